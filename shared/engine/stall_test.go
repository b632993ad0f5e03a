package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// A built-in step that requires a capability no resource has waits in
// line with no slot to come: past its resource_wait_seconds the sweep
// fails it with class resource, naming what it waited for, and the job
// with it. Until then each look keeps it waiting, and the job is due for
// the sweep at the bound, not before.
func TestResourceWaitFailsTheStepAfterItsBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"solve","action":{"type":"pass"},"requires":{"capabilities":["quantum"]},"resource_wait_seconds":120}]}`)
	require.Equal(t, []engine.ExecuteResult{engine.Waiting}, b.drain(t))
	s := b.job(t, tenantA, j.ID).Steps[0]
	require.NotNil(t, s.ResourceWait)
	require.True(t, b.clock.Now().Add(120*time.Second).Equal(*s.ResourceWait.Until))

	b.clock.Advance(119 * time.Second)
	require.Zero(t, b.sweep(t).Due, "not before its bound")
	require.Equal(t, domain.JobQueued, b.job(t, tenantA, j.ID).State)
	b.clock.Advance(time.Second)
	require.Equal(t, 1, b.sweep(t).Due)

	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	s = got.Steps[0]
	require.Equal(t, domain.StepFailed, s.State)
	require.Equal(t, domain.ClassResource, s.Error.Class)
	require.Contains(t, s.Error.Message, "capabilities quantum")
	require.Contains(t, s.Error.Message, "no resource has them")
	require.Empty(t, s.Attempts)
	require.Equal(t, domain.ClassResource, got.Error.Class)
	last := got.Events[len(got.Events)-1]
	require.Equal(t, string(domain.JobEvFailed), last.Type)
	require.Contains(t, last.Detail, "quantum")
	b.clock.Advance(time.Hour)
	require.Zero(t, b.sweep(t).Due, "nothing left to do")
	require.Empty(t, b.drain(t))
}

// A worker step's wait takes the engine's bound when it names none, and
// the claim that finds the wait past it fails the step then.
func TestClaimThatFindsTheResourceWaitPastItsBoundFailsTheStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.e.Configure(func(c *engine.Config) { c.ResourceWait = 10 * time.Minute })
	j := b.submit(t, tenantA, `{"steps":[{"id":"solve","action":{"type":"worker","queue":"lab"},"requires":{"labels":{"site":"eu"}}}]}`)
	require.Equal(t, 600, j.ResourceWaitSeconds)
	require.Empty(t, b.claim(t, tenantA, "lab"), "no resource: the step waits")
	for range 3 { // the sweep sends it again now and then; each claim looks again
		b.clock.Advance(4 * time.Minute)
		b.sweep(t)
		require.Empty(t, b.claim(t, tenantA, "lab"))
	}
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Contains(t, got.Steps[0].Error.Message, "labels site=eu")
	require.Contains(t, got.Steps[0].Error.Message, "resource_wait_seconds (600)")
}

// A job stored with no step able to run again (a dependency on a step
// that a replan replaced, never rewired, as a job written before replans
// were checked could be) and due only by a stale due time is failed by
// the sweep that visits it, saying why on the job.
func TestSweepFailsAJobStoredWithNoStepAbleToRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"r","action":{"type":"worker","queue":"q"}},{"id":"b","action":{"type":"worker","queue":"q"},"depends_on":["r"]}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "replan", Message: "split",
		Steps: []domain.StepSpec{{ID: "r2", Action: domain.ActionSpec{Type: domain.ActionWorker, WorkerAction: domain.WorkerAction{Queue: "q"}}}}})
	require.NoError(t, err)

	// Unwire b as the old replan did, and take r2's run away: nothing can
	// release b. The job keeps the due time it had.
	stored := b.job(t, tenantA, j.ID)
	loaded := len(stored.Events)
	stored.Steps[1].Spec.DependsOn = []string{"r"}
	r2 := stored.Steps[2]
	r2.State, r2.ReadyAt = domain.StepCancelled, nil
	stored.Events = append(stored.Events, domain.Event{Seq: loaded + 1, Type: "step_cancelled", Step: "r2", At: b.clock.Now()})
	require.NoError(t, b.store.Save(b.ctx, stored, loaded))
	require.Equal(t, domain.JobQueued, b.job(t, tenantA, j.ID).State)

	b.clock.Advance(time.Hour)
	require.Equal(t, 1, b.sweep(t).Due)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, "no step can ever run again: b waits on r (FAILED)", got.Error.Message)
	require.Equal(t, domain.StepCancelled, got.Steps[1].State)
	require.Zero(t, b.sweep(t).Due)
}
