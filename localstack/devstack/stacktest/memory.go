package stacktest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/runner"
	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
)

// NewInMemory serves the stack's HTTP API as the runner serves it
// (template.yaml's routes, each to its own function's handler) over the
// engine on the in-memory adapters (shared/memory) instead of the
// emulator, and plays the SQS event source mapping of the ready queues
// with a goroutine. A test of the API's behaviour runs on it in
// milliseconds, with the race detector; what only the emulator has (the
// timer state machine, S3, the event bus, Lambda, the stack's options)
// is New's. The engine keeps its defaults, which are the template's; the
// clock is real time plus what the test advances, as New's. Only the
// Harness's URL, Engine and API are set in its Stack.
func NewInMemory(t testing.TB) *Harness {
	t.Helper()
	clock := &Clock{}
	store := memory.NewStore()
	store.AddKey(TenantA, KeyA)
	store.AddKey(TenantB, KeyB)
	queue := memory.NewQueue(clock.Now)
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng := engine.New(engine.Config{
		Store: store, Queue: longPollQueue{queue}, Runner: &actions.Runner{}, BuiltinLease: memory.DefaultReadyVisibility, Log: log,
		Now: clock.Now, Schedules: memory.NewSchedules(store), Blobs: memory.NewBlobs(clock.Now),
	})

	path, err := devstack.FindTemplate()
	require.NoError(t, err)
	tmpl, err := bootstrap.Parse(path)
	require.NoError(t, err)
	newAPI := func(fns ...httpapi.Function) *httpapi.API {
		a := httpapi.New(eng, log, fns...)
		a.MetricsText = prometheus.Exposition // as functions/enqueue wires it
		a.OperatorText = prometheus.OperatorExposition
		return a
	}
	r := &runner.Runner{
		Stack: &bootstrap.Stack{Functions: tmpl.Functions()}, Log: log,
		Handlers: runner.Handlers{HTTP: map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
			"EnqueueFunction": newAPI(httpapi.EnqueueFunction).Handle,
			"ClaimFunction":   newAPI(httpapi.ClaimFunction).Handle,
		}},
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		executeReady(ctx, eng, queue)
	}()
	t.Cleanup(func() { cancel(); <-stopped })

	h := &Harness{Stack: &devstack.Stack{URL: srv.URL, Engine: eng, API: newAPI()}, Clock: clock, HTTP: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(func() { h.checkEveryJob(t) })
	return h
}

// executeReady plays the event source mapping of the ready queues until
// ctx ends: each message goes to the engine as the execute function hands
// it over, and is deleted unless it was held or failed.
func executeReady(ctx context.Context, eng *engine.Engine, q *memory.Queue) {
	for ctx.Err() == nil {
		ds := q.TakeReady(10)
		if len(ds) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		for _, d := range ds {
			if res, err := eng.Execute(ctx, d); err == nil && res != engine.Held {
				_ = q.Ack(ctx, d.Token)
			}
		}
	}
}

// longPollQueue waits as SQS's long poll does: a take that finds nothing
// looks again until its wait has passed.
type longPollQueue struct{ *memory.Queue }

func (q longPollQueue) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	deadline := time.Now().Add(wait)
	for {
		ds, err := q.Queue.Take(ctx, tenant, name, lanes, max, wait)
		if err != nil || len(ds) > 0 || !time.Now().Before(deadline) {
			return ds, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// testLog sends the engine's warnings to the test's log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
