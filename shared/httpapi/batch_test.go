package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/httpapi"
)

type batchAnswer struct {
	Jobs []struct {
		Index  int             `json:"index"`
		Status int             `json:"status"`
		Job    *stacktest.Job  `json:"job"`
		Error  *batchItemError `json:"error"`
	} `json:"jobs"`
}

type batchItemError struct {
	Code    domain.Code `json:"code"`
	Message string      `json:"message"`
	Field   string      `json:"field"`
}

func submitBatch(t *testing.T, h *stacktest.Harness, items ...string) batchAnswer {
	t.Helper()
	res, raw := call(t, h, "POST", "/v1/jobs/batch", "Bearer "+stacktest.KeyA, `{"jobs":[`+strings.Join(items, ",")+`]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	var a batchAnswer
	require.NoError(t, json.Unmarshal(raw, &a))
	require.Len(t, a.Jobs, len(items), "%s", raw)
	for i, it := range a.Jobs {
		require.Equal(t, i, it.Index, "request order")
		require.True(t, (it.Job == nil) != (it.Error == nil), "item %d has a job or an error: %s", i, raw)
	}
	return a
}

func jobCount(t *testing.T, h *stacktest.Harness) int {
	t.Helper()
	var page listPage
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs?limit=100", stacktest.KeyA, nil, &page)
	return len(page.Jobs)
}

// Each job of a batch is answered on its own: made ones 201 with the job,
// a bad one its error naming the job's field, and the bad one writes
// nothing and stops no other.
func TestBatchAnswersEachJob(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	a := submitBatch(t, h,
		passJob,
		`{"steps":[{"id":"a","action":{"type":"nope"}}]}`,
		`{"idempotency_key":"k1","steps":[{"id":"b","action":{"type":"pass"}}]}`,
		`[1]`,
		`{"steps":[{"id":"c","action":{"type":"pass"}}],"idempotency_key":7}`,
		`{"steps":[{"id":"d","action":{"type":"pass"}}],"bogus":1}`,
	)
	require.Equal(t, http.StatusCreated, a.Jobs[0].Status)
	require.Equal(t, http.StatusCreated, a.Jobs[2].Status)
	for _, i := range []int{1, 3, 4, 5} {
		require.Equal(t, http.StatusBadRequest, a.Jobs[i].Status, "item %d", i)
		require.Equal(t, domain.CodeInvalid, a.Jobs[i].Error.Code)
		require.True(t, strings.HasPrefix(a.Jobs[i].Error.Field, fmt.Sprintf("jobs[%d]", i)), "item %d: %+v", i, a.Jobs[i].Error)
		require.True(t, strings.HasPrefix(a.Jobs[i].Error.Message, a.Jobs[i].Error.Field+": "), "the message names the field: %+v", a.Jobs[i].Error)
	}
	require.Equal(t, "jobs[1].steps[0].action.type", a.Jobs[1].Error.Field)
	require.Equal(t, "jobs[3]", a.Jobs[3].Error.Field)
	require.Equal(t, "jobs[4].idempotency_key", a.Jobs[4].Error.Field)
	require.Equal(t, "jobs[5].bogus", a.Jobs[5].Error.Field)
	require.Equal(t, 2, jobCount(t, h), "refused jobs wrote nothing")

	for _, i := range []int{0, 2} {
		h.AwaitState(t, stacktest.KeyA, a.Jobs[i].Job.ID, domain.JobCompleted)
	}
}

// A batch that is no batch is refused whole, before any write.
func TestBatchLimits(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	many := make([]string, 26)
	for i := range many {
		many[i] = passJob
	}
	for name, c := range map[string]struct {
		body, field string
		status      int
		code        domain.Code
	}{
		"26 jobs":         {`{"jobs":[` + strings.Join(many, ",") + `]}`, "jobs", 400, domain.CodeInvalid},
		"no jobs":         {`{"jobs":[]}`, "jobs", 400, domain.CodeInvalid},
		"jobs missing":    {`{}`, "jobs", 400, domain.CodeInvalid},
		"jobs not a list": {`{"jobs":{}}`, "jobs", 400, domain.CodeInvalid},
		"unknown member":  {`{"jobs":[` + passJob + `],"x":1}`, "x", 400, domain.CodeInvalid},
		"empty body":      {``, "body", 400, domain.CodeInvalid},
		"too large":       {`{"jobs":[{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":"` + strings.Repeat("x", httpapi.MaxBatchBodyBytes) + `"}]}`, "", 413, domain.CodeTooLarge},
	} {
		res, raw := call(t, h, "POST", "/v1/jobs/batch", "Bearer "+stacktest.KeyA, c.body)
		requireError(t, res.StatusCode, raw, c.status, c.code, c.field)
		_ = name
	}
	res, raw := call(t, h, "POST", "/v1/jobs/batch", "Bearer "+stacktest.KeyA, `{"jobs":[`+passJob+`]}`, "Idempotency-Key", "k")
	requireError(t, res.StatusCode, raw, 400, domain.CodeInvalid, "Idempotency-Key")
	res, raw = call(t, h, "POST", "/v1/jobs/batch", "", `{"jobs":[`+passJob+`]}`)
	requireError(t, res.StatusCode, raw, 401, domain.CodeUnauthorized, "")
	require.Zero(t, jobCount(t, h))

	full := submitBatch(t, h, many[:25]...)
	for _, it := range full.Jobs {
		require.Equal(t, http.StatusCreated, it.Status)
		h.AwaitState(t, stacktest.KeyA, it.Job.ID, domain.JobCompleted)
	}
}

// A job's idempotency_key is the Idempotency-Key of POST /v1/jobs: a
// repeat answers the first job (200), another body under it 422, on
// either route.
func TestBatchIdempotency(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	job := `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"n":1}}`
	keyed := func(key, body string) string {
		return `{"idempotency_key":"` + key + `",` + strings.TrimPrefix(body, "{")
	}
	first := submitBatch(t, h, keyed("k1", job), job)
	require.Equal(t, http.StatusCreated, first.Jobs[0].Status)
	id := first.Jobs[0].Job.ID

	again := submitBatch(t, h,
		keyed("k1", job),
		`{"steps":[{"id":"a","action":{"type":"pass"}}],"idempotency_key":"k1","payload":{"n":1}}`,
		keyed("k1", `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"n":2}}`),
		keyed("k2", job), keyed("k2", job),
	)
	require.Equal(t, http.StatusOK, again.Jobs[0].Status)
	require.Equal(t, id, again.Jobs[0].Job.ID)
	require.Equal(t, http.StatusOK, again.Jobs[1].Status, "the key's place in the job does not matter")
	require.Equal(t, id, again.Jobs[1].Job.ID)
	require.Equal(t, http.StatusUnprocessableEntity, again.Jobs[2].Status)
	require.Equal(t, domain.CodeIdempotencyMismatch, again.Jobs[2].Error.Code)
	require.Equal(t, "jobs[2].idempotency_key", again.Jobs[2].Error.Field)
	require.Equal(t, http.StatusCreated, again.Jobs[3].Status)
	require.Equal(t, http.StatusOK, again.Jobs[4].Status, "a key repeated within the batch")
	require.Equal(t, again.Jobs[3].Job.ID, again.Jobs[4].Job.ID)

	// One key on both routes: the same submission.
	res, raw := call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, job, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	var single stacktest.Job
	require.NoError(t, json.Unmarshal(raw, &single))
	require.Equal(t, id, single.ID)
	res, raw = call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, passJob, "Idempotency-Key", "k3")
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &single))
	fromSingle := submitBatch(t, h, keyed("k3", passJob))
	require.Equal(t, http.StatusOK, fromSingle.Jobs[0].Status)
	require.Equal(t, single.ID, fromSingle.Jobs[0].Job.ID)

	require.Equal(t, 4, jobCount(t, h))
	for _, j := range []string{id, first.Jobs[1].Job.ID, again.Jobs[3].Job.ID, single.ID} {
		h.AwaitState(t, stacktest.KeyA, j, domain.JobCompleted)
	}
}
