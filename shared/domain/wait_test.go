package domain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func rng() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func TestSleepHoldsTheJobWithoutAnExecutor(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"p":1},"steps":[{"id":"nap","action":{"type":"sleep","seconds":5}},{"id":"after","action":{"type":"pass"}}]}`)
	nap := j.Steps[0]
	require.Equal(t, StepWaiting, nap.State)
	require.Equal(t, JobWaiting, j.State, "a short sleep: WAITING, not PARKED")
	wake := at(5 * time.Second)
	require.Equal(t, &Timer{WakeAt: &wake}, nap.Timer, "not parked")
	require.Equal(t, []Dispatch{{Step: nap, Delay: 5 * time.Second}}, j.Outstanding(t0), "one timer, at the wake time")
	require.Equal(t, at(5*time.Second+DispatchGrace), *j.DueAt, "the sweep backs the timer up")

	_, err := j.Lease("nap", builtin("x"), at(time.Second))
	requireIllegal(t, err, "step", string(StepWaiting), string(StepEvLease))
	_, err = j.Fire("nap", at(4*time.Second))
	var early *NotYetError
	require.ErrorAs(t, err, &early, "an early timer is sent again for the rest")
	require.Equal(t, at(5*time.Second), early.Until)

	ds, err := j.Fire("nap", at(5*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []string{"after"}, dispatched(ds))
	require.Equal(t, StepSucceeded, nap.State)
	require.JSONEq(t, `{"p":1}`, string(nap.Output), "a sleep passes its input on")
	require.Equal(t, JobQueued, j.State)
	require.Equal(t, "wait_completed", j.Events[len(j.Events)-1].Type)

	_, err = j.Fire("nap", at(6*time.Second))
	requireIllegal(t, err, "step", string(StepSucceeded), "timer")
}

func TestLongSleepParksTheJob(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":86400}}]}`)
	require.Equal(t, JobParked, j.State)
	require.True(t, j.Steps[0].Timer.Parked)
	// The formal machine enters Waiting only from Running: the job passes
	// through it in the same write.
	require.Equal(t, []string{"job_created", "step_waiting", "job_running", "job_waiting", "job_parked"}, eventTypes(j.Events))
	n := len(j.Events)
	_, err := j.Fire("nap", at(24*time.Hour))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State, "a parked job completes when its last wait ends")
	require.Equal(t, []string{"step_succeeded", "wait_completed", "job_running", "job_completed"}, eventTypes(j.Events[n:]), "the formal way out of Parked")
}

func TestZeroSleepEndsAtOnce(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":0}},{"id":"b","action":{"type":"pass"}}]}`)
	require.Equal(t, StepSucceeded, j.Steps[0].State)
	require.Equal(t, StepPending, j.Steps[1].State)
	require.Equal(t, JobQueued, j.State)
}

const waitJob = `{"steps":[{"id":"prep","action":{"type":"pass"}},{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":60}},{"id":"after","action":{"type":"pass"}}]}`

func TestWaitResumesOnItsSignal(t *testing.T) {
	t.Parallel()
	j := newJob(t, waitJob)
	l := mustLease(t, j, "prep", builtin("p"), t0)
	ds, err := j.Complete("prep", l.ID, json.RawMessage(`"prepped"`), at(time.Second))
	require.NoError(t, err)
	w := j.Steps[1]
	require.Equal(t, StepWaiting, w.State)
	require.Equal(t, JobWaiting, j.State)
	require.Equal(t, []Dispatch{{Step: w, Delay: 60 * time.Second}}, ds, "the deadline's timer")

	_, changed, err := j.Signal(SignalRequest{Name: "other", Payload: json.RawMessage(`1`)}, at(2*time.Second))
	require.NoError(t, err)
	require.False(t, changed, "a name no wait takes is dropped")
	require.Equal(t, StepWaiting, w.State)

	n := len(j.Events)
	ds, changed, err = j.Signal(SignalRequest{Name: "go", Payload: json.RawMessage(`{"ok":true}`), ID: "sig-1"}, at(3*time.Second))
	require.NoError(t, err)
	require.True(t, changed)
	replayOK(t, j)
	require.Equal(t, []string{"after"}, dispatched(ds))
	require.JSONEq(t, `{"ok":true}`, string(w.Output))
	require.Equal(t, []string{NoteSignalReceived, "step_succeeded", "step_pending", "wait_completed"}, since(j, n))
	require.Equal(t, "w", j.Signals[0].Step)
	require.Equal(t, JobQueued, j.State)

	n = len(j.Events)
	_, changed, err = j.Signal(SignalRequest{Name: "go", ID: "sig-1"}, at(4*time.Second))
	require.NoError(t, err)
	require.False(t, changed, "the same id twice writes nothing")
	require.Len(t, j.Events, n)

	_, err = j.Fire("w", at(time.Hour))
	requireIllegal(t, err, "step", string(StepSucceeded), "timer")
}

