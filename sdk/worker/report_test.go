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
	paths := &pathCounter{counts: map[string]int{}}
	c, err := client.New(client.Config{BaseURL: b.h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Timeout: time.Minute, Transport: paths}})
	require.NoError(t, err)
	b.c = c
	const n = 5
	var ids []string
	for i := range n {
		ids = append(ids, b.submit(t, workerStep("together", 0), map[string]any{"i": i}))
	}
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
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
