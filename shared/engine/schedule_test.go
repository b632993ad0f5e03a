package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// scheduled is a bundle whose engine keeps schedules in memory.
func scheduled(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	b.e.Configure(func(c *engine.Config) { c.Schedules = memory.NewSchedules(b.store) })
	return b
}

func (b *bundle) createSchedule(t *testing.T, tenant, body string) *domain.Schedule {
	t.Helper()
	s, created, err := b.e.CreateSchedule(b.ctx, tenant, []byte(body))
	require.NoError(t, err)
	require.True(t, created)
	return s
}

func (b *bundle) schedule(t *testing.T, tenant, id string) *domain.Schedule {
	t.Helper()
	s, err := b.e.GetSchedule(b.ctx, tenant, id)
	require.NoError(t, err)
	return s
}

// runs answers the jobs a schedule made, newest first.
func (b *bundle) runs(t *testing.T, tenant, id string) []engine.JobSummary {
	t.Helper()
	page, _, err := b.e.List(b.ctx, tenant, engine.ListFilter{Schedule: id, Limit: 100})
	require.NoError(t, err)
	return page
}

const everyFive = `{"id":"five","every":"5s","overlap":"allow","job":{"payload":{"n":1},"steps":[{"id":"a","action":{"type":"pass"}}]}}`

func TestScheduleMakesAJobEachTick(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	created := b.clock.Now()
	b.createSchedule(t, tenantA, everyFive)
	rep := b.sweep(t)
	require.Zero(t, rep.SchedulesDue, "nothing before its first tick")

	for tick := 1; tick <= 3; tick++ {
		b.clock.Advance(5 * time.Second)
		rep = b.sweep(t)
		require.Equal(t, 1, rep.SchedulesDue)
		require.Equal(t, 1, rep.Fired, "tick %d", tick)
		require.Zero(t, b.sweep(t).Fired, "a tick fires once")
		b.drain(t)
		runs := b.runs(t, tenantA, "five")
		require.Len(t, runs, tick)
		j := b.job(t, tenantA, runs[0].ID)
		require.Equal(t, domain.JobCompleted, j.State, "the run ran")
		require.Equal(t, "five", j.ScheduleID)
		require.JSONEq(t, `{"n":1}`, string(j.Payload))
		require.True(t, j.CreatedAt.Equal(created.Add(time.Duration(tick)*5*time.Second)))
	}
	s := b.schedule(t, tenantA, "five")
	require.EqualValues(t, 3, s.Runs)
	require.Equal(t, b.runs(t, tenantA, "five")[0].ID, s.LastJobID)
	require.True(t, created.Add(20*time.Second).Equal(*s.NextAt))
	page, _, err := b.e.List(b.ctx, tenantB, engine.ListFilter{Schedule: "five", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page, "another tenant's listing shows none")
}

func TestMissedTicksAfterDowntimeFireOnce(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, everyFive)
	b.clock.Advance(time.Hour) // 720 ticks with no sweep
	require.Equal(t, 1, b.sweep(t).Fired)
	require.Zero(t, b.sweep(t).Fired)
	require.Len(t, b.runs(t, tenantA, "five"), 1)
	s := b.schedule(t, tenantA, "five")
	require.True(t, b.clock.Now().Add(5*time.Second).Equal(*s.NextAt), "the next tick is the first after now")
}

