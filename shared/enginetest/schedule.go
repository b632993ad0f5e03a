package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// ScheduleFixture is one check's schedule store, with the job store its
// runs are created in: both empty, and its own.
type ScheduleFixture struct {
	Schedules engine.Schedules
	Jobs      engine.Store
	// Now is when the suite's schedules are made (the zero time means the
	// wall clock, in UTC, to the millisecond).
	Now time.Time
	// Skip names checks this adapter is known to fail, each with why.
	Skip map[string]string
}

var scheduleChecks = []check[ScheduleFixture]{
	{"create then get answers a fresh copy", scheduleCreateGet},
	{"a taken id is refused, another tenant's is free", scheduleCreateTaken},
	{"save is conditional on version", scheduleSaveConditional},
	{"racing saves have exactly one winner", scheduleSaveRace},
	{"delete removes it and its due entry", scheduleDelete},
	{"due lists running schedules past their tick", scheduleDue},
	{"list pages by id, the tenant's own", scheduleList},
	{"fire writes the schedule and its run together", scheduleFire},
	{"fire writes nothing when either write cannot be made", scheduleFireRefused},
	{"racing fires of one tick make one run", scheduleFireRace},
}

// ScheduleChecks answers the names of the schedule contract's checks.
func ScheduleChecks() []string { return names(scheduleChecks) }

// ScheduleContract runs every schedule check, each in parallel on a
// fixture of its own from setup.
func ScheduleContract(t *testing.T, setup func(t *testing.T) ScheduleFixture) {
	run(t, scheduleChecks, func(t *testing.T) (ScheduleFixture, map[string]string) {
		f := setup(t)
		if f.Now.IsZero() {
			f.Now = time.Now().UTC().Truncate(time.Millisecond)
		}
		return f, f.Skip
	})
}

// newSchedule builds an unsaved schedule that ticks every minute.
func newSchedule(t *testing.T, tenant, id string, now time.Time) *domain.Schedule {
	t.Helper()
	s, _, err := domain.ParseSchedule(tenant, []byte(`{"id":"`+id+`","every":"1m","overlap":"allow","job":{"payload":{"n":1},"steps":[{"id":"a","action":{"type":"pass"}}]}}`), "hash-"+id, now)
	require.NoError(t, err)
	return s
}

func createSchedule(t *testing.T, f ScheduleFixture, tenant, id string) *domain.Schedule {
	t.Helper()
	s := newSchedule(t, tenant, id, f.Now)
	require.NoError(t, f.Schedules.Create(context.Background(), s))
	require.EqualValues(t, 1, s.Version, "Create sets version 1")
	return s
}

func getSchedule(t *testing.T, f ScheduleFixture, tenant, id string) *domain.Schedule {
	t.Helper()
	s, err := f.Schedules.Get(context.Background(), tenant, id)
	require.NoError(t, err)
	return s
}

// dueIDs answers the ids of the schedules due at now.
func dueSchedules(t *testing.T, f ScheduleFixture, now time.Time) []string {
	t.Helper()
	keys, err := f.Schedules.Due(context.Background(), now, 100)
	require.NoError(t, err)
	var out []string
	for _, k := range keys {
		out = append(out, k.Tenant+"/"+k.ID)
	}
	return out
}

// runOf builds the job s's tick makes.
func runOf(t *testing.T, s *domain.Schedule, tick time.Time) *domain.Job {
	t.Helper()
	spec, err := s.RunSpec()
	require.NoError(t, err)
	j, err := domain.NewJob(s.Tenant, s.RunID(tick), spec, "", tick)
	require.NoError(t, err)
	return j
}

func scheduleCreateGet(t *testing.T, f ScheduleFixture) {
	s := createSchedule(t, f, tenantA, "nightly")
	got := getSchedule(t, f, tenantA, "nightly")
	require.Equal(t, s.ID, got.ID)
	require.Equal(t, tenantA, got.Tenant)
	require.Equal(t, "1m0s", got.Every)
	require.Equal(t, domain.OverlapAllow, got.Overlap)
	require.JSONEq(t, string(s.Job), string(got.Job))
	require.True(t, s.NextAt.Equal(*got.NextAt))
	require.True(t, s.CreatedAt.Equal(got.CreatedAt))
	require.Equal(t, s.RequestHash, got.RequestHash)
	got.Runs = 99
	require.Zero(t, getSchedule(t, f, tenantA, "nightly").Runs, "a copy: changing it changes nothing stored")

	_, err := f.Schedules.Get(context.Background(), tenantA, "missing")
	require.ErrorIs(t, err, domain.ErrNotFound)
	_, err = f.Schedules.Get(context.Background(), tenantB, "nightly")
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's schedule is not found")
}

func scheduleCreateTaken(t *testing.T, f ScheduleFixture) {
	createSchedule(t, f, tenantA, "s")
	again := newSchedule(t, tenantA, "s", f.Now.Add(time.Hour))
	require.ErrorIs(t, f.Schedules.Create(context.Background(), again), engine.ErrScheduleExists)
	require.True(t, getSchedule(t, f, tenantA, "s").CreatedAt.Equal(f.Now), "the first one stands")
	createSchedule(t, f, tenantB, "s")
}

