package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// WorkerVisibility is the worker queues' visibility timeout in a run.
const WorkerVisibility = 5 * time.Second

// RunTimerThreshold is the chaos stack's timer threshold: a delay up to it
// is an SQS delay, a longer one (a 2.5 or 3 s sleep, a 3 or 4 s deadline)
// a Step Functions timer, which moto runs.
const RunTimerThreshold = 2 * time.Second

// Tenant and APIKey are the run's tenant, whose jobs the run's checks
// are about.
const (
	Tenant = "chaos"
	APIKey = "chaos-key"
)

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

// SweepTotals add up the sweeps the run drove itself.
type SweepTotals struct {
	Sweeps, Crashed, Advances, Reclaimed, Redispatched int
}

// Run runs one seed: a stack under the fault layer, the jobs of the seed's
// plan (with its resource, replan and flood jobs), chaos workers and
// sweepers, the schedules beside them, then the
// checks. An error means the run could not be made (the stack did not
// start), not that a check failed: those are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.Endpoint == "" {
		return nil, errors.New("chaos: Config.Endpoint is required")
	}
	started := time.Now()
	f := New(cfg.Seed, cfg.Probabilities)
	plan := f.Plan(cfg.Jobs)
	clock := &Clock{}
	pool := newResourcePool(f.ResourcePlan(len(plan), cfg.Resources), clock)
	waves := pool.plan.all()
	replans := f.ReplanPlan(len(plan) + len(waves))
	all := slices.Concat(plan, waves, replans)
	name := fmt.Sprintf("chaos-%d-%x", cfg.Seed, time.Now().UnixNano()&0xffffff)
	st, err := devstack.Start(ctx, devstack.Options{
		EndpointURL: cfg.Endpoint, StackName: name, APIKeys: map[string]string{APIKey: Tenant, ScheduleKey: ScheduleTenant},
		ScheduleEvery: 2 * time.Second, PollWait: time.Second, Lease: cfg.Lease, Now: clock.Now, Log: cfg.Log,
		TimerThreshold:   RunTimerThreshold,
		APIOptions:       []func(*middleware.Stack) error{f.Middleware, pool.Observe},
		RunnerAPIOptions: []func(*middleware.Stack) error{f.Duplicates()},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: start the stack: %w", err)
	}
	defer st.Close()

	r := &run{
		cfg: cfg, f: f, st: st, clock: clock, pool: pool,
		raw:  store.New(st.DynamoDB, st.Resources.Env["STEPFLOW_TABLE"]),
		c:    newClient(st.URL, APIKey),
		subs: make([]*submission, len(all)),
	}
	r.w = &workers{f: f, c: r.c, clock: clock, pool: pool, replans: map[string][]call{}}
	// The worker queues are made before the engine first uses them, with a
	// 5 s visibility timeout instead of the engine's 30 s (as Lease shortens
	// the ready queues'), so a message a crashed claim took comes back soon.
	wq := queue.New(st.SQS, queue.Config{
		WorkerQueuePrefix: st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"], DLQARN: st.Resources.Env["STEPFLOW_DLQ_ARN"],
		WorkerQueueVisible: WorkerVisibility,
	})
	for _, name := range WorkerQueues {
		if err := wq.EnsureWorkerQueue(ctx, Tenant, name); err != nil {
			return nil, fmt.Errorf("chaos: create worker queue %s: %w", name, err)
		}
	}
	res := &Result{Seed: cfg.Seed, Jobs: len(all), Stack: name, Plan: PlanDigest(all)}
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
	submitAll(ctx, slices.Concat(plan, replans), func(p JobPlan) { r.submit(ctx, p, deadline) })
	waved.Wait()
	r.submitted.Store(true)
	finished := await(ctx, r.raw, Tenant, r.snapshot, deadline)
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
	res.Queues, res.Dead = r.drain(ctx, time.Now().Add(cfg.Drain))
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
	res.Notes = append(res.Notes, r.w.notes...)
	res.Duration = time.Since(started)
	return res, nil
}

type run struct {
	cfg   Config
	f     *Faults
	st    *devstack.Stack
	clock *Clock
	raw   *store.Store // the table without the fault layer, for the checks
	c     *client
	w     *workers
	pool  *resourcePool

	mu        sync.Mutex
	subs      []*submission // by JobPlan.N
	racers    sync.WaitGroup
	sweeps    SweepTotals
	submitted atomic.Bool // every planned job has been submitted
}

func (r *run) snapshot() []*submission {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.subs)
}

// submitAll submits plans from four goroutines.
func submitAll(ctx context.Context, plan []JobPlan, submit func(JobPlan)) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(plan) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				submit(plan[i])
			}
		})
	}
	wg.Wait()
}