func TestSignalBeforeTheWaitIsKept(t *testing.T) {
	t.Parallel()
	j := newJob(t, waitJob)
	_, changed, err := j.Signal(SignalRequest{Name: "go", Payload: json.RawMessage(`"early"`)}, t0)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, NoteSignalReceived, j.Events[len(j.Events)-1].Type)
	require.Equal(t, JobQueued, j.State, "a kept signal moves nothing")

	l := mustLease(t, j, "prep", builtin("p"), at(time.Second))
	ds, err := j.Complete("prep", l.ID, nil, at(2*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, StepSucceeded, j.Steps[1].State, "the wait takes the kept signal at once")
	require.JSONEq(t, `"early"`, string(j.Steps[1].Output))
	require.Equal(t, []string{"after"}, dispatched(ds))
	require.Nil(t, j.Steps[1].Timer)
}

func TestWaitPastItsDeadlineFailsTheJob(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":60}},{"id":"b","action":{"type":"pass"}}]}`)
	require.Equal(t, JobWaiting, j.State)
	_, n, err := j.FireDue(at(59*time.Second), nil)
	require.NoError(t, err)
	require.Zero(t, n)
	_, n, err = j.FireDue(at(60*time.Second), nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	replayOK(t, j)
	require.Equal(t, map[string]StepState{"w": StepFailed, "b": StepCancelled}, stepStates(j))
	require.Equal(t, ClassTimeout, j.Steps[0].Error.Class)
	require.Contains(t, j.Steps[0].Error.Message, `no signal "go"`)
	require.Equal(t, JobFailed, j.State)
	_, _, err = j.Signal(SignalRequest{Name: "go"}, at(61*time.Second))
	requireIllegal(t, err, "job", string(JobFailed), "signal go")
	require.EqualError(t, err, "the job is FAILED; only a job that has not finished takes signals")
}

func TestWaitWithoutDeadlineParksAndIsNeverDue(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go"}}]}`)
	require.Equal(t, JobParked, j.State)
	require.Nil(t, j.DueAt, "nothing polls a parked job")
	require.Equal(t, &Timer{Parked: true}, j.Steps[0].Timer, "parked, with no instant to end it")
	_, _, err := j.Signal(SignalRequest{Name: "go"}, at(time.Hour))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	require.Nil(t, j.Steps[0].Timer)
	require.JSONEq(t, `null`, string(j.Steps[0].Output))
}

func TestParkedBranchBesideRunnableWorkIsWaiting(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go"}},{"id":"b","action":{"type":"worker"}},{"id":"c","action":{"type":"pass"},"depends_on":["w","b"]}]}`)
	require.Equal(t, JobWaiting, j.State, "b can still run: not parked")
	l := mustLease(t, j, "b", viaWorker("x", "b1"), t0)
	require.Equal(t, JobRunning, j.State)
	_, err := j.Complete("b", l.ID, nil, at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobParked, j.State, "only the parked wait is left")
	ds, _, err := j.Signal(SignalRequest{Name: "go"}, at(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, dispatched(ds))
	require.Equal(t, JobQueued, j.State)
	replayOK(t, j)
}

// Only a signal some wait of the job can take is kept, one per such wait:
// a flood of other names writes nothing and cannot lock out the wait's own.
func TestUnknownSignalsCannotLockOutTheWait(t *testing.T) {
	t.Parallel()
	j := newJob(t, waitJob)
	n := len(j.Events)
	for k := range 100 {
		_, o, err := j.Deliver(SignalRequest{Name: fmt.Sprint("junk-", k)}, t0)
		require.NoError(t, err)
		require.Equal(t, SignalDropped, o.Outcome)
		require.Contains(t, o.Reason, "no wait step of this job")
	}
	require.Empty(t, j.Signals)
	require.Len(t, j.Events, n, "a dropped signal writes nothing")

	_, o, err := j.Deliver(SignalRequest{Name: "go", Payload: json.RawMessage(`"early"`)}, t0)
	require.NoError(t, err)
	require.Equal(t, SignalKept, o.Outcome)
	_, o, err = j.Deliver(SignalRequest{Name: "go", Payload: json.RawMessage(`"twice"`)}, t0)
	require.NoError(t, err)
	require.Equal(t, SignalDropped, o.Outcome, "the one wait for go has its signal kept")
	require.Contains(t, o.Reason, "has a signal kept already")

	l := mustLease(t, j, "prep", builtin("p"), at(time.Second))
	_, err = j.Complete("prep", l.ID, nil, at(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, StepSucceeded, j.Steps[1].State)
	require.JSONEq(t, `"early"`, string(j.Steps[1].Output))
	replayOK(t, j)
}

// A wait a fail action's replan would add takes a signal kept for it.
func TestSignalForAWaitAReplanWouldAddIsKept(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"x","action":{"type":"fail","class":"replan","steps":[{"id":"w","action":{"type":"wait","signal":"later"}}]}}]}`)
	_, o, err := j.Deliver(SignalRequest{Name: "later"}, t0)
	require.NoError(t, err)
	require.Equal(t, SignalKept, o.Outcome)
	_, o, err = j.Deliver(SignalRequest{Name: "sooner"}, t0)
	require.NoError(t, err)
	require.Equal(t, SignalDropped, o.Outcome)
}

// The kept signals stay bounded for a job with more waits than the bound.
func TestKeptSignalsAreBounded(t *testing.T) {
	t.Parallel()
	steps := []string{`{"id":"prep","action":{"type":"pass"}}`}
	for k := range MaxKeptSignals + 1 {
		steps = append(steps, fmt.Sprintf(`{"id":"w%d","action":{"type":"wait","signal":"go"}}`, k))
	}
	j := newJob(t, `{"steps":[`+strings.Join(steps, ",")+`]}`)
	for range MaxKeptSignals {
		_, o, err := j.Deliver(SignalRequest{Name: "go"}, t0)
		require.NoError(t, err)
		require.Equal(t, SignalKept, o.Outcome)
	}
	_, _, err := j.Signal(SignalRequest{Name: "go"}, t0)
	require.Equal(t, CodeConflict, CodeOf(err))
	replayOK(t, j)
}

func TestRunAtHoldsEveryFirstStep(t *testing.T) {
	t.Parallel()
	spec, err := ParseJobSpec([]byte(`{"run_at":"` + at(time.Minute).Format(time.RFC3339) + `","steps":[{"id":"a","action":{"type":"pass"}},{"id":"g","action":{"type":"approval"}},{"id":"c","action":{"type":"pass"},"depends_on":["a","g"]}]}`))
	require.NoError(t, err)
	j, err := NewJob("t", "job1", spec, "", t0)
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobQueued, j.State)
	require.Equal(t, StepPending, j.Steps[1].State, "the gate does not open before run_at")
	out := j.Outstanding(t0)
	require.Equal(t, []string{"a", "g"}, dispatched(out))
	require.Equal(t, time.Minute, out[0].Delay)

	_, err = j.Lease("a", builtin("a"), at(59*time.Second))
	var early *NotYetError
	require.ErrorAs(t, err, &early)
	_, err = j.Fire("g", at(59*time.Second))
	require.ErrorAs(t, err, &early)

	mustLease(t, j, "a", builtin("a"), at(time.Minute))
	_, err = j.Fire("g", at(time.Minute))
	require.NoError(t, err)
	require.Equal(t, StepNeedsUser, j.Steps[1].State)
	replayOK(t, j)
}

func TestCancelReachesWaitsSleepsAndGates(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":600}},{"id":"s","action":{"type":"sleep","seconds":100}},{"id":"g","action":{"type":"approval","timeout_seconds":60}},{"id":"r","action":{"type":"worker"}},{"id":"p","action":{"type":"wait","signal":"late"}},{"id":"z","action":{"type":"pass"},"depends_on":["w","s","g","r","p"]}]}`)
	l := mustLease(t, j, "r", viaWorker("x", "r1"), t0)
	deadline, wake, gate := at(600*time.Second), at(100*time.Second), at(60*time.Second)
	require.Equal(t, []*Timer{{Deadline: &deadline}, {WakeAt: &wake}, {Deadline: &gate}, nil, {Parked: true}, nil}, timers(j))
	changed, err := j.Cancel(at(time.Second))
	require.NoError(t, err)
	require.True(t, changed)
	replayOK(t, j)
	require.Equal(t, map[string]StepState{"w": StepCancelled, "s": StepCancelled, "g": StepCancelled, "r": StepCancelled, "p": StepCancelled, "z": StepCancelled}, stepStates(j))
	require.Equal(t, []*Timer{nil, nil, nil, nil, {Parked: true}, nil}, timers(j), "no timer is left; a parked wait still says it was")
	require.True(t, j.Steps[3].CancelledUnder(l.ID, at(2*time.Second)), "the running worker hears cancel_requested")
	for _, id := range []string{"w", "s", "g"} {
		_, err := j.Fire(id, at(time.Hour))
		requireIllegal(t, err, "step", string(StepCancelled), "timer")
	}
	_, n, err := j.FireDue(at(time.Hour), nil)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Nil(t, j.DueAt)
}

