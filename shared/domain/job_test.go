package domain

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	passJob   = `{"steps":[{"id":"a","action":{"type":"pass"}}]}`
	threeJob  = `{"payload":{"in":1},"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}},{"id":"c","action":{"type":"pass"}}]}`
	workerJob = `{"queue":"q","steps":[{"id":"a","action":{"type":"worker"},"retry":{"max_attempts":3,"backoff":"exponential","initial_delay_ms":1000,"max_delay_ms":30000}}]}`
	onceJob   = `{"steps":[{"id":"a","action":{"type":"worker"},"retry":{"max_attempts":1}}]}`
)

// newJob parses body and builds job "job1" at t0.
func newJob(t *testing.T, body string) *Job {
	t.Helper()
	spec, err := ParseJobSpec([]byte(body))
	require.NoError(t, err)
	j, err := NewJob("tenant1", "job1", spec, "idem-1", t0)
	require.NoError(t, err)
	replayOK(t, j)
	return j
}

// replayOK asserts the invariant: the event log replays to the stored state.
func replayOK(t *testing.T, j *Job) {
	t.Helper()
	require.NoError(t, CheckReplay(j))
	require.NoError(t, CheckFormal(j.Events), "job %s", j.ID)
	for i, ev := range j.Events {
		require.Equal(t, i+1, ev.Seq, "event %d", i)
	}
}

func builtin(nonce string) LeaseRequest {
	return LeaseRequest{Nonce: nonce, Duration: time.Minute}
}

func viaWorker(worker, nonce string) LeaseRequest {
	return LeaseRequest{Worker: worker, ViaWorker: true, Nonce: nonce, Duration: time.Minute, Token: "rcpt-" + nonce}
}

func mustLease(t *testing.T, j *Job, step string, req LeaseRequest, now time.Time) *Lease {
	t.Helper()
	l, err := j.Lease(step, req, now)
	require.NoError(t, err)
	replayOK(t, j)
	return l
}

func eventTypes(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// since answers the event types logged after the first n events.
func since(j *Job, n int) []string { return eventTypes(j.Events[n:]) }

func ptr(t time.Time) *time.Time { return &t }

func requireIllegal(t *testing.T, err error, kind, from, event string) {
	t.Helper()
	var ie *IllegalTransitionError
	require.True(t, errors.As(err, &ie), "want *IllegalTransitionError, got %T %v", err, err)
	require.Equal(t, kind, ie.Kind)
	require.Equal(t, from, ie.From)
	require.Equal(t, event, ie.Event)
}

func TestPassJob(t *testing.T) {
	t.Parallel()
	j := newJob(t, passJob)
	s := j.Steps[0]
	require.Equal(t, "tenant1", j.Tenant)
	require.Equal(t, "idem-1", j.IdempotencyKey)
	require.Equal(t, DefaultQueue, j.Queue)
	require.Equal(t, 1, j.Priority)
	require.Equal(t, JobQueued, j.State)
	require.Equal(t, StepPending, s.State)
	require.Equal(t, "a", s.ID())
	require.Equal(t, ptr(t0), s.ReadyAt)
	requireDue(t, j, at(DispatchGrace))
	require.Nil(t, j.EndedAt)
	require.Nil(t, j.ExpiresAt)
	require.Equal(t, []*Step{s}, j.Runnable())

	t1 := at(time.Second)
	l := mustLease(t, j, "a", builtin("n1"), t1)
	require.Equal(t, JobRunning, j.State)
	require.Equal(t, StepRunning, s.State)
	require.Equal(t, 1, s.Attempt)
	require.Equal(t, 1, l.Attempt)
	require.Equal(t, t1.Add(time.Minute), l.ExpiresAt)
	require.Same(t, l, s.Lease)
	require.Nil(t, s.ReadyAt)
	require.Empty(t, j.Runnable())
	require.Equal(t, []Attempt{{N: 1, State: AttemptRunning, Lease: l.ID, StartedAt: &t1}}, s.Attempts)
	requireDue(t, j, l.ExpiresAt) // a built-in lease is reclaimed as soon as it runs out
	ref, err := ParseLeaseID(l.ID)
	require.NoError(t, err)
	require.Equal(t, LeaseRef{JobID: "job1", StepIndex: 0, Attempt: 1, Nonce: "n1"}, ref)
	require.Equal(t, "job1/a/1", j.IdempotencyToken(s))

	t2 := at(2 * time.Second)
	out, err := j.Complete("a", l.ID, json.RawMessage(`{"ok":true}`), t2)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, StepSucceeded, s.State)
	require.Equal(t, JobCompleted, j.State)
	require.JSONEq(t, `{"ok":true}`, string(s.Output))
	require.Nil(t, s.Lease)
	require.Nil(t, s.Error)
	require.Equal(t, AttemptSucceeded, s.Attempts[0].State)
	require.Equal(t, &t2, s.Attempts[0].EndedAt)
	require.Equal(t, &t2, j.EndedAt)
	require.Equal(t, ptr(t2.Add(30*24*time.Hour)), j.ExpiresAt)
	require.Nil(t, j.DueAt)
	require.Equal(t, t2, j.UpdatedAt)
	require.Equal(t, t0, j.CreatedAt)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_running", "step_succeeded", "job_completed"}, eventTypes(j.Events))
	for _, ev := range j.Events {
		if ev.Step != "" {
			require.Equal(t, "a", ev.Step)
			require.Equal(t, 1, ev.Attempt)
		}
	}

	// A finished job cannot be leased again.
	_, err = j.Lease("a", builtin("n2"), t2)
	requireIllegal(t, err, "job", "COMPLETED", string(JobEvRunning))
	replayOK(t, j)
	require.Empty(t, j.Runnable())
}

func TestCompleteWithoutOutputStoresNull(t *testing.T) {
	t.Parallel()
	j := newJob(t, passJob)
	l := mustLease(t, j, "a", builtin("n"), t0)
	_, err := j.Complete("a", l.ID, nil, t0)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, json.RawMessage(`null`), j.Steps[0].Output)
}

func TestLeaseViaWorkerLogsJobLeased(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_leased"}, eventTypes(j.Events))
	require.Equal(t, "w1", l.Worker)
	require.Equal(t, "rcpt-n1", l.Token)
	require.Equal(t, "w1", j.Steps[0].Attempts[0].Worker)
	require.Equal(t, "w1", j.Events[1].Detail)
}