func scheduleSaveConditional(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	createSchedule(t, f, tenantA, "s")
	a, b := getSchedule(t, f, tenantA, "s"), getSchedule(t, f, tenantA, "s")
	require.True(t, a.Pause(f.Now))
	require.NoError(t, f.Schedules.Save(ctx, a))
	require.EqualValues(t, 2, a.Version)
	b.Skip("", f.Now)
	err := f.Schedules.Save(ctx, b)
	require.ErrorIs(t, err, domain.ErrVersionConflict)
	require.EqualValues(t, 1, b.Version, "a lost save leaves the version as it was")
	got := getSchedule(t, f, tenantA, "s")
	require.True(t, got.Paused)
	require.Zero(t, got.Skipped)

	gone := newSchedule(t, tenantA, "never-made", f.Now)
	gone.Version = 1
	require.ErrorIs(t, f.Schedules.Save(ctx, gone), domain.ErrVersionConflict, "a save never creates")
	_, err = f.Schedules.Get(ctx, tenantA, "never-made")
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func scheduleSaveRace(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	const racers, rounds = 8, 10
	createSchedule(t, f, tenantA, "s")
	for round := range rounds {
		copies := make([]*domain.Schedule, racers)
		for i := range copies {
			copies[i] = getSchedule(t, f, tenantA, "s")
			copies[i].Skip(fmt.Sprint(i), f.Now)
		}
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				errs[i] = f.Schedules.Save(ctx, copies[i])
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: racers %d and %d both won", round, winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, domain.ErrVersionConflict)
		}
		require.NotEqual(t, -1, winner, "round %d: nobody won", round)
		got := getSchedule(t, f, tenantA, "s")
		require.Equal(t, fmt.Sprint(winner), got.LastError)
		require.EqualValues(t, round+1, got.Skipped)
		require.EqualValues(t, round+2, got.Version)
	}
}

func scheduleDelete(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	s := createSchedule(t, f, tenantA, "s")
	createSchedule(t, f, tenantA, "kept")
	require.ErrorIs(t, f.Schedules.Delete(ctx, tenantB, "s"), domain.ErrNotFound, "another tenant's")
	require.NoError(t, f.Schedules.Delete(ctx, tenantA, "s"))
	_, err := f.Schedules.Get(ctx, tenantA, "s")
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.ErrorIs(t, f.Schedules.Delete(ctx, tenantA, "s"), domain.ErrNotFound, "deleted already")
	require.Equal(t, []string{tenantA + "/kept"}, dueSchedules(t, f, s.NextAt.Add(time.Second)))
	s.Skip("", f.Now)
	require.ErrorIs(t, f.Schedules.Save(ctx, s), domain.ErrVersionConflict, "a deleted schedule is never saved back")
}

func scheduleDue(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	a := createSchedule(t, f, tenantA, "a")
	createSchedule(t, f, tenantB, "b")
	paused := createSchedule(t, f, tenantA, "paused")
	require.True(t, paused.Pause(f.Now))
	require.NoError(t, f.Schedules.Save(ctx, paused))
	tick := *a.NextAt
	require.Empty(t, dueSchedules(t, f, tick.Add(-time.Millisecond)), "nothing before its tick")
	require.ElementsMatch(t, []string{tenantA + "/a", tenantB + "/b"}, dueSchedules(t, f, tick), "due at its tick, a paused one never")

	a.Ran(tick, a.RunID(tick), tick)
	require.NoError(t, f.Schedules.Save(ctx, a))
	require.Equal(t, []string{tenantB + "/b"}, dueSchedules(t, f, tick), "moved on to its next tick")
	require.ElementsMatch(t, []string{tenantA + "/a", tenantB + "/b"}, dueSchedules(t, f, *a.NextAt))

	require.True(t, paused.Resume(tick))
	require.NoError(t, f.Schedules.Save(ctx, paused))
	require.Contains(t, dueSchedules(t, f, *paused.NextAt), tenantA+"/paused", "resumed: due again")
}

func scheduleList(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	for _, id := range []string{"c", "a", "e", "b", "d"} {
		createSchedule(t, f, tenantA, id)
	}
	createSchedule(t, f, tenantB, "b-only")
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5, "paging does not end")
		page, next, err := f.Schedules.List(ctx, tenantA, cursor, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 2)
		for _, s := range page {
			require.Equal(t, tenantA, s.Tenant)
			got = append(got, s.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, got)

	_, cur, err := f.Schedules.List(ctx, tenantA, "", 1)
	require.NoError(t, err)
	_, _, err = f.Schedules.List(ctx, tenantB, cur, 1)
	var de *domain.Error
	require.ErrorAs(t, err, &de, "another tenant's cursor")
	require.Equal(t, "cursor", de.Field)

	none, next, err := f.Schedules.List(ctx, "tenant-none", "", 10)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Empty(t, next)
}