func TestOverlapSkipWaitsForTheLastRun(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, `{"id":"w","every":"1m","job":{"steps":[{"id":"work","action":{"type":"worker","queue":"q"}}]}}`)
	b.createSchedule(t, tenantA, `{"id":"w2","every":"1m","overlap":"allow","job":{"steps":[{"id":"work","action":{"type":"worker","queue":"q2"}}]}}`)
	b.clock.Advance(time.Minute)
	rep := b.sweep(t)
	require.Equal(t, 2, rep.Fired)

	b.clock.Advance(time.Minute)
	rep = b.sweep(t)
	require.Equal(t, 1, rep.Fired, "allow: a second run beside the first")
	require.Equal(t, 1, rep.Skipped, "skip: the first run is unfinished")
	s := b.schedule(t, tenantA, "w")
	require.EqualValues(t, 1, s.Runs)
	require.EqualValues(t, 1, s.Skipped)
	require.Empty(t, s.LastError)
	require.True(t, b.clock.Now().Add(time.Minute).Equal(*s.NextAt), "a skipped tick moves on too")
	require.Len(t, b.runs(t, tenantA, "w2"), 2)

	leases := b.claim(t, tenantA, "q")
	require.Len(t, leases, 1)
	_, err := b.e.Complete(b.ctx, tenantA, leases[0].LeaseID, nil)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	rep = b.sweep(t)
	require.Equal(t, 2, rep.Fired, "the last run finished: the tick makes its job")
	require.Len(t, b.runs(t, tenantA, "w"), 2)
}

func TestPausedScheduleMakesNothingAndResumesWithoutABurst(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, everyFive)
	s, err := b.e.PauseSchedule(b.ctx, tenantA, "five")
	require.NoError(t, err)
	require.True(t, s.Paused)
	require.Nil(t, s.NextAt)
	again, err := b.e.PauseSchedule(b.ctx, tenantA, "five")
	require.NoError(t, err)
	require.Equal(t, s.Version, again.Version, "pausing a paused schedule writes nothing")
	b.clock.Advance(time.Minute)
	require.Zero(t, b.sweep(t).SchedulesDue, "a paused schedule is not in the due index")

	s, err = b.e.ResumeSchedule(b.ctx, tenantA, "five")
	require.NoError(t, err)
	require.False(t, s.Paused)
	require.True(t, s.NextAt.After(b.clock.Now()), "the next tick is ahead")
	require.Zero(t, b.sweep(t).Fired, "nothing missed while paused is made up")
	b.clock.Advance(5 * time.Second)
	require.Equal(t, 1, b.sweep(t).Fired)
	require.Len(t, b.runs(t, tenantA, "five"), 1)

	_, err = b.e.PauseSchedule(b.ctx, tenantB, "five")
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's schedule")
}

func TestDeletedScheduleMakesNoMoreJobs(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, everyFive)
	b.clock.Advance(5 * time.Second)
	require.Equal(t, 1, b.sweep(t).Fired)

	_, err := b.e.DeleteSchedule(b.ctx, tenantB, "five")
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's schedule")
	s, err := b.e.DeleteSchedule(b.ctx, tenantA, "five")
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Runs, "answered as it was")
	for range 3 {
		b.clock.Advance(5 * time.Second)
		require.Zero(t, b.sweep(t).SchedulesDue)
	}
	require.Len(t, b.runs(t, tenantA, "five"), 1)
	_, err = b.e.GetSchedule(b.ctx, tenantA, "five")
	require.ErrorIs(t, err, domain.ErrNotFound)
	_, err = b.e.DeleteSchedule(b.ctx, tenantA, "five")
	require.ErrorIs(t, err, domain.ErrNotFound)
}

// deletingSchedules deletes a schedule between the sweep's read of it and
// its fire: the delete lands while the tick is being fired.
type deletingSchedules struct{ *memory.Schedules }

func (d deletingSchedules) Fire(ctx context.Context, s *domain.Schedule, run *domain.Job) error {
	if err := d.Schedules.Delete(ctx, s.Tenant, s.ID); err != nil {
		return err
	}
	return d.Schedules.Fire(ctx, s, run)
}

func TestADeleteDuringATickMakesNoJob(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.e.Configure(func(c *engine.Config) { c.Schedules = deletingSchedules{c.Schedules.(*memory.Schedules)} })
	b.createSchedule(t, tenantA, everyFive)
	b.clock.Advance(5 * time.Second)
	rep := b.sweep(t)
	require.Equal(t, 1, rep.SchedulesDue)
	require.Zero(t, rep.Fired)
	require.Zero(t, rep.Errors, "a deleted schedule is no error")
	require.Empty(t, b.runs(t, tenantA, "five"))
	require.Empty(t, b.queue.TakeReady(10), "nothing dispatched")
}

