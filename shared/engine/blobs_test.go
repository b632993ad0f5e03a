package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// flakyBlobs fails the next Gets on demand: S3 answering 5xx.
type flakyBlobs struct {
	*memory.Blobs
	failGets atomic.Int32
}

func (f *flakyBlobs) Get(ctx context.Context, key string) ([]byte, error) {
	if f.failGets.Add(-1) >= 0 {
		return nil, errors.New("injected: S3 answered 503")
	}
	f.failGets.Store(0)
	return f.Blobs.Get(ctx, key)
}

// measuringRunner answers, for a step whose id is "measure", the size and
// SHA-256 of the input it was handed (a built-in action that takes any
// input, as http does); other steps run as usual.
type measuringRunner struct{ engine.Actions }

func (r measuringRunner) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	if c.Spec.ID != "measure" {
		return r.Actions.Run(ctx, c)
	}
	ref := domain.NewDataRef("", c.Input)
	return json.RawMessage(fmt.Sprintf(`{"size":%d,"sha256":%q}`, ref.Size, ref.SHA256)), nil
}

// withBlobs gives the bundle's engine an in-memory blob store on its clock.
func withBlobs(t *testing.T) (*bundle, *flakyBlobs) {
	t.Helper()
	b := setup(t)
	blobs := &flakyBlobs{Blobs: memory.NewBlobs(b.clock.Now)}
	b.e.Configure(func(c *engine.Config) { c.Blobs, c.Runner = blobs, measuringRunner{c.Runner} })
	return b, blobs
}

// bigJSON answers a JSON string of n bytes that does not compress.
func bigJSON(t *testing.T, n int) json.RawMessage {
	t.Helper()
	raw := make([]byte, (n-2)/2)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return json.RawMessage(`"` + hex.EncodeToString(raw) + `"`)
}

func wholeOutput(t *testing.T, b *bundle, tenant, id, step string) json.RawMessage {
	t.Helper()
	out, err := b.e.Output(b.ctx, tenant, id, step, func(json.RawMessage) bool { return true })
	require.NoError(t, err)
	require.Empty(t, out.URL)
	return out.Data
}

func TestALargeWorkerOutputIsStoredAndItsDependentRunsOnItWhole(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}},{"id":"measure","action":{"type":"http","url":"https://example.com/measure"}}]}`)
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 1)
	big := bigJSON(t, 900*1024)
	res, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, big)
	require.NoError(t, err)
	require.Equal(t, domain.StepSucceeded, res.StepState)

	got := b.job(t, tenantA, j.ID)
	render := got.Steps[0]
	require.Nil(t, render.Output, "the job holds a reference, not 900 KB")
	want := domain.NewDataRef(domain.OutputKey(tenantA, j.ID, "render", 1), big)
	require.Equal(t, &want, render.OutputRef)
	require.Equal(t, &want, render.Attempts[0].OutputRef)
	stored, err := blobs.Get(b.ctx, want.Key)
	require.NoError(t, err)
	require.Equal(t, []byte(big), stored)

	// The built-in dependent runs on the data itself.
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State, "%+v", got.Steps[1].Error)
	require.JSONEq(t, fmt.Sprintf(`{"size":%d,"sha256":%q}`, want.Size, want.SHA256), string(got.Steps[1].Output))

	require.Equal(t, []byte(big), []byte(wholeOutput(t, b, tenantA, j.ID, "render")))

	// Too large for the response: a URL to the stored output instead.
	out, err := b.e.Output(b.ctx, tenantA, j.ID, "render", func(json.RawMessage) bool { return false })
	require.NoError(t, err)
	require.Nil(t, out.Data)
	require.Equal(t, &want, out.Ref)
	data, err := blobs.Open(out.URL)
	require.NoError(t, err)
	require.Equal(t, []byte(big), data)
	b.clock.Advance(engine.OutputURLTTL)
	_, err = blobs.Open(out.URL)
	require.ErrorContains(t, err, "expired")
}

func TestASmallOutputStaysInline(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	require.JSONEq(t, `{"p":1}`, string(ls[0].Input))
	require.Nil(t, ls[0].InputRef)
	require.Empty(t, ls[0].InputURL)
	small := bigJSON(t, domain.DefaultInlineLimit)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, small)
	require.NoError(t, err)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, small, got.Steps[0].Output, "at the limit it stays inline")
	require.Nil(t, got.Steps[0].OutputRef)
	require.Empty(t, blobs.Keys())
	require.Equal(t, small, wholeOutput(t, b, tenantA, j.ID, "w"))
}

func TestAWorkerIsHandedALargeInputByURL(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[
		{"id":"make","action":{"type":"worker","queue":"a"}},
		{"id":"use","action":{"type":"worker","queue":"b","lease_seconds":120}}]}`)
	ls := b.claim(t, tenantA, "a")
	require.Len(t, ls, 1)
	big := bigJSON(t, 900*1024)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, big)
	require.NoError(t, err)

	ls = b.claim(t, tenantA, "b")
	require.Len(t, ls, 1)
	l := ls[0]
	require.Nil(t, l.Input, "the input is not inline")
	raw, err := json.Marshal(l)
	require.NoError(t, err)
	require.Less(t, len(raw), 2048, "the claim stays small: %s", raw)
	ref := domain.NewDataRef(domain.OutputKey(tenantA, j.ID, "make", 1), big)
	require.Equal(t, &ref, l.InputRef, "the one stored output it runs on, no copy")
	data, err := blobs.Open(l.InputURL)
	require.NoError(t, err)
	require.NoError(t, l.InputRef.Verify(data))

	// The URL lasts the lease's length.
	b.clock.Advance(119 * time.Second)
	_, err = blobs.Open(l.InputURL)
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	_, err = blobs.Open(l.InputURL)
	require.ErrorContains(t, err, "expired")
}

