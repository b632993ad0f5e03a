package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// A decision is pure: every adapter the engine has refuses a call made
// while one runs, and every job write loses its first race, so every
// change of every operation below is decided twice. What a change needs
// of the outside world is done before its decisions (prepare) or after
// its write (effects), once.

// decideGuard fails the test on an adapter call made inside a decision.
type decideGuard struct {
	t     *testing.T
	e     *engine.Engine
	calls atomic.Int64
}

func (g *decideGuard) check(call string) {
	g.calls.Add(1)
	if g.e.Deciding() {
		g.t.Errorf("%s was called inside a decision", call)
	}
}

// racedStore is the in-memory store behind the guard, losing the first
// race of every change (a write at a version it has not refused yet).
type racedStore struct {
	*memory.Store
	g       *decideGuard
	refused map[string]bool
	races   int
}

func (s *racedStore) Create(ctx context.Context, j *domain.Job, h string, now time.Time) (*domain.Job, bool, error) {
	s.g.check("Store.Create")
	return s.Store.Create(ctx, j, h, now)
}
func (s *racedStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	s.g.check("Store.Get")
	return s.Store.Get(ctx, tenant, id)
}
func (s *racedStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	s.g.check("Store.Save")
	if k := fmt.Sprint(j.ID, j.Version); !s.refused[k] {
		s.refused[k] = true
		s.races++
		return domain.ErrVersionConflict
	}
	return s.Store.Save(ctx, j, loaded)
}
func (s *racedStore) List(ctx context.Context, tenant string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	s.g.check("Store.List")
	return s.Store.List(ctx, tenant, f)
}
func (s *racedStore) Due(ctx context.Context, now time.Time, limit int) ([]engine.DueJob, error) {
	s.g.check("Store.Due")
	return s.Store.Due(ctx, now, limit)
}
func (s *racedStore) Quarantine(ctx context.Context, tenant, id, reason string, now time.Time) error {
	s.g.check("Store.Quarantine")
	return s.Store.Quarantine(ctx, tenant, id, reason, now)
}
func (s *racedStore) Defer(ctx context.Context, k engine.DueJob, until time.Time) error {
	s.g.check("Store.Defer")
	return s.Store.Defer(ctx, k, until)
}
func (s *racedStore) TenantForKey(ctx context.Context, key string) (string, error) {
	s.g.check("Store.TenantForKey")
	return s.Store.TenantForKey(ctx, key)
}
func (s *racedStore) RecordStats(ctx context.Context, tenant string, d engine.StatsDelta, now time.Time) error {
	s.g.check("Store.RecordStats")
	return s.Store.RecordStats(ctx, tenant, d, now)
}
func (s *racedStore) Stats(ctx context.Context, tenant string, now time.Time) (engine.Stats, error) {
	s.g.check("Store.Stats")
	return s.Store.Stats(ctx, tenant, now)
}
func (s *racedStore) StepStats(ctx context.Context, tenant string) (engine.StepCounts, error) {
	s.g.check("Store.StepStats")
	return s.Store.StepStats(ctx, tenant)
}
func (s *racedStore) RecordSweep(ctx context.Context, at time.Time) error {
	s.g.check("Store.RecordSweep")
	return s.Store.RecordSweep(ctx, at)
}
func (s *racedStore) JobVersion(ctx context.Context, tenant, id string) (int64, error) {
	s.g.check("Store.JobVersion")
	return s.Store.JobVersion(ctx, tenant, id)
}
func (s *racedStore) TakePollSlot(ctx context.Context, tenant, lease string, bound int, until, now time.Time) (time.Time, bool, error) {
	s.g.check("Store.TakePollSlot")
	return s.Store.TakePollSlot(ctx, tenant, lease, bound, until, now)
}
func (s *racedStore) ReleasePollSlot(ctx context.Context, tenant, lease string) error {
	s.g.check("Store.ReleasePollSlot")
	return s.Store.ReleasePollSlot(ctx, tenant, lease)
}

