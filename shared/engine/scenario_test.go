package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/stepflowtest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Scenarios that were end-to-end tests on the local stack although only
// the engine's behaviour was under test: here on the in-memory adapters
// and a clock the test moves, so a backoff, an expired lease or a gate's
// deadline takes no time and never races the machine's load. What is the
// stack's own (HTTP, the functions, the AWS adapters) stays in
// localstack/devstack.

// A retryable failure backs off exponentially (1 s, then 2 s, its cap) and
// fails the job once max_attempts attempts have failed.
func TestRetryableFailureBacksOffExponentiallyThenFails(t *testing.T) {
	t.Parallel()
	env := stepflowtest.New(t)
	j := env.Submit(`{"steps":[{"id":"flaky","action":{"type":"fail","class":"retryable"},
		"retry":{"max_attempts":3,"backoff":"exponential","initial_delay_ms":1000,"max_delay_ms":2000}}]}`)
	j = env.AwaitState(j.ID, domain.JobFailed)

	s := j.Steps[0]
	require.Equal(t, domain.StepFailed, s.State)
	require.Len(t, s.Attempts, 3, "exactly max_attempts attempts")
	for i, a := range s.Attempts {
		require.Equal(t, i+1, a.N)
		require.Equal(t, domain.AttemptFailed, a.State)
		require.Equal(t, domain.ClassRetryable, a.Error.Class)
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second} {
		prev, next := s.Attempts[i], s.Attempts[i+1]
		require.Equal(t, wait, next.StartedAt.Sub(*prev.EndedAt), "attempt %d started when its backoff ran out", next.N)
	}
	require.Equal(t, []string{
		"job_created", "step_leased", "step_running", "job_running",
		"step_failed_retryable", "step_retrying", "job_retrying", "step_running", "job_running",
		"step_failed_retryable", "step_retrying", "job_retrying", "step_running", "job_running",
		"step_failed_fatal", "step_failed", "job_failed",
	}, eventTypes(j))
}

// A fatal fail action ends its job with its message; the step after it
// never runs.
func TestFatalFailActionFailsItsJobWithItsMessage(t *testing.T) {
	t.Parallel()
	env := stepflowtest.New(t)
	j := env.Submit(`{"steps":[{"id":"boom","action":{"type":"fail","class":"fatal","message":"no such customer"}},{"id":"never","action":{"type":"pass"}}]}`)
	j = env.AwaitState(j.ID, domain.JobFailed)
	require.Len(t, j.Steps[0].Attempts, 1)
	require.Equal(t, "no such customer", j.Steps[0].Error.Message)
	require.Equal(t, domain.StepCancelled, j.Steps[1].State, "the step after a failed one never runs, and is not left waiting")
	require.Empty(t, j.Steps[1].Attempts)
}

// A worker that goes silent loses its step when its lease runs out: the
// message comes back by itself, the next claim takes attempt 2, and every
// outcome the first worker reports late is refused and changes nothing.
func TestExpiredLeaseGoesToTheNextWorkerAndFencesTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"slow","lease_seconds":1}}]}`)
	first := b.claim(t, tenantA, "slow")
	require.Len(t, first, 1)
	require.Empty(t, b.claim(t, tenantA, "slow"), "hidden while the lease is live")

	b.clock.Advance(time.Second)
	second := b.claim(t, tenantA, "slow")
	require.Len(t, second, 1)
	require.Equal(t, 2, second[0].Attempt)
	require.NotEqual(t, first[0].LeaseID, second[0].LeaseID)

	_, err := b.e.Heartbeat(b.ctx, tenantA, first[0].LeaseID, 0)
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	_, err = b.e.Complete(b.ctx, tenantA, first[0].LeaseID, json.RawMessage(`{"late":true}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	_, err = b.e.Fail(b.ctx, tenantA, first[0].LeaseID, engine.Outcome{Class: "retryable"})
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.Equal(t, domain.CodeLeaseLost, domain.CodeOf(err), "409 lease_lost")
	before := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobRunning, before.State, "the silent worker changed nothing")
	require.Equal(t, domain.AttemptTimeout, before.Steps[0].Attempts[0].State)

	_, err = b.e.Complete(b.ctx, tenantA, second[0].LeaseID, json.RawMessage(`1`))
	require.NoError(t, err)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Len(t, got.Steps[0].Attempts, 2)
}

