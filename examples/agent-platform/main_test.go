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
func TestAgentPlatform(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.ScheduleEvery = time.Second })
	var out strings.Builder
	err := run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, Out: &out})
	require.NoError(t, err, out.String())
	for _, line := range []string{
		"critic: search#1 on browser-", "-> switch_resource",
		"critic: draft#1 -> retry", "critic: draft#2 -> replan",
		"critic: buy#1 -> needs_user", `person: asked "Buy the $12 market report?"`, "critic: buy#2 -> accept (confirmed by ada)",
		"critic: review#1 -> accept (verdict publish)", "rework   WAITING_DEPS -> SKIPPED",
		"critic: research[0]#1 -> accept", "critic: research[2]#1 -> accept", "research[2] WAITING_DEPS -> PENDING -> LEASED",
	} {
		require.Contains(t, out.String(), line)
	}
	t.Log(out.String())
}
