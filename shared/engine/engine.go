// Package engine runs the canonical model against its adapters: it loads a
// job, lets the domain decide a change, saves it with one conditional write,
// and only then sends the messages the change calls for. A crash between
// the write and the send loses nothing: the sweep finds the step overdue and
// sends again.
package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stepflow/stepflow/shared/domain"
)

// Clock tells the time; tests set it.
type Clock func() time.Time

// Config is what an engine runs on: its adapters, its clock and log, and
// its settings. New takes it whole; nothing changes it after (the Engine
// has no exported fields: callers use its methods).
type Config struct {
	Store Store
	// Resources keeps resource pools; New takes it from the store when the
	// store keeps them too (both adapters do).
	Resources Resources
	Queue     Queue
	Runner    Actions
	// StateMachines runs stepfunctions steps' executions; nil fails such a
	// step, saying so. ExecutionWait is how long the execute function waits
	// for one it started (ExecutionWait when zero, none when negative).
	StateMachines StateMachines
	ExecutionWait time.Duration
	Now           Clock
	Log           *slog.Logger
	// BuiltinLease is the longest the execute function holds a step: the
	// ready queues' visibility timeout, after which SQS hands the message out
	// again. A step's own lease is shorter (builtinLease).
	BuiltinLease time.Duration
	// P0Tenants may submit priority 0; nil lets every tenant
	// (STEPFLOW_P0_TENANTS).
	P0Tenants map[string]bool
	// TimerThreshold is the longest delay the queue sends as an SQS delay:
	// a longer one waits in the due index until the sweep sends it within
	// reach (domain.Job.Arm); a job whose waits all end beyond it is
	// PARKED (STEPFLOW_TIMER_THRESHOLD).
	TimerThreshold time.Duration
	// TimerService: the queue holds a delay beyond TimerThreshold itself
	// (a Step Functions timer, STEPFLOW_TIMER_STATE_MACHINE), so such a
	// message is sent at once rather than by the sweep.
	TimerService bool
	// ResourceWait bounds a resource wait for a step that names no
	// resource_wait_seconds (STEPFLOW_RESOURCE_WAIT_SECONDS; zero:
	// domain.DefaultResourceWait).
	ResourceWait time.Duration
	// Retention is how long finished jobs are kept, per state
	// (STEPFLOW_RETENTION_*_DAYS; zero fields take the defaults).
	Retention domain.Retention
	// Schedules keeps the schedules the sweep fires (schedule.go); nil
	// wires none.
	Schedules Schedules
	// Blobs keeps payloads and outputs over InlineLimit (STEPFLOW_DATA_BUCKET);
	// nil keeps everything in the job's item.
	Blobs Blobs
	// InlineLimit is the largest payload or output kept in the job's item
	// (STEPFLOW_INLINE_LIMIT; domain.DefaultInlineLimit when zero).
	InlineLimit int
	// ChainSteps bounds the steps an execute invocation runs after the one
	// delivered (execute.go; ChainSteps when zero, none when negative);
	// ChainTime how long it starts new ones (ChainTime when zero).
	ChainSteps int
	ChainTime  time.Duration
	// Publisher sends each saved change's job-level transitions
	// (STEPFLOW_EVENT_BUS); nil sends none.
	Publisher Publisher
	// JobStateEvents chooses which transitions Publisher gets
	// (STEPFLOW_JOB_STATE_EVENTS); the zero value gives it all of them.
	JobStateEvents JobStateEvents
	// Metrics receives the step metrics at each flush of the counters
	// (CloudWatch EMF on Lambda); nil sends them nowhere.
	Metrics MetricsSink
	// Thresholds judge GET /v1/health (STEPFLOW_HEALTH_*); the zero value
	// takes DefaultHealthThresholds.
	Thresholds HealthThresholds
	// WorkerQueueUses records when jobs last named each worker queue, so
	// the sweep removes idle ones (queues.go); New takes it from the
	// store when the store keeps them (both adapters do).
	WorkerQueueUses WorkerQueueUses
	// WorkerQueueIdle is how long a worker queue no job names is kept
	// (STEPFLOW_WORKER_QUEUE_IDLE_SECONDS; DefaultWorkerQueueIdle when zero).
	WorkerQueueIdle time.Duration
	// MaxLongPolls bounds one tenant's open long-polls across every
	// process (STEPFLOW_MAX_LONG_POLLS; DefaultMaxLongPolls when zero,
	// none when negative).
	MaxLongPolls int
	// Operator keeps the operator's figures (operator.go); New takes it
	// from the store when the store keeps them (both adapters do). Nil
	// keeps none.
	Operator OperatorStore
	// Gauges reads the queues' depths for the sweep's readings; New
	// takes it from the queue when the queue reads them (the SQS
	// adapter). Nil reads none.
	Gauges QueueGauges
	// FunctionMemoryMB is the memory of the function this runs in, which
	// Lambda bills its time at (AWS_LAMBDA_FUNCTION_MEMORY_SIZE; the
	// template's 128 when zero): a job's usage counts its time so.
	FunctionMemoryMB int
	// TenantBudgets are tenants' daily budgets (STEPFLOW_TENANT_BUDGETS):
	// a submit past one answers 402. Nil bounds none.
	TenantBudgets TenantBudgets
}