// Resources and worker queue uses, kept by the same store.
func (s *racedStore) GetResource(ctx context.Context, tenant, id string) (*domain.Resource, error) {
	s.g.check("Resources.GetResource")
	return s.Store.GetResource(ctx, tenant, id)
}
func (s *racedStore) ListResources(ctx context.Context, tenant string) ([]*domain.Resource, error) {
	s.g.check("Resources.ListResources")
	return s.Store.ListResources(ctx, tenant)
}
func (s *racedStore) SaveResource(ctx context.Context, r *domain.Resource) error {
	s.g.check("Resources.SaveResource")
	return s.Store.SaveResource(ctx, r)
}
func (s *racedStore) DeleteResource(ctx context.Context, tenant, id string, version int64) error {
	s.g.check("Resources.DeleteResource")
	return s.Store.DeleteResource(ctx, tenant, id, version)
}
func (s *racedStore) ExtendHolder(ctx context.Context, tenant, id, key string, until time.Time) error {
	s.g.check("Resources.ExtendHolder")
	return s.Store.ExtendHolder(ctx, tenant, id, key, until)
}
func (s *racedStore) PutWorkerQueueUse(ctx context.Context, u engine.WorkerQueueUse) error {
	s.g.check("WorkerQueueUses.PutWorkerQueueUse")
	return s.Store.PutWorkerQueueUse(ctx, u)
}
func (s *racedStore) WorkerQueueUses(ctx context.Context, tenant string) ([]engine.WorkerQueueUse, error) {
	s.g.check("WorkerQueueUses.WorkerQueueUses")
	return s.Store.WorkerQueueUses(ctx, tenant)
}
func (s *racedStore) IdleWorkerQueues(ctx context.Context, now time.Time, limit int) ([]engine.WorkerQueueUse, error) {
	s.g.check("WorkerQueueUses.IdleWorkerQueues")
	return s.Store.IdleWorkerQueues(ctx, now, limit)
}
func (s *racedStore) ForgetWorkerQueue(ctx context.Context, u engine.WorkerQueueUse) (engine.WorkerQueueUse, error) {
	s.g.check("WorkerQueueUses.ForgetWorkerQueue")
	return s.Store.ForgetWorkerQueue(ctx, u)
}

type guardedQueue struct {
	*memory.Queue
	g *decideGuard
}

func (q guardedQueue) Dispatch(ctx context.Context, j *domain.Job, sends []engine.Send) error {
	q.g.check("Queue.Dispatch")
	return q.Queue.Dispatch(ctx, j, sends)
}
func (q guardedQueue) DispatchJobs(ctx context.Context, batch []engine.JobSends) error {
	q.g.check("Queue.DispatchJobs")
	return q.Queue.DispatchJobs(ctx, batch)
}
func (q guardedQueue) EnsureWorkerQueue(ctx context.Context, tenant, name string) error {
	q.g.check("Queue.EnsureWorkerQueue")
	return q.Queue.EnsureWorkerQueue(ctx, tenant, name)
}
func (q guardedQueue) EnsureWorkerQueues(ctx context.Context, tenant string, names []string) error {
	q.g.check("Queue.EnsureWorkerQueues")
	return q.Queue.EnsureWorkerQueues(ctx, tenant, names)
}
func (q guardedQueue) WorkerQueueDepth(ctx context.Context, tenant, name string) ([]engine.LaneDepth, error) {
	q.g.check("Queue.WorkerQueueDepth")
	return q.Queue.WorkerQueueDepth(ctx, tenant, name)
}
func (q guardedQueue) DeleteIdleWorkerQueue(ctx context.Context, tenant, name string) (bool, error) {
	q.g.check("Queue.DeleteIdleWorkerQueue")
	return q.Queue.DeleteIdleWorkerQueue(ctx, tenant, name)
}
func (q guardedQueue) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	q.g.check("Queue.Take")
	return q.Queue.Take(ctx, tenant, name, lanes, max, wait)
}
func (q guardedQueue) Extend(ctx context.Context, token string, d time.Duration) error {
	q.g.check("Queue.Extend")
	return q.Queue.Extend(ctx, token, d)
}
func (q guardedQueue) Release(ctx context.Context, token string) error {
	q.g.check("Queue.Release")
	return q.Queue.Release(ctx, token)
}
func (q guardedQueue) ExtendAll(ctx context.Context, es []engine.Extension) []error {
	q.g.check("Queue.ExtendAll")
	return q.Queue.ExtendAll(ctx, es)
}
func (q guardedQueue) AckAll(ctx context.Context, tokens []string) []error {
	q.g.check("Queue.AckAll")
	return q.Queue.AckAll(ctx, tokens)
}
func (q guardedQueue) Ack(ctx context.Context, token string) error {
	q.g.check("Queue.Ack")
	return q.Queue.Ack(ctx, token)
}

type guardedBlobs struct {
	*memory.Blobs
	g *decideGuard
}

func (b guardedBlobs) Put(ctx context.Context, key string, data []byte) error {
	b.g.check("Blobs.Put")
	return b.Blobs.Put(ctx, key, data)
}
func (b guardedBlobs) Get(ctx context.Context, key string) ([]byte, error) {
	b.g.check("Blobs.Get")
	return b.Blobs.Get(ctx, key)
}
func (b guardedBlobs) URL(ctx context.Context, key string, ttl time.Duration) (string, error) {
	b.g.check("Blobs.URL")
	return b.Blobs.URL(ctx, key, ttl)
}
func (b guardedBlobs) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	b.g.check("Blobs.DeletePrefix")
	return b.Blobs.DeletePrefix(ctx, prefix)
}

