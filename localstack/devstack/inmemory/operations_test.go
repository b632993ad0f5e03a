package inmemory_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// Resource pools, priorities, failure classes and timeouts, over HTTP
// over the stack's API on the in-memory adapters.

func TestResourcePoolOverHTTP(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	for _, id := range []string{"gpu-1", "gpu-2"} {
		h.JSON(t, http.StatusCreated, http.MethodPut, "/v1/resources/"+id, keyA, map[string]any{"capabilities": []string{"gpu"}, "labels": map[string]string{"zone": "a"}, "capacity": 1}, nil)
	}
	h.JSON(t, http.StatusOK, http.MethodPut, "/v1/resources/gpu-2", keyA, map[string]any{"capabilities": []string{"gpu"}, "labels": map[string]string{"zone": "a"}, "capacity": 1}, nil)
	status, _ := h.Call(t, http.MethodGet, "/v1/resources/gpu-1", stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, status, "another tenant's resource")
	status, body := h.Call(t, http.MethodPut, "/v1/resources/bad", keyA, map[string]any{"capacity": 0})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"capacity"`)
	status, body = h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "s", "action": map[string]any{"type": "sleep", "seconds": 1}, "requires": map[string]any{"capabilities": []string{"gpu"}}}}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"steps[0].requires"`)

	var jobs []string
	for i := range 4 {
		j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"n": i}, "steps": []any{
			map[string]any{"id": "train", "action": map[string]any{"type": "worker", "queue": "ml", "lease_seconds": 30},
				"requires": map[string]any{"capabilities": []string{"gpu"}, "labels": map[string]string{"zone": "a"}}},
		}})
		jobs = append(jobs, j.ID)
	}
	first := claim(t, h, keyA, "ml", "box-1", 4, 2)
	require.Len(t, first, 2, "two resources of one slot: two leases, two steps wait")
	require.NotEqual(t, first[0].Resource.ID, first[1].Resource.ID)
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, h.InUse(t))
	require.Empty(t, claim(t, h, keyA, "ml", "box-1", 4, 1), "no slot is free")
	waiting := 0
	for _, id := range jobs {
		if h.Steps(t, id)[0].ResourceWait != nil {
			waiting++
		}
	}
	require.Equal(t, 2, waiting)

	// A resource failure switches the step to another resource and puts
	// the first on its avoid list; the freed slot wakes a waiter.
	failed := first[0]
	var res wire.OutcomeResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+failed.LeaseID+"/fail", keyA, map[string]any{"class": "resource", "message": "CUDA error"}, &res)
	require.Equal(t, domain.StepSwitchingResource, res.StepState)
	require.Equal(t, []string{failed.Resource.ID}, h.Steps(t, failed.JobID)[0].Avoid)
	woken := claim(t, h, keyA, "ml", "box-2", 4, 5)
	require.Len(t, woken, 1, "the waiter woken by the freed slot starts")
	require.Equal(t, failed.Resource.ID, woken[0].Resource.ID)
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, h.InUse(t))

	// The other holder is killed: its slot comes back when its lease
	// expires (the sweep reclaims it), and the steps in line start.
	h.Clock.Advance(31*time.Second + domain.DispatchGrace)
	require.Equal(t, 2, h.Sweep(t).Reclaimed, "both live leases had expired: their holders stopped heartbeating")
	var next []wire.ClaimedLease
	for range 5 {
		if next = append(next, claim(t, h, keyA, "ml", "box-3", 4, 1)...); len(next) == 2 {
			break
		}
	}
	require.Len(t, next, 2)
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, h.InUse(t))
	for _, l := range next {
		if l.JobID == failed.JobID {
			require.NotEqual(t, failed.Resource.ID, l.Resource.ID, "never the resource it avoids")
		}
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": "ok"}, nil)
	}
	status, _ = h.Call(t, http.MethodDelete, "/v1/resources/gpu-1", keyA, nil)
	require.Contains(t, []int{http.StatusOK, http.StatusConflict}, status)
	var list struct {
		Resources []stacktest.ResourceView `json:"resources"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/resources", keyA, nil, &list)
	require.NotEmpty(t, list.Resources)
}

func TestP0WorkerJobIsClaimedFirstOverHTTP(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	for range 15 {
		h.Submit(t, keyA, map[string]any{"priority": "P2", "steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "qa"}}}})
	}
	urgent := h.Submit(t, keyA, map[string]any{"priority": "P0", "steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "qa"}}}})
	got := claim(t, h, keyA, "qa", "w1", 1, 1)
	require.Len(t, got, 1)
	require.Equal(t, urgent.ID, got[0].JobID, "P0 first, though submitted after 15 P2 jobs")
	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"priority": "P3", "steps": []any{map[string]any{"id": "p", "action": map[string]any{"type": "pass"}}}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"priority"`)
}