// Engine is stepflow's core.
type Engine struct {
	cfg Config
	// deciding counts the decisions running (commit.go): none may call an
	// adapter, which a test's adapters check.
	deciding    atomic.Int32
	touched     sync.Map    // tenant NUL queue -> when this process last recorded its use
	takes       sync.Map    // tenant NUL queue -> *atomic.Int64, this process's takes from it (destination.go)
	fullTenants fullTenants // longpoll.go

	rngMu sync.Mutex
	rng   *mrand.Rand

	idMu      sync.Mutex
	idEntropy *ulid.MonotonicEntropy

	spent spentCache // budget.go

	statsMu      sync.Mutex
	stats        map[string]StatsDelta // per tenant, not written yet
	samples      map[domain.AttemptState][]float64
	statsFlushed time.Time
}

// newID answers a job id that sorts after every id this process made
// before, even within one millisecond, so listings are newest first.
func (e *Engine) newID(now time.Time) string {
	e.idMu.Lock()
	defer e.idMu.Unlock()
	if e.idEntropy == nil {
		e.idEntropy = ulid.Monotonic(rand.Reader, 0)
	}
	return ulid.MustNew(ulid.Timestamp(now), e.idEntropy).String()
}

// New wires an engine on c: a real clock and the default logger unless c
// names others, and the store's resources and worker queue uses unless c
// names others (both stores keep them).
func New(c Config) *Engine {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = func() time.Time { return time.Now().UTC() }
	}
	if r, ok := c.Store.(Resources); ok && c.Resources == nil {
		c.Resources = r
	}
	if u, ok := c.Store.(WorkerQueueUses); ok && c.WorkerQueueUses == nil {
		c.WorkerQueueUses = u
	}
	if o, ok := c.Store.(OperatorStore); ok && c.Operator == nil {
		c.Operator = o
	}
	if g, ok := c.Queue.(QueueGauges); ok && c.Gauges == nil {
		c.Gauges = g
	}
	if c.FunctionMemoryMB <= 0 {
		c.FunctionMemoryMB = 128
	}
	seed := make([]byte, 16)
	_, _ = rand.Read(seed)
	return &Engine{cfg: c, rng: mrand.New(mrand.NewPCG(uint64(seed[0])<<56|uint64(seed[1])<<48|uint64(seed[2]), uint64(seed[3])))}
}

func (e *Engine) now() time.Time { return e.cfg.Now().UTC().Truncate(time.Millisecond) }

// SeedJitter makes the backoff jitter a fixed sequence from seed, so a
// harness that drives the engine on a test clock (sdk/stepflowtest) sees
// the same retry times on every run; New seeds it at random.
func (e *Engine) SeedJitter(seed uint64) {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	e.rng = mrand.New(mrand.NewPCG(seed, seed))
}

