package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/views"
)

// The engine's unit tests run it on the in-memory adapters and a clock
// they move: no emulator, no sleeping, milliseconds a test. The adapters
// keep the contract the DynamoDB and SQS ones keep (shared/enginetest).

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// builtinLease is the ready queues' visibility timeout (template.yaml).
const builtinLease = 1800 * time.Second

// bundle is one test's engine over adapters of its own.
type bundle struct {
	ctx   context.Context
	clock *memory.Clock
	store *memory.Store
	queue *memory.Queue
	e     *engine.Engine
	lossy *lossyQueue
	gate  *gateRunner
}

// setup makes a bundle; opts change the engine's configuration.
func setup(t testing.TB, opts ...func(*engine.Config)) *bundle {
	t.Helper()
	clock := memory.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	st := memory.NewStore()
	q := memory.NewQueue(clock.Now, memory.WithReadyVisibility(builtinLease))
	lossy := &lossyQueue{Queue: q}
	gate := &gateRunner{inner: &actions.Runner{}}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// ChainTime: a chain's time bound is wall time, which a test on a slow
	// machine (-race) must not meet; ChainSteps bounds the chains here.
	cfg := engine.Config{Store: st, Queue: lossy, Runner: gate, BuiltinLease: builtinLease, Log: log, Now: clock.Now, ChainTime: time.Hour}
	for _, o := range opts {
		o(&cfg)
	}
	e := engine.New(cfg)
	b := &bundle{ctx: context.Background(), clock: clock, store: st, queue: q, e: e, lossy: lossy, gate: gate}
	t.Cleanup(func() { b.checkEveryJob(t) })
	return b
}

// withStore has the engine use, over the bundle's memory store, the
// store wrap makes of it (a fault layer), and keeps that in *s.
func withStore[S engine.Store](s *S, wrap func(*memory.Store) S) func(*engine.Config) {
	return func(c *engine.Config) {
		*s = wrap(c.Store.(*memory.Store))
		c.Store = *s
	}
}

// checkEveryJob requires of every job the test made that its events
// replay to its stored state.
func (b *bundle) checkEveryJob(t testing.TB) {
	for _, tenant := range []string{tenantA, tenantB} {
		jobs, _, err := b.store.List(b.ctx, tenant, engine.ListFilter{Limit: 1000})
		require.NoError(t, err)
		for _, js := range jobs {
			j, err := b.store.Get(b.ctx, tenant, js.ID)
			if errors.Is(err, domain.ErrUnreadable) {
				continue // a test that corrupts a job on purpose
			}
			require.NoError(t, err)
			require.NoError(t, domain.CheckReplay(j), "job %s", j.ID)
			require.NoError(t, domain.CheckFormal(j.Events), "job %s", j.ID)
			require.NoError(t, views.CheckAll(j), "job %s in every vocabulary", j.ID)
		}
	}
}

// testWriter sends the engine's log to the test's.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// p0First is the lane order of most takes: P0, P1, P2 (engine.PriorityOrder).
var p0First = engine.PriorityOrder(1)

// lossyQueue loses dispatches on demand: the process "dies" between its
// write and its send.
type lossyQueue struct {
	*memory.Queue
	drop atomic.Int32
	// dropBatch, when set, loses the DispatchJobs call of that number
	// (from 1), and drop then counts single dispatches only; batches
	// counts the calls.
	dropBatch, batches atomic.Int32
}

func (q *lossyQueue) Dispatch(ctx context.Context, j *domain.Job, ds []engine.Send) error {
	if q.drop.Add(-1) >= 0 {
		return errors.New("injected: process died before the send")
	}
	q.drop.Store(0)
	return q.Queue.Dispatch(ctx, j, ds)
}

func (q *lossyQueue) DispatchJobs(ctx context.Context, batch []engine.JobSends) error {
	if n, drop := q.batches.Add(1), q.dropBatch.Load(); drop != 0 {
		if n == drop {
			return errors.New("injected: process died before the send")
		}
		return q.Queue.DispatchJobs(ctx, batch) // drop counts single dispatches then
	}
	if q.drop.Add(-1) >= 0 {
		return errors.New("injected: process died before the send")
	}
	q.drop.Store(0)
	return q.Queue.DispatchJobs(ctx, batch)
}

