// Package stepflowtest runs stepflow's engine inside a Go test, on its
// in-memory adapters and a clock the test moves, so a job spec and the
// worker handlers it calls are tested in milliseconds with no emulator:
// a retry's backoff, a sleep of a day or an approval that times out after
// 24 hours take no time at all.
//
//	env := stepflowtest.New(t)
//	env.HandleQueue("charge", func(ctx context.Context, task *stepflowtest.Task) (any, error) {
//		if task.Attempt < 3 {
//			return nil, stepflowtest.Fail("retryable", "card network busy")
//		}
//		return map[string]string{"receipt": "r-1"}, nil
//	})
//	job := env.Submit(`{"steps":[{"id":"charge","action":{"type":"worker","queue":"charge"}}]}`)
//	job = env.AwaitState(job.ID, domain.JobCompleted) // moves the clock through both backoffs
//
// It is the engine itself, not a model of it: the same code decides every
// transition as on AWS, over the adapters shared/enginetest holds to the
// DynamoDB and SQS contract. What the harness adds is the part AWS plays:
// it takes the ready queues as the SQS event source mapping does, claims
// the worker queues a handler serves as a worker would, runs the heartbeat
// sweep on its schedule (every minute, as template.yaml has it), and moves
// the clock from one due instant to the next. Everything runs in the
// test's goroutine, one message at a time, in a fixed order: no goroutine
// sleeps, and the same test sees the same times on every run.
//
// Built-in steps run as they do on AWS: pass, fail, sleep, wait and its
// signals, approval gates, http (the network guard lets loopback through,
// so an httptest server works) and lambda (to a Go function registered
// with HandleFunction).
//
// An Env is not safe for concurrent use; handlers may call its methods
// that act on jobs (Signal, Cancel, ...), but not those that move time
// (RunUntilIdle, Advance, AwaitState).
package stepflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/netguard"
)

// Defaults of an Env.
var (
	// DefaultStart is where the clock starts: a fixed instant, so times in
	// a test's assertions and failure messages are the same on every run.
	DefaultStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
)

const (
	// DefaultTenant is the tenant an Env's jobs belong to.
	DefaultTenant = "test"
	// DefaultSweepEvery is the heartbeat's period (template.yaml,
	// STEPFLOW_SWEEP_EVERY): schedules fire, and expired leases are
	// reclaimed, at its ticks.
	DefaultSweepEvery = time.Minute
	// DefaultHorizon is how far AwaitState moves the clock before it gives
	// up: a year and a day, past the longest wait a spec may ask for.
	DefaultHorizon = 366 * 24 * time.Hour
	// Worker is the worker name the harness claims under.
	Worker = "stepflowtest"
)

// maxRounds bounds the passes over the queues at one instant: work that
// never settles (a retry policy with no delay, looping) fails the test
// instead of hanging it.
const maxRounds = 100_000

// Option configures an Env.
type Option func(*config)

type config struct {
	start      time.Time
	tenant     string
	sweepEvery time.Duration
	horizon    time.Duration
	seed       uint64
}

// WithStart starts the clock at start (DefaultStart): time.Now() for a
// real instant, or a date a schedule's cron or time zone makes interesting.
func WithStart(start time.Time) Option { return func(c *config) { c.start = start } }

// WithTenant names the tenant the Env acts as (DefaultTenant).
func WithTenant(tenant string) Option { return func(c *config) { c.tenant = tenant } }