type guardedActions struct {
	engine.Actions
	g *decideGuard
}

func (a guardedActions) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	a.g.check("Actions.Run")
	if c.Spec.ID == "big" {
		return bigJSONOf(2 * domain.DefaultInlineLimit), nil // to the blob store
	}
	return a.Actions.Run(ctx, c)
}
func (a guardedActions) CheckAction(spec domain.ActionSpec) (string, error) {
	a.g.check("Actions.CheckAction")
	return a.Actions.CheckAction(spec)
}

type guardedBus struct {
	*memory.Bus
	g *decideGuard
}

func (b guardedBus) Publish(ctx context.Context, cs []engine.JobStateChange) error {
	b.g.check("Publisher.Publish")
	return b.Bus.Publish(ctx, cs)
}

func bigJSONOf(n int) json.RawMessage {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i*7919%26)
	}
	return json.RawMessage(`"` + string(b) + `"`)
}

// guardedBundle is a bundle whose engine's every adapter is guarded.
func guardedBundle(t *testing.T) (*bundle, *racedStore, *decideGuard) {
	t.Helper()
	b := setup(t)
	g := &decideGuard{t: t, e: b.e}
	st := &racedStore{Store: b.store, g: g, refused: map[string]bool{}}
	b.e.Configure(func(c *engine.Config) {
		c.Store, c.Resources, c.WorkerQueueUses = st, st, st
		c.Queue = guardedQueue{Queue: b.queue, g: g}
		c.Blobs = guardedBlobs{Blobs: memory.NewBlobs(b.clock.Now), g: g}
		c.Runner = guardedActions{Actions: c.Runner, g: g}
		c.Publisher = guardedBus{Bus: memory.NewBus(), g: g}
	})
	return b, st, g
}

