package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// storeRunTime: the run time of finished jobs adds up in the same hourly
// window as their outcomes, per tenant.
func storeRunTime(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	now := f.Now
	rec := func(tenant string, ms int64, at time.Time) {
		d := engine.OutcomeDelta(domain.JobCompleted)
		d.DurationMs, d.Timed = ms, 1
		require.NoError(t, f.Store.RecordStats(ctx, tenant, d, at))
	}
	rec(tenantA, 1500, now)
	rec(tenantA, 2500, now.Add(-2*time.Hour))
	rec(tenantA, 99_000, now.Add(-25*time.Hour)) // out of the window
	rec(tenantB, 7000, now)

	st, err := f.Store.Stats(ctx, tenantA, now)
	require.NoError(t, err)
	require.Equal(t, int64(4000), st.DurationMs)
	require.Equal(t, int64(2), st.Timed)
	require.Equal(t, int64(2), st.Completed)
	st, err = f.Store.Stats(ctx, tenantB, now)
	require.NoError(t, err)
	require.Equal(t, int64(7000), st.DurationMs)
	require.Equal(t, int64(1), st.Timed)
}

// storeSpentToday: what a tenant's jobs cost adds up over the window, and
// what they cost since midnight UTC apart (a daily budget is held to it).
func storeSpentToday(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	y, m, d := f.Now.UTC().Date()
	noon := time.Date(y, m, d, 12, 30, 0, 0, time.UTC)
	rec := func(tenant string, nano int64, at time.Time) {
		require.NoError(t, f.Store.RecordStats(ctx, tenant, engine.StatsDelta{CostNanoUSD: nano}, at))
	}
	rec(tenantA, 1500, noon)
	rec(tenantA, 2500, noon.Add(-12*time.Hour)) // 00:30 today
	rec(tenantA, 4000, noon.Add(-13*time.Hour)) // 23:30 yesterday: in the window, not today
	rec(tenantB, 7000, noon)
	st, err := f.Store.Stats(ctx, tenantA, noon)
	require.NoError(t, err)
	require.Equal(t, int64(8000), st.CostNanoUSD)
	require.Equal(t, int64(4000), st.SpentTodayNanoUSD)
	st, err = f.Store.Stats(ctx, tenantB, noon)
	require.NoError(t, err)
	require.Equal(t, int64(7000), st.SpentTodayNanoUSD)
}

func stepDelta(moves map[engine.StepMove]int64, retries int64, gauge map[domain.StepState]int64, ran map[domain.AttemptState][]time.Duration) engine.StepCounts {
	var c engine.StepCounts
	for m, n := range moves {
		c.Move(m, n)
	}
	for s, n := range gauge {
		c.Gauge(s, n)
	}
	c.Retries = retries
	for st, ds := range ran {
		for _, d := range ds {
			c.Observe(st, d)
		}
	}
	return c
}

// storeStepCounters: the step counters add up per tenant across writes
// (on whichever shard each lands) and never age out; the stack's are kept
// apart under engine.AllTenants.
func storeStepCounters(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	now := f.Now
	pr := engine.StepMove{From: domain.StepPending, To: domain.StepRunning}
	rs := engine.StepMove{From: domain.StepRunning, To: domain.StepSucceeded}
	rr := engine.StepMove{From: domain.StepFailedRetryable, To: domain.StepRetrying}
	empty, err := f.Store.StepStats(ctx, tenantA)
	require.NoError(t, err)
	require.True(t, empty.Empty(), "nothing counted yet")

	for i := range 5 {
		d := engine.StatsDelta{Steps: stepDelta(
			map[engine.StepMove]int64{pr: 2, rs: 1},
			1,
			map[domain.StepState]int64{domain.StepPending: -2, domain.StepRunning: 1, domain.StepSucceeded: 1},
			map[domain.AttemptState][]time.Duration{domain.AttemptSucceeded: {300 * time.Millisecond}},
		)}
		if i == 0 {
			d.Steps.Move(rr, 1)
			d.Steps.Observe(domain.AttemptFailed, 2*time.Hour)
		}
		require.NoError(t, f.Store.RecordStats(ctx, tenantA, d, now.Add(-time.Duration(i)*30*time.Hour)))
	}
	require.NoError(t, f.Store.RecordStats(ctx, tenantB, engine.StatsDelta{Steps: stepDelta(map[engine.StepMove]int64{pr: 7}, 0, nil, nil)}, now))
	require.NoError(t, f.Store.RecordStats(ctx, engine.AllTenants, engine.StatsDelta{Steps: stepDelta(map[engine.StepMove]int64{pr: 17}, 0, map[domain.StepState]int64{domain.StepRunning: 3}, nil)}, now))

	c, err := f.Store.StepStats(ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, map[engine.StepMove]int64{pr: 10, rs: 5, rr: 1}, c.Moves)
	require.Equal(t, int64(5), c.Retries)
	require.Equal(t, int64(-10), c.InState[domain.StepPending], "a gauge's delta may be negative")
	require.Equal(t, int64(5), c.InState[domain.StepSucceeded])
	ok := c.Durations[domain.AttemptSucceeded]
	require.Equal(t, int64(5), ok.Count())
	require.Equal(t, int64(1500), ok.SumMs)
	require.Equal(t, int64(5), ok.Counts[1], "0.3 s: the 0.5 s bucket")
	failed := c.Durations[domain.AttemptFailed]
	require.Equal(t, int64(1), failed.Counts[len(engine.DurationBuckets)], "2 h: past every bound")
	require.Len(t, c.Durations, 2)

	c, err = f.Store.StepStats(ctx, tenantB)
	require.NoError(t, err)
	require.Equal(t, map[engine.StepMove]int64{pr: 7}, c.Moves, "each tenant's own")
	c, err = f.Store.StepStats(ctx, engine.AllTenants)
	require.NoError(t, err)
	require.Equal(t, map[engine.StepMove]int64{pr: 17}, c.Moves)
	require.Equal(t, int64(3), c.InState[domain.StepRunning])
	st, err := f.Store.Stats(ctx, tenantA, now)
	require.NoError(t, err)
	require.Equal(t, engine.Stats{}, st, "step counters are not the hourly ones")
}