func TestLeaseUnknownStep(t *testing.T) {
	t.Parallel()
	j := newJob(t, passJob)
	_, err := j.Lease("nope", builtin("n"), t0)
	require.ErrorIs(t, err, ErrNotFound)
	_, _, err = j.Step("nope")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = j.Reclaim("nope", t0)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = j.Complete("nope", "x", nil, t0)
	require.ErrorIs(t, err, ErrNotFound)
	replayOK(t, j)
	require.Len(t, j.Events, 1)
}

func TestThreeStepsRunInOrder(t *testing.T) {
	t.Parallel()
	j := newJob(t, threeJob)
	a, b, c := j.Steps[0], j.Steps[1], j.Steps[2]
	require.Equal(t, []StepState{StepPending, StepWaitingDeps, StepWaitingDeps}, []StepState{a.State, b.State, c.State})
	require.Equal(t, []string{"job_created", "step_waiting_deps", "step_waiting_deps"}, eventTypes(j.Events))
	require.Nil(t, b.ReadyAt)
	require.Equal(t, []*Step{a}, j.Runnable())
	require.JSONEq(t, `{"in":1}`, string(j.Input(0)))
	require.JSONEq(t, `{"in":1}`, string(j.Input(1)), "before step a ran, the payload")

	_, err := j.Lease("b", builtin("x"), t0)
	requireIllegal(t, err, "step", "WAITING_DEPS", "lease")
	replayOK(t, j)
	require.Equal(t, JobQueued, j.State)

	la := mustLease(t, j, "a", builtin("na"), at(time.Second))
	_, err = j.Lease("b", builtin("x"), at(time.Second))
	requireIllegal(t, err, "step", "WAITING_DEPS", "lease")
	replayOK(t, j)

	n := len(j.Events)
	out, err := j.Complete("a", la.ID, json.RawMessage(`{"x":1}`), at(2*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Len(t, out, 1)
	require.Same(t, b, out[0].Step)
	require.Zero(t, out[0].Delay)
	require.Equal(t, StepPending, b.State)
	require.Equal(t, StepWaitingDeps, c.State)
	require.Equal(t, ptr(at(2*time.Second)), b.ReadyAt)
	require.Equal(t, JobQueued, j.State)
	require.Equal(t, []string{"step_succeeded", "step_pending", "job_requeued"}, since(j, n))
	require.JSONEq(t, `{"x":1}`, string(j.Input(1)))
	require.Equal(t, []*Step{b}, j.Runnable())
	requireDue(t, j, at(2*time.Second+DispatchGrace))

	_, err = j.Lease("c", builtin("x"), at(3*time.Second))
	requireIllegal(t, err, "step", "WAITING_DEPS", "lease")

	lb := mustLease(t, j, "b", builtin("nb"), at(3*time.Second))
	ref, err := ParseLeaseID(lb.ID)
	require.NoError(t, err)
	require.Equal(t, 1, ref.StepIndex)
	out, err = j.Complete("b", lb.ID, json.RawMessage(`{"y":2}`), at(4*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Len(t, out, 1)
	require.Same(t, c, out[0].Step)
	require.JSONEq(t, `{"y":2}`, string(j.Input(2)))

	lc := mustLease(t, j, "c", builtin("nc"), at(5*time.Second))
	out, err = j.Complete("c", lc.ID, nil, at(6*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, JobCompleted, j.State)
	require.Equal(t, ptr(at(6*time.Second)), j.EndedAt)
	require.Nil(t, j.DueAt)
}

func TestRetryableFailure(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l1 := mustLease(t, j, "a", viaWorker("w1", "n1"), at(time.Second))

	t2 := at(2 * time.Second)
	n := len(j.Events)
	out, err := j.Fail("a", l1.ID, Failure{Class: ClassRetryable, Message: "boom"}, t2, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []Dispatch{{Step: s, Delay: time.Second}}, out)
	require.Equal(t, StepRetrying, s.State)
	require.Equal(t, JobRetrying, j.State)
	require.Equal(t, []string{"step_failed_retryable", "step_retrying", "job_retrying"}, since(j, n))
	require.Equal(t, ptr(t2.Add(time.Second)), s.ReadyAt)
	require.Nil(t, s.Lease)
	require.Equal(t, &StepError{Class: ClassRetryable, Message: "boom"}, s.Error)
	require.Equal(t, AttemptFailed, s.Attempts[0].State)
	require.Equal(t, s.Error, s.Attempts[0].Error)
	require.Equal(t, &t2, s.Attempts[0].EndedAt)
	require.Equal(t, []*Step{s}, j.Runnable())
	requireDue(t, j, t2.Add(time.Second+DispatchGrace))

	// The old lease is gone.
	_, err = j.Complete("a", l1.ID, nil, t2)
	require.ErrorIs(t, err, ErrLeaseLost)

	// Not before the backoff ran out.
	_, err = j.Lease("a", viaWorker("w1", "n2"), t2.Add(999*time.Millisecond))
	var ny *NotYetError
	require.ErrorAs(t, err, &ny)
	require.Equal(t, t2.Add(time.Second), ny.Until)
	require.Contains(t, ny.Error(), "not runnable before")
	replayOK(t, j)
	require.Equal(t, 1, s.Attempt)
	require.Equal(t, StepRetrying, s.State)

	// RETRYING -> RUNNING directly: no step_leased.
	t3 := t2.Add(time.Second)
	n = len(j.Events)
	l2 := mustLease(t, j, "a", viaWorker("w1", "n2"), t3)
	require.Equal(t, []string{"step_running", "job_leased"}, since(j, n))
	require.Equal(t, 2, l2.Attempt)
	require.Equal(t, 2, s.Attempt)
	require.Equal(t, JobRunning, j.State)
	require.Equal(t, "job1/a/2", j.IdempotencyToken(s))

	// Second failure: backoff doubles.
	t4 := t3.Add(time.Second)
	out, err = j.Fail("a", l2.ID, Failure{Class: ClassRetryable, Message: "boom again"}, t4, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []Dispatch{{Step: s, Delay: 2 * time.Second}}, out)
	require.Equal(t, JobRetrying, j.State)

	t5 := t4.Add(2 * time.Second)
	l3 := mustLease(t, j, "a", builtin("n3"), t5)
	require.Equal(t, 3, l3.Attempt)
	require.Equal(t, JobRunning, j.State)

	// Third failure exhausts max_attempts 3.
	n = len(j.Events)
	out, err = j.Fail("a", l3.ID, Failure{Class: ClassRetryable, Message: "last"}, t5.Add(time.Second), nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, StepFailed, s.State)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, []string{"step_failed_fatal", "step_failed", "job_failed"}, since(j, n))
	require.Len(t, s.Attempts, 3)
	for i, a := range s.Attempts {
		require.Equal(t, i+1, a.N)
		require.Equal(t, AttemptFailed, a.State, "attempt %d", a.N)
		require.NotNil(t, a.EndedAt)
	}
	require.Equal(t, "last", s.Error.Message)
	require.Nil(t, j.DueAt)
	require.Equal(t, ptr(t5.Add(time.Second+14*24*time.Hour)), j.ExpiresAt)
	require.Empty(t, j.Runnable())
}

func TestRetryAfterOverridesShorterBackoff(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l := mustLease(t, j, "a", builtin("n"), t0)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassRetryable, RetryAfter: 10 * time.Second}, t0, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, 10*time.Second, out[0].Delay)
	require.Equal(t, ptr(at(10*time.Second)), j.Steps[0].ReadyAt)
}

func TestFatalFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, class := range []FailureClass{ClassFatal, FailureClass("")} {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			j := newJob(t, workerJob)
			s := j.Steps[0]
			l := mustLease(t, j, "a", builtin("n"), t0)
			n := len(j.Events)
			out, err := j.Fail("a", l.ID, Failure{Class: class, Message: "no"}, at(time.Second), nil)
			require.NoError(t, err)
			replayOK(t, j)
			require.Empty(t, out)
			require.Equal(t, []string{"step_failed_fatal", "step_failed", "job_failed"}, since(j, n))
			require.Equal(t, StepFailed, s.State)
			require.Equal(t, JobFailed, j.State)
			require.Len(t, s.Attempts, 1)
			require.Equal(t, AttemptFailed, s.Attempts[0].State)
			require.Equal(t, ptr(at(time.Second)), j.EndedAt)
		})
	}
}

