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
// them, every run completed, and an overlap-skip schedule never starting a
// run before the last one ended.
const (
	ScheduleTenant = "chaos-schedules"
	ScheduleKey    = "chaos-schedules-key"
	// ScheduleRaceEvery is how often the racer fires the due schedules
	// from two sweeps at once.
	ScheduleRaceEvery = 700 * time.Millisecond
)

// schedulePlan is a schedule a run makes, and what became of it.
type schedulePlan struct {
	ID    string
	Skip  bool // overlap skip
	Body  string
	calls map[string]call  // create, again, pause, delete
	final *domain.Schedule // read once paused
	gone  error            // reading it once deleted: domain.ErrNotFound
}

func schedulePlans() []*schedulePlan {
	pass := `{"steps":[{"id":"a","action":{"type":"pass"}}]}`
	return []*schedulePlan{
		{ID: "every-2s", Body: `{"id":"every-2s","every":"2s","overlap":"allow","job":` + pass + `}`},
		// A run sleeps a second (an SQS delay), so ticks come while it is
		// unfinished and are skipped.
		{ID: "skip-1s", Skip: true, Body: `{"id":"skip-1s","every":"1s","overlap":"skip","job":{"steps":[{"id":"nap","action":{"type":"sleep","seconds":1}},{"id":"a","action":{"type":"pass"}}]}}`},
		// Ticks each minute of the stack's clock: each jump of the sweeper
		// past a minute misses some, which fire once.
		{ID: "cron", Body: `{"id":"cron","cron":"* * * * *","time_zone":"Europe/Berlin","overlap":"allow","job":` + pass + `}`},
	}
}

// ScheduleResult is what the schedules did in a run: RacePairs counts
// the racer's rounds (two sweeps firing at once), RacerFired the ticks
// its sweeps fired.
type ScheduleResult struct {
	Schedules, Runs, Skipped, RacePairs, RacerFired int
}

// scheduler drives the run's schedules.
type scheduler struct {
	r     *run
	c     *client
	plans []*schedulePlan

	res      ScheduleResult
	stopRace context.CancelFunc
	raceDone sync.WaitGroup
}

func newScheduler(r *run) *scheduler {
	return &scheduler{r: r, plans: schedulePlans(), c: newClient(r.st.URL, ScheduleKey)}
}

func (s *scheduler) do(ctx context.Context, deadline time.Time, p *schedulePlan, op, method, path, body string) {
	if p.calls == nil {
		p.calls = map[string]call{}
	}
	p.calls[op] = s.c.do(ctx, deadline, call{Op: op}, method, path, []byte(body))
}

// start makes the schedules, each once more as a client that lost the
// answer would, and starts the racer: the due schedules fired from two
// sweeps at once, every ScheduleRaceEvery.
func (s *scheduler) start(ctx context.Context, deadline time.Time) {
	for _, p := range s.plans {
		s.do(ctx, deadline, p, "create", http.MethodPost, "/v1/schedules", p.Body)
		s.do(ctx, deadline, p, "again", http.MethodPost, "/v1/schedules", p.Body)
	}
	ctx, s.stopRace = context.WithCancel(ctx)
	s.raceDone.Go(func() {
		every(ctx, ScheduleRaceEvery, func() {
			var wg sync.WaitGroup
			var reps [2]engine.ScheduleReport
			for i := range reps {
				wg.Go(func() {
					defer func() { _ = recover() }() // a crash fault: the invocation died; the tick stays due
					reps[i], _ = s.r.st.Engine.FireSchedules(ctx)
				})
			}
			wg.Wait()
			s.res.RacePairs, s.res.RacerFired = s.res.RacePairs+1, s.res.RacerFired+reps[0].Fired+reps[1].Fired
		})
	})
}

// stop ends the racer, then pauses each schedule (after which no tick
// makes a job), reads what it counts, and deletes it.
func (s *scheduler) stop(ctx context.Context, deadline time.Time) {
	s.stopRace()
	s.raceDone.Wait()
	raw := store.NewSchedules(s.r.st.DynamoDB, s.r.st.Resources.Env["STEPFLOW_TABLE"])
	for _, p := range s.plans {
		s.do(ctx, deadline, p, "pause", http.MethodPost, "/v1/schedules/"+p.ID+"/pause", "")
		p.final, _ = raw.Get(ctx, ScheduleTenant, p.ID)
		s.do(ctx, deadline, p, "delete", http.MethodDelete, "/v1/schedules/"+p.ID, "")
		_, p.gone = raw.Get(ctx, ScheduleTenant, p.ID)
	}
}

// await polls the schedule tenant's jobs until every one is finished or
// the deadline passes.
func (s *scheduler) await(ctx context.Context, deadline time.Time) {
	poll(ctx, deadline, 250*time.Millisecond, func() bool {
		ids, err := listTenant(ctx, s.r.raw, ScheduleTenant)
		for id := range ids {
			if j, err := s.r.raw.Get(ctx, ScheduleTenant, id); err != nil || !j.State.Terminal() {
				return false
			}
		}
		return err == nil
	})
}

