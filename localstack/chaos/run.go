package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// Config is one run; a zero field takes its default.
type Config struct {
	Seed     uint64
	Jobs     int    // 30
	Endpoint string // a running emulator; required (the command starts one)
	// Bound is how long the run waits for every job to finish, from its
	// first submit; a job not finished by then is lost (120 s).
	Bound time.Duration
	// Drain bounds the wait, after every job finished, for the queues to
	// hold no message (30 s).
	Drain time.Duration
	// Lease is the built-in lease and the ready queues' visibility timeout (3 s).
	Lease         time.Duration
	Probabilities Probabilities
	Workers       int          // chaos workers per worker queue (2)
	Log           *slog.Logger // the stack's log; nil discards it
	Progress      io.Writer    // progress lines; nil for none
	Resources     ResourceConfig
}

func (c *Config) defaults() {
	c.Jobs, c.Workers = cmp.Or(c.Jobs, 30), cmp.Or(c.Workers, 2)
	c.Bound, c.Drain, c.Lease = cmp.Or(c.Bound, 120*time.Second), cmp.Or(c.Drain, 30*time.Second), cmp.Or(c.Lease, 3*time.Second)
	if c.Probabilities == (Probabilities{}) {
		c.Probabilities = DefaultProbabilities()
	}
	c.Log = cmp.Or(c.Log, slog.New(slog.DiscardHandler))
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	c.Resources.defaults()
}

// RunTimerThreshold is the chaos stack's timer threshold: a delay up to it
// is an SQS delay, a longer one (a 2.5 or 3 s sleep, a 3 or 4 s deadline)
// a Step Functions timer, which moto runs: the chaos stack takes the
// template's LongTimers StepFunctions, whose faults (KindSFNStartLost) it
// injects.
const RunTimerThreshold = 2 * time.Second

// Tenant and APIKey are the run's tenant, whose jobs the run's checks
// are about.
const (
	Tenant = "chaos"
	APIKey = "chaos-key"
)

// SweepTotals add up the sweeps the run drove itself.
type SweepTotals struct {
	Sweeps, Crashed, Advances, Reclaimed, Redispatched int
}