// WithSweepEvery sets the heartbeat's period (DefaultSweepEvery).
func WithSweepEvery(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// WithHorizon sets how far AwaitState moves the clock before it gives up
// (DefaultHorizon).
func WithHorizon(d time.Duration) Option { return func(c *config) { c.horizon = d } }

// WithSeed seeds the retry jitter (a step's retry.jitter), so its delays
// are the same on every run of the test (seed 1 by default).
func WithSeed(seed uint64) Option { return func(c *config) { c.seed = seed } }

// Env is one engine with its own store, queues, schedules and clock.
type Env struct {
	t         testing.TB
	ctx       context.Context
	cfg       config
	clock     *memory.Clock
	store     *memory.Store
	queue     *memory.Queue
	schedules *memory.Schedules
	engine    *engine.Engine
	functions *functions

	handlers  map[string]Handler
	lastSweep time.Time
	swept     bool
	running   bool // inside RunUntilIdle: handlers may not move time
}

// New builds an Env for one test. When the test ends it checks that every
// job's event log replays to its stored state, as the engine's own tests
// do.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	cfg := config{start: DefaultStart, tenant: DefaultTenant, sweepEvery: DefaultSweepEvery, horizon: DefaultHorizon, seed: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.sweepEvery <= 0 || cfg.horizon <= 0 || !domain.ValidName(cfg.tenant) {
		t.Fatalf("stepflowtest.New: sweep period and horizon must be positive and the tenant 1 to 40 letters, digits, '-' or '_' (got %s, %s, %q)", cfg.sweepEvery, cfg.horizon, cfg.tenant)
	}
	cfg.start = cfg.start.UTC().Truncate(time.Millisecond)
	// Loopback is let through for an httptest server; the rest of the
	// default guard (private, link-local, metadata addresses) holds.
	guard, err := netguard.ParseAllow("127.0.0.0/8,::1,localhost")
	if err != nil {
		t.Fatalf("stepflowtest.New: %v", err)
	}
	clock := memory.NewClock(cfg.start)
	store := memory.NewStore()
	queue := memory.NewQueue(clock.Now)
	fns := &functions{fns: map[string]Function{}}
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The functions live where the local stack's do, so a step naming one
	// by an ARN names that account and region.
	home := actions.LambdaHome{Partition: "aws", Region: "us-east-1", Account: "123456789012"}
	schedules := memory.NewSchedules(store)
	eng := engine.New(engine.Config{
		Store: store, Queue: queue, Runner: &actions.Runner{Guard: guard, Lambda: fns, LambdaHome: home},
		BuiltinLease: memory.DefaultReadyVisibility, Log: log, Now: clock.Now, Schedules: schedules,
	})
	eng.SeedJitter(cfg.seed)
	env := &Env{
		t: t, ctx: t.Context(), cfg: cfg, clock: clock, store: store, queue: queue,
		schedules: schedules, engine: eng, functions: fns, handlers: map[string]Handler{},
	}
	t.Cleanup(env.checkReplay)
	return env
}

// testLog sends the engine's warnings to the test's log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// checkReplay requires of every job that its event log replays to its
// stored state, its job events legal in the formal job table plus the
// documented widenings.
func (e *Env) checkReplay() {
	ctx := context.Background()
	cursor := ""
	for {
		page, next, err := e.store.List(ctx, e.cfg.tenant, engine.ListFilter{Limit: 100, Cursor: cursor})
		if err != nil {
			e.t.Errorf("stepflowtest: list jobs: %v", err)
			return
		}
		for _, js := range page {
			j, err := e.store.Get(ctx, e.cfg.tenant, js.ID)
			if err == nil {
				err = domain.CheckReplay(j)
			}
			if err == nil {
				err = domain.CheckFormal(j.Events)
			}
			if err != nil {
				e.t.Errorf("stepflowtest: job %s: %v", js.ID, err)
			}
		}
		if cursor = next; cursor == "" {
			return
		}
	}
}

// Tenant answers the tenant the Env acts as.
func (e *Env) Tenant() string { return e.cfg.tenant }

// Now answers the clock's time.
func (e *Env) Now() time.Time { return e.clock.Now() }

// Engine answers the engine, for what the Env does not wrap (resources,
// health, idempotency keys); act on it as Tenant().
func (e *Env) Engine() *engine.Engine { return e.engine }

// Submit submits a job as POST /v1/jobs would: spec is its JSON (a
// string, []byte or json.RawMessage) or any value encoding/json makes it
// from. A spec the API would refuse fails the test; TrySubmit answers the
// error instead. Nothing runs until RunUntilIdle, Advance or AwaitState.
func (e *Env) Submit(spec any) *domain.Job {
	e.t.Helper()
	j, err := e.TrySubmit(spec)
	if err != nil {
		e.t.Fatalf("stepflowtest: submit: %v", err)
	}
	return j
}

