package stepflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/stepflowtest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// bundle is one test's Env with a record of what its handlers were given.
type bundle struct {
	env   *stepflowtest.Env
	t0    time.Time
	mu    sync.Mutex
	tasks []stepflowtest.Task
}

func setup(t *testing.T, opts ...stepflowtest.Option) *bundle {
	t.Helper()
	env := stepflowtest.New(t, opts...)
	return &bundle{env: env, t0: env.Now()}
}

// handle serves queue with h, recording each task it is given.
func (b *bundle) handle(queue string, h stepflowtest.Handler) {
	b.env.HandleQueue(queue, func(ctx context.Context, task *stepflowtest.Task) (any, error) {
		b.mu.Lock()
		b.tasks = append(b.tasks, *task)
		b.mu.Unlock()
		return h(ctx, task)
	})
}

// startedAt answers when each attempt of a step started, as offsets from
// the Env's start.
func (b *bundle) startedAt(t *testing.T, jobID, stepID string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, a := range b.env.Step(jobID, stepID).Attempts {
		require.NotNil(t, a.StartedAt)
		out = append(out, a.StartedAt.Sub(b.t0))
	}
	return out
}

func eventAt(t *testing.T, events []domain.Event, typ, step string) time.Time {
	t.Helper()
	for _, ev := range events {
		if ev.Type == typ && ev.Step == step {
			return ev.At
		}
	}
	require.Failf(t, "no such event", "%s of step %q", typ, step)
	return time.Time{}
}

func TestRetriesWithBackoffThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("charge", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		if task.Attempt < 3 {
			return nil, stepflowtest.Fail("retryable", "card network busy")
		}
		return map[string]string{"receipt": "r-" + task.IdempotencyKey}, nil
	})
	j := b.env.Submit(`{"payload":{"order":42},"steps":[{"id":"charge","action":{"type":"worker","queue":"charge"},
		"retry":{"max_attempts":5,"backoff":"exponential","initial_delay_ms":1000,"max_delay_ms":30000}}]}`)
	require.Equal(t, domain.JobQueued, j.State, "Submit runs nothing")

	b.env.RunUntilIdle()
	require.Equal(t, domain.JobRetrying, b.env.Get(j.ID).State)
	b.env.Advance(999 * time.Millisecond)
	require.Len(t, b.tasks, 1, "the backoff has not run out")
	b.env.Advance(time.Millisecond)
	require.Len(t, b.tasks, 2, "the second attempt runs at the end of the first backoff")

	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second}, b.startedAt(t, j.ID, "charge"), "1 s, then 2 s")
	require.Equal(t, b.t0.Add(3*time.Second), b.env.Now(), "AwaitState moved the clock no further than it had to")
	require.JSONEq(t, fmt.Sprintf(`{"receipt":"r-%s/charge/3"}`, j.ID), string(got.Steps[0].Output))
	for i, task := range b.tasks {
		require.Equal(t, i+1, task.Attempt)
		require.JSONEq(t, `{"order":42}`, string(task.Input))
		require.Equal(t, fmt.Sprintf("%s/charge/%d", j.ID, i+1), task.IdempotencyKey)
	}
}

// A plain error is class retryable; with no retry on the step, the
// default policy for it applies: 3 attempts, 1 s then 2 s apart.
func TestPlainErrorFollowsTheDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("q", func(context.Context, *stepflowtest.Task) (any, error) { return nil, errors.New("boom") })
	j := b.env.Submit(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobFailed)
	require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second}, b.startedAt(t, j.ID, "w"))
	require.Equal(t, domain.ClassRetryable, got.Steps[0].Error.Class)
	require.Equal(t, "boom", got.Steps[0].Error.Message)
}