// Run runs one seed: a stack under the fault layer, the jobs of the seed's
// plan (with its resource, replan and flood jobs), chaos workers and
// sweepers, the schedules beside them, then the checks. An error means
// the run could not be made (the stack did not start), not that a check
// failed: those are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.Endpoint == "" {
		return nil, errors.New("chaos: Config.Endpoint is required")
	}
	started := time.Now()
	f := New(cfg.Seed, cfg.Probabilities)
	plan := f.Plan(cfg.Jobs)
	clock := &Clock{}
	noted := &notes{}
	pool := newResourcePool(f.ResourcePlan(len(plan), cfg.Resources), clock, noted)
	waves := pool.plan.all()
	replans := f.ReplanPlan(len(plan) + len(waves))
	all := slices.Concat(plan, waves, replans)
	name := fmt.Sprintf("chaos-%d-%x", cfg.Seed, time.Now().UnixNano()&0xffffff)
	st, err := devstack.Start(ctx, devstack.Options{
		EndpointURL: cfg.Endpoint, StackName: name, APIKeys: map[string]string{APIKey: Tenant, ScheduleKey: ScheduleTenant},
		ScheduleEvery: 2 * time.Second, PollWait: time.Second, Lease: cfg.Lease, Now: clock.Now, Log: cfg.Log,
		TimerThreshold:   RunTimerThreshold,
		Parameters:       map[string]string{"LongTimers": "StepFunctions"},
		APIOptions:       []func(*middleware.Stack) error{f.Middleware, pool.Observe},
		RunnerAPIOptions: []func(*middleware.Stack) error{f.Duplicates()},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: start the stack: %w", err)
	}
	defer st.Close()

	r := &run{f: f, st: st, clock: clock, pool: pool, raw: store.New(st.DynamoDB, st.Resources.Env["STEPFLOW_TABLE"]), c: newClient(st.URL, APIKey)}
	for _, p := range all {
		r.subs = append(r.subs, &submission{plan: p, ids: map[string]int{}})
	}
	r.w = &workers{f: f, c: r.c, clock: clock, pool: pool, late: map[string][]string{}, notes: noted}
	// The worker queues are made before the engine first uses them, with a
	// 5 s visibility timeout instead of the engine's 30 s (as Lease shortens
	// the ready queues'), so a message a crashed claim took comes back soon.
	wq := queue.New(st.SQS, queue.Config{
		WorkerQueuePrefix: st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"], DLQARN: st.Resources.Env["STEPFLOW_DLQ_ARN"],
		WorkerQueueVisible: 5 * time.Second,
	})
	for _, name := range WorkerQueues {
		if err := wq.EnsureWorkerQueue(ctx, Tenant, name); err != nil {
			return nil, fmt.Errorf("chaos: create worker queue %s: %w", name, err)
		}
	}
	res := &Result{Seed: cfg.Seed, Jobs: len(all), Plan: PlanDigest(all)}
	fmt.Fprintf(cfg.Progress, "seed %d: stack %s at %s, %d jobs\n", cfg.Seed, name, st.URL, len(all))

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	sweepCtx, stopSweeps := context.WithCancel(ctx)
	defer stopSweeps()
	r.w.start(workCtx, cfg.Workers)
	var sweeper, waved sync.WaitGroup
	sweeper.Go(func() { r.sweeper(sweepCtx) })

	deadline := time.Now().Add(cfg.Bound)
	waved.Go(func() { pool.submit(ctx, workCtx, r, deadline) })
	sc := newScheduler(r)
	sc.start(workCtx, deadline)
	r.submitAll(ctx, slices.Concat(plan, replans), deadline)
	waved.Wait()
	r.submitted.Store(true)
	finished := r.await(ctx, deadline)
	// The schedules stop (paused, then deleted) once the run's jobs are
	// done, and their last runs finish before the queues are drained.
	sc.stop(ctx, time.Now().Add(cfg.Drain))
	sc.await(ctx, time.Now().Add(cfg.Drain))
	res.Waited = time.Since(started)
	fmt.Fprintf(cfg.Progress, "seed %d: %d of %d jobs finished after %s\n", cfg.Seed, finished, len(all), res.Waited.Round(time.Millisecond))

	// Drain without faults: what is left in the queues now was left by
	// the engine, not by a fault still in progress.
	stopSweeps()
	sweeper.Wait()
	f.Pause()
	res.Dead = r.drain(ctx, time.Now().Add(cfg.Drain))
	stopWork()
	r.racers.Wait()
	r.w.wg.Wait()

	l := r.check(ctx, res)
	sc.check(ctx, l, res)
	res.Checks = l.checks
	res.Lost, res.Duplicated, res.Mismatched = l.failed(Lost), l.failed(Duplicated), l.failed(Mismatched)
	res.Faults, res.Calls, res.FaultsByCall = f.Counts(), f.Calls(), map[string]int64{}
	for _, d := range f.Trace() {
		if d.Call != "" {
			res.FaultsByCall[string(d.Kind)+" "+d.Call]++
		}
	}
	res.Sweeps = r.sweeps
	res.Claimed, res.WorkerOutcomes, res.WorkerRefused = r.w.claimed.Load(), r.w.outcomes.Load(), r.w.refused.Load()
	res.Notes = noted.list
	res.Duration = time.Since(started)
	return res, nil
}

type run struct {
	f     *Faults
	st    *devstack.Stack
	clock *Clock
	raw   *store.Store // the table without the fault layer, for the checks
	c     *client
	w     *workers
	pool  *resourcePool

	subs      []*submission // by JobPlan.N, each filled in by its own submit
	racers    sync.WaitGroup
	queues    map[string]string // what each queue held when the drain stopped ("" for nothing)
	submitted atomic.Bool       // every planned job has been submitted
	sweeps    SweepTotals       // the sweeper's own
}

// submitAll submits plans from four goroutines.
func (r *run) submitAll(ctx context.Context, plans []JobPlan, deadline time.Time) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(plans) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				r.submit(ctx, plans[i].N, deadline)
			}
		})
	}
	wg.Wait()
}

// send submits the planned job with its Idempotency-Key, again on a 5xx or
// a transport error, and notes every job id answered.
func (s *submission) send(ctx context.Context, c *client, deadline time.Time) {
	for _, a := range c.retry(ctx, deadline, http.MethodPost, "/v1/jobs", s.plan.Body, "Idempotency-Key", s.plan.Key) {
		var j struct {
			ID string `json:"id"`
		}
		if a.ok() && json.Unmarshal(a.body, &j) == nil && j.ID != "" {
			s.ids[j.ID]++
			s.id = cmp.Or(s.id, j.ID)
		}
	}
}