func TestTimeoutFailure(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", builtin("n"), t0)
	n := len(j.Events)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassTimeout, Message: "slow"}, at(time.Second), nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []Dispatch{{Step: s, Delay: time.Second}}, out)
	require.Equal(t, []string{"step_timed_out", "step_retrying", "job_retrying"}, since(j, n))
	require.Equal(t, StepRetrying, s.State)
	require.Equal(t, JobRetrying, j.State)
	require.Equal(t, AttemptTimeout, s.Attempts[0].State)
	require.Equal(t, ClassTimeout, s.Error.Class)
}

func TestTimeoutFailureExhausted(t *testing.T) {
	t.Parallel()
	j := newJob(t, onceJob)
	l := mustLease(t, j, "a", builtin("n"), t0)
	n := len(j.Events)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassTimeout}, t0, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, []string{"step_timed_out", "step_failed", "job_failed"}, since(j, n))
	require.Equal(t, AttemptTimeout, j.Steps[0].Attempts[0].State)
}

func TestResourceFailureSwitchesResource(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	t1 := at(time.Second)
	n := len(j.Events)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassResource, Message: "gpu gone"}, t1, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []Dispatch{{Step: s}}, out)
	require.Equal(t, []string{"step_failed_resource", "step_switching_resource", "job_requeued"}, since(j, n))
	require.Equal(t, StepSwitchingResource, s.State)
	require.Equal(t, JobQueued, j.State)
	require.Equal(t, []string{"w1"}, s.Avoid)
	require.Equal(t, &t1, s.ReadyAt)
	require.Equal(t, []*Step{s}, j.Runnable())
	require.Equal(t, AttemptFailed, s.Attempts[0].State)

	// Runnable again, straight away, on another worker.
	n = len(j.Events)
	l2 := mustLease(t, j, "a", viaWorker("w2", "n2"), t1)
	require.Equal(t, []string{"step_leased", "step_running", "job_leased"}, since(j, n))
	require.Equal(t, 2, l2.Attempt)

	_, err = j.Fail("a", l2.ID, Failure{Class: ClassResource}, t1, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []string{"w1", "w2"}, s.Avoid)
}

func TestResourceFailureOfBuiltinAvoidsNobody(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l := mustLease(t, j, "a", builtin("n"), t0)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassResource}, t0, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Len(t, out, 1)
	require.Equal(t, StepSwitchingResource, j.Steps[0].State)
	require.Empty(t, j.Steps[0].Avoid)
}

func TestResourceFailureExhausted(t *testing.T) {
	t.Parallel()
	j := newJob(t, onceJob)
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	n := len(j.Events)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassResource}, t0, nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, []string{"step_failed_resource", "step_failed_fatal", "step_failed", "job_failed"}, since(j, n))
	require.Empty(t, j.Steps[0].Avoid)
}

func TestNeedsUserWaits(t *testing.T) {
	t.Parallel()
	j := newJob(t, threeJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", builtin("n"), t0)
	n := len(j.Events)
	out, err := j.Fail("a", l.ID, Failure{Class: ClassNeedsUser, Message: "which one?"}, at(time.Second), nil)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, []string{"step_needs_user", "job_waiting"}, since(j, n))
	require.Equal(t, StepNeedsUser, s.State)
	require.Equal(t, JobWaiting, j.State)
	require.Nil(t, j.DueAt)
	require.Nil(t, j.EndedAt)
	require.Empty(t, j.Runnable())
	require.Equal(t, "which one?", s.Error.Message)
	redispatch, reclaim := j.NeedsSweep(s, at(time.Hour))
	require.False(t, redispatch)
	require.False(t, reclaim)

	_, err = j.Lease("a", builtin("n2"), at(2*time.Second))
	requireIllegal(t, err, "step", "NEEDS_USER", "lease")
	replayOK(t, j)
}