func TestDecisionsCallNoAdapter(t *testing.T) {
	b, st, g := guardedBundle(t)
	ctx := b.ctx
	for _, id := range []string{"gpu-1", "gpu-2"} {
		_, _, err := b.e.PutResource(ctx, tenantA, id, []byte(`{"capabilities":["gpu"],"capacity":1}`))
		require.NoError(t, err)
	}
	state := func(id string) domain.JobState { return b.job(t, tenantA, id).State }

	// Built-in steps: an output too large for the item goes to the blob
	// store; the step after it composes its input from there.
	data := b.submit(t, tenantA, `{"steps":[{"id":"big","action":{"type":"http","url":"https://example.com/big"}},{"id":"after","action":{"type":"pass"},"depends_on":["big"]},{"id":"w","action":{"type":"worker","queue":"q"},"depends_on":["big"]}]}`)
	b.drain(t)
	// A worker's input composed of stored data: stored for its attempt,
	// and presigned.
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	require.NotEmpty(t, ls[0].InputURL)
	_, err := b.e.Complete(ctx, tenantA, ls[0].LeaseID, bigJSONOf(2*domain.DefaultInlineLimit))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, state(data.ID))

	// Resources: a worker's slot taken, extended by a heartbeat, switched
	// after a resource failure, given back by its outcome.
	gpu := b.submit(t, tenantA, `{"steps":[{"id":"train","action":{"type":"worker","queue":"ml","lease_seconds":60},"requires":{"capabilities":["gpu"]}}]}`)
	ls = b.claim(t, tenantA, "ml")
	require.Len(t, ls, 1)
	_, err = b.e.Heartbeat(ctx, tenantA, ls[0].LeaseID, time.Minute)
	require.NoError(t, err)
	_, err = b.e.Fail(ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "resource", Message: "GPU faulted"})
	require.NoError(t, err)
	ls = b.claim(t, tenantA, "ml")
	require.Len(t, ls, 1)
	// A built-in step waits for the slot it holds, and is woken when it
	// is given back.
	waits := b.submit(t, tenantA, `{"steps":[{"id":"p","action":{"type":"pass"},"requires":{"capabilities":["gpu"]}}]}`)
	hog := b.submit(t, tenantA, `{"steps":[{"id":"h","action":{"type":"worker","queue":"ml","lease_seconds":60},"requires":{"capabilities":["gpu"]}}]}`)
	hogs := b.claim(t, tenantA, "ml")
	require.Len(t, hogs, 1)
	require.Contains(t, b.drain(t), engine.Waiting)
	_, err = b.e.Complete(ctx, tenantA, ls[0].LeaseID, json.RawMessage(`{}`))
	require.NoError(t, err)
	b.drain(t)
	require.Equal(t, domain.JobCompleted, state(gpu.ID))
	require.Equal(t, domain.JobCompleted, state(waits.ID))
	// An expired lease with a slot, reclaimed by the sweep.
	b.clock.Advance(2 * time.Minute)
	require.Positive(t, b.sweep(t).Reclaimed)
	_, err = b.e.Cancel(ctx, tenantA, hog.ID)
	require.NoError(t, err)

	// A replan that names a new worker queue; needs_user and resume; a
	// fatal failure and its redrive; a worker timed out at a heartbeat.
	plan := b.submit(t, tenantA, `{"steps":[{"id":"plan","action":{"type":"worker","queue":"q"},"retry":{"max_attempts":1}}]}`)
	ls = b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err = b.e.Fail(ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "replan", Steps: []domain.StepSpec{{ID: "next", Action: domain.ActionSpec{Type: domain.ActionWorker, WorkerAction: domain.WorkerAction{Queue: "q2"}}}}})
	require.NoError(t, err)
	ls = b.claim(t, tenantA, "q2")
	require.Len(t, ls, 1)
	_, err = b.e.Fail(ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "needs_user", Prompt: "which?"})
	require.NoError(t, err)
	_, err = b.e.Resume(ctx, tenantA, plan.ID, "next", json.RawMessage(`{"answer":1}`))
	require.NoError(t, err)
	ls = b.claim(t, tenantA, "q2")
	require.Len(t, ls, 1)
	_, err = b.e.Fail(ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "fatal", Message: "no"})
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, state(plan.ID))
	_, err = b.e.Redrive(ctx, tenantA, plan.ID)
	require.NoError(t, err)
	ls = b.claim(t, tenantA, "q2")
	require.Len(t, ls, 1)
	timed := b.submit(t, tenantA, `{"steps":[{"id":"slow","action":{"type":"worker","queue":"q3","lease_seconds":60},"timeout_seconds":30,"retry":{"max_attempts":1}}]}`)
	ts := b.claim(t, tenantA, "q3")
	require.Len(t, ts, 1)
	b.clock.Advance(31 * time.Second)
	_, err = b.e.Heartbeat(ctx, tenantA, ts[0].LeaseID, time.Minute)
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.Equal(t, domain.JobFailed, state(timed.ID))
	_, err = b.e.Cancel(ctx, tenantA, plan.ID)
	require.NoError(t, err)

	// Gates, a sleep and a wait: decided by people, signals and timers.
	gates := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"approval"}},{"id":"r","action":{"type":"approval"}},{"id":"nap","action":{"type":"sleep","seconds":30}},{"id":"w","action":{"type":"wait","signal":"go"}}]}`)
	b.drain(t)
	_, _, err = b.e.Approve(ctx, tenantA, gates.ID, "a", engine.Decision{By: "ann"})
	require.NoError(t, err)
	_, _, err = b.e.Signal(ctx, tenantA, gates.ID, domain.SignalRequest{Name: "go"})
	require.NoError(t, err)
	b.clock.Advance(31 * time.Second)
	b.drain(t)
	_, _, err = b.e.Reject(ctx, tenantA, gates.ID, "r", engine.Decision{By: "bob"})
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, state(gates.ID))

	// A finished job's stored data deleted when it expires.
	b.clock.Advance(31 * 24 * time.Hour)
	require.Positive(t, b.sweep(t).DataDeleted)

	require.Positive(t, g.calls.Load())
	require.Greater(t, st.races, 30, "every change lost a race and was decided again")
}

// A replan under a lease the step no longer holds is refused as a lost
// lease (409), before its steps are checked against the job: a zombie
// worker hears it lost the lease, not that its steps are invalid.
func TestAReplanUnderALostLeaseIsLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.submit(t, tenantA, `{"steps":[{"id":"plan","action":{"type":"worker","queue":"q","lease_seconds":10},"retry":{"max_attempts":3}}]}`)
	zombie := b.claim(t, tenantA, "q")
	require.Len(t, zombie, 1)
	b.clock.Advance(2 * time.Minute)
	b.sweep(t) // reclaims the expired lease
	live := b.claim(t, tenantA, "q")
	require.Len(t, live, 1)
	next := []domain.StepSpec{{ID: "n", Action: domain.ActionSpec{Type: domain.ActionWorker, WorkerAction: domain.WorkerAction{Queue: "q"}}}}
	_, err := b.e.Fail(b.ctx, tenantA, live[0].LeaseID, engine.Outcome{Class: "replan", Steps: next})
	require.NoError(t, err)
	_, err = b.e.Fail(b.ctx, tenantA, zombie[0].LeaseID, engine.Outcome{Class: "replan", Steps: next})
	require.ErrorIs(t, err, domain.ErrLeaseLost)
}
func (s *racedStore) RequestCancel(ctx context.Context, tenant, id string) error {
	s.g.check("Store.RequestCancel")
	return s.Store.RequestCancel(ctx, tenant, id)
}