// sendBatched submits the planned job as POST /v1/jobs/batch's one item,
// its key the item's idempotency_key, again while the batch or its item
// answers a 5xx or nothing, and notes every job id answered.
func (s *submission) sendBatched(ctx context.Context, c *client, deadline time.Time) {
	var item map[string]json.RawMessage
	if err := json.Unmarshal(s.plan.Body, &item); err != nil {
		panic(fmt.Sprintf("chaos: plan %d's body is no object: %v", s.plan.N, err))
	}
	item["idempotency_key"], _ = json.Marshal(s.plan.Key)
	body, _ := json.Marshal(map[string]any{"jobs": []any{item}})
	wait := 50 * time.Millisecond
	for {
		a := unbatchJob(c.once(ctx, http.MethodPost, "/v1/jobs/batch", body))
		var j struct {
			ID string `json:"id"`
		}
		if a.ok() && json.Unmarshal(a.body, &j) == nil && j.ID != "" {
			s.ids[j.ID]++
			s.id = cmp.Or(s.id, j.ID)
		}
		if !a.retryable() || ctx.Err() != nil || !time.Now().Add(wait).Before(deadline) {
			return
		}
		sleep(ctx, wait)
		wait = min(wait*2, time.Second)
	}
}

// unbatchJob answers a batch of one job as POST /v1/jobs would have.
func unbatchJob(a answer) answer { return unbatchOne(a, "jobs", "job") }

// batched says whether job n goes by POST /v1/jobs/batch rather than POST
// /v1/jobs: every third, by its number (no draw from the seeded streams).
func batchedJob(n int) bool { return n%3 == 1 }

// submit submits job n (twice for every fifth, as a client that lost the
// first answer would: the same job must answer), after its body that must
// be refused if it has one (replan-fail's), then sets its racer going
// (race.go). Every third goes by the batch route.
func (r *run) submit(ctx context.Context, n int, deadline time.Time) {
	s := r.subs[n]
	if s.plan.Refused != nil {
		r.c.retry(ctx, deadline, http.MethodPost, "/v1/jobs", s.plan.Refused)
	}
	send := s.send
	if batchedJob(n) {
		send = s.sendBatched
	}
	send(ctx, r.c, deadline)
	if s.id != "" && n%5 == 0 {
		send(ctx, r.c, deadline)
	}
	r.racers.Go(func() { r.race(ctx, s, deadline) })
}

// await polls the table (without faults) until every job submitted is
// finished and its racer done (a FAILED redrive job is about to run
// again), or the deadline passes, and answers how many finished.
func (r *run) await(ctx context.Context, deadline time.Time) int {
	n := 0
	poll(ctx, deadline, 250*time.Millisecond, func() bool {
		n = 0
		open := 0
		for _, s := range r.subs {
			if s.id != "" && !s.finished {
				j, err := r.raw.Get(ctx, Tenant, s.id)
				s.finished = err == nil && j.State.Terminal() && s.raced.Load()
			}
			n, open = n+btoi(s.finished), open+btoi(s.id != "" && !s.finished)
		}
		return open == 0
	})
	return n
}