func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	live := at(30 * time.Second)
	expired := l.ExpiresAt

	for _, tc := range []struct {
		name  string
		lease string
		now   time.Time
	}{
		{"wrong id", "job1.0.1.other", live},
		{"empty id", "", live},
		{"at expiry", l.ID, expired},
		{"after expiry", l.ID, expired.Add(time.Hour)},
	} {
		n := len(j.Events)
		_, err := j.Complete("a", tc.lease, nil, tc.now)
		require.ErrorIs(t, err, ErrLeaseLost, "Complete %s", tc.name)
		require.Equal(t, CodeLeaseLost, CodeOf(err))
		_, err = j.Heartbeat("a", tc.lease, time.Minute, tc.now)
		require.ErrorIs(t, err, ErrLeaseLost, "Heartbeat %s", tc.name)
		_, err = j.Fail("a", tc.lease, Failure{Class: ClassRetryable}, tc.now, nil)
		require.ErrorIs(t, err, ErrLeaseLost, "Fail %s", tc.name)
		require.Len(t, j.Events, n, "%s changes nothing", tc.name)
		require.Equal(t, StepRunning, s.State)
		require.Equal(t, expired, s.Lease.ExpiresAt)
		replayOK(t, j)
	}

	// Not reclaimable while live.
	_, err := j.Reclaim("a", live)
	requireIllegal(t, err, "step", "RUNNING", "lease_timeout")
	replayOK(t, j)

	// Reclaim after expiry.
	reclaimAt := expired.Add(time.Second)
	n := len(j.Events)
	out, err := j.Reclaim("a", reclaimAt)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []Dispatch{{Step: s}}, out)
	require.Equal(t, []string{"step_lease_timeout", "step_pending", "job_requeued"}, since(j, n))
	require.Equal(t, StepPending, s.State)
	require.Equal(t, JobQueued, j.State)
	require.Nil(t, s.Lease)
	require.Equal(t, &reclaimAt, s.ReadyAt)
	require.Equal(t, AttemptTimeout, s.Attempts[0].State)
	require.Equal(t, ClassTimeout, s.Attempts[0].Error.Class)
	require.Equal(t, &reclaimAt, s.Attempts[0].EndedAt)

	// Reclaiming twice is refused.
	_, err = j.Reclaim("a", reclaimAt)
	requireIllegal(t, err, "step", "PENDING", "lease_timeout")

	// A new lease is attempt 2, and the old lease id stays refused.
	l2 := mustLease(t, j, "a", viaWorker("w2", "n2"), reclaimAt)
	require.Equal(t, 2, l2.Attempt)
	require.NotEqual(t, l.ID, l2.ID)
	_, err = j.Complete("a", l.ID, nil, reclaimAt)
	require.ErrorIs(t, err, ErrLeaseLost)
	_, err = j.Heartbeat("a", l.ID, time.Minute, reclaimAt)
	require.ErrorIs(t, err, ErrLeaseLost)
	_, err = j.Complete("a", l2.ID, json.RawMessage(`1`), reclaimAt.Add(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	require.Equal(t, []AttemptState{AttemptTimeout, AttemptSucceeded}, []AttemptState{s.Attempts[0].State, s.Attempts[1].State})
}

// A lease that no longer holds its step says why, so that its holder
// knows whether its work counted and whether to stop.
func TestLeaseLostSaysWhy(t *testing.T) {
	t.Parallel()
	lost := func(t *testing.T, err error, why string) {
		t.Helper()
		require.ErrorIs(t, err, ErrLeaseLost)
		require.Equal(t, CodeLeaseLost, CodeOf(err))
		require.EqualError(t, err, "lease lost: "+why)
	}

	// Expired, the step not yet taken by another attempt.
	j := newJob(t, workerJob)
	l1 := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	_, err := j.Complete("a", l1.ID, nil, l1.ExpiresAt)
	lost(t, err, "the lease expired at 2025-03-14T09:27:53Z with no heartbeat to extend it (heartbeat well within lease_seconds); the step runs again as another attempt")
	_, err = j.Complete("a", "job1.0.1.forged", nil, at(time.Second))
	lost(t, err, `no attempt of step "a" ran under this lease; the step is RUNNING`)

	// Taken over by attempt 2.
	l2 := mustLease(t, j, "a", viaWorker("w2", "n2"), l1.ExpiresAt)
	_, err = j.Heartbeat("a", l1.ID, time.Minute, l1.ExpiresAt)
	lost(t, err, `attempt 1 was taken over: attempt 2 holds step "a" under another lease; stop this attempt's work`)

	// Completed, under the lease or another.
	_, err = j.Complete("a", l2.ID, json.RawMessage(`1`), l1.ExpiresAt.Add(time.Second))
	require.NoError(t, err)
	_, err = j.Fail("a", l2.ID, Failure{Class: ClassFatal}, l1.ExpiresAt.Add(2*time.Second), nil)
	lost(t, err, `step "a" already completed under this lease (attempt 2); its outcome stands and nothing more is taken`)
	_, err = j.Complete("a", l1.ID, nil, l1.ExpiresAt.Add(2*time.Second))
	lost(t, err, `step "a" already completed under another lease (attempt 2); stop this attempt's work, it is not needed`)

	// Expired and reclaimed by the sweep.
	j = newJob(t, workerJob)
	l1 = mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	_, err = j.Reclaim("a", l1.ExpiresAt)
	require.NoError(t, err)
	_, err = j.Complete("a", l1.ID, nil, l1.ExpiresAt)
	lost(t, err, `the lease expired at 2025-03-14T09:27:53Z with no heartbeat to extend it and attempt 1 was ended; step "a" is PENDING`)

	// Cancelled.
	j = newJob(t, workerJob)
	l1 = mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	_, err = j.Cancel(at(time.Second))
	require.NoError(t, err)
	_, err = j.Fail("a", l1.ID, Failure{Class: ClassRetryable}, at(2*time.Second), nil)
	lost(t, err, "the job was cancelled; stop this attempt's work: nothing more is taken under this lease")
	replayOK(t, j)
}

func TestLeaseReclaimsExpiredLeaseInSameChange(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l1 := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)

	// A live lease cannot be taken.
	_, err := j.Lease("a", viaWorker("w2", "n2"), at(59*time.Second))
	requireIllegal(t, err, "step", "RUNNING", "lease")
	replayOK(t, j)

	n := len(j.Events)
	l2 := mustLease(t, j, "a", viaWorker("w2", "n2"), l1.ExpiresAt)
	require.Equal(t, []string{"step_lease_timeout", "step_pending", "job_requeued", "step_leased", "step_running", "job_leased"}, since(j, n))
	require.Equal(t, 2, l2.Attempt)
	require.Equal(t, JobRunning, j.State)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, AttemptTimeout, s.Attempts[0].State)
	require.Equal(t, AttemptRunning, s.Attempts[1].State)
	require.Equal(t, "w2", s.Attempts[1].Worker)
	_, err = j.Complete("a", l1.ID, nil, l1.ExpiresAt)
	require.ErrorIs(t, err, ErrLeaseLost)
}

