package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

const (
	keyA    = stacktest.KeyA
	tenantA = stacktest.TenantA
)

// The stack's wiring, end to end: a job submitted to the enqueue
// function over HTTP is run by the execute function off its ready queue
// (the SQS event source mapping) and read back. What the engine decides
// for it is shared/engine's TestPassJobCompletes, on the in-memory
// adapters.
func TestAJobRunsThroughTheStacksFunctions(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hello", "action": map[string]any{"type": "pass"}}}, "payload": map[string]any{"hi": 1}})
	require.Equal(t, domain.JobQueued, j.State)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Equal(t, domain.StepSucceeded, j.Steps[0].State)
	require.JSONEq(t, `{"hi":1}`, string(j.Steps[0].Output))
	require.Len(t, j.Steps[0].Attempts, 1)
	require.Equal(t, domain.AttemptSucceeded, j.Steps[0].Attempts[0].State)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_running", "step_succeeded", "job_completed"}, h.EventTypes(t, keyA, j.ID))
	h.CheckReplay(t, tenantA, j.ID)
}

type claimed struct {
	Leases []wire.ClaimedLease `json:"leases"`
}

func claim(t *testing.T, h *stacktest.Harness, key, queue, worker string, max, wait int) []wire.ClaimedLease {
	t.Helper()
	var c claimed
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/claim", key, map[string]any{"queue": queue, "max": max, "wait_seconds": wait, "worker": worker}, &c)
	return c.Leases
}

func TestExternalWorkerClaimsHeartbeatsAndCompletes(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "render", "action": map[string]any{"type": "worker", "queue": "gpu", "lease_seconds": 30}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}, "payload": map[string]any{"frame": 7}})

	leases := claim(t, h, keyA, "gpu", "w1", 1, 5)
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, j.ID, l.JobID)
	require.Equal(t, "render", l.StepID)
	require.Equal(t, 1, l.Attempt)
	require.JSONEq(t, `{"frame":7}`, string(l.Input))
	require.Equal(t, j.ID+"/render/1", l.IdempotencyKey)

	var hb wire.HeartbeatResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/heartbeat", keyA, map[string]any{"extend_seconds": 60}, &hb)
	require.False(t, hb.CancelRequested)
	require.True(t, hb.ExpiresAt.After(l.ExpiresAt), "heartbeat extends the lease")

	var res wire.OutcomeResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": map[string]any{"png": "s3://x"}}, &res)
	require.Equal(t, domain.StepSucceeded, res.StepState)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"png":"s3://x"}`, string(j.Steps[1].Output), "the next step ran on the worker's output")
	require.Equal(t, "w1", j.Steps[0].Attempts[0].Worker)
	types := h.EventTypes(t, keyA, j.ID)
	require.Contains(t, types, "job_leased", "a worker's claim is job_leased")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestSixWorkersNeverShareALease(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	const jobs, workers = 20, 6
	ids := map[string]bool{}
	for range jobs {
		j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "pool", "lease_seconds": 120}}}})
		ids[j.ID] = true
	}

	var mu sync.Mutex
	var all []wire.ClaimedLease
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(all) >= jobs
				mu.Unlock()
				if done {
					return
				}
				got := claim(t, h, keyA, "pool", fmt.Sprintf("w%d", w), 3, 1)
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	require.Len(t, all, jobs, "every job claimed exactly once")
	seen := map[string]bool{}
	for _, l := range all {
		require.False(t, seen[l.JobID], "job %s was leased twice", l.JobID)
		seen[l.JobID] = true
		require.True(t, ids[l.JobID])
		require.Equal(t, 1, l.Attempt)
	}
	for _, l := range all {
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, nil, nil)
	}
	for id := range ids {
		j := h.AwaitState(t, keyA, id, domain.JobCompleted)
		require.Len(t, j.Steps[0].Attempts, 1)
		h.CheckReplay(t, tenantA, id)
	}
}

func TestTwoInstancesDoNotShareData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	endpoint := stacktest.Endpoint(t)
	keys := map[string]string{"same-key": "dev"}
	a, err := devstack.Start(ctx, devstack.Options{EndpointURL: endpoint, StackName: "iso-a", APIKeys: keys, PollWait: time.Second})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := devstack.Start(ctx, devstack.Options{EndpointURL: endpoint, StackName: "iso-b", APIKeys: keys, PollWait: time.Second})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NotEqual(t, a.URL, b.URL)

	ha, hb := &stacktest.Harness{Stack: a, HTTP: http.DefaultClient}, &stacktest.Harness{Stack: b, HTTP: http.DefaultClient}
	j := ha.Submit(t, "same-key", map[string]any{"steps": []any{map[string]any{"id": "x", "action": map[string]any{"type": "pass"}}}})
	ha.AwaitState(t, "same-key", j.ID, domain.JobCompleted)
	status, _ := hb.Call(t, http.MethodGet, "/v1/jobs/"+j.ID, "same-key", nil)
	require.Equal(t, http.StatusNotFound, status)
	var list struct{ Jobs []json.RawMessage }
	hb.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", "same-key", nil, &list)
	require.Empty(t, list.Jobs)
}