// sweeper is the heartbeat under chaos: every second, by chance, the
// stack's clock jumps past domain.DispatchGrace so overdue dispatches and
// expired leases are due, and one sweep runs, or, by chance, two at once.
// (The runner's own schedule sweeps every 2 s besides.)
func (r *run) sweeper(ctx context.Context) {
	heartbeat := handlers.Heartbeat(r.st.Engine)
	every(ctx, time.Second, func() {
		// Once every job is submitted, jump more often and further: a
		// dispatch lost k times in a row waits DispatchGrace << k.
		p, shifts := r.f.P.Advance, 1
		if r.submitted.Load() {
			p, shifts = min(2*p, 1), 3
		}
		advance, by := false, time.Duration(0)
		r.f.Draw(StreamSweeps, func(rng *rand.Rand) {
			advance = rng.Float64() < p
			by = (domain.DispatchGrace + time.Second) << rng.IntN(shifts)
		})
		if advance {
			r.clock.Advance(by)
		}
		n := 1 + btoi(r.f.Chance(StreamSweeps, KindDoubleSweep, r.f.P.DoubleSweep))
		var wg sync.WaitGroup
		reps, done := make([]engine.SweepReport, n), make([]bool, n)
		for i := range n {
			wg.Go(func() {
				defer func() { _ = recover() }() // the invocation died; the next one picks up
				reps[i], _ = heartbeat(ctx, events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events"})
				done[i] = true
			})
		}
		wg.Wait()
		t := &r.sweeps
		for i := range n {
			t.Crashed, t.Reclaimed, t.Redispatched = t.Crashed+btoi(!done[i]), t.Reclaimed+reps[i].Reclaimed, t.Redispatched+reps[i].Redispatched
		}
		t.Sweeps, t.Advances = t.Sweeps+n, t.Advances+btoi(advance)
	})
}

// drain waits until the ready and worker queues hold no message (visible,
// in flight or delayed), while the runner and the chaos workers go on
// consuming; it notes what each held when it stopped, and answers what the
// dead-letter queue holds.
func (r *run) drain(ctx context.Context, deadline time.Time) int {
	urls := map[string]string{}
	for _, id := range []string{"ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2"} {
		urls[id] = r.st.Resources.QueueURLs[id]
	}
	q := queue.New(r.st.SQS, queue.Config{WorkerQueuePrefix: r.st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]})
	for _, name := range WorkerQueues {
		if u, err := q.WorkerQueueURL(ctx, Tenant, name); err == nil {
			urls["worker queue "+name] = u
		}
	}
	r.queues = map[string]string{}
	poll(ctx, deadline, 500*time.Millisecond, func() bool {
		left := 0
		for name, url := range urls {
			n, held := r.count(ctx, url)
			left += n
			r.queues[name] = held
		}
		return left == 0
	})
	dead, _ := r.count(ctx, r.st.Resources.QueueURLs["DeadLetterQueue"])
	return dead
}

// count answers how many messages a queue holds, visible, in flight or
// delayed, and what it holds ("" for nothing).
func (r *run) count(ctx context.Context, url string) (int, string) {
	kinds := []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}
	out, err := r.st.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: kinds})
	if err != nil {
		return 1, "its attributes could not be read: " + err.Error()
	}
	n, held := 0, []string{}
	for _, k := range kinds {
		v, _ := strconv.Atoi(out.Attributes[string(k)])
		n, held = n+v, append(held, fmt.Sprintf("%s %d", k, v))
	}
	if n == 0 {
		return 0, ""
	}
	return n, "holds " + strings.Join(held, ", ")
}

// check holds every job of the run's tenant to the invariants and to its
// row, the submits to their answers, the queues to being empty and the
// pool to its capacity; it answers the ledger the schedules' checks add
// to.
func (r *run) check(ctx context.Context, res *Result) *ledger {
	l := newLedger()
	stored := map[string]*domain.Job{}
	unread := map[string]error{} // a job whose read failed: "not stored" says why
	res.States = map[domain.JobState]int{}
	for _, s := range r.subs {
		if s.id == "" {
			continue
		}
		j, err := r.raw.Get(ctx, Tenant, s.id)
		if err != nil {
			unread[s.id] = err
			continue
		}
		stored[s.id] = j
		res.States[j.State]++
	}
	l.unread = unread
	listed, listErr := listTenant(ctx, r.raw, Tenant)
	// Jobs no submit made: child jobs (of job steps), held to their parents.
	others := map[string]*domain.Job{}
	for id := range listed {
		if _, ok := stored[id]; ok {
			continue
		}
		if j, err := r.raw.Get(ctx, Tenant, id); err == nil {
			others[id] = j
		}
	}
	l.judgeSubmits(r.subs, listed, listErr, stored, others, r.w.late) // the workers have stopped
	for _, name := range slices.Sorted(maps.Keys(r.queues)) {
		l.judge("no message left in flight (per queue)", Mismatched, name, one(r.queues[name])...)
	}
	r.pool.check(ctx, r, l, res, stored)
	return l
}