// jitterRNG answers a random source for backoff jitter; math/rand/v2's Rand
// is not safe for concurrent use, so each caller gets its own.
func (e *Engine) jitterRNG() *mrand.Rand {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return mrand.New(mrand.NewPCG(e.rng.Uint64(), e.rng.Uint64()))
}

func nonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxRaces bounds how often a change is decided again after losing a
// version race to another writer; one that loses them all answers
// domain.ErrContended (503, Retry-After), never a 500.
const maxRaces = 8

// Between lost races a change pauses a random time below raceBackoffFirst,
// doubling up to raceBackoffMax (full jitter): writers that collided once
// spread out instead of colliding again in step. The pauses add up to at
// most about 0.6 s over maxRaces, inside any request's time.
const (
	raceBackoffFirst = 5 * time.Millisecond
	raceBackoffMax   = 160 * time.Millisecond
)

// lostRace pauses after the race-th lost race (from 0) and reports whether
// to decide again: false when ctx ended.
func lostRace(ctx context.Context, race int) bool {
	ceiling := min(raceBackoffFirst<<race, raceBackoffMax)
	return Sleep(ctx, mrand.N(ceiling)+time.Millisecond)
}

// StatsFlushEvery is how long a process keeps outcome counts before the
// end of an invocation writes them: under load, a Lambda instance writes
// its counters a few times a minute rather than once per job.
const StatsFlushEvery = 10 * time.Second

// recordStats notes a saved change in the health counters and the step
// metrics, in memory; flushStats writes them.
func (e *Engine) recordStats(j *domain.Job, before loadedJob) {
	prev, waitingBefore := before.state, before.waiting
	var d StatsDelta
	if !prev.Terminal() {
		d = OutcomeDelta(j.State)
		if j.State == domain.JobCompleted || j.State == domain.JobFailed {
			d.DurationMs, d.Timed = runTime(j).Milliseconds(), 1
		}
	}
	if w := j.WaitsOnPerson(); w != waitingBefore {
		d.Blocked = map[bool]int64{true: 1, false: -1}[w]
	}
	if q := j.State == domain.JobQueued; q != (prev == domain.JobQueued) {
		d.Queued = map[bool]int64{true: 1, false: -1}[q] // a reclaim or retry queues a job again
	}
	d.CostNanoUSD = costNano(j) - before.cost
	samples := countSteps(&d.Steps, j, before.steps, before.loaded)
	e.addStats(j.Tenant, d, samples)
}

// stepSnapshot is a step as a write found it: its state and the numbers
// of the attempts that had ended.
type stepSnapshot struct {
	state domain.StepState
	ended []int
}

// snapshotSteps notes j's steps before a decision changes them, by
// position (a decision only appends steps). Every write takes one, so it
// is a slice, not a map by id: a job of thousands of steps would pay a
// map of them on every write.
func snapshotSteps(j *domain.Job) []stepSnapshot {
	out := make([]stepSnapshot, len(j.Steps))
	var ended []int // every step's, one after another
	for i, s := range j.Steps {
		from := len(ended)
		for _, a := range s.Attempts {
			if a.EndedAt != nil {
				ended = append(ended, a.N)
			}
		}
		out[i] = stepSnapshot{state: s.State, ended: ended[from:len(ended):len(ended)]}
	}
	return out
}

// countSteps adds to c the step moves a write made (the step_ events it
// appended, each from the state before it: a step a write adds starts
// PENDING, as Replay has it), the retries among them and the attempts it
// ended; before is nil for a new job. It answers the ended attempts' run
// times in seconds, for the metrics sink.
func countSteps(c *StepCounts, j *domain.Job, before []stepSnapshot, loaded int) map[domain.AttemptState][]float64 {
	for range j.Steps[min(len(before), len(j.Steps)):] {
		c.Gauge(domain.StepPending, 1)
	}
	moved := map[string]domain.StepState{} // the steps the write moved, as it left them so far
	for _, ev := range j.Events[min(loaded, len(j.Events)):] {
		st, ok := strings.CutPrefix(ev.Type, "step_")
		if !ok {
			continue
		}
		to := domain.StepState(strings.ToUpper(st))
		from, seen := moved[ev.Step]
		if !seen {
			from = stateBefore(j, before, ev.Step)
		}
		moved[ev.Step] = to
		c.Move(StepMove{From: from, To: to}, 1)
		c.Gauge(from, -1)
		c.Gauge(to, 1)
		if to == domain.StepRetrying {
			c.Retries++
		}
	}
	var samples map[domain.AttemptState][]float64
	for i, s := range j.Steps {
		for _, a := range s.Attempts {
			if a.EndedAt == nil || a.StartedAt == nil || i < len(before) && slices.Contains(before[i].ended, a.N) {
				continue
			}
			d := max(a.EndedAt.Sub(*a.StartedAt), 0)
			c.Observe(a.State, d)
			if samples == nil {
				samples = map[domain.AttemptState][]float64{}
			}
			samples[a.State] = append(samples[a.State], d.Seconds())
		}
	}
	return samples
}

