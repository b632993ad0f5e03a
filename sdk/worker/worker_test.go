package worker_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
)

type bundle struct {
	h   *stacktest.Harness
	c   *client.Client
	ctx context.Context
}

func setup(t *testing.T, opts ...stacktest.Option) *bundle {
	t.Helper()
	h := stacktest.NewInMemory(t)
	if len(opts) > 0 {
		h = stacktest.New(t, opts...)
	}
	c, err := client.New(client.Config{BaseURL: h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Timeout: time.Minute}})
	require.NoError(t, err)
	return &bundle{h: h, c: c, ctx: t.Context()}
}

func (b *bundle) submit(t *testing.T, step client.StepSpec, payload any) string {
	t.Helper()
	j, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{step}, Payload: payload})
	require.NoError(t, err)
	return j.ID
}

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

// start runs a worker until the test ends or stop is called; stop stops
// it and answers what Run answered.
func (b *bundle) start(t *testing.T, o worker.Options, h worker.Handler) (stop func() error) {
	t.Helper()
	o.ClaimWait = time.Second
	w, err := worker.New(b.c, o, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var res error
	stop = func() error {
		cancel()
		once.Do(func() {
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Error("Run did not return")
			}
		})
		return res
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func workerStep(queue string, lease int) client.StepSpec {
	return client.StepSpec{ID: "work", Action: client.Worker(queue, lease), Retry: &client.RetryPolicy{MaxAttempts: 1}}
}

func TestWorkerCompletesAndFailsWithTheHandlersClass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := b.submit(t, workerStep("q", 0), map[string]any{"n": 2})
	fatal := b.submit(t, workerStep("q", 0), map[string]any{"fail": "fatal"})
	plain := b.submit(t, workerStep("q", 0), map[string]any{"err": "disk full"})
	panics := b.submit(t, workerStep("q", 0), map[string]any{"panic": true})

	stop := b.start(t, worker.Options{Queue: "q", Concurrency: 3}, func(ctx context.Context, task *worker.Task) (any, error) {
		var in struct {
			N     int
			Fail  string
			Err   string
			Panic bool
		}
		if err := task.Decode(&in); err != nil {
			return nil, err
		}
		switch {
		case in.Fail != "":
			return nil, worker.Fail(in.Fail, "refused")
		case in.Err != "":
			return nil, errors.New(in.Err)
		case in.Panic:
			panic("boom")
		}
		return map[string]any{"double": in.N * 2, "key": task.IdempotencyKey}, nil
	})

	j := b.awaitState(t, ok, client.JobCompleted)
	require.JSONEq(t, `{"double":4,"key":"`+ok+`/work/1"}`, string(j.Steps[0].Output))
	j = b.awaitState(t, fatal, client.JobFailed)
	require.Equal(t, &client.StepError{Class: client.ClassFatal, Message: "refused"}, j.Steps[0].Error)
	j = b.awaitState(t, plain, client.JobFailed)
	require.Equal(t, client.ClassRetryable, j.Steps[0].Error.Class, "an error of no class is retryable")
	require.Equal(t, "disk full", j.Steps[0].Error.Message)
	j = b.awaitState(t, panics, client.JobFailed)
	require.Contains(t, j.Steps[0].Error.Message, "panicked: boom")
	require.NoError(t, stop())
}

// The handler's context ends when its job is cancelled, and when its
// lease is lost; nothing is reported for either.
func TestHandlerContextEndsOnCancelAndOnALostLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cancelled := b.submit(t, workerStep("c", 9), map[string]any{"id": "cancelled"})
	b.submit(t, workerStep("l", 3), map[string]any{"id": "lost"})
	var mu sync.Mutex
	started, causes := map[string]bool{}, map[string]error{}
	handler := func(ctx context.Context, task *worker.Task) (any, error) {
		var in struct{ ID string }
		require.NoError(t, task.Decode(&in))
		mu.Lock()
		started[in.ID] = true
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		causes[in.ID] = context.Cause(ctx)
		mu.Unlock()
		return nil, ctx.Err()
	}
	b.start(t, worker.Options{Queue: "c"}, handler)
	b.start(t, worker.Options{Queue: "l"}, handler)
	seen := func(m map[string]bool, id string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return m[id] }
	}
	require.Eventually(t, seen(started, "cancelled"), 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, seen(started, "lost"), 30*time.Second, 10*time.Millisecond)

	ended := func(id string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return causes[id] != nil }
	}
	_, err := b.c.Cancel(b.ctx, cancelled)
	require.NoError(t, err)
	require.Eventually(t, ended("cancelled"), 30*time.Second, 10*time.Millisecond)
	// The lease of 3 s runs out on the engine's clock: the next heartbeat
	// hears 409.
	b.h.Clock.Advance(time.Minute)
	require.Eventually(t, ended("lost"), 30*time.Second, 10*time.Millisecond)
	mu.Lock()
	require.ErrorIs(t, causes["cancelled"], worker.ErrCancelRequested)
	require.ErrorIs(t, causes["lost"], worker.ErrLeaseLost)
	mu.Unlock()
	j := b.awaitState(t, cancelled, client.JobCancelled)
	require.Equal(t, "cancelled", j.Steps[0].Attempts[0].State)
}

