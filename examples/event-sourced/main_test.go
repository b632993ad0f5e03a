package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

// The example runs to its end against the whole local stack, as it does
// against make dev.
func TestEventSourced(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.ScheduleEvery = time.Second })
	var out strings.Builder
	err := run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, Out: &out})
	require.NoError(t, err, out.String())
	for _, line := range []string{
		"status from the events: Completed; stored: COMPLETED (Completed)",
		"status from the events: Failed; stored: FAILED (Failed)",
		"projected Waiting: acting on it", "status from the events: Cancelled; stored: CANCELLED (Cancelled)",
	} {
		require.Contains(t, out.String(), line)
	}
	require.Equal(t, 4, strings.Count(out.String(), "the events and the stored state agree"))
	t.Log(out.String())
}

// The projection follows the lifecycle's rule: the last job event decides,
// step events and notes do not move the job's status.
func TestProjection(t *testing.T) {
	t.Parallel()
	p := &projection{steps: map[string]string{}}
	for _, typ := range []string{"job_created", "job_running", "job_retrying", "job_leased", "job_waiting", "signal_received", "job_parked", "wait_completed", "job_failed", "job_requeued", "job_cancelled"} {
		p.apply(client.Event{Type: typ})
	}
	require.Equal(t, "Cancelled", p.status)
	p = &projection{steps: map[string]string{}}
	for _, typ := range []string{"job_created", "job_running", "job_retrying"} {
		p.apply(client.Event{Type: typ})
	}
	require.Equal(t, "Retrying", p.status)
	p.apply(client.Event{Type: "job_waiting"})
	p.apply(client.Event{Type: "job_parked"})
	require.Equal(t, "Waiting", p.status, "this lifecycle has no Parked")
}