func timers(j *Job) []*Timer {
	out := make([]*Timer, len(j.Steps))
	for i, s := range j.Steps {
		out[i] = s.Timer
	}
	return out
}

func TestRedriveRunsTheFailedPartAgain(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"worker"},"depends_on":["a"],"retry":{"max_attempts":2}},{"id":"c","action":{"type":"worker"},"depends_on":["a"]},{"id":"d","action":{"type":"pass"},"depends_on":["b","c"]}]}`)
	_, err := j.Redrive(t0)
	requireIllegal(t, err, "job", string(JobQueued), "redrive (only a FAILED job is redriven)")
	require.EqualError(t, err, "the job is QUEUED; only a FAILED job can be redriven")

	la := mustLease(t, j, "a", builtin("a"), t0)
	_, err = j.Complete("a", la.ID, json.RawMessage(`"A"`), at(time.Second))
	require.NoError(t, err)
	lb := mustLease(t, j, "b", viaWorker("x", "b1"), at(2*time.Second))
	_, err = j.Fail("b", lb.ID, Failure{Class: ClassRetryable, Message: "1"}, at(3*time.Second), rng())
	require.NoError(t, err)
	lb = mustLease(t, j, "b", viaWorker("x", "b2"), at(10*time.Second))
	_, err = j.Fail("b", lb.ID, Failure{Class: ClassRetryable, Message: "2"}, at(11*time.Second), rng())
	require.NoError(t, err)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, map[string]StepState{"a": StepSucceeded, "b": StepFailed, "c": StepCancelled, "d": StepCancelled}, stepStates(j))
	require.NotNil(t, j.ExpiresAt)

	n := len(j.Events)
	ds, err := j.Redrive(at(time.Hour))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, "job_requeued", j.Events[n].Type)
	require.Equal(t, []string{"b", "c"}, dispatched(ds))
	require.Equal(t, map[string]StepState{"a": StepSucceeded, "b": StepPending, "c": StepPending, "d": StepWaitingDeps}, stepStates(j))
	require.Equal(t, JobQueued, j.State)
	require.Nil(t, j.ExpiresAt, "retention waits for the new end")
	require.Nil(t, j.EndedAt)
	require.JSONEq(t, `{"payload":{},"deps":{"a":"A"}}`, string(j.Input(1)), "what succeeded feeds the re-run")

	lb = mustLease(t, j, "b", viaWorker("x", "b3"), at(time.Hour+time.Second))
	require.Equal(t, 3, lb.Attempt, "attempts number on")
	_, err = j.Fail("b", lb.ID, Failure{Class: ClassRetryable, Message: "3"}, at(time.Hour+2*time.Second), rng())
	require.NoError(t, err)
	require.Equal(t, StepRetrying, j.Steps[1].State, "a fresh retry budget")
	lb = mustLease(t, j, "b", viaWorker("x", "b4"), at(2*time.Hour))
	_, err = j.Complete("b", lb.ID, nil, at(2*time.Hour))
	require.NoError(t, err)
	lc := mustLease(t, j, "c", viaWorker("x", "c1"), at(2*time.Hour))
	_, err = j.Complete("c", lc.ID, nil, at(2*time.Hour))
	require.NoError(t, err)
	ld := mustLease(t, j, "d", builtin("d"), at(2*time.Hour))
	_, err = j.Complete("d", ld.ID, nil, at(2*time.Hour))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	require.Equal(t, 1, j.Steps[0].Attempt, "a never ran again")
}

func TestReplanPutsNewStepsInPlace(t *testing.T) {
	t.Parallel()
	// In order: a, plan, z. plan is replaced by x and y (y after x); z then
	// waits for y.
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"plan","action":{"type":"worker"}},{"id":"z","action":{"type":"pass"}}]}`)
	la := mustLease(t, j, "a", builtin("a"), t0)
	_, err := j.Complete("a", la.ID, nil, at(time.Second))
	require.NoError(t, err)
	lp := mustLease(t, j, "plan", viaWorker("x", "p"), at(2*time.Second))
	steps := []StepSpec{
		{ID: "x", Action: ActionSpec{Type: ActionPass}},
		{ID: "y", Action: ActionSpec{Type: ActionPass}, DependsOn: []string{"x"}},
	}
	require.NoError(t, ValidateSteps(steps, "steps", "default"))
	ds, err := j.Fail("plan", lp.ID, Failure{Class: ClassReplan, Message: "split it", Steps: steps}, at(3*time.Second), rng())
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []string{"x"}, dispatched(ds))
	require.Equal(t, map[string]StepState{"a": StepSucceeded, "plan": StepFailed, "z": StepWaitingDeps, "x": StepPending, "y": StepWaitingDeps}, stepStates(j))
	require.Equal(t, []string{"x", "y"}, j.Steps[1].ReplacedBy)
	require.Equal(t, []string{"y"}, j.Steps[2].Spec.DependsOn)
	require.Equal(t, []string{"a"}, j.Steps[3].Spec.DependsOn, "x takes plan's dependencies")
	require.NotEqual(t, JobFailed, j.State, "a replanned step does not fail the job")
	require.Contains(t, eventTypes(j.Events), NoteReplanned)

	for _, id := range []string{"x", "y", "z"} {
		l := mustLease(t, j, id, builtin(id), at(4*time.Second))
		_, err := j.Complete(id, l.ID, nil, at(4*time.Second))
		require.NoError(t, err)
	}
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
}

