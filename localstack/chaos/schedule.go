package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/store"
)

// Schedules under chaos: beside the run, a tenant of their own makes a few
// schedules when the run starts, over the API and under its faults. They
// fire from every sweep of the run (the runner's, the sweeper's, two at
// once by chance) and from a racer that fires the due schedules from two
// sweeps at once every ScheduleRaceEvery, so a tick is often fired twice
// together; the sweeper's clock jumps make ticks missed by a minute or
// more. When the run's jobs are done, each schedule is paused and deleted
// (over the API, under faults), and the checks hold its jobs against what
// it counts: one job per tick, every counted run stored and no job beyond
// them, every run finished with a log that replays, and an overlap-skip
// schedule never starting a run before the last one ended.

// ScheduleTenant is the tenant whose schedules run beside the run; its
// jobs are none of the run's (whose checks count every job of Tenant).
const (
	ScheduleTenant = "chaos-schedules"
	ScheduleKey    = "chaos-schedules-key"
)

// ScheduleRaceEvery is how often the racer fires the due schedules from
// two sweeps at once.
const ScheduleRaceEvery = 700 * time.Millisecond

// schedulePlan is a schedule a run makes.
type schedulePlan struct {
	ID   string
	Skip bool // overlap skip
	Body string
}

func schedulePlans() []schedulePlan {
	pass := `{"steps":[{"id":"a","action":{"type":"pass"}}]}`
	return []schedulePlan{
		{ID: "every-2s", Body: `{"id":"every-2s","every":"2s","overlap":"allow","job":` + pass + `}`},
		// A run sleeps a second (an SQS delay), so ticks come while it is
		// unfinished and are skipped.
		{ID: "skip-1s", Skip: true, Body: `{"id":"skip-1s","every":"1s","overlap":"skip","job":{"steps":[{"id":"nap","action":{"type":"sleep","seconds":1}},{"id":"a","action":{"type":"pass"}}]}}`},
		// Ticks each minute of the stack's clock: each jump of the sweeper
		// past a minute misses some, which fire once.
		{ID: "cron", Body: `{"id":"cron","cron":"* * * * *","time_zone":"Europe/Berlin","overlap":"allow","job":` + pass + `}`},
	}
}

// ScheduleResult is what the schedules did in a run, and their checks.
type ScheduleResult struct {
	Schedules int
	Runs      int // jobs the schedules made
	Skipped   int // ticks they skipped
	// RacePairs counts the racer's rounds (two sweeps firing at once),
	// RacerFired the ticks its sweeps fired, RacerLost the writes of a
	// tick that found it fired (or skipped) by the other sweep, RacerErrors
	// the ticks they left due after a fault.
	RacePairs, RacerFired, RacerLost, RacerErrors int
	Checks                                        []*Check
}

// Failed answers how many schedule checks failed.
func (s *ScheduleResult) Failed() int {
	if s == nil {
		return 0
	}
	n := 0
	for _, c := range s.Checks {
		n += c.Failed
	}
	return n
}

// scheduler drives the run's schedules.
type scheduler struct {
	r     *run
	c     *client
	plans []schedulePlan
	raw   *store.Schedules // without the fault layer, for the checks

	mu      sync.Mutex
	made    map[string][]int // every status each create answered
	replay  map[string][]int // the same create sent again
	paused  map[string][]int
	deleted map[string][]int
	final   map[string]*domain.Schedule // as read once paused
	res     ScheduleResult

	stopRace context.CancelFunc
	raceDone chan struct{}
}

func newScheduler(r *run) *scheduler {
	return &scheduler{
		r: r, plans: schedulePlans(),
		c:    &client{base: r.st.URL, key: ScheduleKey, hc: &http.Client{Timeout: 30 * time.Second}},
		raw:  store.NewSchedules(r.st.DynamoDB, r.st.Resources.Env["STEPFLOW_TABLE"]),
		made: map[string][]int{}, replay: map[string][]int{}, paused: map[string][]int{}, deleted: map[string][]int{},
		final: map[string]*domain.Schedule{},
	}
}

func statuses(as []answer) []int {
	out := make([]int, len(as))
	for i, a := range as {
		out[i] = a.status
	}
	return out
}

// start makes the schedules, each once more as a client that lost the
// answer would, and starts the racer.
func (s *scheduler) start(ctx context.Context, deadline time.Time) {
	for _, p := range s.plans {
		made := statuses(s.c.retry(ctx, deadline, http.MethodPost, "/v1/schedules", []byte(p.Body)))
		again := statuses(s.c.retry(ctx, deadline, http.MethodPost, "/v1/schedules", []byte(p.Body)))
		s.mu.Lock()
		s.made[p.ID], s.replay[p.ID] = made, again
		s.mu.Unlock()
	}
	raceCtx, stop := context.WithCancel(ctx)
	s.stopRace, s.raceDone = stop, make(chan struct{})
	go func() {
		defer close(s.raceDone)
		s.race(raceCtx)
	}()
}

