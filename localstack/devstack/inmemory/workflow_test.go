package inmemory_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// The workflows, over the stack's HTTP API.

func TestWaitResumesOnItsSignal(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "paid", "action": map[string]any{"type": "wait", "signal": "payment", "timeout_seconds": 3600}},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobParked, j.State, "its deadline is beyond the timer threshold: parked")
	require.Equal(t, domain.StepWaiting, j.Steps[0].State)
	require.Zero(t, h.Sweep(t).Due, "the sweep never touches a waiting job")

	status, _ := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", stacktest.KeyB, map[string]any{"name": "payment"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, body := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "pay ment"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"name"`)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "payment", "payload": map[string]any{"amount": 5}, "id": "pay-1"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"amount":5}`, string(j.Steps[1].Output), "the payload is the wait's output, the next step's input")
	types := h.EventTypes(t, keyA, j.ID)
	require.Contains(t, types, "wait_completed")
	require.Contains(t, types, domain.NoteSignalReceived)

	status, body = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "payment"})
	require.Equal(t, "the job is COMPLETED; only a job that has not finished takes signals", conflict(t, status, body), "a finished job takes no signal")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestRedriveRunsAFailedJobToCompletion(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "prep", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "work", "action": map[string]any{"type": "worker", "queue": "r"}, "retry": map[string]any{"max_attempts": 1}},
	}})
	l := claim(t, h, keyA, "r", "w", 1, 10)
	require.Len(t, l, 1)
	status, body := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", keyA, nil)
	require.Equal(t, "the job is RUNNING; only a FAILED job can be redriven", conflict(t, status, body))
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "fatal", "message": "disk full"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)

	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, status)
	var redriven stacktest.Job
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", keyA, nil, &redriven)
	require.Equal(t, domain.JobQueued, redriven.State)
	l = claim(t, h, keyA, "r", "w", 1, 10)
	require.Len(t, l, 1)
	require.Equal(t, 2, l[0].Attempt, "attempts number on")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": "ok"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Len(t, j.Steps[0].Attempts, 1, "the succeeded step did not run again")
	require.Contains(t, h.EventTypes(t, keyA, j.ID), "job_requeued")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestReplanAddsStepsThatRun(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "plan", "action": map[string]any{"type": "worker", "queue": "planner"}},
		map[string]any{"id": "report", "action": map[string]any{"type": "pass"}},
	}})
	l := claim(t, h, keyA, "planner", "w", 1, 10)
	require.Len(t, l, 1)
	status, body := h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan",
		"steps": []any{map[string]any{"id": "report", "action": map[string]any{"type": "pass"}}}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"steps[0].id"`)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan", "message": "split in two",
		"steps": []any{
			map[string]any{"id": "part-1", "action": map[string]any{"type": "pass"}},
			map[string]any{"id": "part-2", "action": map[string]any{"type": "worker", "queue": "parts"}},
		}}, nil)
	l = claim(t, h, keyA, "parts", "w", 1, 10)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": "p2"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var deps struct {
		Deps map[string]json.RawMessage `json:"deps"`
	}
	require.NoError(t, json.Unmarshal(j.Steps[1].Output, &deps))
	require.Len(t, deps.Deps, 2, "report ran on both new steps")
	require.Equal(t, domain.StepFailed, j.Steps[0].State, "the replanned step")
	h.CheckReplay(t, tenantA, j.ID)
}
