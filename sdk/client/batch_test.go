package client_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

// SubmitBatch answers each job in order: made, repeated under its key, or
// refused with an error naming it, the others unaffected.
func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.c.SubmitBatch(b.ctx, []client.BatchJob{
		{JobRequest: client.JobRequest{Steps: []client.StepSpec{pass("a")}}},
		{JobRequest: client.JobRequest{Steps: []client.StepSpec{{ID: "b", Action: client.Action{"type": "nope"}}}}},
		{JobRequest: client.JobRequest{Steps: []client.StepSpec{pass("c")}}, IdempotencyKey: "order-7"},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.NotNil(t, res[0].Job)
	require.False(t, res[0].Job.Replayed)
	require.NotEmpty(t, res[0].IdempotencyKey, "a key made for the job")
	require.Nil(t, res[1].Job)
	require.Equal(t, client.CodeInvalid, res[1].Err.Code)
	require.Equal(t, http.StatusBadRequest, res[1].Err.Status)
	require.Equal(t, "jobs[1].steps[0].action.type", res[1].Err.Field)
	require.Equal(t, "order-7", res[2].IdempotencyKey)

	// The key is Submit's too.
	again, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{pass("c")}}, client.WithIdempotencyKey("order-7"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, res[2].Job.ID, again.ID)

	raw, err := b.c.SubmitBatchJSON(b.ctx, []json.RawMessage{
		json.RawMessage(`{"idempotency_key":"order-7","steps":[{"id":"c","action":{"type":"pass"}}]}`),
		json.RawMessage(`{"steps":[{"id":"d","action":{"type":"pass"}}]}`),
	})
	require.NoError(t, err)
	require.True(t, raw[0].Job.Replayed)
	require.Equal(t, res[2].Job.ID, raw[0].Job.ID)
	require.NotNil(t, raw[1].Job)

	for _, id := range []string{res[0].Job.ID, res[2].Job.ID, raw[1].Job.ID} {
		b.awaitState(t, id, client.JobCompleted)
	}

	_, err = b.c.SubmitBatch(b.ctx, make([]client.BatchJob, 26))
	require.ErrorContains(t, err, "1 to 25 jobs")
}

// A batch whose answer was lost is sent again with the same keys: its
// jobs are made once.
func TestSubmitBatchRetryMakesEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := &faults{next: http.DefaultTransport, script: func(n int, r *http.Request) (int, string, bool) {
		if n == 0 {
			return http.StatusServiceUnavailable, "", true // made, then the answer lost
		}
		return 0, "", false
	}}
	c := newClient(t, b.h.URL, stacktest.KeyA, f)
	jobs := []client.BatchJob{
		{JobRequest: client.JobRequest{Steps: []client.StepSpec{pass("a")}}},
		{JobRequest: client.JobRequest{Steps: []client.StepSpec{pass("b")}}},
	}
	res, err := c.SubmitBatch(b.ctx, jobs)
	require.NoError(t, err)
	require.Len(t, f.requests(), 2, "retried once")
	for _, r := range res {
		require.NotNil(t, r.Job, "%+v", r.Err)
		require.True(t, r.Job.Replayed, "the retry answered the job the first request made")
		b.awaitState(t, r.Job.ID, client.JobCompleted)
	}
	page, err := b.c.ListJobs(b.ctx, client.ListJobsOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2, "each job made once")
}
