package client_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/client"
)

// ReportOutcomes answers each outcome in order: recorded (where the job
// went), or refused with its error naming the item; the others are
// unaffected, and a repeat of the whole batch answers the recorded ones
// again.
func TestReportOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	step := client.StepSpec{ID: "w", Action: client.Worker("outcomes", 60), Retry: &client.RetryPolicy{MaxAttempts: 1}}
	for range 2 {
		_, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{step}})
		require.NoError(t, err)
	}
	var ls []client.Lease
	for len(ls) < 2 {
		more, err := b.c.Claim(b.ctx, client.ClaimRequest{Queue: "outcomes", Max: 2, WaitSeconds: 1})
		require.NoError(t, err)
		ls = append(ls, more...)
	}
	batch := []client.LeaseOutcome{
		{LeaseID: ls[0].LeaseID, Output: map[string]int{"n": 1}},
		{LeaseID: ls[1].LeaseID, Failure: &client.Failure{Class: client.ClassFatal, Message: "no"}},
		{LeaseID: ls[1].LeaseID, Failure: &client.Failure{Class: "sideways"}},
	}
	res, err := b.c.ReportOutcomes(b.ctx, batch)
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, client.JobCompleted, res[0].Result.JobState)
	require.Equal(t, client.JobFailed, res[1].Result.JobState)
	require.Nil(t, res[2].Result)
	require.Equal(t, http.StatusBadRequest, res[2].Err.Status)
	require.Equal(t, "outcomes[2].class", res[2].Err.Field)

	again, err := b.c.ReportOutcomes(b.ctx, batch[:2])
	require.NoError(t, err)
	require.Equal(t, res[0].Result, again[0].Result, "a recorded outcome is answered again")
	require.Equal(t, res[1].Result, again[1].Result)

	_, err = b.c.ReportOutcomes(b.ctx, make([]client.LeaseOutcome, 26))
	require.ErrorContains(t, err, "1 to 25 outcomes")
}