func scheduleFire(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	s := createSchedule(t, f, tenantA, "s")
	tick := *s.NextAt
	run := runOf(t, s, tick)
	s.Ran(tick, run.ID, tick)
	require.NoError(t, f.Schedules.Fire(ctx, s, run))
	require.EqualValues(t, 2, s.Version)
	require.EqualValues(t, 1, run.Version)

	got := getSchedule(t, f, tenantA, "s")
	require.EqualValues(t, 1, got.Runs)
	require.Equal(t, run.ID, got.LastJobID)
	j, err := f.Jobs.Get(ctx, tenantA, run.ID)
	require.NoError(t, err)
	require.Equal(t, "s", j.ScheduleID)
	require.Equal(t, domain.JobQueued, j.State)
	require.JSONEq(t, `{"n":1}`, string(j.Payload))

	plain := newJob(t, tenantA, passSpec, "", f.Now)
	_, _, err = f.Jobs.Create(ctx, plain, "", f.Now)
	require.NoError(t, err)
	listed, _, err := f.Jobs.List(ctx, tenantA, engine.ListFilter{Schedule: "s", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []engine.JobSummary{{ID: run.ID, State: domain.JobQueued, Queue: domain.DefaultQueue, Schedule: "s"}}, listed, "?schedule= lists its runs only")
	listed, _, err = f.Jobs.List(ctx, tenantA, engine.ListFilter{Schedule: "s", State: domain.JobCompleted, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, listed, "with another filter beside it")
	listed, _, err = f.Jobs.List(ctx, tenantA, engine.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 2)
}

func scheduleFireRefused(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	s := createSchedule(t, f, tenantA, "s")
	tick := *s.NextAt

	// The schedule moved on (a pause) since it was read: no run.
	stale := getSchedule(t, f, tenantA, "s")
	paused := getSchedule(t, f, tenantA, "s")
	require.True(t, paused.Pause(tick))
	require.NoError(t, f.Schedules.Save(ctx, paused))
	run := runOf(t, stale, tick)
	stale.Ran(tick, run.ID, tick)
	require.ErrorIs(t, f.Schedules.Fire(ctx, stale, run), domain.ErrVersionConflict)
	require.EqualValues(t, 1, stale.Version, "a lost fire leaves the version as it was")
	_, err := f.Jobs.Get(ctx, tenantA, run.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "no run without its schedule's write")

	// The run's id is taken: the schedule stays as it was.
	cur := getSchedule(t, f, tenantA, "s")
	taken := runOf(t, cur, tick)
	_, _, err = f.Jobs.Create(ctx, runOf(t, cur, tick), "", f.Now)
	require.NoError(t, err)
	cur.Ran(tick, taken.ID, tick)
	require.ErrorIs(t, f.Schedules.Fire(ctx, cur, taken), domain.ErrVersionConflict)
	got := getSchedule(t, f, tenantA, "s")
	require.Zero(t, got.Runs, "no schedule write without its run")
	require.EqualValues(t, 2, got.Version)

	// Deleted: nothing is written.
	gone := getSchedule(t, f, tenantA, "s")
	require.NoError(t, f.Schedules.Delete(ctx, tenantA, "s"))
	later := tick.Add(time.Minute)
	run = runOf(t, gone, later)
	gone.Ran(later, run.ID, later)
	require.ErrorIs(t, f.Schedules.Fire(ctx, gone, run), domain.ErrVersionConflict)
	_, err = f.Jobs.Get(ctx, tenantA, run.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a deleted schedule makes no job")
	_, err = f.Schedules.Get(ctx, tenantA, "s")
	require.ErrorIs(t, err, domain.ErrNotFound, "a fire never brings a deleted schedule back")
}

func scheduleFireRace(t *testing.T, f ScheduleFixture) {
	ctx := context.Background()
	const racers, rounds = 6, 5
	createSchedule(t, f, tenantA, "s")
	for round := range rounds {
		copies := make([]*domain.Schedule, racers)
		runs := make([]*domain.Job, racers)
		var tick time.Time
		for i := range copies {
			copies[i] = getSchedule(t, f, tenantA, "s")
			tick = *copies[i].NextAt
			runs[i] = runOf(t, copies[i], tick)
			copies[i].Ran(tick, runs[i].ID, tick)
		}
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				errs[i] = f.Schedules.Fire(ctx, copies[i], runs[i])
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
				continue
			}
			require.True(t, errors.Is(err, domain.ErrVersionConflict), "round %d: %v", round, err)
		}
		require.Equal(t, 1, won, "round %d", round)
		got := getSchedule(t, f, tenantA, "s")
		require.EqualValues(t, round+1, got.Runs)
		listed, _, err := f.Jobs.List(ctx, tenantA, engine.ListFilter{Schedule: "s", Limit: 100})
		require.NoError(t, err)
		require.Len(t, listed, round+1, "one run per tick")
	}
}