func TestReplanIsChecked(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}}]}`)
	for _, tc := range []struct {
		name  string
		steps []StepSpec
		field string
	}{
		{"id taken", []StepSpec{{ID: "b"}}, "steps[0].id"},
		{"on the replanned step", []StepSpec{{ID: "x", DependsOn: []string{"a"}}}, "steps[0].depends_on[0]"},
		{"unknown dependency", []StepSpec{{ID: "x", DependsOn: []string{"nope"}}}, "steps[0].depends_on[0]"},
	} {
		err := j.CheckReplan("a", tc.steps, "steps")
		var de *Error
		require.ErrorAs(t, err, &de, tc.name)
		require.Equal(t, CodeInvalid, de.Code, tc.name)
		require.Equal(t, tc.field, de.Field, tc.name)
	}
}

func TestRetentionPerTerminalState(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		r    Retention
		body string
		want time.Duration
	}{
		{"completed, default", Retention{}, `{"steps":[{"id":"p","action":{"type":"pass"}}]}`, 30 * 24 * time.Hour},
		{"completed, configured", Retention{CompletedDays: 2}, `{"steps":[{"id":"p","action":{"type":"pass"}}]}`, 2 * 24 * time.Hour},
		{"failed, configured", Retention{FailedDays: 3}, `{"steps":[{"id":"p","action":{"type":"fail","class":"fatal"}}]}`, 3 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := ParseJobSpec([]byte(tc.body))
			require.NoError(t, err)
			spec.Retention = tc.r
			j, err := NewJob("t", "01J0000000000000000000000A", spec, "", now)
			require.NoError(t, err)
			l, err := j.Lease("p", LeaseRequest{Nonce: "n", Duration: time.Minute}, now)
			require.NoError(t, err)
			if spec.Steps[0].Action.Type == ActionPass {
				_, err = j.Complete("p", l.ID, nil, now)
			} else {
				_, err = j.Fail("p", l.ID, Failure{Class: ClassFatal}, now, nil)
			}
			require.NoError(t, err)
			require.True(t, j.State.Terminal())
			require.Equal(t, now.Add(tc.want), *j.ExpiresAt)
		})
	}
}

// A signal that ended its job, sent again with its id (its answer was
// lost), is answered as delivered, not refused as late.
// A repeat of a delivered signal, by the sender's id or by the engine's
// request id (a write that landed though its answer was lost), writes
// nothing even once the signal ended the job; another signal is refused.
func TestRepeatedSignalAfterTheJobEnded(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]func(k string) SignalRequest{
		"by the sender's id":         func(k string) SignalRequest { return SignalRequest{Name: "go", ID: k} },
		"by the engine's request id": func(k string) SignalRequest { return SignalRequest{Name: "go", Request: k} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go"}}]}`)
			_, changed, err := j.Signal(req("s-1"), t0)
			require.NoError(t, err)
			require.True(t, changed)
			require.Equal(t, JobCompleted, j.State)
			_, changed, err = j.Signal(req("s-1"), at(time.Second))
			require.NoError(t, err)
			require.False(t, changed)
			_, _, err = j.Signal(req("s-2"), at(time.Second))
			var ite *IllegalTransitionError
			require.ErrorAs(t, err, &ite, "a new signal to a finished job is refused")
			replayOK(t, j)
		})
	}
}
