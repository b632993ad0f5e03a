package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A step's input expression builds what it runs on from the payload and
// its dependencies; its output expression keeps part of its result.
func TestShapedInputAndOutput(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"site":"a.example","tries":3},"steps":[
		{"id":"critic","action":{"type":"worker"},"output":"{'verdict': output.review.verdict, 'notes': size(output.review.notes)}"},
		{"id":"fix","action":{"type":"worker"},"depends_on":["critic"],
		 "input":"{'url': 'https://' + payload.site, 'verdict': steps.critic.output.verdict, 'budget': payload.tries * 2.0}"}]}`)
	l := mustLease(t, j, "critic", viaWorker("w", "c1"), t0)
	out := json.RawMessage(`{"review":{"verdict":"revise","notes":["a","b"]},"raw":"long text"}`)
	shaped, err := ShapeOutput(j.Steps[0], out)
	require.NoError(t, err)
	require.JSONEq(t, `{"verdict":"revise","notes":2}`, string(shaped))
	_, err = j.Complete("critic", l.ID, shaped, at(time.Second))
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"https://a.example","verdict":"revise","budget":6}`, string(j.Input(1)))

	unshaped, err := ShapeOutput(j.Steps[1], out)
	require.NoError(t, err)
	require.JSONEq(t, string(out), string(unshaped), "no output expression: the output as it is")
}

// An expression that cannot be evaluated is a ShapeError, which the
// engine fails the attempt with.
func TestAShapeThatCannotBeEvaluated(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{},"steps":[{"id":"a","action":{"type":"worker"},"input":"{'x': payload.missing}","output":"output.a.b"}]}`)
	var se *ShapeError
	_, err := j.InputData(0).Compose(nil)
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, "input: no such key: missing", se.Error())
	_, err = ShapeOutput(j.Steps[0], json.RawMessage(`{"a":1}`))
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, "output", se.Field)
}

func TestShapesAreCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, field, says string }{
		{`{"steps":[{"id":"a","action":{"type":"pass"},"input":"{'x': "}]}`, "steps[0].input", "is not an expression"},
		{`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"depends_on":["a"],"input":"steps.z.output"}]}`, "steps[1].input", "names steps.z, which the step does not depend on"},
		{`{"steps":[{"id":"a","action":{"type":"pass"},"output":"payload.x"}]}`, "steps[0].output", "undeclared reference to 'payload'"},
		{`{"steps":[{"id":"a","action":{"type":"sleep","seconds":1},"input":"payload"}]}`, "steps[0].input", "does not apply to action type \"sleep\""},
		{`{"steps":[{"id":"a","action":{"type":"approval"},"output":"output"}]}`, "steps[0].output", "does not apply to action type \"approval\""},
	} {
		_, err := ParseJobSpec([]byte(c.body))
		var de *Error
		require.True(t, errors.As(err, &de), "%s: %v", c.body, err)
		require.Equal(t, c.field, de.Field, c.body)
		require.Contains(t, de.Message, c.says, c.body)
	}
}