// gateRunner runs the built-in actions, except that a step with id "gate"
// (an http step: a pure one is leased and recorded at once, never held
// running) waits, once started, until it is let go, and answers {}.
type gateRunner struct {
	inner   engine.Actions
	mu      sync.Mutex
	started chan struct{}
	release chan struct{}
}

func (g *gateRunner) arm() (started, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started, g.release = make(chan struct{}), make(chan struct{})
	return g.started, g.release
}

func (g *gateRunner) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	if c.Spec.ID == "gate" {
		g.mu.Lock()
		started, release := g.started, g.release
		g.mu.Unlock()
		if started != nil {
			close(started)
			<-release
		}
		return json.RawMessage(`{}`), nil
	}
	return g.inner.Run(ctx, c)
}

func (g *gateRunner) CheckAction(a domain.ActionSpec) (string, error) { return g.inner.CheckAction(a) }

// submit submits a job for tenant and requires it made.
func (b *bundle) submit(t testing.TB, tenant, body string) *domain.Job {
	t.Helper()
	j, created, err := b.e.Submit(b.ctx, tenant, []byte(body), "")
	require.NoError(t, err)
	require.True(t, created)
	return j
}

// job reads a job as stored and requires its event log to replay to it.
func (b *bundle) job(t testing.TB, tenant, id string) *domain.Job {
	t.Helper()
	j, err := b.store.Get(b.ctx, tenant, id)
	require.NoError(t, err)
	require.NoError(t, domain.CheckReplay(j))
	return j
}

// execute runs the execute handler on one delivery as the SQS event source
// mapping does: a message that ran, or has nothing left to do, is deleted;
// a held one, or one that failed, stays for redelivery.
func (b *bundle) execute(t testing.TB, d engine.Delivery) engine.ExecuteResult {
	t.Helper()
	res, err := b.e.Execute(b.ctx, d)
	require.NoError(t, err)
	if res != engine.Held && res != engine.Early { // kept, as the handler keeps them
		require.NoError(t, b.queue.Ack(b.ctx, d.Token))
	}
	return res
}

// drain executes what the ready path holds now, batch after batch, until
// it is empty, and answers what became of each message.
func (b *bundle) drain(t *testing.T) []engine.ExecuteResult {
	t.Helper()
	var out []engine.ExecuteResult
	for range 100 {
		ds := b.queue.TakeReady(10)
		if len(ds) == 0 {
			return out
		}
		for _, d := range ds {
			out = append(out, b.execute(t, d))
		}
	}
	require.Fail(t, "the ready path never emptied")
	return out
}

// takeOne requires exactly one delivery on the ready path.
func (b *bundle) takeOne(t *testing.T) engine.Delivery {
	t.Helper()
	ds := b.queue.TakeReady(10)
	require.Len(t, ds, 1)
	return ds[0]
}

// claim claims from tenant's worker queue without waiting.
func (b *bundle) claim(t *testing.T, tenant, queue string) []engine.ClaimedLease {
	t.Helper()
	ls, err := b.e.Claim(b.ctx, tenant, engine.ClaimRequest{Queue: queue, Max: 5, Worker: "box-1"})
	require.NoError(t, err)
	return ls
}

func (b *bundle) sweep(t *testing.T) engine.SweepReport {
	t.Helper()
	rep, err := b.e.Sweep(b.ctx)
	require.NoError(t, err)
	return rep
}

func eventTypes(j *domain.Job) []string {
	var out []string
	for _, e := range j.Events {
		out = append(out, e.Type)
	}
	return out
}

func TestPassJobCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"hello","action":{"type":"pass"}}],"payload":{"hi":1}}`)
	require.Equal(t, domain.JobQueued, j.State)

	d := b.takeOne(t)
	carried := d.Message.Doc
	d.Message.Doc = nil
	require.Equal(t, engine.Message{Tenant: tenantA, Job: j.ID, Step: "hello"}, d.Message)
	var doc domain.Job
	require.NoError(t, json.Unmarshal(carried, &doc))
	// Sent before its write, it cannot count that write's units: the
	// job's next write counts them (a job whose usage has no write).
	require.Zero(t, doc.Usage.WriteUnits)
	doc.Usage.WriteUnits, doc.ItemBytes = j.Usage.WriteUnits, j.ItemBytes
	require.Equal(t, j, &doc, "the message carries the job as written")
	d.Message.Doc = carried
	require.Equal(t, engine.Executed, b.execute(t, d))

	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	s := got.Steps[0]
	require.Equal(t, domain.StepSucceeded, s.State)
	require.JSONEq(t, `{"hi":1}`, string(s.Output))
	require.Len(t, s.Attempts, 1)
	require.Equal(t, domain.AttemptSucceeded, s.Attempts[0].State)
	require.Nil(t, got.DueAt, "a finished job leaves the due index")
	require.NotNil(t, got.ExpiresAt)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_running", "step_succeeded", "job_completed"}, eventTypes(got))
	require.Empty(t, b.queue.TakeReady(10))
	require.Equal(t, engine.SweepReport{}, b.sweep(t))
}

func TestThreeStepsRunInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"payload":{"n":1},"steps":[
		{"id":"fetch","action":{"type":"pass"}},
		{"id":"shape","action":{"type":"pass"}},
		{"id":"notify","action":{"type":"pass"}}]}`)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []domain.StepState{domain.StepPending, domain.StepWaitingDeps, domain.StepWaitingDeps}, stepStates(got))
	// One message: the first step's. Each step after it is made runnable
	// by the write of the one before and run in the same invocation.
	d := b.takeOne(t)
	require.Equal(t, "fetch", d.Message.Step)
	require.Equal(t, engine.Executed, b.execute(t, d))
	require.Empty(t, b.queue.TakeReady(10), "nothing sent: the chain ran them")
	got = b.job(t, tenantA, j.ID)
	var ran []string
	for _, ev := range got.Events {
		if ev.Type == "step_succeeded" {
			ran = append(ran, ev.Step)
		}
	}
	require.Equal(t, []string{"fetch", "shape", "notify"}, ran)
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	for _, s := range got.Steps {
		require.JSONEq(t, `{"n":1}`, string(s.Output), "each step runs on the output before it")
	}
	require.Empty(t, b.queue.TakeReady(10))
}

func TestRetryableFailureIsRetriedAfterItsBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"flaky","action":{"type":"fail","class":"retryable","message":"busy"},
		"retry":{"max_attempts":3,"backoff":"fixed","initial_delay_ms":10000}}]}`)
	start := b.clock.Now()
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobRetrying, got.State)
	require.Equal(t, domain.StepRetrying, got.Steps[0].State)
	require.Equal(t, 1, got.Steps[0].Attempt)
	require.True(t, got.Steps[0].ReadyAt.Equal(start.Add(10*time.Second)))
	require.Empty(t, b.queue.TakeReady(10), "the retry is sent with the backoff as its delay")

	// A message that comes before the backoff has run out (a duplicate)
	// runs nothing: it is sent again with the rest of the delay.
	b.clock.Advance(4 * time.Second)
	early := engine.Delivery{Message: engine.Message{Tenant: tenantA, Job: j.ID, Step: "flaky"}}
	res, err := b.e.Execute(b.ctx, early)
	require.NoError(t, err)
	require.Equal(t, engine.Deferred, res)
	require.Equal(t, 1, b.job(t, tenantA, j.ID).Steps[0].Attempt)

	b.clock.Advance(6*time.Second - time.Millisecond)
	require.Empty(t, b.queue.TakeReady(10))
	b.clock.Advance(time.Millisecond)
	// The retry and the re-sent duplicate: one runs attempt 2, the other
	// finds the next backoff running and is deferred again.
	require.ElementsMatch(t, []engine.ExecuteResult{engine.Executed, engine.Deferred}, b.drain(t))
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, 2, got.Steps[0].Attempt)
	require.True(t, got.Steps[0].Attempts[1].StartedAt.Equal(start.Add(10*time.Second)), "attempt 2 ran when its backoff ran out")

	b.clock.Advance(10 * time.Second)
	require.ElementsMatch(t, []engine.ExecuteResult{engine.Executed, engine.Stale}, b.drain(t))
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State, "three attempts, all failed")
	require.Len(t, got.Steps[0].Attempts, 3)
	for _, a := range got.Steps[0].Attempts {
		require.Equal(t, domain.AttemptFailed, a.State)
		require.Equal(t, "busy", a.Error.Message)
	}
	b.clock.Advance(time.Hour)
	require.Empty(t, b.drain(t))
}

func TestFatalFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"boom","action":{"type":"fail","class":"fatal"},"retry":{"max_attempts":3}},{"id":"never","action":{"type":"pass"}}]}`)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, domain.StepFailed, got.Steps[0].State)
	require.Equal(t, 1, got.Steps[0].Attempt)
	require.Equal(t, domain.ClassFatal, got.Steps[0].Error.Class)
	require.Equal(t, domain.StepCancelled, got.Steps[1].State, "nothing is left waiting in a finished job")
	b.clock.Advance(time.Hour)
	require.Empty(t, b.queue.TakeReady(10))
	require.Equal(t, engine.SweepReport{}, b.sweep(t))
}