// check holds the schedules' jobs to the invariants and to what each
// schedule counts, and each schedule's calls to their answers.
func (s *scheduler) check(ctx context.Context, l *ledger, res *Result) {
	byPlan := map[string][]*domain.Job{}
	ids, err := listTenant(ctx, s.r.raw, ScheduleTenant)
	if err != nil {
		l.judge("every run a schedule counts is stored", Lost, "schedules", "list the schedule tenant's jobs: "+err.Error())
	}
	for id := range ids {
		if j, err := s.r.raw.Get(ctx, ScheduleTenant, id); err == nil {
			byPlan[j.ScheduleID] = append(byPlan[j.ScheduleID], j)
		}
	}
	for _, p := range s.plans {
		key, calls := "schedule "+p.ID, p.calls
		s.res.Schedules++
		if calls["create"].final()/100 != 2 {
			l.judge("every schedule made", Lost, key, calls["create"].String())
			continue
		}
		l.judge("every schedule made", Lost, key)
		l.judge("a schedule made again with its body answers it (200)", Duplicated, key, wrong(calls["again"].final() != http.StatusOK, calls["again"].String())...)
		s.checkRuns(l, p, byPlan[p.ID])
		delete(byPlan, p.ID)
		// A 404 only after a retry: the first delete was applied and its answer lost.
		deleted := calls["delete"].final() == http.StatusOK || calls["delete"].final() == http.StatusNotFound && calls["delete"].retried()
		l.judge("pause and delete answered, and the schedule is gone", Mismatched, key, wrong(calls["pause"].final() != http.StatusOK || !deleted || !errors.Is(p.gone, domain.ErrNotFound),
			fmt.Sprintf("%s, %s; read once deleted: %v", calls["pause"], calls["delete"], p.gone))...)
	}
	for id, jobs := range byPlan {
		l.judge("no job beyond the runs its schedule counts", Duplicated, "schedule "+id, fmt.Sprintf("%d jobs name it, which the run never made", len(jobs)))
	}
	res.Schedules = &s.res
}

// checkRuns holds a schedule's jobs to the invariants and its row (they
// complete), and to what it counts: one job per tick, every counted run
// stored and none beyond, overlap skip held.
func (s *scheduler) checkRuns(l *ledger, p *schedulePlan, jobs []*domain.Job) {
	key := "schedule " + p.ID
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].ID < jobs[k].ID })
	ticks, stored, overlaps, twice := map[uint64]string{}, map[string]bool{}, []string{}, []string{}
	for i, j := range jobs {
		stored[j.ID] = true
		if u, err := ulid.ParseStrict(j.ID); err == nil && ticks[u.Time()] != "" {
			twice = append(twice, fmt.Sprintf("tick %s made %s and %s", time.UnixMilli(int64(u.Time())).UTC().Format(time.RFC3339Nano), ticks[u.Time()], j.ID))
		} else if err == nil {
			ticks[u.Time()] = j.ID
		}
		l.judgeJob(fmt.Sprintf("job %s (%s)", j.ID, p.ID), completes, &submission{finished: true}, j, nil)
		if p.Skip && i > 0 && (jobs[i-1].EndedAt == nil || j.CreatedAt.Before(*jobs[i-1].EndedAt)) {
			overlaps = append(overlaps, fmt.Sprintf("job %s made at %s; the run before it, %s, ended %v", j.ID, j.CreatedAt.Format(time.RFC3339Nano), jobs[i-1].ID, jobs[i-1].EndedAt))
		}
	}
	if p.Skip {
		l.judge("overlap skip: no run made before the last one ended", Mismatched, key, overlaps...)
	}
	l.judge("one job per schedule tick", Duplicated, key, twice...)
	switch final := p.final; {
	case final == nil:
		l.judge("every run a schedule counts is stored", Lost, key, "not read once paused")
	case int64(len(jobs)) < final.Runs || final.LastJobID != "" && !stored[final.LastJobID]:
		l.judge("every run a schedule counts is stored", Lost, key, fmt.Sprintf("counts %d runs, the last %s; %d jobs are stored", final.Runs, final.LastJobID, len(jobs)))
	case int64(len(jobs)) > final.Runs:
		l.judge("no job beyond the runs its schedule counts", Duplicated, key, fmt.Sprintf("counts %d runs; %d jobs are stored", final.Runs, len(jobs)))
	default:
		l.judge("every run a schedule counts is stored", Lost, key)
	}
	if p.final != nil {
		s.res.Runs, s.res.Skipped = s.res.Runs+int(p.final.Runs), s.res.Skipped+int(p.final.Skipped)
	}
}