func TestWorkerFailsFatal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("charge", func(context.Context, *stepflowtest.Task) (any, error) {
		return nil, stepflowtest.Fail("fatal", "card declined")
	})
	j := b.env.Submit(`{"steps":[{"id":"charge","action":{"type":"worker","queue":"charge"},"retry":{"max_attempts":5}},
		{"id":"ship","action":{"type":"pass"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobFailed)
	require.Equal(t, b.t0, b.env.Now(), "it failed at once")
	require.Equal(t, domain.StepFailed, got.Steps[0].State)
	require.Equal(t, &domain.StepError{Class: domain.ClassFatal, Message: "card declined"}, got.Steps[0].Error)
	require.Equal(t, domain.StepCancelled, got.Steps[1].State, "what comes after never runs")
	b.env.Advance(time.Hour)
	require.Len(t, b.tasks, 1, "fatal is never retried")
}

// What a handler reports it spent is recorded on its attempt, failed or
// succeeded, and counted in its job's cost.
func TestAHandlerReportsWhatItSpent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("llm", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		task.ReportCost(0.01)
		if task.Attempt == 1 {
			return nil, stepflowtest.Fail("retryable", "rate limited after the prompt was paid for")
		}
		task.ReportCost(0.002)
		return map[string]string{"answer": "42"}, nil
	})
	j := b.env.Submit(`{"steps":[{"id":"ask","action":{"type":"worker","queue":"llm"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	attempts := got.Steps[0].Attempts
	require.Len(t, attempts, 2)
	require.InDelta(t, 0.01, attempts[0].CostUSD, 1e-12)
	require.InDelta(t, 0.012, attempts[1].CostUSD, 1e-12)
	require.InDelta(t, 0.022, got.Steps[0].ReportedUSD(), 1e-9)
	require.InDelta(t, 0.022, got.Cost().ReportedUSD, 1e-9)
}

// A job whose handler spends past its budget waits at its budget gate
// until SetBudget raises it.
func TestABudgetHoldsAJobUntilRaised(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("llm", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		task.ReportCost(0.01)
		return map[string]string{"answer": "42"}, nil
	})
	j := b.env.Submit(`{"budget":{"usd":0.005},"steps":[{"id":"ask","action":{"type":"worker","queue":"llm"}},{"id":"store","action":{"type":"pass"}}]}`)
	held := b.env.AwaitState(j.ID, domain.JobWaiting)
	require.NotNil(t, held.Budget.Exceeded)
	require.Equal(t, domain.StepSucceeded, held.Steps[0].State)
	require.Zero(t, held.Steps[1].Attempt, "no further step starts")
	b.env.SetBudget(j.ID, 1)
	done := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Equal(t, 1.0, done.Budget.USD)
	require.Nil(t, done.Budget.Exceeded)
}

func TestSleep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.env.Submit(`{"payload":{"p":1},"steps":[{"id":"nap","action":{"type":"sleep","seconds":3600}},{"id":"after","action":{"type":"pass"}}]}`)
	b.env.RunUntilIdle()
	require.Equal(t, domain.JobParked, b.env.Get(j.ID).State, "a sleep past the timer threshold parks its job")
	b.env.Advance(3599 * time.Second)
	require.Equal(t, domain.StepWaiting, b.env.Step(j.ID, "nap").State)
	b.env.Advance(time.Second)
	got := b.env.Get(j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Equal(t, b.t0.Add(time.Hour), eventAt(t, got.Events, "step_succeeded", "nap"))
	require.Equal(t, []time.Duration{time.Hour}, b.startedAt(t, j.ID, "after"))
	require.JSONEq(t, `{"p":1}`, string(got.Steps[1].Output))
}

const gated = `{"payload":{"order":7},"steps":[
	{"id":"build","action":{"type":"pass"}},
	{"id":"review","action":{"type":"approval","timeout_seconds":86400}},
	{"id":"deploy","action":{"type":"worker","queue":"deploy"}}]}`

func TestApprovalGateApproved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("deploy", func(_ context.Context, task *stepflowtest.Task) (any, error) { return "deployed", nil })
	j := b.env.Submit(gated)
	got := b.env.AwaitState(j.ID, domain.JobWaiting)
	require.Equal(t, domain.StepNeedsUser, got.Steps[1].State, "the gate is open")
	b.env.Advance(time.Hour)
	require.Empty(t, b.tasks, "nothing passes an open gate")

	b.env.Approve(j.ID, "review")
	got = b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Equal(t, b.t0.Add(time.Hour), b.env.Now())
	require.Equal(t, "stepflowtest", got.Steps[1].Decision.By)
	require.JSONEq(t, `"deployed"`, string(got.Steps[2].Output))
	require.Len(t, b.tasks, 1)
}

func TestApprovalGateTimesOutAfter24Hours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("deploy", func(context.Context, *stepflowtest.Task) (any, error) { return nil, nil })
	j := b.env.Submit(gated)
	b.env.Advance(24*time.Hour - time.Millisecond)
	require.Equal(t, domain.StepNeedsUser, b.env.Step(j.ID, "review").State)
	b.env.Advance(time.Millisecond)
	got := b.env.Get(j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, domain.ClassTimeout, got.Steps[1].Error.Class)
	require.Equal(t, b.t0.Add(24*time.Hour), eventAt(t, got.Events, "step_timed_out", "review"))
	require.Equal(t, domain.StepCancelled, got.Steps[2].State)
	require.Empty(t, b.tasks)
}

func TestApprovalGateRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.env.Submit(gated)
	b.env.RunUntilIdle()
	require.Equal(t, domain.JobFailed, b.env.Reject(j.ID, "review").State)
}

