package devstack_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// Resource pools, priorities, failure classes and timeouts, over HTTP
// against a whole local stack on the emulator.

func TestP0BuiltinJobIsNotQueuedBehindAP2Backlog(t *testing.T) {
	t.Parallel()
	// As on AWS (each mapping its MaximumConcurrency), and as `make dev`
	// runs them, fitted to a machine of eight invocations per function.
	for _, machine := range []int{0, 8} {
		t.Run(fmt.Sprintf("machine_invocations=%d", machine), func(t *testing.T) {
			t.Parallel()
			testP0NotBehindP2(t, machine)
		})
	}
}

func testP0NotBehindP2(t *testing.T, machine int) {
	// The P2 jobs call an endpoint that answers only once the test lets
	// it: every invocation the P2 mapping may run (its MaximumConcurrency)
	// is held, and the rest of the backlog stays on its queue. The P0 job
	// has its own queue and mapping, so it completes meanwhile.
	var started atomic.Int32
	release := make(chan struct{})
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`"done"`))
	}))
	t.Cleanup(held.Close)
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // runs before held.Close, which waits for held requests
	h := stacktest.New(t, func(o *devstack.Options) { o.HTTPAllow = "127.0.0.1/32"; o.MachineInvocations = machine })
	var execute bootstrap.Function
	for _, f := range h.Resources.Functions {
		if f.LogicalID == "ExecuteFunction" {
			execute = f
		}
	}
	caps := h.Runner.MappingInvocations(execute)
	if machine > 0 {
		require.Equal(t, map[string]int{"ReadyQueueP0": 4, "ReadyQueueP1": 2, "ReadyQueueP2": 1}, caps, "20, 10 and 5 scaled by 8/35, at least one")
	} else {
		require.Equal(t, map[string]int{"ReadyQueueP0": 20, "ReadyQueueP1": 10, "ReadyQueueP2": 5}, caps, "the template's MaximumConcurrency")
	}

	// The first P2 jobs are submitted one at a time, each once the one
	// before is running, so each of the P2 mapping's invocations (its
	// MaximumConcurrency, or its share of the machine) holds one; the rest
	// of the 60 queue behind them.
	const backlog = 60
	p2Concurrency := caps["ReadyQueueP2"]
	var p2 []string
	for i := range backlog {
		p2 = append(p2, h.Submit(t, keyA, map[string]any{"priority": 2, "steps": []any{map[string]any{"id": "h", "action": map[string]any{"type": "http", "url": held.URL}}}}).ID)
		if i < p2Concurrency {
			require.Eventually(t, func() bool { return started.Load() == int32(i+1) }, 30*time.Second, 10*time.Millisecond, "P2 job %d is running", i)
		}
	}
	urgent := h.Submit(t, keyA, map[string]any{"priority": "P0", "steps": []any{map[string]any{"id": "p", "action": map[string]any{"type": "pass"}}}})
	h.AwaitState(t, keyA, urgent.ID, domain.JobCompleted)
	require.Equal(t, int32(p2Concurrency), started.Load(), "the P0 job started before %d of the %d P2 jobs ahead of it", backlog-p2Concurrency, backlog)
	for _, id := range p2 {
		require.NotEqual(t, domain.JobCompleted, h.Get(t, keyA, id).State, "no P2 job had finished")
	}
	let()
	for _, id := range p2 {
		h.AwaitState(t, keyA, id, domain.JobCompleted)
	}
}