func TestReclaimWhenAttemptsExhausted(t *testing.T) {
	t.Parallel()
	j := newJob(t, onceJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	n := len(j.Events)
	out, err := j.Reclaim("a", l.ExpiresAt)
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, out)
	require.Equal(t, []string{"step_lease_timeout", "step_failed", "job_failed"}, since(j, n))
	require.Equal(t, StepFailed, s.State)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, ClassTimeout, s.Error.Class)
	require.Equal(t, AttemptTimeout, s.Attempts[0].State)
	require.Nil(t, s.Lease)
	require.Nil(t, j.DueAt)
	require.Equal(t, ptr(l.ExpiresAt), j.EndedAt)
}

func TestLeaseOnExpiredLeaseWhenAttemptsExhausted(t *testing.T) {
	t.Parallel()
	j := newJob(t, onceJob)
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	_, err := j.Lease("a", viaWorker("w2", "n2"), l.ExpiresAt)
	requireIllegal(t, err, "job", "FAILED", string(JobEvRunning))
	// The reclaim happened; the change is consistent and worth saving.
	replayOK(t, j)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, StepFailed, j.Steps[0].State)
	require.Len(t, j.Steps[0].Attempts, 1)
}

func TestHeartbeatExtendsLease(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	oldExpiry := l.ExpiresAt
	n := len(j.Events)
	hb := at(50 * time.Second)
	got, err := j.Heartbeat("a", l.ID, 5*time.Minute, hb)
	require.NoError(t, err)
	replayOK(t, j)
	require.Same(t, s.Lease, got)
	require.Equal(t, l.ID, got.ID)
	require.Equal(t, hb.Add(5*time.Minute), got.ExpiresAt)
	requireDue(t, j, hb.Add(5*time.Minute+DispatchGrace))
	require.Equal(t, hb, j.UpdatedAt)
	require.Len(t, j.Events, n, "a heartbeat logs nothing")

	// The old expiry no longer ends the lease.
	redispatch, reclaim := j.NeedsSweep(s, oldExpiry.Add(time.Second))
	require.False(t, redispatch)
	require.False(t, reclaim)
	_, err = j.Reclaim("a", oldExpiry.Add(time.Second))
	requireIllegal(t, err, "step", "RUNNING", "lease_timeout")
	_, err = j.Complete("a", l.ID, nil, oldExpiry.Add(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
}

// cancelFrom builds the job states Cancel starts from.
var cancelFrom = []struct {
	name  string
	build func(t *testing.T) *Job
	state JobState
}{
	{"queued", func(t *testing.T) *Job { return newJob(t, threeJob) }, JobQueued},
	{"running", func(t *testing.T) *Job {
		j := newJob(t, threeJob)
		mustLease(t, j, "a", builtin("n"), t0)
		return j
	}, JobRunning},
	{"running second step", func(t *testing.T) *Job {
		j := newJob(t, threeJob)
		l := mustLease(t, j, "a", builtin("n"), t0)
		_, err := j.Complete("a", l.ID, nil, t0)
		require.NoError(t, err)
		mustLease(t, j, "b", builtin("n"), t0)
		return j
	}, JobRunning},
	{"retrying", func(t *testing.T) *Job {
		j := newJob(t, workerJob)
		l := mustLease(t, j, "a", builtin("n"), t0)
		_, err := j.Fail("a", l.ID, Failure{Class: ClassRetryable}, t0, nil)
		require.NoError(t, err)
		return j
	}, JobRetrying},
	{"waiting", func(t *testing.T) *Job {
		j := newJob(t, workerJob)
		l := mustLease(t, j, "a", builtin("n"), t0)
		_, err := j.Fail("a", l.ID, Failure{Class: ClassNeedsUser}, t0, nil)
		require.NoError(t, err)
		return j
	}, JobWaiting},
	{"switching resource", func(t *testing.T) *Job {
		j := newJob(t, workerJob)
		l := mustLease(t, j, "a", viaWorker("w", "n"), t0)
		_, err := j.Fail("a", l.ID, Failure{Class: ClassResource}, t0, nil)
		require.NoError(t, err)
		return j
	}, JobQueued},
}

func TestCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range cancelFrom {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := tc.build(t)
			replayOK(t, j)
			require.Equal(t, tc.state, j.State)
			var leases []*Lease
			before := map[*Step]StepState{}
			for _, s := range j.Steps {
				before[s] = s.State
				if s.Lease != nil {
					leases = append(leases, s.Lease)
				}
			}
			now := at(time.Minute / 2)
			changed, err := j.Cancel(now)
			require.NoError(t, err)
			require.True(t, changed)
			replayOK(t, j)
			require.Equal(t, JobCancelled, j.State)
			require.Equal(t, "job_cancelled", j.Events[len(j.Events)-1].Type)
			for _, s := range j.Steps {
				if before[s] == StepSucceeded {
					require.Equal(t, StepSucceeded, s.State)
				} else {
					require.Equal(t, StepCancelled, s.State, "step %s", s.ID())
				}
				require.Nil(t, s.Lease)
				require.Nil(t, s.ReadyAt)
				for _, a := range s.Attempts {
					require.True(t, a.State.Terminal(), "attempt %d of %s is %s", a.N, s.ID(), a.State)
				}
			}
			require.Equal(t, &now, j.EndedAt)
			require.Equal(t, ptr(now.Add(7*24*time.Hour)), j.ExpiresAt)
			require.Nil(t, j.DueAt)
			require.Empty(t, j.Runnable())

			// A lease still out is fenced off; its attempt reads cancelled.
			for _, l := range leases {
				ref, err := ParseLeaseID(l.ID)
				require.NoError(t, err)
				s := j.Steps[ref.StepIndex]
				require.Equal(t, AttemptCancelled, s.Attempts[l.Attempt-1].State)
				require.Equal(t, &now, s.Attempts[l.Attempt-1].EndedAt)
				_, err = j.Complete(s.ID(), l.ID, nil, now)
				require.ErrorIs(t, err, ErrLeaseLost)
				_, err = j.Fail(s.ID(), l.ID, Failure{Class: ClassFatal}, now, nil)
				require.ErrorIs(t, err, ErrLeaseLost)
			}

			// Again: nothing changes.
			n := len(j.Events)
			changed, err = j.Cancel(now.Add(time.Hour))
			require.NoError(t, err)
			require.False(t, changed)
			require.Len(t, j.Events, n)
			require.Equal(t, &now, j.EndedAt)
			replayOK(t, j)

			// And nothing runs.
			_, err = j.Lease(j.Steps[0].ID(), builtin("late"), now)
			requireIllegal(t, err, "job", "CANCELLED", string(JobEvRunning))
		})
	}
}