// Fan-out and fan-in: b and c run on a's output once it succeeds, d on
// both of theirs.
func TestDAG(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, q := range []string{"left", "right"} {
		b.handle(q, func(_ context.Context, task *stepflowtest.Task) (any, error) {
			var in struct {
				Deps map[string]struct{ N int } `json:"deps"`
			}
			if err := json.Unmarshal(task.Input, &in); err != nil {
				return nil, stepflowtest.Fail("fatal", err.Error())
			}
			return map[string]any{"side": q, "n": in.Deps["a"].N * 10}, nil
		})
	}
	b.handle("join", func(_ context.Context, task *stepflowtest.Task) (any, error) { return task.Input, nil })
	j := b.env.Submit(`{"payload":{"n":1},"steps":[
		{"id":"a","action":{"type":"pass"}},
		{"id":"b","action":{"type":"worker","queue":"left"},"depends_on":["a"]},
		{"id":"c","action":{"type":"worker","queue":"right"},"depends_on":["a"]},
		{"id":"d","action":{"type":"worker","queue":"join"},"depends_on":["b","c"]}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"payload":{"n":1},"deps":{"b":{"side":"left","n":10},"c":{"side":"right","n":10}}}`, string(got.Steps[3].Output))
	require.Len(t, b.tasks, 3)
	require.Equal(t, "d", b.tasks[2].StepID, "the join runs last")
	require.Equal(t, b.t0, b.env.Now(), "all of it at one instant")
}

