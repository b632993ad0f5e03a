package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/emulator"
	"github.com/stepflow/stepflow/localstack/toolchain"
)

// TestShortRun runs one small seed against moto: every check must hold. Zombie and skewed workers are
// left to the chaos command here, to keep the run short.
func TestShortRun(t *testing.T) {
	// `make test` never passes -short; -short is for a quick local run.
	if testing.Short() {
		t.Skip("starts moto; skipped with -short")
	}
	tc := toolchain.New()
	_, ok := tc.Find(toolchain.MotoServer)
	require.True(t, ok, "%v; CI always has it", tc.NotFound(toolchain.MotoServer))
	t.Parallel()
	ctx := context.Background()
	em, err := emulator.Start(ctx, "127.0.0.1:0", nil)
	require.NoError(t, err)
	t.Cleanup(em.Close)

	p := DefaultProbabilities()
	p.Zombie, p.Skew = 0, 0
	var progress strings.Builder
	start := time.Now()
	// The bound is liveness, not speed: under -race on a loaded machine the
	// two-second leases of the resource jobs expire and retry, and a run
	// takes minutes (make chaos keeps its own, tighter bound). Drain bounds
	// the schedules' last runs too: one whose chained step a crash lost
	// waits for a sweep that advances the clock and is not itself crashed,
	// which under the E2E phase's load took more than 15 s (a run left
	// QUEUED, its sleep done and its pass never sent).
	res, err := Run(ctx, Config{Seed: 5, Jobs: 10, Endpoint: em.URL, Bound: 3 * time.Minute, Drain: 45 * time.Second, Probabilities: p, Progress: &progress,
		Resources: ResourceConfig{Jobs: 4}})
	require.NoError(t, err)
	var report strings.Builder
	res.Report(&report, true)
	t.Logf("%s\n%s(%s)", progress.String(), report.String(), time.Since(start).Round(time.Millisecond))

	require.True(t, res.Passed(), "a check failed:\n%s", report.String())
	require.Positive(t, res.FaultTotal())
	require.Equal(t, 10+4+7, res.Jobs, "the plan's jobs, the resource jobs, the replans and floods")
	byName := map[string]*Check{}
	for _, c := range res.Checks {
		byName[c.Name] = c
	}
	require.Equal(t, res.Jobs, byName["one job per Idempotency-Key"].OK, "every job was submitted once")
	for _, inv := range invariants {
		require.Greater(t, byName[inv.name].OK, res.Jobs, "%q held over the run's jobs and the schedules' and replans'", inv.name)
	}
	require.Contains(t, byName, "resources: no resource ran more attempts at once than its slots")
	require.Equal(t, res.Jobs, res.States["COMPLETED"]+res.States["FAILED"]+res.States["CANCELLED"])
	require.Contains(t, Summary([]*Result{res}), "chaos: 1 runs, ")

	sc := res.Schedules
	require.NotNil(t, sc)
	require.Equal(t, len(schedulePlans()), sc.Schedules)
	require.Positive(t, sc.Runs, "the schedules made jobs")
	require.Positive(t, sc.RacePairs, "two sweeps fired at once")

	rr := res.Resources
	require.NotNil(t, rr)
	require.EqualValues(t, len(ResourcePool), rr.Registered)
	require.Equal(t, 4, rr.Jobs)
	require.Positive(t, rr.Ran, "attempts ran on a slot")
	require.Zero(t, rr.Unobserved, "every slot's taking was seen")
	require.EqualValues(t, 2, res.Faults[KindSlotRace], "two waves")
}
