package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// slowStore is the in-memory store with a latency on the test clock: each
// read and write of a job takes lag, as a DynamoDB request does, so how
// long a sweep runs shows on the clock.
type slowStore struct {
	*memory.Store
	clock *memory.Clock
	lag   time.Duration
}

func (s *slowStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	s.clock.Advance(s.lag)
	return s.Store.Get(ctx, tenant, id)
}

func (s *slowStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	s.clock.Advance(s.lag)
	return s.Store.Save(ctx, j, loaded)
}

func (s *slowStore) Defer(ctx context.Context, k engine.DueJob, until time.Time) error {
	s.clock.Advance(s.lag)
	return s.Store.Defer(ctx, k, until)
}

// withPeriod makes the heartbeat's period period, as the health verdict
// and the sweep's budget read it (STEPFLOW_HEARTBEAT_SECONDS), and each
// job read or write take lag.
func (b *bundle) withPeriod(period, lag time.Duration) {
	th := engine.DefaultHealthThresholds()
	th.SweepEvery = period
	b.e.Configure(func(c *engine.Config) {
		c.Thresholds = th
		c.Store = &slowStore{Store: b.store, clock: b.clock, lag: lag}
	})
}

// runSent executes every message on the ready path and answers how many
// were each tenant's.
func (b *bundle) runSent(t *testing.T) map[string]int {
	t.Helper()
	sent := map[string]int{}
	for {
		ds := b.queue.TakeReady(10)
		if len(ds) == 0 {
			return sent
		}
		for _, d := range ds {
			sent[d.Message.Tenant]++
			require.Equal(t, engine.Executed, b.execute(t, d))
		}
	}
}

// sweepAt runs the sweep as the heartbeat's schedule does at tick, and
// requires that it took less than its budget and one job more, and that
// it recorded its sweep.
func (b *bundle) sweepAt(t *testing.T, tick time.Time, period, job time.Duration) engine.SweepReport {
	t.Helper()
	require.False(t, b.clock.Now().After(tick), "the last run and its work ended before the next tick")
	b.clock.Advance(tick.Sub(b.clock.Now()))
	rep := b.sweep(t)
	took := b.clock.Now().Sub(tick)
	require.LessOrEqual(t, took, period/4+job, "the sweep at %s took %s: %+v", tick.Format(time.TimeOnly), took, rep)
	h, err := b.e.Health(b.ctx, tenantB)
	require.NoError(t, err)
	require.NotNil(t, h.LastHeartbeat)
	require.True(t, h.LastHeartbeat.Equal(b.clock.Now()), "every run records its sweep")
	return rep
}

// requireHealthy requires tenant b's health ok, with no reason.
func (b *bundle) requireHealthy(t *testing.T, tenant string) {
	t.Helper()
	h, err := b.e.Health(b.ctx, tenant)
	require.NoError(t, err)
	require.Equal(t, "ok", h.Status, "%+v", h)
	require.Empty(t, h.Reasons)
}

// One tenant's 1,000 jobs come due at once (a run_at, their messages lost
// with the process that wrote them): each run of the sweep moves on at
// most its quota of them, the other tenant's job goes in the first run,
// every run ends well within the heartbeat's period and records its
// sweep, and the other tenant's health never changes.
func TestOneTenantsBurstNeitherSlowsTheSweepNorChangesAnothersHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const period, lag = 10 * time.Second, 20 * time.Millisecond
	runAt := b.clock.Now().Add(5 * time.Minute)
	body := `{"run_at":"` + runAt.Format(time.RFC3339) + `","steps":[{"id":"only","action":{"type":"pass"}}]}`
	b.lossy.drop.Store(2000) // each submit's sends, before and after its write
	for range 1000 {
		b.submit(t, tenantA, body)
	}
	b.clock.Advance(runAt.Add(time.Second).Sub(b.clock.Now()))
	b.lossy.drop.Store(2)
	jb := b.submit(t, tenantB, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	b.withPeriod(period, lag)
	b.requireHealthy(t, tenantB)

	// While their messages are still expected (until run_at and the
	// grace), the sweep loads none of them.
	tick := runAt.Add(domain.DispatchGrace - time.Millisecond)
	require.Zero(t, b.sweepAt(t, tick, period, 0).Due)

	tick = runAt.Add(domain.DispatchGrace + 5*time.Second)
	doneA := 0
	for run := 1; doneA < 1000; run++ {
		require.LessOrEqual(t, run, 1000/engine.SweepTenantQuota, "tenant a's jobs are all moved on by then")
		b.requireHealthy(t, tenantB)
		rep := b.sweepAt(t, tick, period, 4*lag)
		b.requireHealthy(t, tenantB)
		sent := b.runSent(t)
		require.Equal(t, engine.SweepTenantQuota, sent[tenantA], "run %d: %+v", run, rep)
		doneA += sent[tenantA]
		if run == 1 {
			require.Equal(t, 1, sent[tenantB], "tenant b's job goes in the first run")
			require.Equal(t, engine.SweepReport{Due: 1001, Redispatched: 26, Left: 975}, rep)
		} else {
			require.Zero(t, sent[tenantB])
			require.Equal(t, engine.SweepReport{Due: 1000 - doneA + engine.SweepTenantQuota, Redispatched: engine.SweepTenantQuota, Left: 1000 - doneA}, rep)
		}
		tick = tick.Add(period)
	}
	require.Zero(t, b.sweepAt(t, tick, period, 0).Due)
	b.requireHealthy(t, tenantB)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantB, jb.ID).State)
	jobs, _, err := b.store.List(b.ctx, tenantA, engine.ListFilter{State: domain.JobCompleted, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, jobs, 1000)
}