// A condition on a worker's verdict: the harness skips the branch it
// rules out, in memory, as the stack does.
func TestConditionSkipsABranch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("critic", func(context.Context, *stepflowtest.Task) (any, error) {
		return map[string]string{"verdict": "revise"}, nil
	})
	b.handle("writer", func(_ context.Context, task *stepflowtest.Task) (any, error) { return "rewritten", nil })
	j := b.env.Submit(`{"payload":{},"steps":[
		{"id":"critic","action":{"type":"worker","queue":"critic"}},
		{"id":"ship","action":{"type":"worker","queue":"writer"},"depends_on":["critic"],"when":"steps.critic.output.verdict == 'approve'"},
		{"id":"revise","action":{"type":"worker","queue":"writer"},"depends_on":["critic"],"when":"steps.critic.output.verdict == 'revise'"}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Equal(t, domain.StepSkipped, got.Steps[1].State)
	require.Equal(t, domain.StepSucceeded, got.Steps[2].State)
	require.Len(t, b.tasks, 2, "the skipped step never ran")
	require.Equal(t, "revise", b.tasks[1].StepID)
}

// A map over the payload: the harness runs its items, in memory, as the
// stack does, and the map's output is theirs in order.
func TestMapRunsEachItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("fetch", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		var in struct{ Item string }
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return nil, stepflowtest.Fail("fatal", err.Error())
		}
		return "got " + in.Item, nil
	})
	j := b.env.Submit(`{"payload":{"urls":["a","b","c"]},"steps":[
		{"id":"each","action":{"type":"map","items":"payload.urls","max_concurrency":2,"step":{"action":{"type":"worker","queue":"fetch"}}}},
		{"id":"after","action":{"type":"pass"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.JSONEq(t, `["got a","got b","got c"]`, string(got.Steps[1].Output))
	require.Len(t, b.tasks, 3)
}

func TestAChildJobRunsAndCancelReachesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("score", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		var in struct{ Doc string }
		if err := json.Unmarshal(task.Input, &in); err != nil {
			return nil, stepflowtest.Fail("fatal", err.Error())
		}
		return map[string]any{"score": len(in.Doc)}, nil
	})
	j := b.env.Submit(`{"payload":{"doc":"hello"},"steps":[
		{"id":"sub","action":{"type":"job","spec":{"steps":[{"id":"s","action":{"type":"worker","queue":"score"}}]}}},
		{"id":"after","action":{"type":"pass"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"score":5}`, string(got.Steps[0].Output), "the child's result is the step's output")
	require.Len(t, got.Children(), 1)
	child := b.env.AwaitState(got.Children()[0], domain.JobCompleted)
	require.Equal(t, j.ID, child.Parent.Job)

	// A child nobody works on runs until its parent is cancelled.
	p := b.env.Submit(`{"steps":[{"id":"sub","action":{"type":"job","spec":{"steps":[{"id":"s","action":{"type":"worker","queue":"idle"}}]}}}]}`)
	running := b.env.AwaitState(p.ID, domain.JobRunning) // its step waits on its child
	require.Len(t, running.Children(), 1)
	b.env.Cancel(p.ID)
	b.env.AwaitState(running.Children()[0], domain.JobCancelled)
}

func TestHTTPStepAgainstATestServer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var keys sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		keys.Store(n, r.Header.Get("Idempotency-Key"))
		body, _ := io.ReadAll(r.Body)
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintf(w, `{"got":%s}`, body)
	}))
	t.Cleanup(srv.Close)
	b := setup(t)
	j := b.env.Submit(`{"payload":{"x":1},"steps":[{"id":"hook","action":{"type":"http","url":"` + srv.URL + `"},
		"retry":{"max_attempts":3,"backoff":"fixed","initial_delay_ms":5000}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Equal(t, int32(2), calls.Load(), "503 is retried")
	require.Equal(t, []time.Duration{0, 5 * time.Second}, b.startedAt(t, j.ID, "hook"))
	require.JSONEq(t, `{"got":{"x":1}}`, string(got.Steps[0].Output))
	key, _ := keys.Load(int32(2))
	require.Equal(t, j.ID+"/hook/2", key)
}

func TestWaitForASignal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.env.Submit(`{"steps":[{"id":"paid","action":{"type":"wait","signal":"payment","timeout_seconds":3600}},{"id":"ship","action":{"type":"pass"}}]}`)
	b.env.Advance(10 * time.Minute)
	require.Equal(t, domain.JobParked, b.env.Get(j.ID).State, "its deadline is past the timer threshold")
	b.env.Signal(j.ID, "payment", map[string]int{"amount": 5})
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"amount":5}`, string(got.Steps[1].Output))

	late := b.env.Submit(`{"steps":[{"id":"paid","action":{"type":"wait","signal":"payment","timeout_seconds":3600}}]}`)
	got = b.env.AwaitState(late.ID, domain.JobFailed)
	require.Equal(t, b.t0.Add(10*time.Minute+time.Hour), b.env.Now(), "a wait past its deadline fails its job")
	require.Equal(t, domain.ClassTimeout, got.Steps[0].Error.Class)
}

func TestNeedsUserAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.handle("tailor", func(_ context.Context, task *stepflowtest.Task) (any, error) {
		var in struct {
			UserInput *struct{ Size string } `json:"user_input"`
		}
		_ = json.Unmarshal(task.Input, &in)
		if in.UserInput == nil {
			return nil, stepflowtest.Fail("needs_user", "which size?")
		}
		return in.UserInput.Size, nil
	})
	j := b.env.Submit(`{"payload":{"shirt":1},"steps":[{"id":"fit","action":{"type":"worker","queue":"tailor"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobWaiting)
	require.Equal(t, "which size?", got.Steps[0].Prompt)
	b.env.Resume(j.ID, "fit", map[string]string{"size": "L"})
	got = b.env.AwaitState(j.ID, domain.JobCompleted)
	require.JSONEq(t, `"L"`, string(got.Steps[0].Output))
}

func TestCancelAndRedrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sleeping := b.env.Submit(`{"steps":[{"id":"nap","action":{"type":"sleep","seconds":60}},{"id":"after","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobCancelled, b.env.Cancel(sleeping.ID).State)
	b.env.Advance(time.Hour)
	require.Equal(t, domain.StepCancelled, b.env.Step(sleeping.ID, "after").State, "the sleep's timer finds nothing to do")

	broken := true
	b.handle("q", func(context.Context, *stepflowtest.Task) (any, error) {
		if broken {
			return nil, stepflowtest.Fail("fatal", "bad config")
		}
		return "ok", nil
	})
	j := b.env.Submit(`{"steps":[{"id":"prep","action":{"type":"pass"}},{"id":"work","action":{"type":"worker","queue":"q"}}]}`)
	b.env.AwaitState(j.ID, domain.JobFailed)
	broken = false
	b.env.Redrive(j.ID)
	got := b.env.AwaitState(j.ID, domain.JobCompleted)
	require.Len(t, got.Steps[0].Attempts, 1, "what succeeded is kept")
	require.Equal(t, 2, got.Steps[1].Attempt)
}

func TestLambdaStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := 0
	b.env.HandleFunction("stepflow-fn-echo", func(ctx context.Context, event json.RawMessage) (any, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("cold start")
		}
		lc, _ := lambdacontext.FromContext(ctx)
		return map[string]any{"echo": event, "key": lc.ClientContext.Custom["idempotency_key"]}, nil
	})
	j := b.env.Submit(`{"payload":{"hi":1},"steps":[{"id":"call","action":{"type":"lambda","function":"stepflow-fn-echo"}},
		{"id":"missing","action":{"type":"lambda","function":"stepflow-fn-nobody"}}]}`)
	got := b.env.AwaitState(j.ID, domain.JobFailed)
	require.JSONEq(t, fmt.Sprintf(`{"echo":{"hi":1},"key":"%s/call/2"}`, j.ID), string(got.Steps[0].Output), "a function error is retried")
	require.Equal(t, domain.ClassFatal, got.Steps[1].Error.Class, "an unknown function fails fatal")
	require.Contains(t, got.Steps[1].Error.Message, "HandleFunction")
}

// Schedules fire from the sweep, on its ticks, as the clock moves.
func TestScheduleFiresAsTheClockMoves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.env.CreateSchedule(`{"id":"nightly","cron":"0 2 * * *","job":{"steps":[{"id":"report","action":{"type":"pass"}}]}}`)
	require.Equal(t, b.t0.Add(2*time.Hour), *s.NextAt)
	b.env.Advance(48 * time.Hour)
	runs := b.env.List(engine.ListFilter{Schedule: "nightly"})
	require.Len(t, runs, 2)
	for i, run := range runs {
		j := b.env.Get(run.ID)
		require.Equal(t, domain.JobCompleted, j.State)
		require.Equal(t, b.t0.Add(time.Duration(26-24*i)*time.Hour), j.CreatedAt, "each at its tick, newest first")
	}
}