// A cancel reaches the worker holding a live lease through its heartbeat;
// a forged lease id, and a lease that had run out before the cancel, are
// simply lost.
func TestCancelledWorkerHearsItButAnExpiredOrForgedLeaseDoesNot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	live := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"c","lease_seconds":300}}]}`)
	l := b.claim(t, tenantA, "c")
	require.Len(t, l, 1)
	_, err := b.e.Cancel(b.ctx, tenantA, live.ID)
	require.NoError(t, err)
	hb, err := b.e.Heartbeat(b.ctx, tenantA, l[0].LeaseID, 0)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested)
	require.Nil(t, hb.ExpiresAt, "a cancelled lease has no expiry to report")

	forged := l[0].LeaseID[:len(l[0].LeaseID)-4] + "beef"
	_, err = b.e.Heartbeat(b.ctx, tenantA, forged, 0)
	require.Equal(t, domain.CodeLeaseLost, domain.CodeOf(err), "a forged lease: %v", err)

	old := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"c","lease_seconds":1}}]}`)
	l = b.claim(t, tenantA, "c")
	require.Len(t, l, 1)
	require.Equal(t, old.ID, l[0].JobID)
	b.clock.Advance(2 * time.Second)
	_, err = b.e.Cancel(b.ctx, tenantA, old.ID)
	require.NoError(t, err)
	_, err = b.e.Heartbeat(b.ctx, tenantA, l[0].LeaseID, 0)
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.Equal(t, domain.AttemptTimeout, b.job(t, tenantA, old.ID).Steps[0].Attempts[0].State)
}

// A submit that wrote its job and lost its send is answered, when the
// client retries with the same idempotency key, by the same job, sent this
// time: it runs with no sweep.
func TestIdempotentReplayDispatchesAJobThatNeverStarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"steps":[{"id":"a","action":{"type":"pass"}}]}`)
	b.lossy.drop.Store(1)
	first, created, err := b.e.Submit(b.ctx, tenantA, body, "retry-me")
	require.NoError(t, err)
	require.True(t, created)
	require.Empty(t, b.queue.TakeReady(10), "the send was lost")

	again, created, err := b.e.Submit(b.ctx, tenantA, body, "retry-me")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, first.ID).State)
}

// A gate past its deadline fails its job. A gate first reached passes
// through job_running, as the formal job machine goes into Waiting
// (docs/model.md#formal-job-machine).
func TestGatePastItsTimeoutFailsItsJob(t *testing.T) {
	t.Parallel()
	env := stepflowtest.New(t)
	j := env.Submit(`{"steps":[{"id":"gate","action":{"type":"approval","timeout_seconds":600}}]}`)
	start := env.Now()
	j = env.AwaitState(j.ID, domain.JobFailed)
	require.False(t, env.Now().Before(start.Add(600*time.Second)), "not before its deadline")
	require.Equal(t, domain.StepFailed, j.Steps[0].State)
	require.Contains(t, j.Steps[0].Error.Message, "approval gate timed out")
	require.Equal(t, []string{"job_created", "step_needs_user", "job_running", "job_waiting", "step_timed_out", "step_failed", "job_failed"}, eventTypes(j))
}

// run_at holds a job's first step until then.
func TestRunAtHoldsTheJobUntilThen(t *testing.T) {
	t.Parallel()
	env := stepflowtest.New(t)
	runAt := env.Now().Add(time.Hour)
	j := env.Submit(`{"run_at":"` + runAt.Format(time.RFC3339) + `","steps":[{"id":"a","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobQueued, j.State)
	env.RunUntilIdle()
	require.Equal(t, domain.StepPending, env.Get(j.ID).Steps[0].State, "nothing runs before run_at")
	j = env.AwaitState(j.ID, domain.JobCompleted)
	require.False(t, j.Steps[0].Attempts[0].StartedAt.Before(runAt), "started %s, run_at %s", j.Steps[0].Attempts[0].StartedAt, runAt)
}

// A gate that opens first holds its job from the start; rejected, it
// fails the job and cancels what comes after it, and is never approved
// after that.
func TestRejectedGateFailsItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"ok","action":{"type":"approval"}},{"id":"deploy","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobWaiting, j.State)
	got, changed, err := b.e.Reject(b.ctx, tenantA, j.ID, "ok", engine.Decision{By: "bob", Comment: "not today"})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, domain.StepFailed, got.Steps[0].State)
	require.Equal(t, domain.StepCancelled, got.Steps[1].State)
	_, _, err = b.e.Approve(b.ctx, tenantA, j.ID, "ok", engine.Decision{By: "ann"})
	require.Equal(t, domain.CodeConflict, domain.CodeOf(err), "approve after reject: %v", err)
	require.Empty(t, b.drain(t))
}

