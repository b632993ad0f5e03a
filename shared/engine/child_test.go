package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// A parent whose second step runs a child job of two steps on its input.
const parentJob = `{"payload": {"n": 1}, "steps": [
	{"id": "prep", "action": {"type": "pass"}},
	{"id": "sub", "action": {"type": "job", "spec": {"steps": [
		{"id": "a", "action": {"type": "pass"}},
		{"id": "b", "action": {"type": "pass"}, "output": "{'got': output.n}"}]}}},
	{"id": "after", "action": {"type": "pass"}}]}`

// childOf answers the child job step of j made on its latest attempt.
func (b *bundle) childOf(t *testing.T, j *domain.Job, step string) *domain.Job {
	t.Helper()
	s, _, err := j.Step(step)
	require.NoError(t, err)
	require.NotEmpty(t, s.Attempts)
	id := s.Attempts[len(s.Attempts)-1].Child
	require.NotEmpty(t, id, "step %s made no child", step)
	return b.job(t, j.Tenant, id)
}

func TestAChildJobCompletesAndItsResultIsTheStepsOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, parentJob)
	b.drain(t)

	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	sub, _, _ := got.Steps[1], 0, 0
	require.JSONEq(t, `{"got": 1}`, string(sub.Output), "the child's last step's output")
	require.Nil(t, sub.Child, "no child waited on any more")
	require.JSONEq(t, `{"got": 1}`, string(got.Steps[2].Output), "the next step runs on it")

	child := b.childOf(t, got, "sub")
	require.Equal(t, domain.JobCompleted, child.State)
	require.Equal(t, &domain.ParentRef{Job: j.ID, Step: "sub", Attempt: 1, Lease: sub.Attempts[0].Lease}, child.Parent)
	require.JSONEq(t, `{"n": 1}`, string(child.Payload), "the step's input is its payload")
	require.Equal(t, []string{child.ID}, got.Children())
	require.Equal(t, domain.ChildJobID(j.ID, "sub", 1, *sub.Attempts[0].StartedAt), child.ID)

	kids, _, err := b.e.List(b.ctx, tenantA, engine.ListFilter{Parent: j.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, kids, 1)
	require.Equal(t, child.ID, kids[0].ID)
	_, _, err = b.e.List(b.ctx, tenantB, engine.ListFilter{Parent: j.ID, Limit: 10})
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's parent is not found")
}

func TestAFailedChildFailsItsStepAndARetryMakesANewChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps": [{"id": "sub", "retry": {"max_attempts": 2, "backoff": "fixed", "initial_delay_ms": 1000},
		"action": {"type": "job", "spec": {"steps": [{"id": "boom", "action": {"type": "fail", "class": "retryable", "message": "no luck"}, "retry": {"max_attempts": 1}}]}}}]}`)
	b.drain(t)
	b.clock.Advance(2 * time.Second)
	b.drain(t)

	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	s := got.Steps[0]
	require.Len(t, s.Attempts, 2, "the child's retryable failure retried the step")
	require.NotEqual(t, s.Attempts[0].Child, s.Attempts[1].Child, "each attempt its own child")
	require.Contains(t, s.Error.Message, "child job "+s.Attempts[1].Child+" failed: step boom failed: no luck")
	require.Len(t, got.Children(), 2)
	for _, id := range got.Children() {
		require.Equal(t, domain.JobFailed, b.job(t, tenantA, id).State)
	}
}

func TestCancellingTheParentCancelsItsRunningChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "w", "action": {"type": "worker", "queue": "gpu"}}]}}}]}`)
	b.drain(t)
	running := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobRunning, running.State)
	child := b.childOf(t, running, "sub")
	require.Equal(t, domain.JobQueued, child.State)

	_, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCancelled, b.job(t, tenantA, child.ID).State, "cancelled with its parent")
	parent := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCancelled, parent.State)
	require.Equal(t, []string{child.ID}, parent.Orphans, "kept until the sweep sees it ended")

	b.clock.Advance(domain.DispatchGrace)
	b.sweep(t)
	require.Empty(t, b.job(t, tenantA, j.ID).Orphans)
}

func TestARetriedStartMakesNoSecondChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The child's first message is lost with the process that made it;
	// the parent's lease write named it, so every later try names it too.
	j := b.submit(t, tenantA, `{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "w", "action": {"type": "worker", "queue": "gpu"}}]}}}]}`)
	d := b.takeOne(t)
	require.Equal(t, engine.Executed, b.execute(t, d))
	running := b.job(t, tenantA, j.ID)
	child := b.childOf(t, running, "sub")

	// The same message again, and the sweep's look: neither makes another.
	require.NoError(t, b.queue.Dispatch(b.ctx, running, engine.Route(running, []domain.Dispatch{{Step: running.Steps[0]}})))
	require.Equal(t, engine.Stale, b.execute(t, b.takeOne(t)))
	b.clock.Advance(domain.DispatchGrace)
	b.sweep(t)
	again := b.job(t, tenantA, j.ID)
	require.Equal(t, []string{child.ID}, again.Children())
	require.Equal(t, 1, again.Steps[0].Attempt)
	require.Equal(t, 1, again.Steps[0].Child.Checks, "looked at once, and later next time")

	// Its worker ends it: the parent completes with its output.
	l := b.claim(t, tenantA, "gpu")[0]
	_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{"done": true}`))
	require.NoError(t, err)
	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	require.JSONEq(t, `{"done": true}`, string(done.Steps[0].Output))
}

func TestTheSweepMakesAChildNeverMadeAndRecordsAnEndNeverTold(t *testing.T) {
	t.Parallel()
	var st *childLosingStore
	b := setup(t, withStore(&st, func(m *memory.Store) *childLosingStore { return &childLosingStore{Store: m} }))
	st.loseCreates.Store(1) // the process dies after the lease, before the child is made
	j := b.submit(t, tenantA, `{"payload": {"k": "v"}, "steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "w", "action": {"type": "worker", "queue": "gpu"}}]}}}]}`)
	b.drain(t)
	running := b.job(t, tenantA, j.ID)
	s := running.Steps[0]
	require.NotNil(t, s.Child)
	_, err := b.store.Get(b.ctx, tenantA, s.Child.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.NotNil(t, running.DueAt, "due for the sweep")

	b.clock.Advance(domain.DispatchGrace)
	b.sweep(t)
	child := b.job(t, tenantA, s.Child.ID)
	require.JSONEq(t, `{"k": "v"}`, string(child.Payload))

	// The child ends, and the write that tells the parent is lost.
	st.loseParentWrites.Store(true)
	l := b.claim(t, tenantA, "gpu")[0]
	_, err = b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{"x": 2}`))
	require.NoError(t, err)
	st.loseParentWrites.Store(false)
	require.Equal(t, domain.JobRunning, b.job(t, tenantA, j.ID).State)

	b.clock.Advance(2 * domain.DispatchGrace)
	b.sweep(t)
	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	require.JSONEq(t, `{"x": 2}`, string(done.Steps[0].Output))
}

func TestAChildPastItsTimeoutIsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps": [{"id": "sub", "timeout_seconds": 300, "retry": {"max_attempts": 1},
		"action": {"type": "job", "spec": {"steps": [{"id": "w", "action": {"type": "worker", "queue": "gpu"}}]}}}]}`)
	b.drain(t)
	child := b.childOf(t, b.job(t, tenantA, j.ID), "sub")
	b.clock.Advance(301 * time.Second)
	b.sweep(t)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, domain.ClassTimeout, got.Steps[0].Error.Class)
	require.Equal(t, domain.JobCancelled, b.job(t, tenantA, child.ID).State)
}

func TestAChildSpecIsCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for body, field := range map[string]string{
		`{"steps": [{"id": "sub", "action": {"type": "job"}}]}`:                                                                                                 "steps[0].action.spec",
		`{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": []}}}]}`:                                                                          "steps[0].action.spec.steps",
		`{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "a", "action": {"type": "nope"}}]}}}]}`:                                   "steps[0].action.spec.steps[0].action.type",
		`{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "a", "action": {"type": "pass"}}], "x": 1}}}]}`:                           "steps[0].action.spec.x",
		`{"steps": [{"id": "sub", "action": {"type": "job", "spec": {"steps": [{"id": "a", "action": {"type": "http", "url": "http://169.254.169.254/"}}]}}}]}`: "steps[0].action.spec.steps[0].action.url",
	} {
		_, _, err := b.e.Submit(b.ctx, tenantA, []byte(body), "")
		var de *domain.Error
		require.ErrorAs(t, err, &de, body)
		require.Equal(t, field, de.Field, body)
	}
	jobs, _, err := b.e.List(b.ctx, tenantA, engine.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "nothing written")
}

// childLosingStore loses what a process that dies loses: the write that
// makes a child job (loseCreates of them), and a parent's writes while
// loseParentWrites is set.
type childLosingStore struct {
	*memory.Store
	loseCreates      atomic.Int32
	loseParentWrites atomic.Bool
}

func (s *childLosingStore) Create(ctx context.Context, j *domain.Job, hash string, now time.Time) (*domain.Job, bool, error) {
	if j.Parent != nil && s.loseCreates.Add(-1) >= 0 {
		return nil, false, errors.New("injected: the process died before the child's write")
	}
	return s.Store.Create(ctx, j, hash, now)
}

func (s *childLosingStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	if j.Parent == nil && s.loseParentWrites.Load() {
		return errors.New("injected: the process died before the parent's write")
	}
	return s.Store.Save(ctx, j, loaded)
}

func TestAMapsItemsMayBeChildJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"payload": {"xs": [1, 2, 3]}, "steps": [{"id": "each", "action": {"type": "map", "items": "payload.xs", "max_concurrency": 2,
		"step": {"action": {"type": "job", "spec": {"steps": [{"id": "a", "action": {"type": "pass"}, "output": "{'n': output.item}"}]}}}}}]}`)
	b.drain(t)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	out, err := b.e.Output(b.ctx, tenantA, j.ID, "each", func(json.RawMessage) bool { return true })
	require.NoError(t, err)
	require.JSONEq(t, `[{"n": 1}, {"n": 2}, {"n": 3}]`, string(out.Data))
	require.Len(t, got.Children(), 3)
	child := b.job(t, tenantA, got.Children()[1])
	require.Equal(t, "each[1]", child.Parent.Step, "in item order")

	// Listed last first, a page at a time.
	var listed []string
	cursor := ""
	for {
		page, next, err := b.e.List(b.ctx, tenantA, engine.ListFilter{Parent: j.ID, Limit: 2, Cursor: cursor})
		require.NoError(t, err)
		for _, js := range page {
			listed = append(listed, js.ID)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	kids := got.Children()
	require.Equal(t, []string{kids[2], kids[1], kids[0]}, listed)
}
