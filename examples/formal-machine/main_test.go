package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// The example runs to its end against the whole local stack, as it does
// against make dev.
func TestFormalMachine(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.ScheduleEvery = time.Second })
	var out strings.Builder
	err := run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, Out: &out})
	require.NoError(t, err, out.String())
	for _, line := range []string{
		"job_waiting -> Waiting", "wait_completed -> Queued", "job_completed -> Completed",
		"job_created -> Queued, job_running -> Running, job_waiting -> Waiting, job_parked -> Parked, job_cancelled -> Cancelled",
		"job_failed -> Failed, job_requeued -> Queued",
	} {
		require.Contains(t, out.String(), line)
	}
	t.Log(out.String())
}