// The process dies after a step's write and before the send of the next
// step: the job rests with the next step PENDING until the sweep, past
// the dispatch grace, sends it again.
func TestASendLostAfterAStepIsResentBySweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"worker","queue":"q"}},{"id":"b","action":{"type":"pass"}}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	b.lossy.drop.Store(1) // the send of b fails
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, json.RawMessage(`{}`))
	require.NoError(t, err)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepSucceeded, got.Steps[0].State)
	require.Equal(t, domain.StepPending, got.Steps[1].State)
	require.Empty(t, b.queue.TakeReady(10), "the send of b was lost")

	b.clock.Advance(domain.DispatchGrace - time.Millisecond)
	require.Zero(t, b.sweep(t).Redispatched, "not before the dispatch grace")
	b.clock.Advance(time.Millisecond)
	require.Equal(t, 1, b.sweep(t).Redispatched)
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Len(t, got.Steps[1].Attempts, 1)
	require.Zero(t, b.sweep(t).Due, "a finished job leaves the due index")
}

// A worker's replan whose new step depends on a step after the replanned
// one (directly, or three steps down) is refused naming the dependency,
// and writes nothing: the job, its events and the tenant's worker queues
// are as they were, and the lease still takes a good outcome.
func TestReplanThatClosesACycleWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"x","action":{"type":"worker","queue":"planner"}},
		{"id":"y","action":{"type":"pass"},"depends_on":["x"]},{"id":"z","action":{"type":"pass"},"depends_on":["y"]},
		{"id":"w","action":{"type":"pass"},"depends_on":["z"]}]}`)
	l := b.claim(t, tenantA, "planner")
	require.Len(t, l, 1)
	before := b.job(t, tenantA, j.ID)
	for _, on := range []string{"y", "w"} {
		var o engine.Outcome
		require.NoError(t, json.Unmarshal([]byte(`{"class":"replan","steps":[
			{"id":"fresh","action":{"type":"worker","queue":"fresh-queue"}},
			{"id":"n","action":{"type":"pass"},"depends_on":["fresh","`+on+`"]}]}`), &o))
		_, err := b.e.Fail(b.ctx, tenantA, l[0].LeaseID, o)
		var de *domain.Error
		require.ErrorAs(t, err, &de, "on %s", on)
		require.Equal(t, domain.CodeInvalid, de.Code)
		require.Equal(t, "steps[1].depends_on[1]", de.Field, "on %s", on)
		require.Contains(t, de.Message, "cycle")
	}
	after := b.job(t, tenantA, j.ID)
	require.Equal(t, before.Version, after.Version, "the job is unchanged")
	require.Equal(t, eventTypes(before), eventTypes(after), "no event")
	_, err := b.queue.WorkerQueueDepth(b.ctx, tenantA, "fresh-queue")
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "no queue made")

	_, err = b.e.Fail(b.ctx, tenantA, l[0].LeaseID, engine.Outcome{Class: "replan", Steps: []domain.StepSpec{{ID: "n", Action: domain.ActionSpec{Type: domain.ActionPass}}}})
	require.NoError(t, err)
	b.drain(t)
	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	require.Len(t, done.Steps, 5)
}
