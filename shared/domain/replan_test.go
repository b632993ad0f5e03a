package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pass is a pass step spec that depends on deps.
func passAfter(id string, deps ...string) StepSpec {
	return StepSpec{ID: id, Action: ActionSpec{Type: ActionPass}, DependsOn: deps}
}

func requireField(t *testing.T, err error, field, name string) {
	t.Helper()
	var de *Error
	require.ErrorAs(t, err, &de, name)
	require.Equal(t, CodeInvalid, de.Code, name)
	require.Equal(t, field, de.Field, name)
}

// A replan is checked on the graph as it will be once the replaced step's
// dependents wait on the new steps: a new step that depends on one of
// them, directly or down a chain, would close a cycle.
func TestReplanThatClosesACycleIsRefused(t *testing.T) {
	t.Parallel()
	// x -> y -> z -> w (each on the one before); u stands apart.
	dag := newJob(t, `{"steps":[{"id":"x","action":{"type":"worker"}},{"id":"y","action":{"type":"pass"},"depends_on":["x"]},{"id":"z","action":{"type":"pass"},"depends_on":["y"]},{"id":"w","action":{"type":"pass"},"depends_on":["z"]},{"id":"u","action":{"type":"pass"}}]}`)
	inOrder := newJob(t, `{"steps":[{"id":"x","action":{"type":"worker"}},{"id":"y","action":{"type":"pass"}},{"id":"z","action":{"type":"pass"}}]}`)
	for _, tc := range []struct {
		name  string
		j     *Job
		steps []StepSpec
		field string // "" when the replan is fine
	}{
		{"depth 1", dag, []StepSpec{passAfter("n", "y")}, "steps[0].depends_on[0]"},
		{"depth 3", dag, []StepSpec{passAfter("n", "w")}, "steps[0].depends_on[0]"},
		{"depth 3, not a sink", dag, []StepSpec{passAfter("m"), passAfter("n", "u", "w"), passAfter("o", "n", "m")}, "steps[1].depends_on[1]"},
		{"in order", inOrder, []StepSpec{passAfter("n", "z")}, "steps[0].depends_on[0]"},
		{"beside", dag, []StepSpec{passAfter("n", "u"), passAfter("o", "n")}, ""},
	} {
		err := tc.j.CheckReplan("x", tc.steps, "steps")
		if tc.field == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		requireField(t, err, tc.field, tc.name)
		require.Contains(t, err.Error(), "cycle", tc.name)
	}
}

// A replan may take a job to MaxSteps steps, the replaced one counted,
// and no further.
func TestReplanIsBoundByMaxSteps(t *testing.T) {
	t.Parallel()
	steps := make([]string, MaxSteps-1)
	steps[0] = `{"id":"s0","action":{"type":"worker"}}`
	for i := 1; i < len(steps); i++ {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"pass"}}`, i)
	}
	j := newJob(t, `{"steps":[`+strings.Join(steps, ",")+`]}`)
	require.NoError(t, j.CheckReplan("s0", []StepSpec{passAfter("n")}, "steps"))
	err := j.CheckReplan("s0", []StepSpec{passAfter("n"), passAfter("m")}, "steps")
	requireField(t, err, "steps", "past MaxSteps")
	require.Contains(t, err.Error(), fmt.Sprintf("would give the job %d steps; the limit is %d", MaxSteps+1, MaxSteps))
}

// What the check lets through is what the replan stores: the job's graph
// after the replan has no cycle and runs to its end.
func TestReplanStoresTheGraphItChecked(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"x","action":{"type":"worker"}},{"id":"y","action":{"type":"pass"},"depends_on":["x"]},{"id":"u","action":{"type":"pass"}}]}`)
	l := mustLease(t, j, "x", viaWorker("w", "p"), t0)
	steps := []StepSpec{passAfter("n", "u")}
	require.NoError(t, ValidateSteps(steps, "steps", "default"))
	_, err := j.Fail("x", l.ID, Failure{Class: ClassReplan, Message: "split", Steps: steps}, at(time.Second), rng())
	require.NoError(t, err)
	index := map[string]int{}
	for i, s := range j.Steps {
		index[s.ID()] = i
	}
	require.Empty(t, onCycle(j.specs(), index))
	require.Equal(t, []string{"n"}, j.Steps[1].Spec.DependsOn)
}

