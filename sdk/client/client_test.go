package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

type bundle struct {
	h   *stacktest.Harness
	c   *client.Client // tenant A
	b   *client.Client // tenant B
	ctx context.Context
}

func setup(t *testing.T, opts ...stacktest.Option) *bundle {
	t.Helper()
	h := stacktest.NewInMemory(t)
	if len(opts) > 0 {
		h = stacktest.New(t, opts...)
	}
	return &bundle{h: h, c: newClient(t, h.URL, stacktest.KeyA, nil), b: newClient(t, h.URL, stacktest.KeyB, nil), ctx: t.Context()}
}

func newClient(t *testing.T, url, key string, rt http.RoundTripper) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: url, APIKey: key, HTTPClient: &http.Client{Transport: rt, Timeout: time.Minute}})
	require.NoError(t, err)
	return c
}

// await polls a job until cond holds.
func (b *bundle) await(t *testing.T, id string, cond func(*client.Job) bool) *client.Job {
	t.Helper()
	var j *client.Job
	require.Eventually(t, func() bool {
		var err error
		j, err = b.c.Job(b.ctx, id)
		require.NoError(t, err)
		return cond(j)
	}, 30*time.Second, 20*time.Millisecond, "job %s; last seen %+v", id, j)
	return j
}

func (b *bundle) awaitState(t *testing.T, id string, s client.JobState) *client.Job {
	t.Helper()
	return b.await(t, id, func(j *client.Job) bool { return j.State == s })
}

func pass(id string) client.StepSpec { return client.StepSpec{ID: id, Action: client.Pass()} }

func TestJobsRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{pass("a"), pass("b")}, Payload: map[string]int{"n": 1}})
	require.NoError(t, err)
	require.False(t, j.Replayed)
	require.Equal(t, client.JobQueued, j.State)

	j = b.awaitState(t, j.ID, client.JobCompleted)
	require.JSONEq(t, `{"n":1}`, string(j.Steps[1].Output))
	s, ok := j.Step("b")
	require.True(t, ok)
	require.Equal(t, "SUCCEEDED", s.State)

	evs, err := b.c.Events(b.ctx, j.ID, client.EventsOptions{})
	require.NoError(t, err)
	require.Equal(t, "job_created", evs.Events[0].Type)
	require.Equal(t, "job_completed", evs.Events[len(evs.Events)-1].Type)
	later, err := b.c.Events(b.ctx, j.ID, client.EventsOptions{After: 3})
	require.NoError(t, err)
	require.Len(t, later.Events, len(evs.Events)-3)
	require.Equal(t, 4, later.Events[0].Seq)
	require.Equal(t, client.JobCompleted, later.State)
	require.Equal(t, evs.Events[len(evs.Events)-1].Seq, later.LastSeq)

	// A view is the API's document as it is; the canonical one has the
	// job's id and state.
	raw, err := b.c.GetView(b.ctx, j.ID, "canonical")
	require.NoError(t, err)
	var doc struct{ ID, State string }
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, j.ID, doc.ID)
	require.Equal(t, "COMPLETED", doc.State)

	// The same idempotency key and body answer the same job.
	req := client.JobRequest{Steps: []client.StepSpec{pass("x")}}
	first, err := b.c.Submit(b.ctx, req, client.WithIdempotencyKey("order-1"))
	require.NoError(t, err)
	again, err := b.c.Submit(b.ctx, req, client.WithIdempotencyKey("order-1"))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)
	_, err = b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{pass("y")}}, client.WithIdempotencyKey("order-1"))
	require.Equal(t, client.CodeIdempotencyMismatch, client.ErrorCode(err))

	// Bad input: a typed error naming the field.
	_, err = b.c.SubmitJSON(b.ctx, json.RawMessage(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q","url":"http://x"}}]}`))
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, client.CodeInvalid, apiErr.Code)
	require.Equal(t, "steps[0].action.url", apiErr.Field)

	// Another tenant's job is not found.
	_, err = b.b.Job(b.ctx, j.ID)
	require.True(t, client.IsNotFound(err), "%v", err)

	// Paging: three jobs a page of one at a time, newest first.
	var ids []string
	for js, err := range b.c.Jobs(b.ctx, client.ListJobsOptions{Limit: 1}) {
		require.NoError(t, err)
		ids = append(ids, js.ID)
	}
	require.Equal(t, []string{first.ID, j.ID}, ids)
	page, err := b.c.ListJobs(b.ctx, client.ListJobsOptions{State: client.JobCompleted, Limit: 100})
	require.NoError(t, err)
	var completed []string
	for _, js := range page.Jobs {
		require.Equal(t, client.JobCompleted, js.State)
		completed = append(completed, js.ID)
	}
	require.Contains(t, completed, j.ID)

	h, err := b.c.Health(b.ctx)
	require.NoError(t, err)
	require.Contains(t, []string{"ok", "degraded", "unhealthy"}, h.Status)
}

func TestGatesSignalsResumeRedriveAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gated, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "ok", Action: client.Approval(0)}, pass("after")}})
	require.NoError(t, err)
	rejected, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "ok", Action: client.Approval(0)}}})
	require.NoError(t, err)
	waiting, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "paid", Action: client.Wait("payment", 0)}}})
	require.NoError(t, err)
	asks, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "ask", Action: client.Action{"type": "fail", "class": "needs_user", "prompt": "which?"}}}})
	require.NoError(t, err)
	fails, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "boom", Action: client.Fail(client.ClassFatal, "no")}}})
	require.NoError(t, err)
	sleeps, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "nap", Action: client.Sleep(3600)}}})
	require.NoError(t, err)

	for _, id := range []string{gated.ID, rejected.ID} {
		j, err := b.c.Await(b.ctx, id, func(j *client.Job) bool { return j.State == client.JobWaiting })
		require.NoError(t, err)
		require.Equal(t, id, j.ID)
	}
	_, err = b.c.Approve(b.ctx, gated.ID, "ok", client.DecisionRequest{By: "ann", Comment: "fine"})
	require.NoError(t, err)
	j := b.awaitState(t, gated.ID, client.JobCompleted)
	require.Equal(t, "ann", j.Steps[0].Decision.By)
	require.True(t, j.Steps[0].Decision.Approved)
	j, err = b.c.Reject(b.ctx, rejected.ID, "ok", client.DecisionRequest{By: "bob"})
	require.NoError(t, err)
	require.Equal(t, client.JobFailed, j.State)
	_, err = b.c.Approve(b.ctx, rejected.ID, "ok", client.DecisionRequest{})
	require.True(t, client.IsConflict(err), "approve after reject: %v", err)

	signalled, err := b.c.Signal(b.ctx, waiting.ID, client.SignalRequest{Name: "payment", Payload: map[string]int{"amount": 5}})
	require.NoError(t, err)
	require.NotNil(t, signalled.SignalOutcome, "the answer says what became of the signal")
	require.Contains(t, []string{client.SignalDelivered, client.SignalKept}, signalled.SignalOutcome.Outcome)
	j = b.awaitState(t, waiting.ID, client.JobCompleted)
	require.JSONEq(t, `{"amount":5}`, string(j.Steps[0].Output))

	b.await(t, asks.ID, func(j *client.Job) bool { return j.Steps[0].State == "NEEDS_USER" })
	_, err = b.c.Resume(b.ctx, asks.ID, "ask", map[string]string{"pick": "b"})
	require.NoError(t, err)
	j = b.await(t, asks.ID, func(j *client.Job) bool { return j.Steps[0].State == "NEEDS_USER" && j.Steps[0].Attempt == 2 })
	require.JSONEq(t, `{"pick":"b"}`, string(j.Steps[0].UserInput))

	// Await follows the log: a job that finishes without its condition is an error naming the state.
	_, err = b.c.Await(b.ctx, fails.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	require.ErrorContains(t, err, "ended FAILED")
	_, err = b.c.Redrive(b.ctx, fails.ID)
	require.NoError(t, err)
	j = b.await(t, fails.ID, func(j *client.Job) bool { return j.State == client.JobFailed && j.Steps[0].Attempt == 2 })
	require.Len(t, j.Steps[0].Attempts, 2)

	j, err = b.c.Cancel(b.ctx, sleeps.ID)
	require.NoError(t, err)
	require.Equal(t, client.JobCancelled, j.State)
	_, err = b.c.Cancel(b.ctx, gated.ID)
	require.True(t, client.IsConflict(err), "cancel of a completed job: %v", err)
}

func TestResourcesAndSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, created, err := b.c.PutResource(b.ctx, "gpu-1", client.ResourceRequest{Capabilities: []string{"gpu"}, Labels: map[string]string{"zone": "a"}, Capacity: 2})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 2, r.Free)
	_, created, err = b.c.PutResource(b.ctx, "gpu-1", client.ResourceRequest{Capabilities: []string{"gpu"}, Capacity: 3})
	require.NoError(t, err)
	require.False(t, created)
	r, err = b.c.Resource(b.ctx, "gpu-1")
	require.NoError(t, err)
	require.Equal(t, 3, r.Capacity)
	all, err := b.c.Resources(b.ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.NoError(t, b.c.DeleteResource(b.ctx, "gpu-1"))
	_, err = b.c.Resource(b.ctx, "gpu-1")
	require.True(t, client.IsNotFound(err))

	req := client.ScheduleRequest{ID: "nightly", Every: "1h", Job: client.JobRequest{Steps: []client.StepSpec{pass("a")}}}
	s, err := b.c.CreateSchedule(b.ctx, req)
	require.NoError(t, err)
	require.True(t, s.Created)
	require.NotNil(t, s.NextAt)
	s, err = b.c.CreateSchedule(b.ctx, req)
	require.NoError(t, err)
	require.False(t, s.Created, "the same body again answers the schedule")
	_, err = b.c.CreateScheduleJSON(b.ctx, json.RawMessage(`{"id":"second","cron":"0 9 * * 1-5","time_zone":"Europe/Berlin","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`))
	require.NoError(t, err)
	var ids []string
	for s, err := range b.c.Schedules(b.ctx, 1) {
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	require.Equal(t, []string{"nightly", "second"}, ids)
	s, err = b.c.PauseSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.True(t, s.Paused)
	s, err = b.c.ResumeSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.False(t, s.Paused)
	s, err = b.c.DeleteSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, "nightly", s.ID)
	_, err = b.c.Schedule(b.ctx, "nightly")
	require.True(t, client.IsNotFound(err))
}

func TestWorkerProtocol(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "render", Action: client.Worker("gpu", 30)}}, Payload: map[string]string{"scene": "x"}})
	require.NoError(t, err)
	leases, err := b.c.Claim(b.ctx, client.ClaimRequest{Queue: "gpu", Max: 5, WaitSeconds: 10, Worker: "box-1"})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, j.ID, l.JobID)
	require.Equal(t, "render", l.StepID)
	require.Equal(t, 30, l.LeaseSeconds)
	in, err := b.c.FetchInput(b.ctx, &l)
	require.NoError(t, err)
	require.JSONEq(t, `{"scene":"x"}`, string(in))

	hb, err := b.c.Heartbeat(b.ctx, l.LeaseID, time.Minute)
	require.NoError(t, err)
	require.False(t, hb.CancelRequested)
	require.True(t, hb.ExpiresAt.After(l.ExpiresAt), "extended")

	res, err := b.c.Complete(b.ctx, l.LeaseID, map[string]string{"png": "s3://x"})
	require.NoError(t, err)
	require.Equal(t, client.JobCompleted, res.JobState)
	// A lease once ended is lost to a heartbeat.
	_, err = b.c.Heartbeat(b.ctx, l.LeaseID, 0)
	require.True(t, client.IsLeaseLost(err), "%v", err)

	j2, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "render", Action: client.Worker("gpu", 0)}}})
	require.NoError(t, err)
	leases, err = b.c.Claim(b.ctx, client.ClaimRequest{Queue: "gpu", WaitSeconds: 10})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	res, err = b.c.Fail(b.ctx, leases[0].LeaseID, client.Failure{Class: client.ClassFatal, Message: "bad scene"})
	require.NoError(t, err)
	require.Equal(t, client.JobFailed, res.JobState)
	j2, err = b.c.Job(b.ctx, j2.ID)
	require.NoError(t, err)
	require.Equal(t, "bad scene", j2.Steps[0].Error.Message)
	require.Equal(t, client.ClassFatal, j2.Steps[0].Error.Class)

	// An empty queue answers no lease, not an error.
	leases, err = b.c.Claim(b.ctx, client.ClaimRequest{Queue: "gpu"})
	require.NoError(t, err)
	require.Empty(t, leases)
}

// StepOutput answers a step's output whole; past the inline limit it is
// in S3, and the route may answer 303 to a presigned URL.
func TestStepOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *devstack.Options) { o.Env = map[string]string{"STEPFLOW_INLINE_LIMIT": "1024"} })
	big := strings.Repeat("x", 4096)
	j, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{pass("small"), {ID: "w", Action: client.Worker("q", 0)}}, Payload: map[string]string{"v": "1"}})
	require.NoError(t, err)
	leases, err := b.c.Claim(b.ctx, client.ClaimRequest{Queue: "q", WaitSeconds: 10})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	_, err = b.c.Complete(b.ctx, leases[0].LeaseID, map[string]string{"big": big})
	require.NoError(t, err)
	j = b.awaitState(t, j.ID, client.JobCompleted)
	require.NotNil(t, j.Steps[1].OutputRef, "an output past the inline limit is kept in S3")

	out, err := b.c.StepOutput(b.ctx, j.ID, "small")
	require.NoError(t, err)
	require.JSONEq(t, `{"v":"1"}`, string(out))
	out, err = b.c.StepOutput(b.ctx, j.ID, "w")
	require.NoError(t, err)
	require.JSONEq(t, `{"big":"`+big+`"}`, string(out))
	_, err = b.b.StepOutput(b.ctx, j.ID, "w")
	require.True(t, client.IsNotFound(err))
}