func TestFailureClassesAndWorkerTimeoutOverHTTP(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "net"}}}})
	l := claim(t, h, keyA, "net", "w1", 1, 2)
	require.Len(t, l, 1)
	failedAt := time.Now()
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "network", "message": "connection refused"}, nil)
	s := h.Steps(t, j.ID)[0]
	require.Equal(t, domain.StepRetrying, s.State)
	require.WithinDuration(t, failedAt.Add(30*time.Second), *s.NextRunAt, 5*time.Second, "no retry policy on the step: the network rule, 30 s first")
	h.Clock.Advance(31 * time.Second)
	h.Sweep(t) // its delayed message is still on its way in real time: the sweep sends it again
	h.Clock.Advance(domain.DispatchGrace)
	h.Sweep(t)
	l = claim(t, h, keyA, "net", "w1", 1, 2)
	require.Len(t, l, 1)
	require.Equal(t, 2, l[0].Attempt)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": 1}, nil)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	// timeout_seconds 3 on a worker that keeps heartbeating.
	k := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "slowpoke", "lease_seconds": 60}, "timeout_seconds": 3}}})
	l = claim(t, h, keyA, "slowpoke", "w1", 1, 2)
	require.Len(t, l, 1)
	require.NotNil(t, l[0].Deadline)
	status := http.StatusOK
	for range 10 {
		if status, _ = h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/heartbeat", keyA, map[string]any{"extend_seconds": 60}); status != http.StatusOK {
			break
		}
		h.Clock.Advance(time.Second)
	}
	require.Equal(t, http.StatusConflict, status, "past timeout_seconds the heartbeat answers 409")
	s = h.Steps(t, k.ID)[0]
	require.Equal(t, domain.StepRetrying, s.State, "TIMED_OUT, then the timeout rule: one retry after 5 minutes")
	require.Equal(t, domain.AttemptTimeout, s.Attempts[0].State)
	require.Contains(t, h.EventTypes(t, keyA, k.ID), domain.StepTimedOut.EventType())
}

// A built-in step that requires a capability no resource offers waits in
// line; past its resource_wait_seconds the sweep fails it with class
// resource, naming the capability, and the job FAILED says why, on the
// job and in its events. A bad bound answers 400 naming the field.
func TestResourceWaitBoundOverHTTP(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "s", "action": map[string]any{"type": "pass"}, "requires": map[string]any{"capabilities": []string{"quantum"}}, "resource_wait_seconds": 0.5}}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"steps[0].resource_wait_seconds"`)

	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "solve", "action": map[string]any{"type": "pass"}, "requires": map[string]any{"capabilities": []string{"quantum"}}, "resource_wait_seconds": 2}}})
	require.Eventually(t, func() bool { return h.Steps(t, j.ID)[0].ResourceWait != nil }, 30*time.Second, 20*time.Millisecond, "the step waits for a resource")
	require.Equal(t, domain.JobQueued, h.Get(t, keyA, j.ID).State)

	h.Clock.Advance(2 * time.Second)
	h.Sweep(t)
	var got struct {
		State domain.JobState      `json:"state"`
		Error *domain.StepError    `json:"error"`
		Steps []stacktest.StepView `json:"steps"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, domain.ClassResource, got.Error.Class)
	require.Contains(t, got.Error.Message, "quantum")
	s := h.Get(t, keyA, j.ID).Steps[0]
	require.Equal(t, domain.StepFailed, s.State)
	require.Equal(t, domain.ClassResource, s.Error.Class)
	require.Contains(t, s.Error.Message, "capabilities quantum")
	require.Empty(t, s.Attempts, "it never ran")
	evs := h.Events(t, keyA, j.ID)
	last := evs[len(evs)-1]
	require.Equal(t, "job_failed", last.Type)
	require.Contains(t, last.Detail, "quantum")
}