// Jitter comes from a seeded source: the same test sees the same retry
// times on every run.
func TestJitterIsTheSameOnEveryRun(t *testing.T) {
	t.Parallel()
	times := func() []time.Duration {
		b := setup(t)
		b.handle("q", func(context.Context, *stepflowtest.Task) (any, error) { return nil, errors.New("busy") })
		j := b.env.Submit(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q"},
			"retry":{"max_attempts":6,"backoff":"exponential","initial_delay_ms":10000,"jitter":true}}]}`)
		b.env.AwaitState(j.ID, domain.JobFailed)
		return b.startedAt(t, j.ID, "w")
	}
	first := times()
	require.Len(t, first, 6)
	require.Equal(t, first, times())
}

func TestSubmitRefusesABadSpecNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.env.TrySubmit(map[string]any{"steps": []any{map[string]any{"id": "x", "action": map[string]any{"type": "worker", "queue": "no spaces"}}}})
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "steps[0].action.queue", de.Field)
	require.Empty(t, b.env.List(engine.ListFilter{}), "nothing written")
}

// fatalRecorder is a testing.TB whose Fatalf is recorded and ends the
// goroutine, as the real one does, so a test can see the harness fail.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *fatalRecorder) message() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

// runFailing runs f on an Env whose test failures are recorded, and
// answers the failure.
func runFailing(t *testing.T, f func(env *stepflowtest.Env)) string {
	t.Helper()
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(stepflowtest.New(rec, stepflowtest.WithHorizon(48*time.Hour)))
	}()
	<-done
	return rec.message()
}

// AwaitState says why a job never got there, and what would move it.
func TestAwaitStateExplainsAStuckJob(t *testing.T) {
	t.Parallel()
	msg := runFailing(t, func(env *stepflowtest.Env) {
		j := env.Submit(`{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}}]}`)
		env.AwaitState(j.ID, domain.JobCompleted)
	})
	require.Contains(t, msg, "never reached COMPLETED: nothing moved it there within 48h0m0s")
	require.Contains(t, msg, `no handler serves queue "gpu"`)

	msg = runFailing(t, func(env *stepflowtest.Env) {
		j := env.Submit(`{"steps":[{"id":"g","action":{"type":"approval"}}]}`)
		env.AwaitState(j.ID, domain.JobCompleted)
	})
	require.Contains(t, msg, "nothing is due that could move it")
	require.Contains(t, msg, "waits on a person")

	msg = runFailing(t, func(env *stepflowtest.Env) {
		env.HandleQueue("q", func(context.Context, *stepflowtest.Task) (any, error) {
			return nil, stepflowtest.Fail("fatal", "disk full")
		})
		j := env.Submit(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
		env.AwaitState(j.ID, domain.JobCompleted)
	})
	require.Contains(t, msg, "it ended FAILED")
	require.Contains(t, msg, "error fatal: disk full")
	require.True(t, strings.Contains(msg, "job_failed"), "the events are shown")
}

func TestHandlersMayNotMoveTheClock(t *testing.T) {
	t.Parallel()
	msg := runFailing(t, func(env *stepflowtest.Env) {
		env.HandleQueue("q", func(context.Context, *stepflowtest.Task) (any, error) {
			env.Advance(time.Minute)
			return nil, nil
		})
		env.Submit(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
		env.RunUntilIdle()
	})
	require.Contains(t, msg, "Advance called from a handler")
}
