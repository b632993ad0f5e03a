package devstack_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/engine"
)

// manyWorkerSteps are n steps, each on a worker queue of its own.
func manyWorkerSteps(n int, prefix string) []any {
	steps := make([]any, n)
	for i := range steps {
		steps[i] = map[string]any{"id": fmt.Sprintf("s%d", i), "action": map[string]any{"type": "worker", "queue": fmt.Sprintf("%s%d", prefix, i)}}
	}
	return steps
}

func listQueues(t *testing.T, h *stacktest.Harness, key string) []engine.WorkerQueue {
	t.Helper()
	var out struct{ Queues []engine.WorkerQueue }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/queues", key, nil, &out)
	return out.Queues
}

// A replan naming 60 new worker queues was refused at steps[44] but left 44
// SQS queues behind, using up the tenant's bound for good; a refused submit
// did the same. A request's queues are counted before any is made.
func TestRefusedRequestsMakeNoWorkerQueue(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	h.Submit(t, keyA, workerStep("planner"))
	before := workerQueueCount(t, h)

	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": manyWorkerSteps(60, "sub-")})
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"field":"steps[49].action.queue"`, "the first queue past the bound of 50 (the tenant has one)")
	require.Contains(t, string(body), "STEPFLOW_MAX_WORKER_QUEUES")
	require.Equal(t, before, workerQueueCount(t, h), "a refused submit makes no queue")

	l := claim(t, h, keyA, "planner", "w", 1, 10)
	require.Len(t, l, 1)
	status, body = h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{
		"class": "replan", "message": "fan out", "steps": manyWorkerSteps(60, "re-")})
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"field":"steps[49].action.queue"`)
	require.Equal(t, before, workerQueueCount(t, h), "a refused replan makes no queue")
	require.Len(t, listQueues(t, h, keyA), 1)

	// What fits is made: 49 more queues take the tenant to its bound.
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{
		"class": "replan", "message": "fan out", "steps": manyWorkerSteps(49, "re-")}, nil)
	require.Equal(t, before+49, workerQueueCount(t, h))
}

// A worker queue no job names for the idle time is removed by the sweep
// (once empty) and no longer counts against the bound; GET /v1/queues
// answers each queue's depth, the calling tenant's only.
func TestIdleWorkerQueuesAreRemovedAndFreeTheBound(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withEnv("STEPFLOW_MAX_WORKER_QUEUES", "2"), withEnv("STEPFLOW_WORKER_QUEUE_IDLE_SECONDS", "3600"))
	h.Submit(t, keyA, workerStep("done"))
	h.Submit(t, keyA, workerStep("busy"))
	h.Submit(t, keyA, workerStep("busy"))
	l := claim(t, h, keyA, "done", "w", 1, 10)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": 1}, nil)
	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, workerStep("third"))
	require.Equal(t, http.StatusBadRequest, status, "at the bound: %s", body)

	qs := listQueues(t, h, keyA)
	require.Len(t, qs, 2)
	require.Equal(t, "busy", qs[0].Name)
	require.Equal(t, int64(2), qs[0].Visible, "the busy queue holds its two jobs' messages")
	require.Equal(t, []engine.LaneDepth{{Priority: 1, Visible: 2}}, qs[0].Lanes)
	require.Equal(t, "done", qs[1].Name)
	require.Zero(t, qs[1].Visible+qs[1].InFlight+qs[1].Delayed)
	require.WithinDuration(t, h.Clock.Now(), qs[1].LastUsed, time.Minute)
	require.Empty(t, listQueues(t, h, stacktest.KeyB), "another tenant sees none of a's queues")

	require.Zero(t, h.Sweep(t).QueuesRemoved, "not idle yet")
	h.Clock.Advance(time.Hour + time.Second)
	rep := h.Sweep(t)
	require.Equal(t, 1, rep.QueuesRemoved, "%+v", rep)
	qs = listQueues(t, h, keyA)
	require.Len(t, qs, 1, "the busy queue is kept")
	require.Equal(t, "busy", qs[0].Name)
	require.Empty(t, claim(t, h, keyA, "done", "w", 1, 0), "the removed queue is gone")

	h.Submit(t, keyA, workerStep("third")) // the removed queue no longer counts
}