func TestCancelFinishedJobIsRefused(t *testing.T) {
	t.Parallel()
	completed := newJob(t, passJob)
	l := mustLease(t, completed, "a", builtin("n"), t0)
	_, err := completed.Complete("a", l.ID, nil, t0)
	require.NoError(t, err)

	failed := newJob(t, onceJob)
	l = mustLease(t, failed, "a", builtin("n"), t0)
	_, err = failed.Fail("a", l.ID, Failure{Class: ClassFatal}, t0, nil)
	require.NoError(t, err)

	for _, j := range []*Job{completed, failed} {
		n, state := len(j.Events), j.State
		changed, err := j.Cancel(at(time.Hour))
		require.False(t, changed)
		requireIllegal(t, err, "job", string(state), string(JobEvCancelled))
		require.EqualError(t, err, "the job is "+string(state)+"; only a job that has not finished can be cancelled", "the state and what is allowed, not the event")
		require.Equal(t, CodeConflict, CodeOf(err))
		require.Equal(t, state, j.State)
		require.Len(t, j.Events, n)
		require.Equal(t, ptr(t0), j.EndedAt)
		replayOK(t, j)
	}
}

func TestSweepRedispatchAfterGrace(t *testing.T) {
	t.Parallel()
	j := newJob(t, passJob)
	s := j.Steps[0]
	for _, tc := range []struct {
		now        time.Duration
		redispatch bool
	}{{0, false}, {DispatchGrace - time.Nanosecond, false}, {DispatchGrace, true}, {time.Hour, true}} {
		redispatch, reclaim := j.NeedsSweep(s, at(tc.now))
		require.Equal(t, tc.redispatch, redispatch, "at +%s", tc.now)
		require.False(t, reclaim)
	}
	requireDue(t, j, at(DispatchGrace))

	// Each re-dispatch doubles the wait, counted from the re-dispatch.
	now := at(DispatchGrace)
	wait := DispatchGrace
	for i := 1; i <= 8; i++ {
		n := len(j.Events)
		require.NoError(t, j.Redispatched(s, now))
		replayOK(t, j)
		require.Len(t, j.Events, n, "a re-dispatch logs nothing")
		require.Equal(t, i, s.Redispatches)
		require.Equal(t, &now, s.ReadyAt)
		wait = min(wait*2, DispatchGrace<<6)
		require.Equal(t, ptr(now.Add(wait)), j.DueAt, "after %d re-dispatches", i)
		redispatch, _ := j.NeedsSweep(s, now.Add(wait-time.Nanosecond))
		require.False(t, redispatch, "after %d re-dispatches", i)
		redispatch, _ = j.NeedsSweep(s, now.Add(wait))
		require.True(t, redispatch, "after %d re-dispatches", i)
		now = now.Add(wait)
	}
	require.Equal(t, 64*time.Minute, wait, "the wait is capped")

	// In line for a resource, the wait is capped at 4 minutes: its wake is
	// one message, and the sweep is the net under it.
	require.NoError(t, j.WaitForResource("a", &ResourceWait{Since: now, On: []string{"gpu-1"}}, now))
	require.Equal(t, ptr(now.Add(4*time.Minute)), j.DueAt)
	s.ResourceWait, s.Redispatches = nil, 0

	// A lease resets the count.
	l := mustLease(t, j, "a", builtin("n"), now)
	require.Zero(t, s.Redispatches)
	redispatch, reclaim := j.NeedsSweep(s, l.ExpiresAt.Add(-time.Nanosecond))
	require.False(t, redispatch)
	require.False(t, reclaim)
	redispatch, reclaim = j.NeedsSweep(s, l.ExpiresAt)
	require.False(t, redispatch)
	require.True(t, reclaim)
	requireDue(t, j, l.ExpiresAt) // a built-in lease is reclaimed as soon as it runs out

	_, err := j.Reclaim("a", l.ExpiresAt)
	require.NoError(t, err)
	replayOK(t, j)
	redispatch, reclaim = j.NeedsSweep(s, l.ExpiresAt)
	require.False(t, redispatch)
	require.False(t, reclaim)
	requireDue(t, j, l.ExpiresAt.Add(DispatchGrace))
}

func TestSweepRetryingStepWaitsForBackoff(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", builtin("n"), t0)
	_, err := j.Fail("a", l.ID, Failure{Class: ClassRetryable, RetryAfter: time.Hour}, t0, nil)
	require.NoError(t, err)
	ready := at(time.Hour)
	redispatch, _ := j.NeedsSweep(s, ready.Add(DispatchGrace-time.Nanosecond))
	require.False(t, redispatch)
	redispatch, _ = j.NeedsSweep(s, ready.Add(DispatchGrace))
	require.True(t, redispatch)

	// A re-dispatch before the backoff ends keeps ReadyAt.
	require.NoError(t, j.Redispatched(s, at(time.Minute)))
	replayOK(t, j)
	require.Equal(t, &ready, s.ReadyAt)
	requireDue(t, j, ready.Add(2*DispatchGrace))
}

func TestSweepIgnoresWaitingAndFinished(t *testing.T) {
	t.Parallel()
	j := newJob(t, threeJob)
	for _, s := range j.Steps[1:] {
		redispatch, reclaim := j.NeedsSweep(s, at(24*time.Hour))
		require.False(t, redispatch, s.ID())
		require.False(t, reclaim, s.ID())
	}
	_, err := j.Cancel(t0)
	require.NoError(t, err)
	redispatch, reclaim := j.NeedsSweep(j.Steps[0], at(24*time.Hour))
	require.False(t, redispatch)
	require.False(t, reclaim)
}

