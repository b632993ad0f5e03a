package domain

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDataKeysLieUnderTheJobsPrefix(t *testing.T) {
	t.Parallel()
	prefix := JobDataPrefix("acme", "01JOB")
	require.Equal(t, "acme/01JOB/", prefix)
	require.Equal(t, "acme/01JOB/payload", PayloadKey("acme", "01JOB"))
	require.Equal(t, "acme/01JOB/render/2", OutputKey("acme", "01JOB", "render", 2))
	require.Equal(t, "acme/01JOB/render/2.input", InputKey("acme", "01JOB", "render", 2))
	// A step id a URL path would read as "." or ".." is escaped; one that
	// merely holds dots is not.
	require.Equal(t, "acme/01JOB/%2E/1", OutputKey("acme", "01JOB", ".", 1))
	require.Equal(t, "acme/01JOB/%2E%2E/1", OutputKey("acme", "01JOB", "..", 1))
	require.Equal(t, "acme/01JOB/a..b/1", OutputKey("acme", "01JOB", "a..b", 1))
	// A step named "payload" does not collide with the payload.
	require.NotEqual(t, PayloadKey("acme", "01JOB"), OutputKey("acme", "01JOB", "payload", 1))
	for _, k := range []string{PayloadKey("acme", "01JOB"), OutputKey("acme", "01JOB", "..", 1), InputKey("acme", "01JOB", "x", 3)} {
		require.True(t, strings.HasPrefix(k, prefix), k)
	}
}

func TestDataRefVerifiesWhatWasFetched(t *testing.T) {
	t.Parallel()
	ref := NewDataRef("k", []byte(`{"a":1}`))
	require.Equal(t, 7, ref.Size)
	require.Equal(t, "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862", ref.SHA256)
	require.NoError(t, ref.Verify([]byte(`{"a":1}`)))
	require.ErrorContains(t, ref.Verify([]byte(`{"a":2}`)), "its reference says 7 bytes")
	require.Error(t, ref.Verify([]byte(`{"a":1} `)))
}

// completeRef runs step id of j under a lease and completes it with data
// kept under its output key.
func completeRef(t *testing.T, j *Job, id string, data string) DataRef {
	t.Helper()
	l := mustLease(t, j, id, builtin("n-"+id), t0)
	ref := NewDataRef(OutputKey(j.Tenant, j.ID, id, l.Attempt), []byte(data))
	_, err := j.CompleteRef(id, l.ID, ref, t0)
	require.NoError(t, err)
	replayOK(t, j)
	return ref
}

func TestAReferencedOutputFeedsTheNextStepAsItsReference(t *testing.T) {
	t.Parallel()
	j := newJob(t, threeJob)
	big := `{"big":"` + strings.Repeat("x", 100) + `"}`
	ref := completeRef(t, j, "a", big)
	a := j.Steps[0]
	require.Nil(t, a.Output, "the item holds the reference, not the data")
	require.Equal(t, &ref, a.OutputRef)
	require.Equal(t, &ref, a.Attempts[0].OutputRef)
	require.Nil(t, a.Attempts[0].Output)
	require.Equal(t, "tenant1/job1/a/1", ref.Key)

	in := j.InputData(1)
	require.Equal(t, &ref, in.Ref(), "b's whole input is a's output: its reference, no copy")
	require.Equal(t, []DataRef{ref}, in.Refs())
	require.Equal(t, len(big), in.Size())
	_, err := in.Compose(nil)
	require.ErrorContains(t, err, "was not fetched")
	got, err := in.Compose(map[string][]byte{ref.Key: []byte(big)})
	require.NoError(t, err)
	require.JSONEq(t, big, string(got))

	out, ok := j.OutputData(0)
	require.True(t, ok)
	require.Equal(t, &ref, out.Ref())
	_, ok = j.OutputData(2)
	require.False(t, ok, "c has no output yet")

	// The references survive the store's round trip.
	raw, err := json.Marshal(j)
	require.NoError(t, err)
	var back Job
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, &ref, back.Steps[0].OutputRef)
	require.Equal(t, &ref, back.InputData(1).Ref())
}

func TestADAGInputComposesReferencesWithInlineOutputs(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"p":1},"steps":[
		{"id":"a","action":{"type":"pass"}},
		{"id":"b","action":{"type":"pass"}},
		{"id":"c","action":{"type":"pass"},"depends_on":["a","b"]}]}`)
	ref := completeRef(t, j, "a", `[1,2,3]`)
	l := mustLease(t, j, "b", builtin("b"), t0)
	_, err := j.Complete("b", l.ID, json.RawMessage(`{"small":true}`), t0)
	require.NoError(t, err)

	in := j.InputData(2)
	require.Nil(t, in.Ref(), "a composition is no one reference")
	require.Equal(t, []DataRef{ref}, in.Refs())
	require.GreaterOrEqual(t, in.Size(), ref.Size+len(`{"small":true}`)+len(`{"p":1}`))
	got, err := in.Compose(map[string][]byte{ref.Key: []byte(`[1,2,3]`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"payload":{"p":1},"deps":{"a":[1,2,3],"b":{"small":true}}}`, string(got))
}