const workerJob = `{"payload":{"frame":7},"steps":[{"id":"render","action":{"type":"worker","queue":"gpu","lease_seconds":60},"retry":{"max_attempts":3}}]}`

func TestWorkerClaimsAndHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, workerJob)
	require.Empty(t, b.queue.TakeReady(10), "a worker step is no built-in step")
	require.Empty(t, b.claim(t, tenantB, "gpu"), "another tenant's gpu queue is its own")

	start := b.clock.Now()
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 1)
	l := ls[0]
	require.Equal(t, j.ID, l.JobID)
	require.Equal(t, "render", l.StepID)
	require.Equal(t, 1, l.Attempt)
	require.Equal(t, 3, l.MaxAttempts)
	require.JSONEq(t, `{"frame":7}`, string(l.Input))
	require.True(t, l.ExpiresAt.Equal(start.Add(time.Minute)))
	require.Equal(t, j.ID+"/render/1", l.IdempotencyKey)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobRunning, got.State)
	require.Contains(t, eventTypes(got), "job_leased")
	require.Equal(t, "box-1", got.Steps[0].Lease.Worker)

	b.clock.Advance(50 * time.Second)
	hb, err := b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, time.Minute)
	require.NoError(t, err)
	require.False(t, hb.CancelRequested)
	require.True(t, hb.ExpiresAt.Equal(start.Add(110*time.Second)))

	// Past the first expiry, within the extended one: nobody else gets it,
	// and the sweep leaves it alone.
	b.clock.Advance(50 * time.Second)
	require.Empty(t, b.claim(t, tenantA, "gpu"))
	require.Zero(t, b.sweep(t).Reclaimed)
	hb, err = b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, time.Second)
	require.NoError(t, err)
	require.True(t, hb.ExpiresAt.Equal(start.Add(101*time.Second)), "a heartbeat may shorten the lease too")

	b.clock.Advance(time.Second)
	_, err = b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, 10*time.Minute)
	require.ErrorIs(t, err, domain.ErrLeaseLost, "the lease ran out at 101 s")
	require.Equal(t, domain.CodeLeaseLost, domain.CodeOf(err))
}

func TestWorkerCompletesUnderItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, workerJob)
	l := b.claim(t, tenantA, "gpu")[0]
	b.clock.Advance(30 * time.Second)
	_, err := b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, 0) // 0: the step's lease_seconds
	require.NoError(t, err)
	b.clock.Advance(45 * time.Second)

	res, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{"png":"s3://frames/7"}`))
	require.NoError(t, err)
	require.Equal(t, engine.OutcomeResult{JobID: j.ID, StepID: "render", StepState: domain.StepSucceeded, JobState: domain.JobCompleted}, res)
	require.Zero(t, b.queue.Len(tenantA, "gpu"), "the worker's message was deleted")
	got := b.job(t, tenantA, j.ID)
	require.JSONEq(t, `{"png":"s3://frames/7"}`, string(got.Steps[0].Output))

	// A retry of a completion whose answer was lost answers the same.
	again, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{"png":"s3://frames/7"}`))
	require.NoError(t, err)
	require.Equal(t, res, again)
	require.Equal(t, got.Version, b.job(t, tenantA, j.ID).Version, "and writes nothing")
	_, err = b.e.Complete(b.ctx, tenantB, l.LeaseID, nil)
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's lease is not found")
}