func listTenant(ctx context.Context, raw *store.Store, tenant string) (map[string]bool, error) {
	out := map[string]bool{}
	cursor := ""
	for range 1000 {
		page, next, err := raw.List(ctx, tenant, engine.ListFilter{Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			out[s.ID] = true
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
	return out, errors.New("list: more than 1000 pages")
}

// Result is one run's outcome.
type Result struct {
	Seed   uint64
	Jobs   int
	Plan   string // PlanDigest of the jobs submitted
	Faults map[Kind]int64
	Checks []*Check // the run's, its resources', its schedules' and its replans'
	// Lost, Duplicated and Mismatched count the jobs (or queues, or
	// schedules) that failed a check of the category.
	Lost, Duplicated, Mismatched int
	States                       map[domain.JobState]int
	Dead                         int // messages in the dead-letter queue (parked, not in flight)
	Sweeps                       SweepTotals
	Claimed                      int64 // leases the chaos workers were handed
	WorkerOutcomes               int64 // worker outcomes the engine accepted
	WorkerRefused                int64 // worker heartbeats and outcomes answered 409
	Waited, Duration             time.Duration
	Notes                        []string
	Calls                        map[string]int64 // engine AWS calls by operation
	FaultsByCall                 map[string]int64 // "kind Service.Operation" -> faults injected there
	Resources                    *ResourceResult  // nil when the run had no resource jobs
	Schedules                    *ScheduleResult
}

// Passed reports whether every check held.
func (r *Result) Passed() bool { return r.Lost+r.Duplicated+r.Mismatched == 0 }

// FaultTotal answers how many faults the run injected.
func (r *Result) FaultTotal() int64 {
	var n int64
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// Report writes a run's table: its seed, jobs, faults by kind and checks.
func (r *Result) Report(w io.Writer, verbose bool) {
	status := map[bool]string{true: "ok", false: "FAILED"}[r.Passed()]
	var states []string
	for _, s := range domain.AllJobStates() {
		if n := r.States[s]; n > 0 {
			states = append(states, fmt.Sprintf("%s %d", strings.ToLower(string(s)), n))
		}
	}
	fmt.Fprintf(w, "seed %d: %s, %d jobs (plan %s: %s), finished in %s, drained in %s\n", r.Seed, status, r.Jobs, r.Plan, strings.Join(states, ", "),
		r.Waited.Round(100*time.Millisecond), (r.Duration - r.Waited).Round(100*time.Millisecond))
	fmt.Fprintf(w, "  faults %d: %s\n", r.FaultTotal(), FormatCounts(r.Faults))
	fmt.Fprintf(w, "  sweeps %d (%d crashed, clock advanced %d times): reclaimed %d, re-dispatched %d; workers claimed %d, outcomes accepted %d, refused 409 %d; dead-lettered %d\n",
		r.Sweeps.Sweeps, r.Sweeps.Crashed, r.Sweeps.Advances, r.Sweeps.Reclaimed, r.Sweeps.Redispatched,
		r.Claimed, r.WorkerOutcomes, r.WorkerRefused, r.Dead)
	if rr := r.Resources; rr != nil {
		fmt.Fprintf(w, "  resources: %d jobs, %d of %d resources registered; %d attempts run on a slot (%d slots taken unobserved), %d slots taken after their lease ran out\n",
			rr.Jobs, rr.Registered, len(ResourcePool), rr.Ran, rr.Unobserved, rr.Late)
	}
	if sc := r.Schedules; sc != nil {
		fmt.Fprintf(w, "  schedules: %d made, %d runs, %d ticks skipped; racer: %d rounds of two sweeps at once fired %d ticks\n", sc.Schedules, sc.Runs, sc.Skipped, sc.RacePairs, sc.RacerFired)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  check\tok\tfailed\tcounts as\n")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", c.Name, c.OK, c.Failed, c.Category)
	}
	_ = tw.Flush()
	for _, c := range r.Checks {
		for _, e := range c.Examples {
			fmt.Fprintf(w, "    FAIL %s: %s\n", c.Name, e)
		}
	}
	if verbose {
		for what, m := range map[string]map[string]int64{"engine AWS calls": r.Calls, "faults by call": r.FaultsByCall} {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
			}
			fmt.Fprintf(w, "    %s: %s\n", what, strings.Join(parts, ", "))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "    note: %s\n", n)
		}
	}
}

// FaultSummary adds up the runs' faults by kind, in report order: the
// line before Summary.
func FaultSummary(results []*Result) string {
	total := map[Kind]int64{}
	for _, r := range results {
		for k, v := range r.Faults {
			total[k] += v
		}
	}
	return "chaos faults by kind: " + FormatCounts(total)
}

// Summary is the one line that ends a chaos command.
func Summary(results []*Result) string {
	var faults int64
	var jobs, lost, dup, mis int
	for _, r := range results {
		faults, jobs, lost, dup, mis = faults+r.FaultTotal(), jobs+r.Jobs, lost+r.Lost, dup+r.Duplicated, mis+r.Mismatched
	}
	return fmt.Sprintf("chaos: %d runs, %d faults injected, %d jobs, lost %d, duplicated %d, mismatched %d", len(results), faults, jobs, lost, dup, mis)
}