// On shutdown the worker claims no more and lets running handlers finish;
// past the drain time it cancels them and reports them retryable.
func TestShutdownDrainsRunningTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.submit(t, workerStep("d", 0), map[string]any{"id": "first"})
	release := make(chan struct{})
	running := make(chan string, 2)
	stop := b.start(t, worker.Options{Queue: "d", Concurrency: 1}, func(ctx context.Context, task *worker.Task) (any, error) {
		running <- task.JobID
		<-release
		return "done", nil
	})
	require.Equal(t, first, <-running)
	second := b.submit(t, workerStep("d", 0), nil)

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a task ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-stopped, "a drain within its time answers nil")
	j := b.awaitState(t, first, client.JobCompleted)
	require.JSONEq(t, `"done"`, string(j.Steps[0].Output))
	j, err := b.c.Job(b.ctx, second)
	require.NoError(t, err)
	require.Equal(t, client.JobQueued, j.State, "nothing is claimed once the worker stops")

	// Past the drain time the handler's context ends with ErrShutdown, and
	// its error fails the attempt as retryable.
	causes := make(chan error, 1)
	stop = b.start(t, worker.Options{Queue: "d", DrainTimeout: 100 * time.Millisecond}, func(ctx context.Context, task *worker.Task) (any, error) {
		running <- task.JobID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, errors.New("interrupted")
	})
	require.Equal(t, second, <-running)
	require.ErrorContains(t, stop(), "drain time")
	require.ErrorIs(t, <-causes, worker.ErrShutdown)
	j = b.await(t, second, func(j *client.Job) bool {
		return len(j.Steps[0].Attempts) == 1 && j.Steps[0].Attempts[0].State == "failed"
	})
	require.Equal(t, client.ClassRetryable, j.Steps[0].Attempts[0].Error.Class)
}

// A large input comes by URL (issue 9): the handler gets it whole.
func TestLargeInputReachesTheHandlerWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *devstack.Options) { o.Env = map[string]string{"STEPFLOW_INLINE_LIMIT": "1024"} })
	big := strings.Repeat("y", 8000)
	id := b.submit(t, workerStep("big", 0), map[string]string{"big": big})
	j, err := b.c.Job(b.ctx, id)
	require.NoError(t, err)
	byURL := make(chan bool, 1)
	b.start(t, worker.Options{Queue: "big"}, func(ctx context.Context, task *worker.Task) (any, error) {
		byURL <- task.InputURL != ""
		var in struct{ Big string }
		if err := task.Decode(&in); err != nil {
			return nil, err
		}
		return len(in.Big), nil
	})
	if j.PayloadRef != nil {
		require.True(t, <-byURL, "a payload kept in S3 reaches the worker by URL")
	}
	j = b.awaitState(t, id, client.JobCompleted)
	require.JSONEq(t, `8000`, string(j.Steps[0].Output))
}