// TrySubmit is Submit answering the error: a *domain.Error naming the
// field (e.g. steps[0].action.queue) for a spec the API answers 400.
func (e *Env) TrySubmit(spec any) (*domain.Job, error) {
	body, err := jsonOf(spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	j, _, err := e.engine.Submit(e.ctx, e.cfg.tenant, body, "")
	return j, err
}

// CreateSchedule creates a schedule as POST /v1/schedules would; its
// runs are made by the sweep at its ticks as the clock moves.
func (e *Env) CreateSchedule(spec any) *domain.Schedule {
	e.t.Helper()
	body, err := jsonOf(spec)
	if err == nil {
		var s *domain.Schedule
		if s, _, err = e.engine.CreateSchedule(e.ctx, e.cfg.tenant, body); err == nil {
			return s
		}
	}
	e.t.Fatalf("stepflowtest: create schedule: %v", err)
	return nil
}

// Get answers a job as stored.
func (e *Env) Get(id string) *domain.Job {
	e.t.Helper()
	j, err := e.engine.Get(e.ctx, e.cfg.tenant, id)
	if err != nil {
		e.t.Fatalf("stepflowtest: get job: %v", err)
	}
	return j
}

// Step answers one step of a job as stored: its state, output, error and
// attempts (with their start and end times on the Env's clock).
func (e *Env) Step(id, stepID string) *domain.Step {
	e.t.Helper()
	s, _, err := e.Get(id).Step(stepID)
	if err != nil {
		e.t.Fatalf("stepflowtest: job %s: %v", id, err)
	}
	return s
}

// Events answers a job's event log, oldest first.
func (e *Env) Events(id string) []domain.Event {
	e.t.Helper()
	return e.Get(id).Events
}

// List answers the tenant's jobs, newest first, as GET /v1/jobs does
// (f.Schedule lists a schedule's runs); every page, when f.Limit is 0.
func (e *Env) List(f engine.ListFilter) []engine.JobSummary {
	e.t.Helper()
	all := f.Limit == 0
	if all {
		f.Limit = 100
	}
	var out []engine.JobSummary
	for {
		page, next, err := e.engine.List(e.ctx, e.cfg.tenant, f)
		if err != nil {
			e.t.Fatalf("stepflowtest: list jobs: %v", err)
		}
		out = append(out, page...)
		if f.Cursor = next; !all || next == "" {
			return out
		}
	}
}

// Approve approves an open approval gate, as a person would (by
// "stepflowtest").
func (e *Env) Approve(id, stepID string) *domain.Job {
	e.t.Helper()
	j, _, err := e.engine.Approve(e.ctx, e.cfg.tenant, id, stepID, engine.Decision{By: Worker})
	return e.must(j, err)
}

// Reject rejects an open approval gate, failing its job.
func (e *Env) Reject(id, stepID string) *domain.Job {
	e.t.Helper()
	j, _, err := e.engine.Reject(e.ctx, e.cfg.tenant, id, stepID, engine.Decision{By: Worker})
	return e.must(j, err)
}

// Signal sends the signal name with payload (encoded as by Submit; nil for
// none) to a job's wait steps.
func (e *Env) Signal(id, name string, payload any) *domain.Job {
	e.t.Helper()
	raw, err := optionalJSON(payload)
	if err != nil {
		e.t.Fatalf("stepflowtest: signal %q: %v", name, err)
	}
	j, _, err := e.engine.Signal(e.ctx, e.cfg.tenant, id, domain.SignalRequest{Name: name, Payload: raw})
	return e.must(j, err)
}

// Resume answers a step waiting on a person (a handler failed it with
// class needs_user): it runs again with input as its "user_input".
func (e *Env) Resume(id, stepID string, input any) *domain.Job {
	e.t.Helper()
	raw, err := optionalJSON(input)
	if err != nil {
		e.t.Fatalf("stepflowtest: resume %q: %v", stepID, err)
	}
	j, err := e.engine.Resume(e.ctx, e.cfg.tenant, id, stepID, raw)
	return e.must(j, err)
}

// Cancel cancels a job.
func (e *Env) Cancel(id string) *domain.Job {
	e.t.Helper()
	j, err := e.engine.Cancel(e.ctx, e.cfg.tenant, id)
	return e.must(j, err)
}

// Redrive runs a FAILED job again from its failed and cancelled steps.
func (e *Env) Redrive(id string) *domain.Job {
	e.t.Helper()
	j, err := e.engine.Redrive(e.ctx, e.cfg.tenant, id)
	return e.must(j, err)
}

// SetBudget sets or raises a job's budget, as POST /v1/jobs/{id}/budget
// does: a job waiting at its budget gate goes on once usd is more than it
// has cost.
func (e *Env) SetBudget(id string, usd float64) *domain.Job {
	e.t.Helper()
	j, err := e.engine.SetBudget(e.ctx, e.cfg.tenant, id, usd, "stepflowtest")
	return e.must(j, err)
}

func (e *Env) must(j *domain.Job, err error) *domain.Job {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("stepflowtest: %v", err)
	}
	return j
}

// RunUntilIdle runs everything runnable at the clock's present instant:
// built-in steps, the handlers' queues, timers that are due, and the sweep
// when the instant is one of its ticks; then returns, without moving the
// clock.
func (e *Env) RunUntilIdle() {
	e.t.Helper()
	e.enter("RunUntilIdle")
	defer func() { e.running = false }()
	e.runNow()
}