// Two sweeps at once, ticks after ticks: one job per tick.
func TestConcurrentSweepsMakeOneJobPerTick(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, everyFive)
	b.createSchedule(t, tenantA, `{"id":"skip","every":"5s","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	const ticks, sweepers = 10, 4
	for range ticks {
		b.clock.Advance(5 * time.Second)
		reps := make([]engine.ScheduleReport, sweepers)
		var wg sync.WaitGroup
		for i := range sweepers {
			wg.Go(func() {
				var err error
				reps[i], err = b.e.FireSchedules(b.ctx)
				require.NoError(t, err)
			})
		}
		wg.Wait()
		fired := 0
		for _, r := range reps {
			fired += r.Fired + r.Skipped
			require.Zero(t, r.Errors)
		}
		require.Equal(t, 2, fired, "each schedule's tick fired or skipped once")
		b.drain(t)
	}
	for _, id := range []string{"five", "skip"} {
		s := b.schedule(t, tenantA, id)
		runs := b.runs(t, tenantA, id)
		require.Len(t, runs, int(s.Runs), id)
		require.EqualValues(t, ticks, s.Runs+s.Skipped, id)
	}
	require.Len(t, b.runs(t, tenantA, "five"), ticks)
}

func TestCreateScheduleAnswersTheSameBodyAndRefusesAnother(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	first := b.createSchedule(t, tenantA, everyFive)
	b.clock.Advance(time.Second)
	again, created, err := b.e.CreateSchedule(b.ctx, tenantA, []byte(" "+everyFive+"\n"))
	require.NoError(t, err)
	require.False(t, created, "the same body answers the schedule made")
	require.True(t, first.CreatedAt.Equal(again.CreatedAt))

	_, _, err = b.e.CreateSchedule(b.ctx, tenantA, []byte(`{"id":"five","every":"10s","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`))
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.CodeConflict, de.Code)
	require.Equal(t, "id", de.Field)
	require.Equal(t, "5s", b.schedule(t, tenantA, "five").Every, "the first one stands")

	_, created, err = b.e.CreateSchedule(b.ctx, tenantB, []byte(everyFive))
	require.NoError(t, err)
	require.True(t, created, "ids are each tenant's")
}

func TestCreateScheduleChecksItsJobAsASubmission(t *testing.T) {
	t.Parallel()
	clock := memory.NewClock(memory.Epoch)
	st := memory.NewStore()
	e := engine.New(engine.Config{Store: st, Queue: memory.NewQueue(clock.Now, memory.WithMaxWorkerQueues(1)), Runner: &actions.Runner{}, BuiltinLease: builtinLease,
		Now: clock.Now, Schedules: memory.NewSchedules(st), P0Tenants: map[string]bool{tenantB: true}})
	ctx := context.Background()
	_, _, err := e.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q1"}}]}`), "")
	require.NoError(t, err)
	for body, field := range map[string]string{
		`{"id":"s","every":"1m","job":{"steps":[{"id":"w","action":{"type":"worker","queue":"q2"}}]}}`:             "job.steps[0].action.queue",
		`{"id":"s","every":"1m","job":{"priority":0,"steps":[{"id":"a","action":{"type":"pass"}}]}}`:               "job.priority",
		`{"id":"s","every":"1m","job":{"steps":[{"id":"h","action":{"type":"http","url":"http://127.0.0.1/x"}}]}}`: "job.steps[0].action.url",
	} {
		_, _, err := e.CreateSchedule(ctx, tenantA, []byte(body))
		var de *domain.Error
		require.ErrorAs(t, err, &de, body)
		require.Equal(t, field, de.Field, "%s: %v", body, err)
		_, err = e.GetSchedule(ctx, tenantA, "s")
		require.ErrorIs(t, err, domain.ErrNotFound, "nothing written")
	}
}