func TestAPersonsInputIsAddedToAReferencedInput(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"worker"}}]}`)
	ref := completeRef(t, j, "a", `{"doc":1}`)
	l := mustLease(t, j, "b", viaWorker("w", "b1"), t0)
	_, err := j.Fail("b", l.ID, Failure{Class: ClassNeedsUser, Message: "which?"}, t0, rng())
	require.NoError(t, err)
	_, err = j.Resume("b", json.RawMessage(`"this one"`), t0)
	require.NoError(t, err)

	in := j.InputData(1)
	require.Nil(t, in.Ref(), "the person's answer makes it a composition")
	require.Equal(t, []DataRef{ref}, in.Refs())
	got, err := in.Compose(map[string][]byte{ref.Key: []byte(`{"doc":1}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"doc":1,"user_input":"this one"}`, string(got))
}

func TestAReferencedPayloadIsTheFirstStepsInput(t *testing.T) {
	t.Parallel()
	spec, err := ParseJobSpec([]byte(`{"payload":{"in":1},"steps":[{"id":"nap","action":{"type":"sleep","seconds":0}},{"id":"b","action":{"type":"pass"}}]}`))
	require.NoError(t, err)
	ref := NewDataRef(PayloadKey("tenant1", "job1"), spec.Payload)
	spec.Payload, spec.PayloadRef = nil, &ref
	j, err := NewJob("tenant1", "job1", spec, "", t0)
	require.NoError(t, err)
	replayOK(t, j)
	require.Nil(t, j.Payload)
	require.Equal(t, &ref, j.PayloadRef)
	require.Equal(t, &ref, j.InputData(0).Ref())
	require.Equal(t, &ref, j.Steps[0].OutputRef, "a zero sleep at creation passes the reference on")
	require.Equal(t, &ref, j.InputData(1).Ref())
	require.Zero(t, j.InlineBytes())
}

func TestASleepPassesReferencesOn(t *testing.T) {
	t.Parallel()
	// In order: the sleep's output is the one reference it ran on.
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"nap","action":{"type":"sleep","seconds":0}},{"id":"c","action":{"type":"pass"}}]}`)
	ref := completeRef(t, j, "a", `"big"`)
	nap := j.Steps[1]
	require.Equal(t, StepSucceeded, nap.State)
	require.Equal(t, &ref, nap.OutputRef)
	require.Nil(t, nap.Output)
	require.Equal(t, &ref, j.InputData(2).Ref())

	// In a DAG: its output is its input, composed when read.
	j = newJob(t, `{"payload":{"p":1},"steps":[
		{"id":"a","action":{"type":"pass"}},
		{"id":"nap","action":{"type":"sleep","seconds":5},"depends_on":["a"]},
		{"id":"c","action":{"type":"pass"},"depends_on":["nap"]}]}`)
	ref = completeRef(t, j, "a", `"big"`)
	_, err := j.Fire("nap", at(5*time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	nap = j.Steps[1]
	require.True(t, nap.OutputIsInput)
	require.Nil(t, nap.Output)
	require.Nil(t, nap.OutputRef)
	out, ok := j.OutputData(1)
	require.True(t, ok)
	require.Equal(t, []DataRef{ref}, out.Refs())
	got, err := j.InputData(2).Compose(map[string][]byte{ref.Key: []byte(`"big"`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"payload":{"p":1},"deps":{"nap":{"payload":{"p":1},"deps":{"a":"big"}}}}`, string(got))
}

func TestKeepsInlineBoundsTheJobsInlineData(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"p":1},"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}}]}`)
	require.Equal(t, len(`{"p":1}`), j.InlineBytes())
	require.True(t, j.KeepsInline(DefaultInlineLimit, DefaultInlineLimit), "at the limit stays inline")
	require.False(t, j.KeepsInline(DefaultInlineLimit+1, DefaultInlineLimit))

	out := json.RawMessage(`"` + strings.Repeat("y", 30*1024) + `"`)
	l := mustLease(t, j, "a", builtin("a"), t0)
	_, err := j.Complete("a", l.ID, out, t0)
	require.NoError(t, err)
	require.Equal(t, len(`{"p":1}`)+2*len(out), j.InlineBytes(), "an output counts on its step and its attempt")
	require.False(t, j.KeepsInline(2*1024, 1<<20), "whatever the limit, the job's inline data stays bounded")
	require.True(t, j.KeepsInline(1024, 1<<20))
}

func TestCheckLeaseAnswersWhetherAnOutcomeWouldBeTaken(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	l := mustLease(t, j, "a", viaWorker("w", "n1"), t0)
	require.NoError(t, j.CheckLease("a", l.ID, at(time.Second)))
	require.ErrorIs(t, j.CheckLease("a", l.ID, at(time.Minute)), ErrLeaseLost, "expired")
	require.ErrorIs(t, j.CheckLease("a", "other", at(time.Second)), ErrLeaseLost)
	require.ErrorIs(t, j.CheckLease("zz", l.ID, at(time.Second)), ErrNotFound)
}