// Advance moves the clock forward by d, stopping at every instant in
// between at which something becomes due (a backoff's end, a sleep's, a
// gate's deadline, a sweep tick with work, a schedule's tick) to run it
// there, so each thing happens at its own time.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	e.enter("Advance")
	defer func() { e.running = false }()
	until := e.clock.Now().Add(d)
	e.runNow()
	for {
		next, ok := e.nextEvent()
		if !ok || next.After(until) {
			break
		}
		e.moveTo(next)
		e.runNow()
	}
	e.moveTo(until)
	e.runNow()
}

// AwaitState runs the job until it is in state, moving the clock from one
// due instant to the next, and answers it. state is one the job rests in
// between runs (QUEUED, RETRYING, WAITING, PARKED, or a final one): a
// step runs within one instant here, so its job is never seen RUNNING
// (but a job step's, while its child job runs).
// It fails the test, showing the
// job's steps and events, when the job ends in another state, or when
// nothing would move it there within the horizon (a gate no one approves,
// a worker queue with no handler, a wait no signal reaches).
func (e *Env) AwaitState(id string, state domain.JobState) *domain.Job {
	e.t.Helper()
	e.enter("AwaitState")
	defer func() { e.running = false }()
	until := e.clock.Now().Add(e.cfg.horizon)
	for {
		e.runNow()
		j := e.Get(id)
		if j.State == state {
			return j
		}
		why := ""
		next, ok := e.nextEvent()
		switch {
		case j.State.Terminal():
			why = "it ended " + string(j.State)
		case !ok:
			why = "nothing is due that could move it"
		case next.After(until):
			why = fmt.Sprintf("nothing moved it there within %s", e.cfg.horizon)
		}
		if why != "" {
			e.t.Fatalf("stepflowtest: job %s never reached %s: %s, at %s.\n%s", id, state, why, e.clock.Now().Format(time.RFC3339Nano), e.describe(j))
			return j
		}
		e.moveTo(next)
	}
}

func (e *Env) enter(what string) {
	e.t.Helper()
	if e.running {
		e.t.Fatalf("stepflowtest: %s called from a handler; handlers run in no time and may not move the clock", what)
	}
	e.running = true
}

func (e *Env) moveTo(t time.Time) { e.clock.Advance(t.Sub(e.clock.Now())) }

// runNow drains the present instant: the ready queues, the handlers'
// worker queues and the sweep on its tick, until a pass does nothing.
func (e *Env) runNow() {
	e.t.Helper()
	for range maxRounds {
		n := e.executeReady()
		n += e.runHandlers()
		n += e.sweepOnTick()
		if n == 0 {
			return
		}
	}
	e.t.Fatalf("stepflowtest: work at %s never settled after %d passes (a retry with no delay that never ends?)", e.clock.Now().Format(time.RFC3339Nano), maxRounds)
}

// executeReady plays the SQS event source mapping: each visible message of
// the ready queues goes to the execute handler, and is deleted unless it
// is held or failed (then it comes back after its visibility timeout, as
// in SQS).
func (e *Env) executeReady() int {
	e.t.Helper()
	n := 0
	for {
		ds := e.queue.TakeReady(memory.MaxReceive)
		if len(ds) == 0 {
			return n
		}
		for _, d := range ds {
			n++
			res, err := e.engine.Execute(e.ctx, d)
			if err != nil {
				e.t.Errorf("stepflowtest: execute step %s of job %s: %v", d.Message.Step, d.Message.Job, err)
				continue
			}
			if res != engine.Held {
				if err := e.queue.Ack(e.ctx, d.Token); err != nil {
					e.t.Fatalf("stepflowtest: delete message: %v", err)
				}
			}
		}
	}
}

// sweepOnTick runs the heartbeat's sweep when the clock is on one of its
// ticks and it has not run there yet.
func (e *Env) sweepOnTick() int {
	e.t.Helper()
	now := e.clock.Now()
	if now.Sub(e.cfg.start)%e.cfg.sweepEvery != 0 || e.swept && e.lastSweep.Equal(now) {
		return 0
	}
	e.lastSweep, e.swept = now, true
	rep, err := e.engine.Sweep(e.ctx)
	if err != nil {
		e.t.Fatalf("stepflowtest: sweep: %v", err)
	}
	if rep.Errors > 0 || rep.Quarantined > 0 || rep.Deferred > 0 {
		e.t.Errorf("stepflowtest: the sweep at %s could not move every job on: %+v (see the log)", now.Format(time.RFC3339Nano), rep)
	}
	return rep.Due + rep.Fired + rep.Skipped
}