// stateBefore answers the state step id was in before the write: as
// noted, PENDING for one the write added, "" for none of the job's.
func stateBefore(j *domain.Job, before []stepSnapshot, id string) domain.StepState {
	_, i, err := j.Step(id)
	switch {
	case err != nil:
		return ""
	case i < len(before):
		return before[i].state
	}
	return domain.StepPending
}

// runTime is how long a job's attempts ran, all together: its duration
// as the health verdict judges it (time queued, backing off or waiting on
// a person or a signal is not run time).
func runTime(j *domain.Job) time.Duration {
	var d time.Duration
	for _, s := range j.Steps {
		for _, a := range s.Attempts {
			if a.StartedAt != nil && a.EndedAt != nil {
				d += max(a.EndedAt.Sub(*a.StartedAt), 0)
			}
		}
	}
	return d
}

// addStats adds to the tenant's counters not written yet, and samples to
// the attempt run times the metrics sink has not had yet.
func (e *Engine) addStats(tenant string, d StatsDelta, samples map[domain.AttemptState][]float64) {
	if d.Zero() {
		return
	}
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	if e.stats == nil {
		e.stats = map[string]StatsDelta{}
	}
	t := e.stats[tenant]
	t.Add(d)
	e.stats[tenant] = t
	for st, v := range samples {
		if e.samples == nil {
			e.samples = map[domain.AttemptState][]float64{}
		}
		e.samples[st] = append(e.samples[st], v...)
	}
}

// flushStats writes the counters gathered so far when forced (health
// reads them back), when a blocked count moved (a gauge must not drift) or
// StatsFlushEvery has passed since the last write; outcome counts
// otherwise wait, so a process that stops loses at most that many seconds
// of them. Every saved change calls it (observe). The counters are
// advisory: a failed write is logged and dropped.
func (e *Engine) flushStats(ctx context.Context, force bool) {
	now := e.now()
	e.statsMu.Lock()
	due := force || now.Sub(e.statsFlushed) >= StatsFlushEvery
	for _, d := range e.stats {
		due = due || d.Blocked != 0
	}
	if !due || len(e.stats) == 0 {
		e.statsMu.Unlock()
		return
	}
	pending, samples := e.stats, e.samples
	e.stats, e.samples, e.statsFlushed = nil, nil, now
	e.statsMu.Unlock()
	// The stack's step counters too: the heartbeat reads steps_by_state
	// there, one item, for the metrics sink.
	var all StepCounts
	for tenant, d := range pending {
		all.Add(d.Steps)
		if err := e.cfg.Store.RecordStats(context.WithoutCancel(ctx), tenant, d, now); err != nil {
			e.cfg.Log.WarnContext(ctx, "stats not recorded", "tenant", tenant, "err", err)
		}
	}
	if all.Empty() {
		return
	}
	if err := e.cfg.Store.RecordStats(context.WithoutCancel(ctx), AllTenants, StatsDelta{Steps: all}, now); err != nil {
		e.cfg.Log.WarnContext(ctx, "stats not recorded", "tenant", AllTenants, "err", err)
	}
	if e.cfg.Metrics != nil {
		e.cfg.Metrics.Emit(ctx, MetricsBatch{At: now, Moves: all.Moves, Retries: all.Retries, Durations: samples})
	}
}