// faults answers chosen requests itself, or passes them to the real
// transport and then answers something else, recording every request.
type faults struct {
	mu     sync.Mutex
	next   http.RoundTripper
	script func(n int, r *http.Request) (status int, retryAfter string, forward bool)
	seen   []seen
}

type seen struct {
	at      time.Time
	path    string
	idemKey string
	status  int
}

func (f *faults) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	n := len(f.seen)
	status, after, forward := f.script(n, r)
	f.seen = append(f.seen, seen{at: time.Now(), path: r.URL.Path, idemKey: r.Header.Get("Idempotency-Key"), status: status})
	f.mu.Unlock()
	if status == 0 || forward {
		res, err := f.next.RoundTrip(r)
		if err != nil || status == 0 {
			return res, err
		}
		res.Body.Close()
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if after != "" {
		h.Set("Retry-After", after)
	}
	body := `{"error":{"code":"throttled","message":"slow down"}}`
	if status >= 500 {
		body = `{"message":"Service Unavailable"}`
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

func (f *faults) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.seen...)
}

func TestRetriesHonourRetryAfterAndOnlyWhereSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx

	// Two 429s with Retry-After: 1, then the API: one job, and each retry
	// waited at least what it was told.
	f := &faults{next: http.DefaultTransport, script: func(n int, r *http.Request) (int, string, bool) {
		if n < 2 {
			return http.StatusTooManyRequests, "1", false
		}
		return 0, "", false
	}}
	c := newClient(t, b.h.URL, stacktest.KeyA, f)
	j, err := c.Submit(ctx, client.JobRequest{Steps: []client.StepSpec{pass("a")}})
	require.NoError(t, err)
	seen := f.requests()
	require.Len(t, seen, 3)
	for i := 1; i < 3; i++ {
		require.GreaterOrEqual(t, seen[i].at.Sub(seen[i-1].at), time.Second, "retry %d came before Retry-After", i)
		require.Equal(t, seen[0].idemKey, seen[i].idemKey, "a retry carries the same Idempotency-Key")
	}
	require.NotEmpty(t, seen[0].idemKey)

	// The API made the job but its answer was lost (503): the retry
	// answers the same job, and there is one.
	f = &faults{next: http.DefaultTransport, script: func(n int, r *http.Request) (int, string, bool) {
		if n == 0 {
			return http.StatusServiceUnavailable, "", true
		}
		return 0, "", false
	}}
	c = newClient(t, b.h.URL, stacktest.KeyA, f)
	again, err := c.Submit(ctx, client.JobRequest{Steps: []client.StepSpec{pass("b")}})
	require.NoError(t, err)
	require.True(t, again.Replayed, "the retry found the job the lost answer made")
	page, err := b.c.ListJobs(ctx, client.ListJobsOptions{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2, "one job per submit: %+v", page.Jobs)
	require.Contains(t, []string{page.Jobs[0].ID, page.Jobs[1].ID}, j.ID)

	// A claim is not repeated after a 5xx (a lost answer's leases come
	// back when they expire), but is after a 429.
	f = &faults{next: http.DefaultTransport, script: func(n int, r *http.Request) (int, string, bool) {
		if n == 0 {
			return http.StatusServiceUnavailable, "", false
		}
		return 0, "", false
	}}
	c = newClient(t, b.h.URL, stacktest.KeyA, f)
	_, err = c.Claim(ctx, client.ClaimRequest{Queue: "q"})
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
	require.Len(t, f.requests(), 1)
	f = &faults{next: http.DefaultTransport, script: func(n int, r *http.Request) (int, string, bool) {
		if n == 0 {
			return http.StatusTooManyRequests, "", false
		}
		return 0, "", false
	}}
	c = newClient(t, b.h.URL, stacktest.KeyA, f)
	leases, err := c.Claim(ctx, client.ClaimRequest{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, leases)
	require.Len(t, f.requests(), 2)

	// A Retry-After beyond the client's bound is not waited for: the
	// caller hears it.
	f = &faults{next: http.DefaultTransport, script: func(int, *http.Request) (int, string, bool) {
		return http.StatusTooManyRequests, "3600", false
	}}
	c = newClient(t, b.h.URL, stacktest.KeyA, f)
	_, err = c.Health(ctx)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeThrottled, apiErr.Code)
	require.Equal(t, time.Hour, apiErr.RetryAfter)
	require.Len(t, f.requests(), 1)

	// Bounded: a 429 that never ends is given up after MaxRetries.
	f = &faults{next: http.DefaultTransport, script: func(int, *http.Request) (int, string, bool) {
		return http.StatusTooManyRequests, "0", false
	}}
	c, err = client.New(client.Config{BaseURL: b.h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Transport: f}, MaxRetries: 2})
	require.NoError(t, err)
	_, err = c.Job(ctx, j.ID)
	require.True(t, errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests)
	require.Len(t, f.requests(), 3)
}