// submit submits a job (twice for every fifth, as a client that lost the
// first answer would: the same job must answer), after the replan it must
// refuse if it has one, then sets its racer going (race.go).
func (r *run) submit(ctx context.Context, p JobPlan, deadline time.Time) {
	s := &submission{plan: p, ids: map[string]int{}}
	if p.Refused != nil {
		s.add(r.c.do(ctx, deadline, call{Op: "replan"}, http.MethodPost, "/v1/jobs", p.Refused))
	}
	s.send(ctx, r.c, deadline)
	if s.id != "" && p.N%5 == 0 {
		s.send(ctx, r.c, deadline)
	}
	r.mu.Lock()
	r.subs[p.N] = s
	r.mu.Unlock()
	r.racers.Go(func() { r.race(ctx, s, deadline) })
}

// await polls the table (without faults) until every job submitted is
// finished and its racer done (a FAILED redrive job is about to run
// again), or the deadline passes, and answers how many finished.
func await(ctx context.Context, raw *store.Store, tenant string, subs func() []*submission, deadline time.Time) int {
	n := 0
	poll(ctx, deadline, 250*time.Millisecond, func() bool {
		open := 0
		n = 0
		for _, s := range subs() {
			if s == nil || s.id == "" {
				continue
			}
			if !s.finished {
				j, err := raw.Get(ctx, tenant, s.id)
				s.finished = err == nil && j.State.Terminal() && s.raced.Load()
			}
			n, open = n+btoi(s.finished), open+btoi(!s.finished)
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
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
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
		for range n {
			wg.Go(func() {
				crashed := true
				defer func() {
					_ = recover() // the invocation died; the next one picks up
					r.mu.Lock()
					r.sweeps.Crashed += btoi(crashed)
					r.mu.Unlock()
				}()
				rep, _ := heartbeat(ctx, events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events"})
				crashed = false
				r.mu.Lock()
				r.sweeps.Reclaimed += rep.Reclaimed
				r.sweeps.Redispatched += rep.Redispatched
				r.mu.Unlock()
			})
		}
		wg.Wait()
		r.mu.Lock()
		r.sweeps.Sweeps += n
		r.sweeps.Advances += btoi(advance)
		r.mu.Unlock()
	}
}

// queueCount is what a queue holds.
type queueCount struct {
	Name                       string
	Visible, InFlight, Delayed int
	Err                        string // the attributes could not be read
}

func (q queueCount) total() int { return q.Visible + q.InFlight + q.Delayed }

// drain waits until the ready and worker queues hold no message (visible,
// in flight or delayed), while the runner and the chaos workers go on
// consuming; it answers what each held when it stopped, and what the
// dead-letter queue holds.
func (r *run) drain(ctx context.Context, deadline time.Time) ([]queueCount, int) {
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
	var all []queueCount
	poll(ctx, deadline, 500*time.Millisecond, func() bool {
		all = nil
		left := 0
		for _, name := range sortedKeys(urls) {
			c := r.count(ctx, name, urls[name])
			all = append(all, c)
			left += c.total() + btoi(c.Err != "")
		}
		return left == 0
	})
	return all, r.count(ctx, "dead-letter queue", r.st.Resources.QueueURLs["DeadLetterQueue"]).total()
}

func (r *run) count(ctx context.Context, name, url string) queueCount {
	out, err := r.st.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	c := queueCount{Name: name}
	if err != nil {
		c.Err = err.Error()
		return c
	}
	c.Visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	c.InFlight, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	c.Delayed, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	return c
}

// check holds every job of the run's tenant to the invariants and to its
// row, the submits to their answers, the queues to being empty and the
// pool to its capacity; it answers the ledger the schedules' checks add
// to.
func (r *run) check(ctx context.Context, res *Result) *ledger {
	l := newLedger()
	late := map[string][]lateAnswer{}
	r.w.mu.Lock()
	for _, a := range r.w.late {
		late[a.Job] = append(late[a.Job], a)
	}
	for _, s := range r.subs {
		for _, c := range r.w.replans[sid(s)] {
			s.add(c)
		}
	}
	r.w.mu.Unlock()
	stored := readJobs(ctx, r.raw, Tenant, r.subs)
	res.States = map[domain.JobState]int{}
	for _, j := range stored {
		res.States[j.State]++
	}
	listed, listErr := listTenant(ctx, r.raw, Tenant)
	l.judgeSubmits(r.subs, listed, listErr, stored, late)
	for _, q := range res.Queues {
		var left []string
		if q.Err != "" || q.total() > 0 {
			left = append(left, fmt.Sprintf("holds %d visible, %d in flight, %d delayed %s", q.Visible, q.InFlight, q.Delayed, q.Err))
		}
		l.judge("no message left in flight (per queue)", Mismatched, q.Name, left...)
	}
	r.pool.check(ctx, r, l, res, stored)
	return l
}

func sid(s *submission) string {
	if s == nil {
		return ""
	}
	return s.id
}

// readJobs reads (without faults) the jobs submits answered.
func readJobs(ctx context.Context, raw *store.Store, tenant string, subs []*submission) map[string]*domain.Job {
	out := map[string]*domain.Job{}
	for _, s := range subs {
		if s == nil || s.id == "" {
			continue
		}
		if j, err := raw.Get(ctx, tenant, s.id); err == nil {
			out[s.id] = j
		}
	}
	return out
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
