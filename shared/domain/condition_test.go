package domain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A critic's verdict decides which branch runs; the join runs on whichever
// did, and reads the skipped one as null.
const verdict = `{"payload":{"task":"t"},"steps":[
	{"id":"review","action":{"type":"worker"}},
	{"id":"ship","action":{"type":"pass"},"depends_on":["review"],"when":"steps.review.output.verdict == 'approve'"},
	{"id":"revise","action":{"type":"worker"},"depends_on":["review"],"when":"steps['review'].output.verdict == 'revise'"},
	{"id":"report","action":{"type":"worker"},"depends_on":["ship","revise"]}]}`

func TestAFalseConditionSkipsItsStepAndWhatDependsOnItGoesOn(t *testing.T) {
	t.Parallel()
	j := newJob(t, verdict)
	l := mustLease(t, j, "review", viaWorker("w", "r1"), t0)
	ds, err := j.Complete("review", l.ID, json.RawMessage(`{"verdict":"approve"}`), at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, map[string]StepState{"review": StepSucceeded, "ship": StepPending, "revise": StepSkipped, "report": StepWaitingDeps}, stepStates(j))
	require.Equal(t, []string{"ship"}, dispatched(ds))

	ls := mustLease(t, j, "ship", builtin("s1"), at(2*time.Second))
	ds, err = j.Complete("ship", ls.ID, json.RawMessage(`"shipped"`), at(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"report"}, dispatched(ds), "a skipped dependency is done")
	require.JSONEq(t, `{"payload":{"task":"t"},"deps":{"ship":"shipped","revise":null}}`, string(j.Input(3)))

	lr := mustLease(t, j, "report", viaWorker("w", "r2"), at(4*time.Second))
	_, err = j.Complete("report", lr.ID, nil, at(5*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	skip := j.Events[slicesIndex(j.Events, func(e Event) bool { return e.Type == "step_skipped" })]
	require.Equal(t, "revise", skip.Step)
	require.Equal(t, "when is false", skip.Detail)
}

func slicesIndex(es []Event, f func(Event) bool) int {
	for i, e := range es {
		if f(e) {
			return i
		}
	}
	return -1
}

// Skipped steps pass on: a chain of them releases what follows at once,
// and in steps in order the next step runs on what the skipped one would
// have.
func TestSkippedStepsInOrderPassTheirInputOn(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"mode":"quick"},"steps":[
		{"id":"a","action":{"type":"worker"}},
		{"id":"deep","action":{"type":"worker"},"when":"payload.mode == 'full'"},
		{"id":"deeper","action":{"type":"worker"},"when":"steps.deep.state == 'SUCCEEDED'"},
		{"id":"z","action":{"type":"worker"}}]}`)
	l := mustLease(t, j, "a", viaWorker("w", "a1"), t0)
	ds, err := j.Complete("a", l.ID, json.RawMessage(`{"a":1}`), at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, []string{"z"}, dispatched(ds))
	require.Equal(t, StepSkipped, j.Steps[1].State)
	require.Equal(t, StepSkipped, j.Steps[2].State)
	require.JSONEq(t, `{"a":1}`, string(j.Input(3)))
}

// A job whose first steps' conditions are false at submit ends at once.
func TestAJobWhoseEveryStepIsSkippedCompletes(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"n":2},"steps":[{"id":"a","action":{"type":"http","url":"https://example.com"},"when":"payload.n > 3"}]}`)
	replayOK(t, j)
	require.Equal(t, StepSkipped, j.Steps[0].State)
	require.Equal(t, JobCompleted, j.State)
	require.Empty(t, j.Runnable())

	j = newJob(t, `{"payload":{"n":4},"steps":[{"id":"a","action":{"type":"http","url":"https://example.com"},"when":"payload.n > 3"}]}`)
	require.Equal(t, StepPending, j.Steps[0].State, "4.0 > 3: JSON numbers compare with ints")
}