// With the store slow enough that the quota is more than fits in a run,
// the sweep stops at its budget (a quarter of the period), records its
// sweep, and leaves the rest for the next runs.
func TestSweepStopsAtItsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const period, lag = 10 * time.Second, 200 * time.Millisecond
	b.lossy.drop.Store(40) // each submit's sends, before and after its write
	for range 20 {
		b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	}
	b.withPeriod(period, lag)
	tick := b.clock.Now().Add(domain.DispatchGrace)
	done := 0
	for run := 1; done < 20; run++ {
		require.LessOrEqual(t, run, 4)
		rep := b.sweepAt(t, tick, period, 2*lag)
		require.Equal(t, 20-done, rep.Due)
		require.Positive(t, rep.Redispatched)
		require.Equal(t, rep.Due-rep.Redispatched, rep.Left, "%+v", rep)
		done += b.runSent(t)[tenantA]
		tick = tick.Add(period)
	}
}

// duePart is the part of the due index a job is in (memory.DueParts, the
// DynamoDB adapter's shards).
func duePart(id string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32() % memory.DueParts
}

// storeJobIn writes a job of a one-step pass job straight to the store,
// in part of the due index, its message never sent.
func (b *bundle) storeJobIn(t *testing.T, tenant string, part uint32) *domain.Job {
	t.Helper()
	spec, err := domain.ParseJobSpec([]byte(`{"steps":[{"id":"only","action":{"type":"pass"}}]}`))
	require.NoError(t, err)
	for {
		id := ulid.Make().String()
		if duePart(id) != part {
			continue
		}
		j, err := domain.NewJob(tenant, id, spec, "", b.clock.Now())
		require.NoError(t, err)
		j, _, err = b.store.Create(b.ctx, j, fmt.Sprint(id), b.clock.Now())
		require.NoError(t, err)
		return j
	}
}

// A tenant with more jobs due in one part of the due index than a sweep
// reads hides those behind them for one run only: the sweep postpones
// its excess there, spread over the next runs, so the next run reads the
// other tenant's job, and the tenant still moves on its quota a run.
func TestSweepPostponesAFullPartsExcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const period = 10 * time.Second
	const many = engine.SweepRead + 10
	for range many {
		b.storeJobIn(t, tenantA, 3)
	}
	b.clock.Advance(time.Second)
	jb := b.storeJobIn(t, tenantB, 3)
	b.withPeriod(period, 0)

	tick := b.clock.Now().Add(domain.DispatchGrace + 4*time.Second)
	rep := b.sweepAt(t, tick, period, 0)
	require.Equal(t, engine.SweepReport{Due: engine.SweepRead, Redispatched: engine.SweepTenantQuota, Left: engine.SweepRead - engine.SweepTenantQuota, Postponed: engine.SweepRead - engine.SweepTenantQuota}, rep)
	require.Equal(t, map[string]int{tenantA: engine.SweepTenantQuota}, b.runSent(t), "tenant b's job was behind a full part")

	doneA := engine.SweepTenantQuota
	for run := 2; doneA < many; run++ {
		require.LessOrEqual(t, run, many/engine.SweepTenantQuota+2)
		tick = tick.Add(period)
		rep := b.sweepAt(t, tick, period, 0)
		require.Zero(t, rep.Postponed, "run %d: %+v", run, rep)
		sent := b.runSent(t)
		require.Equal(t, min(engine.SweepTenantQuota, many-doneA), sent[tenantA], "run %d: %+v", run, rep)
		require.Equal(t, map[bool]int{true: 1}[run == 2], sent[tenantB], "tenant b's job goes in the next run")
		doneA += sent[tenantA]
	}
	require.Equal(t, domain.JobCompleted, b.job(t, tenantB, jb.ID).State)
}

// A job the executor moves on after its due time (behind a burst) gets
// its true due time in the same write: the sweep does not load it while
// the message that write sent is still expected.
func TestAJobMovedOnAfterItsDueTimeIsNotSwept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runAt := b.clock.Now().Add(5 * time.Minute)
	j := b.submit(t, tenantA, `{"run_at":"`+runAt.Format(time.RFC3339)+`","steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"worker","queue":"q"}}]}`)
	require.Nil(t, j.DueAt, "run_at's message went out before the write: the job is not in the due index")

	b.clock.Advance(runAt.Add(90 * time.Second).Sub(b.clock.Now())) // the executor is 90 s behind
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	j = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepPending, j.Steps[1].State)
	require.True(t, j.DueAt.Equal(b.clock.Now().Add(domain.DispatchGrace)), "due when b's message has had its grace: %s", j.DueAt)
	b.clock.Advance(time.Second)
	require.Equal(t, engine.SweepReport{}, b.sweep(t), "b's message is still expected")

	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, json.RawMessage(`{}`))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}