// storeSweep: the last sweep is the stack's, answered with every
// tenant's stats.
func storeSweep(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	now := f.Now
	st, err := f.Store.Stats(ctx, tenantA, now)
	require.NoError(t, err)
	require.Nil(t, st.LastSweep, "never swept")
	require.NoError(t, f.Store.RecordSweep(ctx, now.Add(-time.Minute)))
	require.NoError(t, f.Store.RecordSweep(ctx, now))
	for _, tenant := range []string{tenantA, tenantB} {
		st, err = f.Store.Stats(ctx, tenant, now)
		require.NoError(t, err)
		require.NotNil(t, st.LastSweep)
		require.True(t, now.Equal(*st.LastSweep), "%s: %v", tenant, st.LastSweep)
	}
}

// storeHealthVerdict: the engine's verdict over this store's counters,
// each threshold crossed on its own, on the engine's clock moved by hand.
func storeHealthVerdict(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	now := f.Now
	clock := now
	th := engine.DefaultHealthThresholds()
	th.Failures24h = 5
	e := engine.New(engine.Config{Store: f.Store, Now: func() time.Time { return clock }, Thresholds: th})
	health := func(tenant string) engine.Health {
		h, err := e.Health(ctx, tenant)
		require.NoError(t, err)
		return h
	}
	record := func(tenant string, d engine.StatsDelta) {
		require.NoError(t, f.Store.RecordStats(ctx, tenant, d, clock))
	}
	const c, d = "tenant-c", "tenant-d"
	// a: 19 completed, 1 failed: 95% is not above 95%: degraded.
	record(tenantA, engine.StatsDelta{Completed: 19, Failed: 1})
	h := health(tenantA)
	require.Equal(t, "degraded", h.Status, "%v", h.Reasons)
	require.Equal(t, []string{"success rate 95.0%"}, h.Reasons)
	// Four more failures: 19/24 is below 80%, and 5 failures in 24 h.
	record(tenantA, engine.StatsDelta{Failed: 4})
	h = health(tenantA)
	require.Equal(t, "unhealthy", h.Status)
	require.Equal(t, []string{"success rate 79.2%", "5 failures in 24 h"}, h.Reasons)

	// b: slow jobs, all successful: average run time 300 s is degraded,
	// never worse.
	record(tenantB, engine.StatsDelta{Completed: 2, DurationMs: 2 * 300_000, Timed: 2})
	h = health(tenantB)
	require.Equal(t, "degraded", h.Status)
	require.Equal(t, []string{"average duration 300.0 s"}, h.Reasons)
	require.InDelta(t, 300, *h.AvgDuration, 1e-9)
	record(tenantB, engine.StatsDelta{Completed: 1, DurationMs: 1000, Timed: 1})
	h = health(tenantB)
	require.Equal(t, "ok", h.Status, "%v", h.Reasons)
	require.InDelta(t, 200.333, *h.AvgDuration, 1e-3)

	// c: backlog 51 and 11 blocked: unhealthy, naming both.
	record(c, engine.StatsDelta{Queued: 51, Blocked: 11})
	h = health(c)
	require.Equal(t, "unhealthy", h.Status)
	require.Equal(t, []string{"backlog 51", "11 jobs blocked on a person"}, h.Reasons)

	// d saw none of it.
	require.Equal(t, engine.Health{Tenant: d, Status: "ok", Notes: []string{"too few finished jobs (0 of 20) to grade the success rate"}}, health(d))

	// A heartbeat: named, and a reason once three periods pass without
	// another.
	require.NoError(t, f.Store.RecordSweep(ctx, clock))
	h = health(d)
	require.Equal(t, "ok", h.Status)
	require.NotNil(t, h.LastHeartbeat)
	require.True(t, clock.Equal(*h.LastHeartbeat))
	clock = clock.Add(3 * time.Minute)
	require.Equal(t, "ok", health(d).Status, "three periods is not yet stale")
	clock = clock.Add(time.Second)
	h = health(d)
	require.Equal(t, "degraded", h.Status)
	require.Equal(t, []string{"heartbeat last swept 3m1s ago"}, h.Reasons)

	// A day later a's failures have aged out.
	clock = now.Add(25 * time.Hour)
	require.NoError(t, f.Store.RecordSweep(ctx, clock))
	h = health(tenantA)
	require.Equal(t, "ok", h.Status, "%v", h.Reasons)
	require.Nil(t, h.SuccessRate)
}