func TestADAGWorkerInputComposedOfStoredDataIsStoredForItsAttempt(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[
		{"id":"a","action":{"type":"worker","queue":"q"}},
		{"id":"b","action":{"type":"worker","queue":"q"}},
		{"id":"join","action":{"type":"worker","queue":"j"},"depends_on":["a","b"]}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 2)
	big := bigJSON(t, 100*1024)
	for _, l := range ls {
		out := json.RawMessage(`{"small":true}`)
		if l.StepID == "a" {
			out = big
		}
		_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, out)
		require.NoError(t, err)
	}
	ls = b.claim(t, tenantA, "j")
	require.Len(t, ls, 1)
	require.Nil(t, ls[0].Input)
	require.Equal(t, domain.InputKey(tenantA, j.ID, "join", 1), ls[0].InputRef.Key)
	data, err := blobs.Open(ls[0].InputURL)
	require.NoError(t, err)
	require.JSONEq(t, `{"payload":{"p":1},"deps":{"a":`+string(big)+`,"b":{"small":true}}}`, string(data))
	require.NoError(t, ls[0].InputRef.Verify(data))
}

func TestALargePayloadIsStoredAndItsFirstStepGetsItByReference(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	payload := bigJSON(t, 20*1024)
	j := b.submit(t, tenantA, `{"payload":`+string(payload)+`,"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	want := domain.NewDataRef(domain.PayloadKey(tenantA, j.ID), payload)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, &want, got.PayloadRef)
	require.Zero(t, got.InlineBytes(), "the job holds no copy")
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	require.Equal(t, &want, ls[0].InputRef)
	data, err := blobs.Open(ls[0].InputURL)
	require.NoError(t, err)
	require.Equal(t, []byte(payload), data)
}

func TestManyOutputsUnderTheLimitNeverOverflowTheJob(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	const n = 40
	var steps []string
	for i := range n {
		steps = append(steps, fmt.Sprintf(`{"id":"s%d","action":{"type":"worker"}}`, i))
	}
	j := b.submit(t, tenantA, `{"steps":[`+strings.Join(steps, ",")+`]}`)
	outs := map[string]json.RawMessage{}
	for range n {
		ls := b.claim(t, tenantA, "default")
		require.Len(t, ls, 1)
		out := bigJSON(t, domain.DefaultInlineLimit) // each at the limit: 40 of them, kept twice, are 640 KB
		outs[ls[0].StepID] = out
		_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, out)
		require.NoError(t, err)
	}
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.LessOrEqual(t, got.InlineBytes(), domain.MaxInlineJobBytes)
	inline := 0
	for _, s := range got.Steps {
		if s.OutputRef == nil {
			inline++
		}
	}
	require.Positive(t, inline)
	require.Len(t, blobs.Keys(), n-inline, "the outputs past the job's inline budget went to the blob store")
	for id, out := range outs {
		require.Equal(t, out, wholeOutput(t, b, tenantA, j.ID, id), id)
	}
}

func TestAnInputWhoseDataIsGoneFailsItsStep(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}},{"id":"p","action":{"type":"pass"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 50*1024))
	require.NoError(t, err)
	blobs.Delete(domain.OutputKey(tenantA, j.ID, "w", 1)) // expired by the bucket's lifecycle

	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	p := got.Steps[1]
	require.Equal(t, domain.StepFailed, p.State)
	require.Len(t, p.Attempts, 1)
	require.Equal(t, domain.ClassFatal, p.Error.Class)
	require.Contains(t, p.Error.Message, "cannot be read")
	require.Contains(t, p.Error.Message, "is gone")

	_, err = b.e.Output(b.ctx, tenantA, j.ID, "w", func(json.RawMessage) bool { return true })
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func TestAWorkerInputWhoseDataIsCorruptFailsItsStep(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[
		{"id":"a","action":{"type":"worker","queue":"q"}},
		{"id":"join","action":{"type":"worker","queue":"j"},"depends_on":["a"]}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 50*1024))
	require.NoError(t, err)
	require.NoError(t, blobs.Put(b.ctx, domain.OutputKey(tenantA, j.ID, "a", 1), []byte(`"tampered"`)))

	require.Empty(t, b.claim(t, tenantA, "j"), "no lease for an input that cannot be had")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Contains(t, got.Steps[1].Error.Message, "corrupt")
	require.Empty(t, b.claim(t, tenantA, "j"), "its message was deleted")
}

func TestAFailedFetchWritesNothingAndTheMessageComesBack(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}},{"id":"p","action":{"type":"pass"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 50*1024))
	require.NoError(t, err)
	before := b.job(t, tenantA, j.ID)

	blobs.failGets.Store(1)
	d := b.takeOne(t)
	_, err = b.e.Execute(b.ctx, d)
	require.ErrorContains(t, err, "injected")
	after := b.job(t, tenantA, j.ID)
	require.Equal(t, before.Version, after.Version, "no lease was written")
	require.Equal(t, 0, after.Steps[1].Attempt)

	require.Equal(t, engine.Executed, b.execute(t, d), "the message, delivered again, runs")
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

func TestOutputAnswersNotFoundUntilThereIsOne(t *testing.T) {
	t.Parallel()
	b, _ := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	all := func(json.RawMessage) bool { return true }
	_, err := b.e.Output(b.ctx, tenantA, j.ID, "w", all)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.ErrorContains(t, err, "has no output")
	_, err = b.e.Output(b.ctx, tenantA, j.ID, "nope", all)
	require.ErrorIs(t, err, domain.ErrNotFound)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 50*1024))
	require.NoError(t, err)
	_, err = b.e.Output(b.ctx, tenantB, j.ID, "w", all)
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's job")
	_, err = b.e.Output(b.ctx, tenantA, "not-a-job", "w", all)
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func TestASleepsOutputComposedOfStoredDataIsServedWhole(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[
		{"id":"a","action":{"type":"worker"}},
		{"id":"nap","action":{"type":"sleep","seconds":0},"depends_on":["a"]}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	big := bigJSON(t, 50*1024)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, big)
	require.NoError(t, err)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.True(t, got.Steps[1].OutputIsInput)
	want := `{"payload":{"p":1},"deps":{"a":` + string(big) + `}}`
	require.JSONEq(t, want, string(wholeOutput(t, b, tenantA, j.ID, "nap")))

	out, err := b.e.Output(b.ctx, tenantA, j.ID, "nap", func(json.RawMessage) bool { return false })
	require.NoError(t, err)
	require.Equal(t, domain.OutputKey(tenantA, j.ID, "nap", 0), out.Ref.Key, "composed, then kept under the step's key for the URL")
	data, err := blobs.Open(out.URL)
	require.NoError(t, err)
	require.JSONEq(t, want, string(data))
}

func TestOutputLimits(t *testing.T) {
	t.Parallel()
	// Without a blob store an output is bound by the job's item: 256 KB.
	b := setup(t)
	b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, domain.MaxBodyBytes+2))
	require.Equal(t, domain.CodeTooLarge, domain.CodeOf(err))

	// With one, up to what a Lambda request carries.
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	ls = b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, engine.MaxOutputBytes+2))
	require.Equal(t, domain.CodeTooLarge, domain.CodeOf(err))
	require.Empty(t, blobs.Keys())
	require.Equal(t, domain.StepRunning, b.job(t, tenantA, j.ID).Steps[0].State, "nothing was recorded")
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, engine.MaxOutputBytes))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

func TestAnOutputThatWouldOverflowTheItemStillFailsItsAttempt(t *testing.T) {
	t.Parallel()
	// The item's size guard stays as the last resort: without a blob store,
	// an outcome the item cannot hold ends its attempt fatal at once.
	b := setup(t)
	small := memory.NewStore(memory.WithMaxItemBytes(8 * 1024))
	b.e.Configure(func(c *engine.Config) { c.Store = small })
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 16*1024))
	require.Equal(t, domain.CodeTooLarge, domain.CodeOf(err))
	require.ErrorContains(t, err, "the attempt was failed as fatal")
	got, err := small.Get(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, got.State)
	require.Contains(t, got.Steps[0].Attempts[0].Error.Message, "could not be stored")
}

func TestARetriedCompleteStoresOnce(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	big := bigJSON(t, 50*1024)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, big)
	require.NoError(t, err)
	// The worker did not hear the answer and completes again: answered as
	// before, nothing new stored or written.
	v := b.job(t, tenantA, j.ID).Version
	res, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, big)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, res.JobState)
	require.Equal(t, v, b.job(t, tenantA, j.ID).Version)
	require.Equal(t, []string{domain.OutputKey(tenantA, j.ID, "w", 1)}, blobs.Keys())
}

func TestAFinishedJobsStoredDataIsDeletedWhenItExpires(t *testing.T) {
	t.Parallel()
	b, blobs := withBlobs(t)
	big := bigJSON(t, 64*1024)
	j := b.submit(t, tenantA, `{"payload":`+string(big)+`,"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}}]}`)
	other := b.submit(t, tenantA, `{"payload":`+string(big)+`,"steps":[{"id":"render","action":{"type":"worker","queue":"other"}}]}`)
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 1)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, bigJSON(t, 64*1024))
	require.NoError(t, err)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.NotNil(t, got.PayloadRef)
	require.Equal(t, got.ExpiresAt, got.DueAt, "due when it expires, to delete its data")
	require.Equal(t, got.ExpiresAt.Add(domain.DataGrace), *got.TTLAt(), "the item outlives its data")
	require.Len(t, blobs.Keys(), 3, "two payloads and an output")

	b.clock.Advance(30*24*time.Hour - time.Minute)
	require.Zero(t, b.sweep(t).DataDeleted, "not before it expires")
	b.clock.Advance(time.Minute)
	require.Equal(t, 1, b.sweep(t).DataDeleted)
	got = b.job(t, tenantA, j.ID)
	require.NotNil(t, got.DataDeletedAt)
	require.Nil(t, got.DueAt, "due no more")
	require.Equal(t, got.ExpiresAt, got.TTLAt())
	require.Equal(t, []string{domain.PayloadKey(tenantA, other.ID)}, blobs.Keys(), "the unfinished job's data stays")
	_, err = b.e.Output(b.ctx, tenantA, j.ID, "render", func(json.RawMessage) bool { return true })
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.Zero(t, b.sweep(t).Due, "nothing is left due")
}