// nextEvent answers the next instant after now at which something is due:
// a message becomes visible, or a sweep tick finds a job or a schedule
// due.
func (e *Env) nextEvent() (time.Time, bool) {
	e.t.Helper()
	now := e.clock.Now()
	next, ok := e.queue.NextVisible(now)
	if due, dok := e.nextDue(); dok {
		if tick := e.tickFor(due, now); !ok || tick.Before(next) {
			next, ok = tick, true
		}
	}
	return next, ok
}

// nextDue answers the earliest time a job or a schedule is due in the due
// indexes.
func (e *Env) nextDue() (time.Time, bool) {
	e.t.Helper()
	var at time.Time
	far := e.clock.Now().Add(100 * 365 * 24 * time.Hour)
	jobs, err := e.store.Due(e.ctx, far, 1)
	if err != nil {
		e.t.Fatalf("stepflowtest: due jobs: %v", err)
	}
	if len(jobs) > 0 {
		if at, err = time.Parse(time.RFC3339Nano, jobs[0].Due); err != nil {
			e.t.Fatalf("stepflowtest: due time %q: %v", jobs[0].Due, err)
		}
	}
	cursor := ""
	for {
		page, next, err := e.schedules.List(e.ctx, e.cfg.tenant, cursor, 100)
		if err != nil {
			e.t.Fatalf("stepflowtest: list schedules: %v", err)
		}
		for _, s := range page {
			if s.NextAt != nil && !s.Paused && (at.IsZero() || s.NextAt.Before(at)) {
				at = *s.NextAt
			}
		}
		if cursor = next; cursor == "" {
			return at, !at.IsZero()
		}
	}
}

// tickFor answers the first sweep tick at or after due that is still to
// come after now.
func (e *Env) tickFor(due, now time.Time) time.Time {
	p := e.cfg.sweepEvery
	after := due
	if !after.After(now) {
		after = now.Add(time.Nanosecond)
	}
	if e.swept && !after.After(e.lastSweep) {
		after = e.lastSweep.Add(time.Nanosecond)
	}
	k := (after.Sub(e.cfg.start) + p - 1) / p
	return e.cfg.start.Add(k * p)
}

// describe renders a job for a failure message: its steps and events.
func (e *Env) describe(j *domain.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s is %s\n", j.ID, j.State)
	for _, s := range j.Steps {
		fmt.Fprintf(&b, "  step %-20s %-18s attempt %d", s.ID(), s.State, s.Attempt)
		if s.Error != nil {
			fmt.Fprintf(&b, "  error %s: %s", s.Error.Class, s.Error.Message)
		}
		if s.Spec.Action.Type == domain.ActionWorker && e.handlers[s.Spec.Action.Queue] == nil && !s.State.Terminal() {
			fmt.Fprintf(&b, "  (no handler serves queue %q: env.HandleQueue)", s.Spec.Action.Queue)
		}
		if s.State == domain.StepNeedsUser {
			b.WriteString("  (waits on a person: env.Approve, env.Reject or env.Resume)")
		}
		if s.State == domain.StepWaiting && s.Spec.Action.Signal != "" {
			fmt.Fprintf(&b, "  (waits for signal %q: env.Signal)", s.Spec.Action.Signal)
		}
		b.WriteByte('\n')
	}
	b.WriteString("events:\n")
	for _, ev := range j.Events {
		fmt.Fprintf(&b, "  %3d %s %-22s %s", ev.Seq, ev.At.Format(time.RFC3339Nano), ev.Type, ev.Step)
		if ev.Attempt > 0 {
			fmt.Fprintf(&b, "#%d", ev.Attempt)
		}
		if ev.Detail != "" {
			b.WriteString("  " + ev.Detail)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// jsonOf encodes a body: JSON given as text passes as is.
func jsonOf(v any) ([]byte, error) {
	switch b := v.(type) {
	case string:
		return []byte(b), nil
	case []byte:
		return b, nil
	case json.RawMessage:
		return b, nil
	}
	return json.Marshal(v)
}

// optionalJSON is jsonOf with nil for nothing.
func optionalJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	b, err := jsonOf(v)
	return json.RawMessage(b), err
}

// sortedQueues answers the handled queues in a fixed order.
func (e *Env) sortedQueues() []string {
	qs := make([]string, 0, len(e.handlers))
	for q := range e.handlers {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

// isRefusal reports an outcome the engine refused because the job moved
// on meanwhile (a handler that cancelled its own job, say).
func isRefusal(err error) bool {
	var ite *domain.IllegalTransitionError
	return errors.Is(err, domain.ErrLeaseLost) || errors.As(err, &ite) || domain.CodeOf(err) == domain.CodeConflict
}