// race fires the due schedules from two sweeps at once, round after round.
func (s *scheduler) race(ctx context.Context) {
	t := time.NewTicker(ScheduleRaceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var reps [2]engine.ScheduleReport
		var wg sync.WaitGroup
		for i := range reps {
			wg.Go(func() {
				defer func() { _ = recover() }() // a crash fault: the invocation died; the tick stays due
				reps[i], _ = s.r.st.Engine.FireSchedules(ctx)
			})
		}
		wg.Wait()
		s.mu.Lock()
		s.res.RacePairs++
		for _, rep := range reps {
			s.res.RacerFired += rep.Fired
			s.res.RacerLost += rep.Lost
			s.res.RacerErrors += rep.Errors
		}
		s.mu.Unlock()
	}
}

// stop ends the racer, then pauses each schedule (after which no tick
// makes a job), reads what it counts, and deletes it.
func (s *scheduler) stop(ctx context.Context, deadline time.Time) {
	if s.stopRace != nil {
		s.stopRace()
		<-s.raceDone
	}
	for _, p := range s.plans {
		paused := statuses(s.c.retry(ctx, deadline, http.MethodPost, "/v1/schedules/"+p.ID+"/pause", nil))
		final, err := s.raw.Get(ctx, ScheduleTenant, p.ID)
		deleted := statuses(s.c.retry(ctx, deadline, http.MethodDelete, "/v1/schedules/"+p.ID, nil))
		s.mu.Lock()
		s.paused[p.ID], s.deleted[p.ID] = paused, deleted
		if err == nil {
			s.final[p.ID] = final
		}
		s.mu.Unlock()
	}
}