// Submit validates and creates a job and dispatches its first step. With
// an idempotency key, the same key and body answer the job already made
// (created false); the same key with another body is refused.
func (e *Engine) Submit(ctx context.Context, tenant string, body []byte, idemKey string) (*domain.Job, bool, error) {
	return e.submit(ctx, tenant, "", body, idemKey)
}

// SubmitAs is Submit of a job whose id is given (`make dev`'s sample job,
// which the sample events name): a job of that id already stored is
// answered as it is (created false).
func (e *Engine) SubmitAs(ctx context.Context, tenant, id string, body []byte) (*domain.Job, bool, error) {
	if err := checkID(id); err != nil {
		return nil, false, err
	}
	if j, err := e.cfg.Store.Get(ctx, tenant, id); err == nil || !errors.Is(err, domain.ErrNotFound) {
		return j, false, err
	}
	return e.submit(ctx, tenant, id, body, "")
}

func (e *Engine) submit(ctx context.Context, tenant, id string, body []byte, idemKey string) (*domain.Job, bool, error) {
	if err := e.CheckDailyBudget(ctx, tenant); err != nil {
		return nil, false, err
	}
	j, err := e.build(ctx, tenant, id, body, idemKey, "Idempotency-Key")
	if err != nil {
		return nil, false, err
	}
	e.chargeSubmit(ctx, j, false)
	sent := false
	if ds := e.sendFirst(j); len(ds) > 0 && j.SentBeforeWrite(ds) {
		e.touchDispatched(ctx, j, ds)
		if err := e.cfg.Queue.Dispatch(ctx, j, carrying(j, Route(j, ds))); err != nil {
			e.cfg.Log.WarnContext(ctx, "first messages not sent before the write; they are sent after it", "job", j.ID, "err", err)
			j.Resweep() // back in the due index
		} else {
			sent = true
		}
	}
	c, err := e.write(ctx, j, body, sent)
	if err != nil {
		return nil, false, err
	}
	e.dispatchNew(ctx, c)
	e.publish(ctx, c.job, c.states)
	return c.job, c.created, nil
}

// dispatchNew sends the steps a submit's write calls for. The messages of
// a job the write made carry it as written (newSends), as those sent
// before a write do.
func (e *Engine) dispatchNew(ctx context.Context, c creation) {
	if len(c.dispatches) == 0 {
		return
	}
	e.touchDispatched(ctx, c.job, c.dispatches)
	if err := e.cfg.Queue.Dispatch(ctx, c.job, newSends(c)); err != nil {
		e.cfg.Log.WarnContext(ctx, "dispatch failed; the sweep will re-send", "job", c.job.ID, "err", err)
	}
}

// newSends routes a creation's dispatches; those of a job the write made
// carry it (carrying), so the claim or the execute that takes one leases
// its step without reading the job: the write is version 1, and a job
// that moved on since refuses the lease's write, which then reads it.
func newSends(c creation) []Send {
	sends := Route(c.job, c.dispatches)
	if c.created && c.job.Version == 1 {
		sends = carrying(c.job, sends)
	}
	return sends
}

// maxCarriedDoc bounds the job a first message carries: a one-step job's
// is some hundreds of bytes, and SQS bills a message by 64 KB.
const maxCarriedDoc = 2048

// maxSentFirstDoc bounds the jobs sent before their write (sendFirst), by
// their JSON. Measured on make dev, a first message sent first came before
// its job's write and waited for it (hidden 4 s) for 9 five-step jobs of
// 20 and every 40- and 100-step job; looking again for 375 ms first
// (absentPause) left none waiting up to ten steps, but a 100-step job
// still started 2 s later than written first. Past this size the two
// write units sending first saves are a small part of the job's cost.
const maxSentFirstDoc = 8 << 10

