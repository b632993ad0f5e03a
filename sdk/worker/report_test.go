package worker_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
)

// pathCounter counts the requests a client sends, by the end of their
// path.
type pathCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (p *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	parts := strings.Split(r.URL.Path, "/")
	p.mu.Lock()
	p.counts[parts[len(parts)-1]]++
	p.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (p *pathCounter) count(last string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[last]
}

// Outcomes of tasks that end together are reported in one request (POST
// /v1/leases/batch), failures with successes; an outcome that ends alone
// goes by /complete, as it costs the same.
func TestOutcomesOfTasksThatEndTogetherGoInOneRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paths := b.countPaths(t)
	const n = 5
	ids, started, all := b.submitTogether(t, "together", n)
	// A long wait: only the last task's end sends the batch.
	b.start(t, worker.Options{Queue: "together", Concurrency: n, OutcomeWait: time.Hour}, func(ctx context.Context, task *worker.Task) (any, error) {
		var in struct{ I int }
		if err := task.Decode(&in); err != nil {
			return nil, err
		}
		if in.I < n {
			started.Done()
			<-all // every task ends together
		}
		if in.I == 0 {
			return nil, worker.Fail(client.ClassFatal, "no frame 0")
		}
		return map[string]int{"i": in.I}, nil
	})
	require.Equal(t, client.ClassFatal, b.awaitState(t, ids[0], client.JobFailed).Steps[0].Error.Class)
	for _, id := range ids[1:] {
		b.awaitState(t, id, client.JobCompleted)
	}
	require.Equal(t, 1, paths.count("batch"), "one request for the five outcomes")
	require.Zero(t, paths.count("complete"))
	require.Zero(t, paths.count("fail"))

	alone := b.submit(t, workerStep("together", 0), map[string]any{"i": n})
	j := b.awaitState(t, alone, client.JobCompleted)
	require.JSONEq(t, `{"i":5}`, string(j.Steps[0].Output))
	require.Equal(t, 1, paths.count("complete"), "an outcome with no other to wait for goes at once, alone")
	require.Equal(t, 1, paths.count("batch"))
}

// What a task reports it spent goes with its outcome, by each path: a
// batch of outcomes (successes and a failure), /complete and /fail alone;
// the job counts it as reported cost, on the step and its attempt.
func TestATaskReportsWhatItSpentWithItsOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paths := b.countPaths(t)
	const n = 3
	ids, started, all := b.submitTogether(t, "spend", n)
	b.start(t, worker.Options{Queue: "spend", Concurrency: n, OutcomeWait: time.Hour}, func(ctx context.Context, task *worker.Task) (any, error) {
		var in struct{ I int }
		if err := task.Decode(&in); err != nil {
			return nil, err
		}
		// Two calls of a cent each, and a tenth of one for its number.
		task.ReportCost(0.01)
		task.ReportCost(0.01 + float64(in.I)/1000)
		if in.I < n {
			started.Done()
			<-all // these end together: one batch
		}
		if in.I%2 == 0 {
			return nil, worker.Fail(client.ClassFatal, "spent and failed")
		}
		return map[string]int{"i": in.I}, nil
	})
	spent := func(i int) float64 { return 0.02 + float64(i)/1000 }
	check := func(id string, i int, state client.JobState) {
		t.Helper()
		j := b.awaitState(t, id, state)
		require.InDelta(t, spent(i), j.Cost.ReportedUSD, 1e-9, "job %d", i)
		require.InDelta(t, spent(i), j.Steps[0].CostUSD, 1e-9)
		require.InDelta(t, spent(i), j.Steps[0].Attempts[0].CostUSD, 1e-9)
		require.GreaterOrEqual(t, j.Cost.USD, j.Cost.ReportedUSD+j.Cost.EngineUSD-1e-9)
	}
	for i, id := range ids {
		state := client.JobCompleted
		if i%2 == 0 {
			state = client.JobFailed
		}
		check(id, i, state)
	}
	require.Equal(t, 1, paths.count("batch"))

	done := b.submit(t, workerStep("spend", 0), map[string]any{"i": n})
	check(done, n, client.JobCompleted)
	require.Equal(t, 1, paths.count("complete"), "alone, by /complete")
	failed := b.submit(t, workerStep("spend", 0), map[string]any{"i": n + 1})
	check(failed, n+1, client.JobFailed)
	require.Equal(t, 1, paths.count("fail"), "alone, by /fail")
	require.Equal(t, 1, paths.count("batch"))
}

// countPaths makes b's client count the requests it sends, by path.
func (b *bundle) countPaths(t *testing.T) *pathCounter {
	t.Helper()
	paths := &pathCounter{counts: map[string]int{}}
	c, err := client.New(client.Config{BaseURL: b.h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Timeout: time.Minute, Transport: paths}})
	require.NoError(t, err)
	b.c = c
	return paths
}

// submitTogether submits n jobs of one worker step on queue, input {"i"},
// and answers their ids, a WaitGroup of n for their tasks to mark started,
// and a channel closed once all have.
func (b *bundle) submitTogether(t *testing.T, queue string, n int) ([]string, *sync.WaitGroup, chan struct{}) {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, b.submit(t, workerStep(queue, 0), map[string]any{"i": i}))
	}
	started := &sync.WaitGroup{}
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	return ids, started, all
}