// A condition that cannot be decided fails its step without running, and
// so its job, saying why.
func TestAConditionThatCannotBeDecidedFailsItsStep(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{},"steps":[
		{"id":"a","action":{"type":"worker"}},
		{"id":"b","action":{"type":"worker"},"depends_on":["a"],"when":"steps.a.output.verdict == 'ok'"}]}`)
	l := mustLease(t, j, "a", viaWorker("w", "a1"), t0)
	ds, err := j.Complete("a", l.ID, json.RawMessage(`{"other":1}`), at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Empty(t, ds)
	require.Equal(t, StepFailed, j.Steps[1].State)
	require.Empty(t, j.Steps[1].Attempts, "it never ran")
	require.Equal(t, JobFailed, j.State)
	require.Contains(t, j.Error.Message, "when: no such key: verdict")
}

func TestConditionsAreCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, field, says string }{
		{`{"steps":[{"id":"a","action":{"type":"pass"},"when":"payload.n >"}]}`, "steps[0].when", "is not a condition"},
		{`{"steps":[{"id":"a","action":{"type":"pass"},"when":"payload.n + 1"}]}`, "steps[0].when", "must be true or false"},
		{`{"steps":[{"id":"a","action":{"type":"pass"},"when":"   "}]}`, "steps[0].when", "is empty"},
		{`{"steps":[{"id":"a","action":{"type":"pass"},"when":"steps.a.state == 'SKIPPED'"}]}`, "steps[0].when", "depends on no step"},
		{`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}},{"id":"c","action":{"type":"pass"},"when":"steps.a.output == 1"}]}`, "steps[2].when", "names steps.a, which the step does not depend on (it depends on b)"},
		{`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"c","action":{"type":"pass"},"depends_on":["a"],"when":"steps['x-y'].output == 1"}]}`, "steps[1].when", "names steps.x-y"},
		{`{"steps":[{"id":"a","action":{"type":"pass"},"when":"` + strings.Repeat("true && ", 300) + `true"}]}`, "steps[0].when", "the limit is 2048"},
	} {
		_, err := ParseJobSpec([]byte(c.body))
		var de *Error
		require.True(t, errors.As(err, &de), "%s: %v", c.body, err)
		require.Equal(t, c.field, de.Field, c.body)
		require.Contains(t, de.Message, c.says, c.body)
	}
	_, err := ParseJobSpec([]byte(`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"when":"steps.a.output.ok && payload.go"}]}`))
	require.NoError(t, err, "the step before is what a step of steps in order depends on")
}

// A hostile condition is stopped by its cost bound rather than holding an
// executor.
func TestAConditionIsBoundedInCost(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"xs":[1,2,3,4,5,6,7,8,9,10]},"steps":[{"id":"a","action":{"type":"pass"},
		"when":"payload.xs.all(a, payload.xs.all(b, payload.xs.all(c, payload.xs.all(d, payload.xs.all(e, a+b+c+d+e >= 0.0)))))"}]}`)
	replayOK(t, j)
	require.Equal(t, StepFailed, j.Steps[0].State)
	require.Contains(t, j.Steps[0].Error.Message, "cost")
}

// A condition on an output kept in the blob store asks for it
// (NeedDataError) rather than decide without it; given it (Fetched) it
// decides, and told it can never be had (Unfetchable) it fails the step
// saying why.
func TestAConditionOnStoredDataAsksForIt(t *testing.T) {
	t.Parallel()
	body := `{"payload":{},"steps":[
		{"id":"a","action":{"type":"worker"}},
		{"id":"b","action":{"type":"worker"},"depends_on":["a"],"when":"steps.a.output.go"}]}`
	ref := NewDataRef("t/j/a/1", []byte(`{"go":false}`))
	leased := func() (*Job, *Lease) {
		j := newJob(t, body)
		return j, mustLease(t, j, "a", viaWorker("w", "a1"), t0)
	}

	j, l := leased()
	_, err := j.CompleteRef("a", l.ID, ref, at(time.Second))
	var need *NeedDataError
	require.True(t, errors.As(err, &need), "%v", err)
	require.Equal(t, []DataRef{ref}, need.Refs)

	j, l = leased()
	j.Fetched = map[string][]byte{ref.Key: []byte(`{"go":false}`)}
	_, err = j.CompleteRef("a", l.ID, ref, at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, StepSkipped, j.Steps[1].State)
	require.Equal(t, JobCompleted, j.State)

	j, l = leased()
	j.Unfetchable = map[string]string{ref.Key: "its data t/j/a/1 is gone"}
	_, err = j.CompleteRef("a", l.ID, ref, at(time.Second))
	require.NoError(t, err)
	require.Equal(t, StepFailed, j.Steps[1].State)
	require.Equal(t, "when: its data t/j/a/1 is gone", j.Steps[1].Error.Message)
}