// carrying gives sends the job as its first write will store it (version
// 1), when it is small: their deliveries take the lease on it without a
// read, and a job that has moved on meanwhile (or is not written yet)
// fails that write's condition and is read.
func carrying(j *domain.Job, sends []Send) []Send {
	c := *j
	c.Version = 1
	c.SettleSpent() // what the submit spent rides with it (store: a job whose usage counts no write)
	doc, err := json.Marshal(&c)
	if err != nil || len(doc) > maxCarriedDoc {
		return sends
	}
	for i := range sends {
		sends[i].Doc = doc
	}
	return sends
}

// carriedJob answers the job a delivered message carries, if it is the
// message's own; nil otherwise.
func carriedJob(m Message) *domain.Job {
	if len(m.Doc) == 0 {
		return nil
	}
	var j domain.Job
	if err := json.Unmarshal(m.Doc, &j); err != nil || j.Tenant != m.Tenant || j.ID != m.Job || j.Version != 1 {
		return nil
	}
	j.CarriedDue = j.DueAt
	return &j
}

// sendFirst answers the first messages of a new job that go out before
// its write, which then leaves it out of the due index (half the write
// units of a one-step job). Only for steps a delivery of the ready queue
// runs: one that comes before the write is hidden a moment (Early), and
// one whose job is never written (the write failed) is dropped after
// absentWindow. A job with an idempotency key is written first: a replay
// would leave a message for a job that is never written, and a refused
// key would have spent it. So is a large job (maxSentFirstDoc): its write
// (header and parts) takes longer than its message takes to come, and an
// early delivery waits seconds.
func (e *Engine) sendFirst(j *domain.Job) []domain.Dispatch {
	if j.IdempotencyKey != "" {
		return nil
	}
	if doc, err := json.Marshal(j); err != nil || len(doc) > maxSentFirstDoc {
		return nil
	}
	ds := j.Outstanding(e.now())
	for _, d := range ds {
		if DestinationOf(j, d.Step).Kind != ToReady {
			return nil
		}
	}
	return ds
}

// creation is what create did: the job, whether this request made it,
// the dispatches its first steps call for, and the job-level transitions
// to publish once they are sent.
type creation struct {
	job        *domain.Job
	created    bool
	dispatches []domain.Dispatch
	states     []JobStateChange
}

// create is submit without the send and the publish: it validates and
// writes the job. keyField names the idempotency key in an error (a
// header, or a member of a batch's item).
func (e *Engine) create(ctx context.Context, tenant, id string, body []byte, idemKey, keyField string) (creation, error) {
	j, err := e.build(ctx, tenant, id, body, idemKey, keyField)
	if err != nil {
		return creation{}, err
	}
	return e.write(ctx, j, body, false)
}

// build validates a job's body and makes the job, not yet written.
func (e *Engine) build(ctx context.Context, tenant, id string, body []byte, idemKey, keyField string) (*domain.Job, error) {
	spec, err := domain.ParseJobSpec(body)
	if err != nil {
		return nil, err
	}
	if len(idemKey) > 255 {
		return nil, domain.Invalid(keyField, "is %d characters; the limit is 255", len(idemKey))
	}
	if err := e.checkSpec(ctx, tenant, spec, ""); err != nil {
		return nil, err
	}
	return e.newJob(ctx, tenant, id, spec, idemKey)
}

// newJob makes a job of a checked spec, not yet written: its payload kept
// in the blob store when large, its long timers sent at once when the
// queue holds them.
func (e *Engine) newJob(ctx context.Context, tenant, id string, spec *domain.JobSpec, idemKey string) (*domain.Job, error) {
	spec.ParkAfter = e.cfg.TimerThreshold
	spec.Retention = e.cfg.Retention
	spec.ResourceWait = e.cfg.ResourceWait
	now := e.now()
	if id == "" {
		id = e.newID(now)
	}
	if e.cfg.Blobs != nil && len(spec.Payload) > e.inlineLimit() {
		// Written before the job: a replay of an idempotent submission
		// leaves this one's copy as garbage the bucket's lifecycle expires.
		ref, err := e.put(ctx, &dataCache{}, domain.PayloadKey(tenant, id), spec.Payload)
		if err != nil {
			return nil, err
		}
		spec.Payload, spec.PayloadRef, spec.PayloadStored = nil, &ref, spec.Payload
	}
	j, err := domain.NewJob(tenant, id, spec, idemKey, now)
	if err != nil {
		return nil, err
	}
	e.armAtOnce(j, now) // Outstanding sends them
	return j, nil
}