func TestIdempotencyToken(t *testing.T) {
	t.Parallel()
	j := newJob(t, threeJob)
	require.Equal(t, "job1/a/0", j.IdempotencyToken(j.Steps[0]))
	mustLease(t, j, "a", builtin("n"), t0)
	require.Equal(t, "job1/a/1", j.IdempotencyToken(j.Steps[0]))
	require.Equal(t, "job1/b/0", j.IdempotencyToken(j.Steps[1]))
}

func TestLeaseIDRoundTrip(t *testing.T) {
	t.Parallel()
	for _, ref := range []LeaseRef{
		{JobID: "01HZX", StepIndex: 0, Attempt: 1, Nonce: "abc"},
		{JobID: "j", StepIndex: 99, Attempt: 100, Nonce: "Zz-_9"},
	} {
		got, err := ParseLeaseID(ref.String())
		require.NoError(t, err)
		require.Equal(t, ref, got)
	}
	require.Equal(t, "j.2.3.n", LeaseRef{JobID: "j", StepIndex: 2, Attempt: 3, Nonce: "n"}.String())
}

func TestParseLeaseIDRejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"", "job1", "job1.0.1", "job1.0.1.n.x", ".0.1.n", "job1.0.1.", "job1..1.n", "job1.0..n",
		"job1.x.1.n", "job1.0.y.n", "job1.-1.1.n", "job1.0.0.n", "job1.0.-2.n", "...",
	} {
		ref, err := ParseLeaseID(id)
		require.ErrorIs(t, err, ErrNotFound, "%q", id)
		require.Equal(t, CodeNotFound, CodeOf(err))
		require.Zero(t, ref, "%q", id)
	}
}