// A fail action's replan is checked at submit on the job as it will be
// when it happens, and so is a replan that replan carries.
func TestFailActionReplanThatClosesACycleIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, field string }{
		{"depth 1", `{"steps":[
			{"id":"x","action":{"type":"fail","class":"replan","steps":[{"id":"n","action":{"type":"pass"},"depends_on":["y"]}]}},
			{"id":"y","action":{"type":"pass"},"depends_on":["x"]}]}`, "steps[0].action.steps[0].depends_on[0]"},
		{"in order, depth 2", `{"steps":[
			{"id":"x","action":{"type":"fail","class":"replan","steps":[{"id":"n","action":{"type":"pass"},"depends_on":["z"]}]}},
			{"id":"y","action":{"type":"pass"}},{"id":"z","action":{"type":"pass"}}]}`, "steps[0].action.steps[0].depends_on[0]"},
		{"a replan's replan", `{"steps":[
			{"id":"x","action":{"type":"fail","class":"replan","steps":[
				{"id":"n","action":{"type":"fail","class":"replan","steps":[{"id":"m","action":{"type":"pass"},"depends_on":["z"]}]}},
				{"id":"o","action":{"type":"pass"},"depends_on":["n"]}]}},
			{"id":"y","action":{"type":"pass"},"depends_on":["x"]},
			{"id":"z","action":{"type":"pass"},"depends_on":["y"]}]}`, "steps[0].action.steps[0].action.steps[0].depends_on[0]"},
		{"a replan's replan naming an unknown step", `{"steps":[
			{"id":"x","action":{"type":"fail","class":"replan","steps":[
				{"id":"n","action":{"type":"fail","class":"replan","steps":[{"id":"m","action":{"type":"pass"},"depends_on":["nope"]}]}}]}}]}`,
			"steps[0].action.steps[0].action.steps[0].depends_on[0]"},
	} {
		_, err := ParseJobSpec([]byte(tc.body))
		requireField(t, err, tc.field, tc.name)
	}
	// The same replans, on steps that do not run after x, are fine.
	_, err := ParseJobSpec([]byte(`{"steps":[
		{"id":"u","action":{"type":"pass"}},
		{"id":"x","action":{"type":"fail","class":"replan","steps":[
			{"id":"n","action":{"type":"fail","class":"replan","steps":[{"id":"m","action":{"type":"pass"},"depends_on":["u"]}]}},
			{"id":"o","action":{"type":"pass"},"depends_on":["n"]}]}},
		{"id":"y","action":{"type":"pass"},"depends_on":["x"]}]}`))
	require.NoError(t, err)
}

// A fail action's replan that cannot join when it happens (it names a
// step only another replan adds) ends its step, and the job, FAILED with
// the reason, instead of leaving the outcome unrecorded.
func TestRefusedFailActionReplanFailsTheJob(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"x","action":{"type":"fail","class":"replan"}},{"id":"y","action":{"type":"pass"},"depends_on":["x"]}]}`)
	l := mustLease(t, j, "x", builtin("x"), t0)
	_, err := j.Fail("x", l.ID, Failure{Class: ClassReplan, Message: "again", Steps: []StepSpec{passAfter("n", "y")}}, at(time.Second), rng())
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobFailed, j.State)
	require.Contains(t, j.Steps[0].Error.Message, "its replan was refused: steps[0].depends_on[0]")
	require.Nil(t, j.Steps[0].ReplacedBy)
	require.Len(t, j.Steps, 2)
}