// write writes a job build made. sent says its first messages went out
// before it (sendFirst); otherwise those the job calls for are answered,
// to send.
func (e *Engine) write(ctx context.Context, j *domain.Job, body []byte, sent bool) (creation, error) {
	j, created, err := e.cfg.Store.Create(ctx, j, requestHash(body), e.now())
	if err != nil {
		return creation{}, err
	}
	return e.written(ctx, j, created, sent), nil
}

// written is write's creation once the store answered: the job observed
// when made now, and the dispatches its first steps call for unless they
// were sent before the write.
func (e *Engine) written(ctx context.Context, j *domain.Job, created, sent bool) creation {
	var states []JobStateChange
	if created {
		states = e.observeCreated(ctx, j)
	}
	// A replay of a job that has not started yet dispatches again: the
	// first request may have died between its write and its send, and a
	// duplicate message finds nothing to do.
	if !sent && (created || !j.Started()) {
		return creation{j, created, j.Outstanding(e.now()), states}
	}
	return creation{j, created, nil, states}
}

// checkSpec refuses, before anything is written, what a valid spec may
// still not do here: an http target the guard refuses, run_at beyond a
// year, priority 0 for a tenant not allowed it, a worker queue past the
// tenant's bound (made now, so a claim never has to). prefix names the
// fields of a spec nested in another body ("job.").
func (e *Engine) checkSpec(ctx context.Context, tenant string, spec *domain.JobSpec, prefix string) error {
	if err := e.checkTargets(spec.Steps, prefix+"steps", spec.Queue); err != nil {
		return err
	}
	if spec.RunAt != nil && spec.RunAt.Sub(e.now()) > domain.MaxWaitSeconds*time.Second {
		return domain.Invalid(prefix+"run_at", "is more than a year ahead")
	}
	if *spec.Priority == 0 && e.cfg.P0Tenants != nil && !e.cfg.P0Tenants[tenant] {
		return domain.Invalid(prefix+"priority", "tenant %s may not submit priority 0 (P0); use 1 or 2, or ask an operator to add it to STEPFLOW_P0_TENANTS", tenant)
	}
	return e.ensureWorkerQueues(ctx, tenant, spec.Steps, prefix+"steps", spec.Queue)
}

// noteCreated counts a new job in its tenant's counters: it may start
// waiting (a gate, a sleep or a wait first).
func (e *Engine) noteCreated(j *domain.Job) {
	var d StatsDelta
	if j.State == domain.JobQueued {
		d.Queued = 1
	}
	if j.WaitsOnPerson() {
		d.Blocked = 1
	}
	d.CostNanoUSD = costNano(j)
	samples := countSteps(&d.Steps, j, nil, 0)
	e.addStats(j.Tenant, d, samples)
}

// ParseTenantList reads a setting that lists tenants: "*" or empty is
// every tenant (nil).
func ParseTenantList(v string) map[string]bool {
	if v = strings.TrimSpace(v); v == "" || v == "*" {
		return nil
	}
	m := map[string]bool{}
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			m[t] = true
		}
	}
	return m
}

// checkTargets refuses, before anything is written, a step (or one a
// replan would add) whose action may never reach its target: an http url
// the network guard never lets through, a lambda function the stack may
// not invoke; those of its maps' items and child jobs too, queue being
// the job's.
func (e *Engine) checkTargets(steps []domain.StepSpec, field, queue string) error {
	return domain.WalkJobSteps(steps, field, queue, func(f string, st *domain.StepSpec) error {
		if st.Action.Type == domain.ActionStepFunctions {
			if e.cfg.StateMachines == nil {
				return domain.Invalid(f+".action.state_machine", "this stack runs no Step Functions executions (it has no Step Functions client)")
			}
			if err := e.cfg.StateMachines.Check(st.Action.StateMachine); err != nil {
				return domain.Invalid(f+".action.state_machine", "%s", err.Error())
			}
			return nil
		}
		if e.cfg.Runner == nil {
			return nil
		}
		if param, err := e.cfg.Runner.CheckAction(st.Action); err != nil {
			return domain.Invalid(f+".action."+param, "%s", err.Error())
		}
		return nil
	})
}