func TestReplayRejectsIllegalSequences(t *testing.T) {
	t.Parallel()
	ev := func(seq int, typ, step string) Event { return Event{Seq: seq, Type: typ, Step: step, At: t0} }
	for _, tc := range []struct {
		name   string
		events []Event
		want   []string // substrings of the error
	}{
		{"completed right after created", []Event{ev(1, "job_created", ""), ev(2, "job_completed", "")}, []string{"event 2", "job_completed", "QUEUED"}},
		{"no job_created", []Event{ev(1, "job_running", "")}, []string{"event 1", "job_running"}},
		{"created twice", []Event{ev(1, "job_created", ""), ev(2, "job_created", "")}, []string{"event 2", "job_created"}},
		{"unknown job event", []Event{ev(1, "job_created", ""), ev(2, "job_exploded", "")}, []string{"event 2", "job_exploded"}},
		{"after the end", []Event{ev(1, "job_created", ""), ev(2, "job_cancelled", ""), ev(3, "job_running", "")}, []string{"event 3", "job_running"}},
		{"step skips running", []Event{ev(1, "job_created", ""), ev(2, "step_succeeded", "a")}, []string{"event 2", "step a", "PENDING", "SUCCEEDED"}},
		{"unknown step state", []Event{ev(1, "job_created", ""), ev(2, "step_exploded", "a")}, []string{"event 2", "EXPLODED"}},
		{"step after its end", []Event{
			ev(1, "job_created", ""), ev(2, "step_leased", "a"), ev(3, "step_running", "a"),
			ev(4, "step_succeeded", "a"), ev(5, "step_running", "a"),
		}, []string{"event 5", "SUCCEEDED", "RUNNING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Replay(tc.events)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := Replay([]Event{ev(1, "job_created", ""), ev(2, "job_completed", "")})
	var ie *IllegalTransitionError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "job_completed", ie.Event)
}

func TestReplayFoldsStepsAndJob(t *testing.T) {
	t.Parallel()
	r, err := Replay(nil)
	require.NoError(t, err)
	require.Equal(t, JobInitial, r.Job)
	require.Empty(t, r.Steps)

	j := newJob(t, threeJob)
	mustLease(t, j, "a", builtin("n"), t0)
	r, err = Replay(j.Events)
	require.NoError(t, err)
	require.Equal(t, Replayed{Job: JobRunning, Steps: map[string]StepState{"a": StepRunning, "b": StepWaitingDeps, "c": StepWaitingDeps}}, r)
}

func TestCheckReplayDetectsDrift(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tamper func(j *Job)
		want   string
	}{
		{"job state", func(j *Job) { j.State = JobCompleted }, "stored COMPLETED, events say RUNNING"},
		{"step state", func(j *Job) { j.Steps[1].State = StepPending }, "step b: stored PENDING, events say WAITING_DEPS"},
		{"unlogged step", func(j *Job) { j.Steps = append(j.Steps, &Step{Spec: StepSpec{ID: "d"}, State: StepRunning}) }, "step d: stored RUNNING, events say PENDING"},
		{"bad log", func(j *Job) { j.Events = append(j.Events, Event{Seq: 99, Type: "job_created"}) }, "event 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(t, threeJob)
			mustLease(t, j, "a", builtin("n"), t0)
			tc.tamper(j)
			err := CheckReplay(j)
			require.Error(t, err)
			require.Contains(t, err.Error(), "job job1")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestEveryNonTerminalStepStateCanBeCancelled keeps Cancel total: a step in
// any state that is not terminal has a cancel row.
func TestEveryNonTerminalStepStateCanBeCancelled(t *testing.T) {
	t.Parallel()
	for _, s := range AllStepStates() {
		got, err := NextStepState(s, StepEvCancel)
		if s.Terminal() {
			require.Error(t, err, "%s", s)
			continue
		}
		require.NoError(t, err, "%s", s)
		require.Equal(t, StepCancelled, got)
	}
}

func TestRetentionCoversTerminalStates(t *testing.T) {
	t.Parallel()
	for _, s := range AllJobStates() {
		require.Equal(t, s.Terminal(), DefaultRetention.For(s) > 0, "%s", s)
	}
	require.Equal(t, 30*24*time.Hour, DefaultRetention.For(JobCompleted))
	require.Equal(t, 7*24*time.Hour, DefaultRetention.For(JobCancelled))
	require.Equal(t, 14*24*time.Hour, DefaultRetention.For(JobFailed))
}

// requireDue checks the job's due time: the sweep needs it at want, and the
// stored due time is no later (it is only pushed on by Resweep).
func requireDue(t *testing.T, j *Job, want time.Time) {
	t.Helper()
	require.NotNil(t, j.due())
	require.Equal(t, want, *j.due())
	require.NotNil(t, j.DueAt)
	require.False(t, j.DueAt.After(want), "due %s is later than %s", j.DueAt, want)
}

func TestDueOnlyMovesEarlierUntilResweep(t *testing.T) {
	t.Parallel()
	j := newJob(t, passJob)
	created := *j.DueAt
	require.Equal(t, t0.Add(DispatchGrace), created)

	// A lease would push the due time out to the lease's end; the stored one
	// stays, so the lease rewrites no index entry.
	l, err := j.Lease("a", LeaseRequest{Nonce: "n", Duration: time.Hour}, at(time.Second))
	require.NoError(t, err)
	require.Equal(t, created, *j.DueAt)
	require.False(t, j.Resweep() == false && j.DueAt.Equal(created), "Resweep pushes it on")
	require.Equal(t, l.ExpiresAt, *j.DueAt)
	require.False(t, j.Resweep(), "a second Resweep changes nothing")

	// Finishing removes it.
	_, err = j.Complete("a", l.ID, nil, at(2*time.Second))
	require.NoError(t, err)
	require.Nil(t, j.DueAt)
}

func TestALeaseIdIsGoodUntilItsExpiryOnly(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l, err := j.Lease("a", viaWorker("w", "n1"), at(0))
	require.NoError(t, err)
	_, err = j.Complete("a", l.ID, []byte(`1`), at(10*time.Second))
	require.NoError(t, err)
	s, _, _ := j.Step("a")

	// A repeated completion while the lease would still run is the same
	// outcome again; after its expiry the lease is just lost.
	require.True(t, s.AlreadyRecorded(l.ID, true, at(30*time.Second)))
	require.False(t, s.AlreadyRecorded(l.ID, false, at(30*time.Second)), "a failure was never recorded")
	require.False(t, s.AlreadyRecorded(l.ID, true, l.ExpiresAt))
	require.False(t, s.AlreadyRecorded("job1.0.1.other", true, at(30*time.Second)))

	c := newJob(t, workerJob)
	l, err = c.Lease("a", viaWorker("w", "n2"), at(0))
	require.NoError(t, err)
	_, err = c.Cancel(at(time.Second))
	require.NoError(t, err)
	s, _, _ = c.Step("a")
	require.True(t, s.CancelledUnder(l.ID, at(2*time.Second)))
	require.False(t, s.CancelledUnder(l.ID, l.ExpiresAt))
	require.False(t, s.CancelledUnder("job1.0.1.forged", at(2*time.Second)))
}

func TestTruncateKeepsUTF8AndSaysSo(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", Truncate("short", 10))
	long := strings.Repeat("é", 3000) // 6000 bytes of two-byte runes
	got := Truncate(long, 100)
	require.LessOrEqual(t, len(got), 100)
	require.True(t, utf8.ValidString(got), "cut on a rune boundary")
	require.Contains(t, got, "(truncated from 6000 bytes)")
}

func TestHugeFailureMessageIsBounded(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l := mustLease(t, j, "a", viaWorker("w1", "n1"), t0)
	msg := strings.Repeat("x", 120*1024)
	_, err := j.Fail("a", l.ID, Failure{Class: ClassFatal, Message: msg}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	replayOK(t, j)
	s := j.Steps[0]
	require.Equal(t, StepFailed, s.State)
	require.LessOrEqual(t, len(s.Error.Message), MaxErrorMessageBytes)
	require.Contains(t, s.Error.Message, "truncated from 122880 bytes")
	require.LessOrEqual(t, len(s.Attempts[0].Error.Message), MaxErrorMessageBytes)
	for _, ev := range j.Events {
		require.LessOrEqual(t, len(ev.Detail), MaxEventDetailBytes, ev.Type)
	}
}

func TestExpiredLeaseIsDueAtOnceForBuiltinAfterGraceForWorker(t *testing.T) {
	t.Parallel()
	b := newJob(t, passJob)
	lb := mustLease(t, b, "a", builtin("n"), t0)
	requireDue(t, b, lb.ExpiresAt)
	w := newJob(t, workerJob)
	lw := mustLease(t, w, "a", viaWorker("w1", "n"), t0)
	requireDue(t, w, lw.ExpiresAt.Add(DispatchGrace))

	// The sweep acts on each as due says, whenever it happens to look.
	_, reclaim := b.NeedsSweep(b.Steps[0], lb.ExpiresAt)
	require.True(t, reclaim, "a built-in lease at once")
	_, reclaim = w.NeedsSweep(w.Steps[0], lw.ExpiresAt)
	require.False(t, reclaim, "a worker lease's message comes back first; the next claim reclaims it")
	_, reclaim = w.NeedsSweep(w.Steps[0], lw.ExpiresAt.Add(DispatchGrace))
	require.True(t, reclaim)
}

func TestResumeRunsAWaitingStepAgainOnThePersonsInput(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":[1,2],"steps":[{"id":"a","action":{"type":"worker"}}]}`)
	l := mustLease(t, j, "a", viaWorker("w", "n1"), t0)
	_, err := j.Resume("a", json.RawMessage(`"x"`), at(time.Second))
	requireIllegal(t, err, "step", string(StepRunning), string(StepEvResume))
	require.EqualError(t, err, `step "a" is RUNNING; only a step waiting on a person (NEEDS_USER) can be resumed`)

	_, err = j.Fail("a", l.ID, Failure{Class: ClassNeedsUser, Message: "m", Prompt: "pick one"}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, "pick one", j.Steps[0].Prompt)
	require.Equal(t, JobWaiting, j.State)

	ds, err := j.Resume("a", json.RawMessage(`{"pick":2}`), at(2*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Len(t, ds, 1)
	require.Equal(t, StepPending, j.Steps[0].State)
	require.Equal(t, JobQueued, j.State)
	require.Empty(t, j.Steps[0].Prompt)
	require.JSONEq(t, `{"input":[1,2],"user_input":{"pick":2}}`, string(j.Input(0)), "a non-object input is wrapped")
	mustLease(t, j, "a", viaWorker("w", "n2"), at(3*time.Second))
	require.Equal(t, 2, j.Steps[0].Attempt)

	_, err = j.Resume("zz", nil, at(4*time.Second))
	require.ErrorIs(t, err, ErrNotFound)
}