// A tick whose job can no longer be made (the tenant lost priority 0) is
// skipped, and the schedule says why.
func TestATickWhoseJobIsRefusedIsSkipped(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, `{"id":"p0","every":"1m","job":{"priority":0,"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	b.e.Configure(func(c *engine.Config) { c.P0Tenants = map[string]bool{tenantB: true} })
	b.clock.Advance(time.Minute)
	rep := b.sweep(t)
	require.Equal(t, 1, rep.Skipped)
	require.Zero(t, rep.Errors)
	s := b.schedule(t, tenantA, "p0")
	require.EqualValues(t, 1, s.Skipped)
	require.Contains(t, s.LastError, "job.priority")
	require.Empty(t, b.runs(t, tenantA, "p0"))

	b.e.Configure(func(c *engine.Config) { c.P0Tenants = nil })
	b.clock.Advance(time.Minute)
	require.Equal(t, 1, b.sweep(t).Fired)
	require.Empty(t, b.schedule(t, tenantA, "p0").LastError)
}

func TestListSchedulesPages(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	for i := range 5 {
		b.createSchedule(t, tenantA, fmt.Sprintf(`{"id":"s%d","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`, i))
	}
	page, next, err := b.e.ListSchedules(b.ctx, tenantA, "", 3)
	require.NoError(t, err)
	require.Len(t, page, 3)
	require.NotEmpty(t, next)
	page, next, err = b.e.ListSchedules(b.ctx, tenantA, next, 3)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Empty(t, next)
	page, _, err = b.e.ListSchedules(b.ctx, tenantB, "", 3)
	require.NoError(t, err)
	require.Empty(t, page)
}

func TestReplaceScheduleKeepsItsRunsAndPause(t *testing.T) {
	t.Parallel()
	b := scheduled(t)
	b.createSchedule(t, tenantA, everyFive)
	b.clock.Advance(5 * time.Second)
	require.Equal(t, 1, b.sweep(t).Fired)
	b.drain(t)

	every10 := `{"id":"five","every":"10s","overlap":"allow","job":{"payload":{"n":2},"steps":[{"id":"a","action":{"type":"pass"}}]}}`
	s, err := b.e.ReplaceSchedule(b.ctx, tenantA, "five", []byte(every10))
	require.NoError(t, err)
	require.Equal(t, "10s", s.Every)
	require.EqualValues(t, 1, s.Runs, "what it did is kept")
	require.True(t, s.NextAt.After(b.clock.Now()) && !s.NextAt.After(b.clock.Now().Add(10*time.Second)), "the new timing's first tick after now")
	again, err := b.e.ReplaceSchedule(b.ctx, tenantA, "five", []byte(every10))
	require.NoError(t, err)
	require.Equal(t, s.Version, again.Version, "the same body again writes nothing")

	b.clock.Advance(10 * time.Second)
	require.Equal(t, 1, b.sweep(t).Fired)
	b.drain(t)
	runs := b.runs(t, tenantA, "five")
	require.Len(t, runs, 2)
	require.JSONEq(t, `{"n":2}`, string(b.job(t, tenantA, runs[0].ID).Payload), "its new job")

	_, err = b.e.PauseSchedule(b.ctx, tenantA, "five")
	require.NoError(t, err)
	s, err = b.e.ReplaceSchedule(b.ctx, tenantA, "five", []byte(everyFive))
	require.NoError(t, err)
	require.True(t, s.Paused, "a paused schedule stays paused")
	require.Nil(t, s.NextAt)

	var de *domain.Error
	_, err = b.e.ReplaceSchedule(b.ctx, tenantA, "five", []byte(`{"id":"other","every":"5s","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`))
	require.ErrorAs(t, err, &de)
	require.Equal(t, "id", de.Field)
	_, err = b.e.ReplaceSchedule(b.ctx, tenantA, "five", []byte(`{"id":"five","every":"5s","job":{"steps":[{"id":"a","action":{"type":"nope"}}]}}`))
	require.ErrorAs(t, err, &de)
	require.Equal(t, "job.steps[0].action.type", de.Field)
	require.Equal(t, "5s", b.schedule(t, tenantA, "five").Every, "a refused replace changes nothing")
	_, err = b.e.ReplaceSchedule(b.ctx, tenantB, "five", []byte(everyFive))
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's schedule")
}