func TestExpiredWorkerLeaseIsReclaimedBySweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, workerJob)
	old := b.claim(t, tenantA, "gpu")[0]

	// Live until its last millisecond: the sweep leaves it alone.
	b.clock.Advance(time.Minute - time.Millisecond)
	require.Zero(t, b.sweep(t).Reclaimed)
	// Expired: a worker step's message comes back by itself, and the sweep
	// backs that up, DispatchGrace after the expiry at the latest.
	b.clock.Advance(time.Millisecond + domain.DispatchGrace)
	rep := b.sweep(t)
	require.Equal(t, 1, rep.Reclaimed)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobQueued, got.State)
	require.Equal(t, domain.StepPending, got.Steps[0].State)
	require.Equal(t, domain.AttemptTimeout, got.Steps[0].Attempts[0].State)

	// The old lease's outcome is refused, and changes nothing.
	_, err := b.e.Complete(b.ctx, tenantA, old.LeaseID, json.RawMessage(`{"late":true}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.Equal(t, domain.CodeLeaseLost, domain.CodeOf(err), "409 lease_lost")
	_, err = b.e.Fail(b.ctx, tenantA, old.LeaseID, engine.Outcome{Class: "retryable"})
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.Equal(t, got.Version, b.job(t, tenantA, j.ID).Version)

	// The next claimer gets the next attempt (its message is the sweep's,
	// or the old one back from its visibility: one leases, the other is
	// hidden behind the live lease).
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Attempt)
	res, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, res.JobState)
	got = b.job(t, tenantA, j.ID)
	require.Len(t, got.Steps[0].Attempts, 2)
	b.clock.Advance(time.Hour)
	require.Empty(t, b.claim(t, tenantA, "gpu"), "what was left of the messages is dropped as stale")
	require.Zero(t, b.queue.Len(tenantA, "gpu"))
}

func TestCancelFencesARunningWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, workerJob)
	l := b.claim(t, tenantA, "gpu")[0]
	b.clock.Advance(10 * time.Second)

	got, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCancelled, got.State)
	require.Zero(t, b.queue.Len(tenantA, "gpu"), "the worker's message was deleted")

	hb, err := b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, time.Minute)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested)
	require.Nil(t, hb.ExpiresAt, "not extended")
	_, err = b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost, "the outcome is refused")

	again, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err, "cancel is idempotent")
	require.Equal(t, got.Version, again.Version)

	// Once the lease would have run out, the holder has simply lost it.
	b.clock.Advance(time.Minute)
	_, err = b.e.Heartbeat(b.ctx, tenantA, l.LeaseID, time.Minute)
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	final := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.AttemptCancelled, final.Steps[0].Attempts[0].State)
}

func TestDuplicateDeliveryOfALeasedStepIsHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"gate","action":{"type":"http","url":"https://example.com/hook"}}]}`)
	started, release := b.gate.arm()
	first := b.takeOne(t)
	done := make(chan engine.ExecuteResult, 1)
	go func() {
		res, err := b.e.Execute(b.ctx, first)
		if err != nil {
			res = engine.ExecuteResult("error: " + err.Error())
		}
		done <- res
	}()
	<-started // the first executor holds the lease and runs the action

	// The same message again (SQS delivers at least once).
	require.NoError(t, b.queue.Release(b.ctx, first.Token))
	dup := b.takeOne(t)
	require.Equal(t, first.Message, dup.Message)
	require.Equal(t, engine.Held, b.execute(t, dup), "not run twice")
	require.Empty(t, b.queue.TakeReady(10), "hidden while the lease is live")
	require.Equal(t, 1, b.queue.Len("", ""), "and kept, in case the holder dies")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepRunning, got.Steps[0].State)
	require.Equal(t, 1, got.Steps[0].Attempt)

	close(release)
	require.Equal(t, engine.Executed, <-done)
	require.NoError(t, b.queue.Ack(b.ctx, first.Token))
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Len(t, got.Steps[0].Attempts, 1)
}

