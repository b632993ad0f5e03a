package domain

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const diamond = `{"payload":{"n":1},"steps":[
	{"id":"a","action":{"type":"pass"}},
	{"id":"b","action":{"type":"worker"},"depends_on":["a"]},
	{"id":"c","action":{"type":"worker"},"depends_on":["a"]},
	{"id":"d","action":{"type":"pass"},"depends_on":["b","c"]}]}`

func stepStates(j *Job) map[string]StepState {
	out := map[string]StepState{}
	for _, s := range j.Steps {
		out[s.ID()] = s.State
	}
	return out
}

func dispatched(ds []Dispatch) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Step.ID())
	}
	return out
}

func TestDiamondRunsBranchesTogetherAndJoinsLast(t *testing.T) {
	t.Parallel()
	j := newJob(t, diamond)
	require.Equal(t, map[string]StepState{"a": StepPending, "b": StepWaitingDeps, "c": StepWaitingDeps, "d": StepWaitingDeps}, stepStates(j))
	require.Equal(t, []*Step{j.Steps[0]}, j.Runnable())
	_, err := j.Lease("b", viaWorker("w", "early"), t0)
	requireIllegal(t, err, "step", string(StepWaitingDeps), string(StepEvLease))

	la := mustLease(t, j, "a", builtin("a1"), t0)
	ds, err := j.Complete("a", la.ID, json.RawMessage(`{"a":1}`), at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []string{"b", "c"}, dispatched(ds), "fan-out: both at once")

	lb := mustLease(t, j, "b", viaWorker("w1", "b1"), at(2*time.Second))
	lc := mustLease(t, j, "c", viaWorker("w2", "c1"), at(2*time.Second))
	require.JSONEq(t, `{"payload":{"n":1},"deps":{"a":{"a":1}}}`, string(j.Input(1)))

	ds, err = j.Complete("b", lb.ID, json.RawMessage(`"B"`), at(3*time.Second))
	require.NoError(t, err)
	require.Empty(t, ds, "d still waits for c")
	require.Equal(t, StepWaitingDeps, j.Steps[3].State)
	ds, err = j.Complete("c", lc.ID, json.RawMessage(`"C"`), at(4*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, dispatched(ds), "fan-in: d once both are done")
	require.JSONEq(t, `{"payload":{"n":1},"deps":{"b":"B","c":"C"}}`, string(j.Input(3)))

	ld := mustLease(t, j, "d", builtin("d1"), at(5*time.Second))
	_, err = j.Complete("d", ld.ID, nil, at(6*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
}

func TestAFailedBranchCancelsTheRestAndFencesItsSibling(t *testing.T) {
	t.Parallel()
	j := newJob(t, diamond)
	la := mustLease(t, j, "a", builtin("a1"), t0)
	_, err := j.Complete("a", la.ID, nil, at(time.Second))
	require.NoError(t, err)
	lb := mustLease(t, j, "b", viaWorker("w1", "b1"), at(2*time.Second))
	lc := mustLease(t, j, "c", viaWorker("w2", "c1"), at(2*time.Second))

	_, err = j.Fail("b", lb.ID, Failure{Class: ClassFatal, Message: "broken"}, at(3*time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, map[string]StepState{"a": StepSucceeded, "b": StepFailed, "c": StepCancelled, "d": StepCancelled}, stepStates(j))
	c := j.Steps[2]
	require.Equal(t, AttemptCancelled, c.Attempts[0].State)
	require.True(t, c.CancelledUnder(lc.ID, at(4*time.Second)), "its worker hears cancel_requested")
	_, err = j.Complete("c", lc.ID, nil, at(4*time.Second))
	require.ErrorIs(t, err, ErrLeaseLost, "its late outcome is refused")
	require.Nil(t, j.DueAt)
}

func TestAFailedStepInOrderCancelsTheStepsAfterIt(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}},{"id":"c","action":{"type":"pass"}}]}`)
	l := mustLease(t, j, "a", builtin("a1"), t0)
	_, err := j.Fail("a", l.ID, Failure{Class: ClassFatal, Message: "no"}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, map[string]StepState{"a": StepFailed, "b": StepCancelled, "c": StepCancelled}, stepStates(j))
}

// In a DAG one branch may run while another waits on a person: the job is
// Running, then Waiting, then Running again, through Queued
// (wait_completed, then job_leased), as the formal machine leaves Waiting.
func TestABranchRunsWhileAnotherWaitsOnAPerson(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"b","action":{"type":"worker"}},{"id":"c","action":{"type":"worker"}},{"id":"d","action":{"type":"pass"},"depends_on":["b","c"]}]}`)
	lc := mustLease(t, j, "c", viaWorker("w", "c1"), t0)
	_, err := j.Fail("c", lc.ID, Failure{Class: ClassNeedsUser, Message: "which one?"}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, JobWaiting, j.State)
	n := len(j.Events)
	mustLease(t, j, "b", viaWorker("w", "b1"), at(2*time.Second))
	require.Equal(t, JobRunning, j.State)
	require.Equal(t, []string{"step_leased", "step_running", "wait_completed", "job_leased"}, eventTypes(j.Events[n:]))
	replayOK(t, j)
}

func TestDependsOnIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, field, msg string }{
		{"unknown", `{"steps":[{"id":"a","action":{"type":"pass"},"depends_on":["zz"]}]}`, "steps[0].depends_on[0]", `names no step of this job: "zz"`},
		{"self", `{"steps":[{"id":"a","action":{"type":"pass"},"depends_on":["a"]}]}`, "steps[0].depends_on[0]", "cannot depend on itself"},
		{"twice", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"depends_on":["a","a"]}]}`, "steps[1].depends_on[1]", "twice"},
		{"cycle", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"depends_on":["a","c"]},{"id":"c","action":{"type":"pass"},"depends_on":["b"]},{"id":"d","action":{"type":"pass"},"depends_on":["c"]}]}`, "steps", "steps b, c, d can never start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseJobSpec([]byte(tc.body))
			var de *Error
			require.ErrorAs(t, err, &de)
			require.Equal(t, CodeInvalid, de.Code)
			require.Equal(t, tc.field, de.Field)
			require.Contains(t, de.Message, tc.msg)
		})
	}
}