// requestHash identifies a request body for idempotency, ignoring white
// space outside strings.
func requestHash(body []byte) string {
	var buf []byte
	if c, err := compactJSON(body); err == nil {
		buf = c
	} else {
		buf = body
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

func compactJSON(b []byte) ([]byte, error) {
	var v json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// quarantine sets aside a job that cannot be read, so no sweep or message
// meets it again; the failure is logged and counted by the caller.
func (e *Engine) quarantine(ctx context.Context, tenant, id string, cause error) {
	e.cfg.Log.ErrorContext(ctx, "job quarantined: its stored data cannot be read", "tenant", tenant, "job", id, "err", cause)
	if err := e.cfg.Store.Quarantine(context.WithoutCancel(ctx), tenant, id, cause.Error(), e.now()); err != nil {
		e.cfg.Log.WarnContext(ctx, "quarantine not written; the next sweep tries again", "job", id, "err", err)
	}
}

// Get answers one of tenant's jobs.
func (e *Engine) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return e.cfg.Store.Get(ctx, tenant, id)
}

// checkID answers not found for anything that cannot be a job id, before
// it reaches the table (whose keys have limits of their own).
func checkID(id string) error {
	if _, err := ulid.ParseStrict(id); err != nil {
		return fmt.Errorf("job %.40q: %w", id, domain.ErrNotFound)
	}
	return nil
}

// List pages through tenant's jobs.
func (e *Engine) List(ctx context.Context, tenant string, f ListFilter) ([]JobSummary, string, error) {
	if f.Parent != "" {
		return e.listChildren(ctx, tenant, f)
	}
	return e.cfg.Store.List(ctx, tenant, f)
}

// Cancel ends a job now. Cancelling a cancelled job answers it unchanged;
// cancelling a finished one is an illegal transition. Worker messages still
// out are deleted so no worker is handed the job again.
func (e *Engine) Cancel(ctx context.Context, tenant, id string) (*domain.Job, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	c := cancelChange()
	// A job whose writers keep winning its races (a long chain of built-in
	// steps writes every few milliseconds) is marked after the first lost
	// race: no write that has not seen the mark succeeds, and whichever
	// writer reads it next cancels the job (commit).
	c.contended = func(ctx context.Context) {
		if err := e.cfg.Store.RequestCancel(ctx, tenant, id); err != nil {
			e.cfg.Log.WarnContext(ctx, "cancel not marked on the job; trying again as before", "job", id, "err", err)
		}
	}
	j, err := e.commit(ctx, tenant, id, nil, c)
	if err != nil {
		return j, fmt.Errorf("cancel job %s: %w", id, err)
	}
	return j, nil
}

// cancelChange cancels a job, deleting its worker messages still out and
// giving back its slots.
func cancelChange() change {
	return change{cancels: true, decide: func(j *domain.Job, now time.Time, fx *effects) error {
		for _, s := range j.Steps {
			if s.Lease != nil && s.Lease.Token != "" && s.Spec.Action.Type == domain.ActionWorker {
				fx.ack = append(fx.ack, s.Lease.Token) // so no worker is handed the job again
			}
			if s.Lease != nil && s.Lease.Resource != "" {
				fx.release = append(fx.release, slot{s.Lease.Resource, s.Lease.ID})
			}
		}
		changed, err := j.Cancel(now)
		if err == nil && !changed {
			return errNoChange
		}
		return err
	}}
}

// Clock answers the engine's time (tests move it).
func (e *Engine) Clock() time.Time { return e.cfg.Now() }

// Log is the engine's logger.
func (e *Engine) Log() *slog.Logger { return e.cfg.Log }

// TenantForKey answers whose API key key is, or domain.ErrUnauthorized.
func (e *Engine) TenantForKey(ctx context.Context, key string) (string, error) {
	return e.cfg.Store.TenantForKey(ctx, key)
}