func TestHeldMessageComesBackAndFindsTheStepDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"gate","action":{"type":"http","url":"https://example.com/hook"}}]}`)
	started, release := b.gate.arm()
	first := b.takeOne(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.e.Execute(b.ctx, first)
		done <- err
	}()
	<-started
	// A second message for the step (a sweep's re-send) is held...
	running := b.job(t, tenantA, j.ID)
	require.NoError(t, b.queue.Dispatch(b.ctx, running, engine.Route(running, []domain.Dispatch{{Step: running.Steps[0]}})))
	require.Equal(t, engine.Held, b.execute(t, b.takeOne(t)))
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, b.queue.Ack(b.ctx, first.Token))
	// ...until the lease it waited on (timeout 60 s + 30 s) has run out; it
	// then finds the step done and is dropped.
	b.clock.Advance(60*time.Second + engine.LeaseMargin)
	require.Empty(t, b.queue.TakeReady(10))
	b.clock.Advance(time.Second)
	require.Equal(t, []engine.ExecuteResult{engine.Stale}, b.drain(t))
	require.Zero(t, b.queue.Len("", ""))
}

func TestLostDispatchIsResentBySweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lossy.drop.Store(2) // the send before the write, and the one after it
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	require.Empty(t, b.queue.TakeReady(10), "the send was lost")

	require.Zero(t, b.sweep(t).Due)
	b.clock.Advance(domain.DispatchGrace - time.Millisecond)
	require.Zero(t, b.sweep(t).Due, "not before DispatchGrace")
	b.clock.Advance(time.Millisecond)
	rep := b.sweep(t)
	require.Equal(t, engine.SweepReport{Due: 1, Redispatched: 1}, rep)
	require.Equal(t, 1, b.job(t, tenantA, j.ID).Steps[0].Redispatches)

	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	b.clock.Advance(time.Hour)
	require.Equal(t, engine.SweepReport{}, b.sweep(t))
}

func TestSweepReDispatchesLessOftenEachTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lossy.drop.Store(4) // the submit's two sends (before and after its write) and the next two re-sends are lost
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	b.clock.Advance(domain.DispatchGrace)
	require.Equal(t, 1, b.sweep(t).Redispatched)
	b.clock.Advance(domain.DispatchGrace)
	require.Zero(t, b.sweep(t).Due, "the second re-send waits twice as long")
	b.clock.Advance(domain.DispatchGrace)
	require.Equal(t, 1, b.sweep(t).Redispatched)
	b.clock.Advance(4 * domain.DispatchGrace)
	require.Equal(t, 1, b.sweep(t).Redispatched)
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

func TestCorruptJobIsQuarantinedAndOthersServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lossy.drop.Store(4) // each submit's sends, before and after its write
	bad := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	good := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	require.NoError(t, b.store.Corrupt(tenantA, bad.ID))
	_, err := b.e.Get(b.ctx, tenantA, bad.ID)
	require.ErrorIs(t, err, domain.ErrUnreadable)

	b.clock.Advance(domain.DispatchGrace)
	rep := b.sweep(t)
	require.Equal(t, engine.SweepReport{Due: 2, Quarantined: 1, Redispatched: 1}, rep)
	why, ok := b.store.Quarantined(tenantA, bad.ID)
	require.True(t, ok)
	require.Contains(t, why, "cannot be read")

	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, good.ID).State)
	b.clock.Advance(time.Hour)
	require.Equal(t, engine.SweepReport{}, b.sweep(t), "the quarantined job is never met again")

	// A message naming it is dropped, not retried for ever.
	res, err := b.e.Execute(b.ctx, engine.Delivery{Message: engine.Message{Tenant: tenantA, Job: bad.ID, Step: "only"}})
	require.NoError(t, err)
	require.Equal(t, engine.Stale, res)
}

func TestHealthBacklogIsTheTenantsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 12 {
		b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	}
	b.submit(t, tenantB, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)

	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, 12, h.Backlog)
	require.Equal(t, "degraded", h.Status)
	require.Contains(t, h.Reasons, "backlog 12")
	require.Nil(t, h.SuccessRate, "nothing finished yet")
	h, err = b.e.Health(b.ctx, tenantB)
	require.NoError(t, err)
	require.Equal(t, engine.Health{Tenant: tenantB, Status: "ok", Backlog: 1, Notes: []string{"too few finished jobs (0 of 20) to grade the success rate"}}, h, "another tenant's backlog never shows")

	results := b.drain(t)
	require.Len(t, results, 13)
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, "ok", h.Status)
	require.Zero(t, h.Backlog)
	require.Equal(t, int64(12), h.Completed)
	require.Equal(t, 1.0, *h.SuccessRate)

	// Outcomes count for 24 hours, then age out.
	b.clock.Advance(25 * time.Hour)
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, engine.Health{Tenant: tenantA, Status: "ok", Notes: []string{"too few finished jobs (0 of 20) to grade the success rate"}}, h)
}

// The success rate is graded only once 20 jobs finished in 24 h: one
// failure among a handful says little, so it is reported, not graded.
func TestHealthGradesTheSuccessRateFromTwentyFinishedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := func(n int, spec string) {
		for range n {
			b.submit(t, tenantA, spec)
		}
		b.drain(t)
	}
	const pass, fail = `{"steps":[{"id":"p","action":{"type":"pass"}}]}`, `{"steps":[{"id":"f","action":{"type":"fail","class":"fatal"}}]}`
	nap := b.submit(t, tenantA, `{"steps":[{"id":"c","action":{"type":"sleep","seconds":3600}}]}`)
	_, err := b.e.Cancel(b.ctx, tenantA, nap.ID) // the rate leaves cancelled jobs out, and so does its minimum
	require.NoError(t, err)
	run(1, fail)
	run(6, pass)

	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, int64(1), h.Cancelled)
	require.InDelta(t, 6.0/7, *h.SuccessRate, 1e-9, "reported")
	require.Equal(t, "ok", h.Status, "85.7%% of 7 is not graded: %v", h.Reasons)
	require.Empty(t, h.Reasons)
	require.Equal(t, []string{"too few finished jobs (7 of 20) to grade the success rate"}, h.Notes)

	run(13, pass)
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, "degraded", h.Status, "19 of 20 is not above 95%%")
	require.Equal(t, []string{"success rate 95.0%"}, h.Reasons)
	require.Empty(t, h.Notes)
}

func TestHealthCountsJobsBlockedOnAPerson(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for range 3 {
		ids = append(ids, b.submit(t, tenantA, `{"steps":[{"id":"ask","action":{"type":"fail","class":"needs_user"}}]}`).ID)
	}
	b.drain(t)
	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, int64(3), h.Blocked)
	require.Equal(t, "degraded", h.Status)
	require.Contains(t, h.Reasons, "3 jobs blocked on a person")

	_, err = b.e.Cancel(b.ctx, tenantA, ids[0])
	require.NoError(t, err)
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, int64(2), h.Blocked)
	require.Equal(t, "ok", h.Status)
	require.Equal(t, int64(1), h.Cancelled)
}

func TestSubmitWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"steps":[{"id":"only","action":{"type":"pass"}}]}`
	first, created, err := b.e.Submit(b.ctx, tenantA, []byte(body), "order-42")
	require.NoError(t, err)
	require.True(t, created)
	// The same body, spaced differently, answers the same job; the replay
	// of a job not started yet sends its message again (a duplicate finds
	// nothing to do).
	again, created, err := b.e.Submit(b.ctx, tenantA, []byte(" "+body+"\n"), "order-42")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.ElementsMatch(t, []engine.ExecuteResult{engine.Executed, engine.Stale}, b.drain(t))

	_, _, err = b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"other","action":{"type":"pass"}}]}`), "order-42")
	require.ErrorIs(t, err, domain.ErrIdempotencyMismatch)
	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, int64(1), h.Completed)
	require.Zero(t, h.Backlog, "a replay is not another job")
}

func TestSubmitPastTheWorkerQueueBoundWritesNothing(t *testing.T) {
	t.Parallel()
	clock := memory.NewClock(memory.Epoch)
	st := memory.NewStore()
	e := engine.New(engine.Config{Store: st, Queue: memory.NewQueue(clock.Now, memory.WithMaxWorkerQueues(2)), Runner: &actions.Runner{}, BuiltinLease: builtinLease, Now: clock.Now})
	ctx := context.Background()
	for _, q := range []string{"q1", "q2", "q1"} {
		_, _, err := e.Submit(ctx, tenantA, fmt.Appendf(nil, `{"steps":[{"id":"w","action":{"type":"worker","queue":%q}}]}`, q), "")
		require.NoError(t, err)
	}
	_, _, err := e.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"w","action":{"type":"worker","queue":"q3"}}]}`), "")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.CodeInvalid, de.Code)
	require.Equal(t, "steps[1].action.queue", de.Field)
	page, _, err := e.List(ctx, tenantA, engine.ListFilter{Limit: 100})
	require.NoError(t, err)
	require.Len(t, page, 3, "the refused job was not written")
	_, _, err = e.Submit(ctx, tenantB, []byte(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q3"}}]}`), "")
	require.NoError(t, err, "the bound is each tenant's")
}

// A worker may start before any job names its queue: its claim makes
// nothing (a mistyped name must not use up one of the tenant's queues) and
// takes the first job once a submit made the queue.
func TestClaimBeforeTheFirstJobMakesNothing(t *testing.T) {
	t.Parallel()
	clock := memory.NewClock(memory.Epoch)
	q := memory.NewQueue(clock.Now)
	e := engine.New(engine.Config{Store: memory.NewStore(), Queue: q, Runner: &actions.Runner{}, BuiltinLease: builtinLease, Now: clock.Now})
	ctx := context.Background()

	ls, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "early", Max: 1, Worker: "w"})
	require.NoError(t, err)
	require.Empty(t, ls)
	_, err = q.Take(ctx, tenantA, "early", p0First, 1, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "the claim made no queue")

	j, _, err := e.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"w","action":{"type":"worker","queue":"early"}}]}`), "")
	require.NoError(t, err)
	ls, err = e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "early", Max: 1, Worker: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, j.ID, ls[0].JobID)
}

// busyStore is a job store under a writer that saves each job once more
// between every read of it and the reader's write, as a long chain of
// built-in steps does, until the job is marked for cancelling.
type busyStore struct {
	*memory.Store
	// aside, when set, says which jobs the other writer leaves alone; by
	// default one marked for cancelling, as a writer of the engine would.
	aside  func(*domain.Job) bool
	writes int
}

func (s *busyStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	j, err := s.Store.Get(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	aside := func(j *domain.Job) bool { return j.CancelRequested }
	if s.aside != nil {
		aside = s.aside
	}
	if other, err := s.Store.Get(ctx, tenant, id); err == nil && !aside(other) {
		if err := s.Store.Save(ctx, other, len(other.Events)); err == nil {
			s.writes++
		}
	}
	return j, nil
}

func TestCancelWinsAgainstAWriterThatAlwaysWins(t *testing.T) {
	t.Parallel()
	var busy *busyStore
	b := setup(t, withStore(&busy, func(m *memory.Store) *busyStore { return &busyStore{Store: m} }))
	j := b.submit(t, tenantA, workerJob)
	busy.writes = 0

	got, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err, "the cancel marks the job after its first lost race, and no writer that did not see the mark wins again")
	require.Equal(t, domain.JobCancelled, got.State)
	require.Equal(t, 1, busy.writes, "the other writer won once")
	stored := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCancelled, stored.State)
	require.False(t, stored.CancelRequested)
}

func TestAWriterThatReadsACancelMarkCancelsFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, workerJob)
	l := b.claim(t, tenantA, "gpu")[0]
	require.NoError(t, b.store.RequestCancel(b.ctx, tenantA, j.ID))

	_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost, "the job was cancelled before the outcome was decided")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCancelled, got.State)
	require.False(t, got.CancelRequested)
	require.Equal(t, domain.AttemptCancelled, got.Steps[0].Attempts[0].State)
	require.Zero(t, b.queue.Len(tenantA, "gpu"), "the worker's message was deleted")
}