// await polls the schedule tenant's jobs until every one is finished or
// the deadline passes.
func (s *scheduler) await(ctx context.Context, deadline time.Time) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ids, err := listTenant(ctx, s.r.raw, ScheduleTenant)
		open := 0
		for id := range ids {
			if j, err := s.r.raw.Get(ctx, ScheduleTenant, id); err != nil || !j.State.Terminal() {
				open++
			}
		}
		if err == nil && open == 0 {
			return
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// lastOK answers the last status of a call sent until it had an answer
// that is not retryable.
func lastOK(st []int) int {
	if len(st) == 0 {
		return 0
	}
	return st[len(st)-1]
}

// check holds the schedules' jobs against what each schedule counts, and
// adds its failures to the run's categories.
func (s *scheduler) check(ctx context.Context, res *Result) {
	var (
		made     = &Check{Name: "every schedule made", Category: Lost}
		replayed = &Check{Name: "a schedule made again with its body answers it (200)", Category: Duplicated}
		perTick  = &Check{Name: "one job per schedule tick", Category: Duplicated}
		counted  = &Check{Name: "every run a schedule counts is stored", Category: Lost}
		extra    = &Check{Name: "no job beyond the runs its schedule counts", Category: Duplicated}
		finished = &Check{Name: "every schedule run finished", Category: Lost}
		replay   = &Check{Name: "schedule runs' events replay to the stored state", Category: Mismatched}
		overlap  = &Check{Name: "overlap skip: no run made before the last one ended", Category: Mismatched}
		stopped  = &Check{Name: "pause and delete answered, and the schedule is gone", Category: Mismatched}
	)
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.res
	sr.Checks = []*Check{made, replayed, perTick, counted, extra, finished, replay, overlap, stopped}
	failed := map[Category]map[string]bool{Lost: {}, Duplicated: {}, Mismatched: {}}
	fail := func(c *Check, key, format string, args ...any) {
		c.fail(format, args...)
		failed[c.Category][key] = true
	}

	// Every job of the tenant, by schedule, oldest tick first.
	byPlan := map[string][]*domain.Job{}
	ids, err := listTenant(ctx, s.r.raw, ScheduleTenant)
	if err != nil {
		fail(counted, "list", "list the schedule tenant's jobs: %v", err)
	}
	for id := range ids {
		j, err := s.r.raw.Get(ctx, ScheduleTenant, id)
		if err != nil {
			fail(counted, id, "job %s: %v", id, err)
			continue
		}
		byPlan[j.ScheduleID] = append(byPlan[j.ScheduleID], j)
	}
	planned := map[string]bool{}
	for _, p := range s.plans {
		planned[p.ID] = true
	}
	for sid, jobs := range byPlan {
		if !planned[sid] {
			fail(extra, sid, "%d jobs name schedule %q, which the run never made", len(jobs), sid)
		}
	}

	for _, p := range s.plans {
		sr.Schedules++
		if st := s.made[p.ID]; !has2xx(st) {
			fail(made, p.ID, "schedule %s: create answered %v", p.ID, st)
			continue
		}
		made.pass()
		if last := lastOK(s.replay[p.ID]); last != http.StatusOK {
			fail(replayed, p.ID, "schedule %s: the same create again answered %v", p.ID, s.replay[p.ID])
		} else {
			replayed.pass()
		}

		jobs := byPlan[p.ID]
		sort.Slice(jobs, func(i, k int) bool { return jobs[i].ID < jobs[k].ID })
		ticks := map[uint64][]string{}
		for _, j := range jobs {
			u, err := ulid.ParseStrict(j.ID)
			if err != nil {
				fail(perTick, p.ID, "job %s: not a ULID: %v", j.ID, err)
				continue
			}
			ticks[u.Time()] = append(ticks[u.Time()], j.ID)
			if j.State.Terminal() {
				finished.pass()
			} else {
				fail(finished, p.ID, "schedule %s: job %s is %s; steps %s", p.ID, j.ID, j.State, stepStates(j))
			}
			if msg := checkReplay(j); msg != "" {
				fail(replay, p.ID, "schedule %s: job %s: %s", p.ID, j.ID, msg)
			} else {
				replay.pass()
			}
		}
		dup := false
		for tick, js := range ticks {
			if len(js) > 1 {
				dup = true
				fail(perTick, p.ID, "schedule %s: tick %s made %d jobs: %v", p.ID, time.UnixMilli(int64(tick)).UTC().Format(time.RFC3339Nano), len(js), js)
			}
		}
		if !dup {
			perTick.pass()
		}

		final := s.final[p.ID]
		if final == nil {
			fail(counted, p.ID, "schedule %s: not read once paused", p.ID)
			continue
		}
		sr.Runs += int(final.Runs)
		sr.Skipped += int(final.Skipped)
		stored := map[string]bool{}
		for _, j := range jobs {
			stored[j.ID] = true
		}
		switch {
		case int64(len(jobs)) < final.Runs:
			fail(counted, p.ID, "schedule %s counts %d runs; %d jobs are stored", p.ID, final.Runs, len(jobs))
		case final.LastJobID != "" && !stored[final.LastJobID]:
			fail(counted, p.ID, "schedule %s: its last run %s is not stored", p.ID, final.LastJobID)
		default:
			counted.pass()
		}
		if int64(len(jobs)) > final.Runs {
			fail(extra, p.ID, "schedule %s counts %d runs; %d jobs are stored", p.ID, final.Runs, len(jobs))
		} else {
			extra.pass()
		}
		if p.Skip {
			ok := true
			for i := 1; i < len(jobs); i++ {
				prev, next := jobs[i-1], jobs[i]
				if prev.EndedAt == nil || next.CreatedAt.Before(*prev.EndedAt) {
					ok = false
					fail(overlap, p.ID, "schedule %s: job %s made at %s; the run before it, %s, ended %v", p.ID, next.ID,
						next.CreatedAt.Format(time.RFC3339Nano), prev.ID, prev.EndedAt)
				}
			}
			if ok {
				overlap.pass()
			}
		}
		_, err := s.raw.Get(ctx, ScheduleTenant, p.ID)
		switch last := lastOK(s.deleted[p.ID]); {
		case lastOK(s.paused[p.ID]) != http.StatusOK:
			fail(stopped, p.ID, "schedule %s: pause answered %v", p.ID, s.paused[p.ID])
		case last != http.StatusOK && !(last == http.StatusNotFound && len(s.deleted[p.ID]) > 1):
			// A 404 only after a retry: the first delete was applied and its answer lost.
			fail(stopped, p.ID, "schedule %s: delete answered %v", p.ID, s.deleted[p.ID])
		case !errors.Is(err, domain.ErrNotFound):
			fail(stopped, p.ID, "schedule %s is still stored after its delete (%v)", p.ID, err)
		default:
			stopped.pass()
		}
	}
	s.res = sr
	res.Schedules = &s.res
	res.Lost += len(failed[Lost])
	res.Duplicated += len(failed[Duplicated])
	res.Mismatched += len(failed[Mismatched])
}

// brief is the schedules' part of a run's report.
func (s *ScheduleResult) brief() string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%d made, %d runs, %d ticks skipped; racer: %d rounds of two sweeps at once fired %d ticks, lost %d races to the other sweep, %d errors (each tick left due)",
		s.Schedules, s.Runs, s.Skipped, s.RacePairs, s.RacerFired, s.RacerLost, s.RacerErrors)
}
