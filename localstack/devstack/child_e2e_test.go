package devstack_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// childJob is a parent whose step "sub" runs a child job of one worker
// step on queue, then a pass step.
func childJob(queue string) map[string]any {
	return map[string]any{"payload": map[string]any{"doc": "hello"}, "steps": []any{
		map[string]any{"id": "sub", "action": map[string]any{"type": "job", "spec": map[string]any{"steps": []any{
			map[string]any{"id": "score", "action": map[string]any{"type": "worker", "queue": queue}}}}}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}}
}

// A child job runs under the same tenant on the step's input, linked both
// ways, and its output becomes the step's; another tenant finds neither.
func TestAChildJobsOutputBecomesTheStepsOutput(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, childJob("childq"))
	leases := claim(t, h, keyA, "childq", "w1", 1, 5)
	require.Len(t, leases, 1)
	require.JSONEq(t, `{"doc":"hello"}`, string(leases[0].Input), "the step's input is the child's payload")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA, map[string]any{"output": map[string]any{"score": 5}}, nil)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"score":5}`, string(j.Steps[0].Output))
	require.JSONEq(t, `{"score":5}`, string(j.Steps[1].Output))
	require.Len(t, j.Children, 1)
	require.Equal(t, j.Children[0], leases[0].JobID)
	child := h.Get(t, keyA, j.Children[0])
	require.Equal(t, domain.JobCompleted, child.State)
	require.NotNil(t, child.Parent)
	require.Equal(t, j.ID, child.Parent.Job)
	require.Equal(t, "sub", child.Parent.Step)

	var page struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?parent="+j.ID, keyA, nil, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, child.ID, page.Jobs[0].ID)
	code, _ := h.Call(t, http.MethodGet, "/v1/jobs?parent="+j.ID, stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, code, "another tenant's parent")
	code, _ = h.Call(t, http.MethodGet, "/v1/jobs/"+child.ID, stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, code, "another tenant's child")
	code, body := h.Call(t, http.MethodGet, "/v1/jobs?parent=nope", keyA, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(body), `"parent"`)
	h.CheckReplay(t, tenantA, j.ID)
	h.CheckReplay(t, tenantA, child.ID)
}

// Cancelling the parent cancels its running child, and the child's
// worker hears it.
func TestCancellingAParentCancelsItsChild(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, childJob("childc"))
	leases := claim(t, h, keyA, "childc", "w1", 1, 5)
	require.Len(t, leases, 1)
	running := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobRunning, running.State)
	require.Equal(t, leases[0].JobID, running.Steps[0].Child, "the step waits on its child")

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", keyA, nil, nil)
	h.AwaitState(t, keyA, leases[0].JobID, domain.JobCancelled)
	var hb struct {
		CancelRequested bool `json:"cancel_requested"`
	}
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/heartbeat", keyA, map[string]any{"extend_seconds": 30}, &hb)
	require.True(t, hb.CancelRequested)
	h.CheckReplay(t, tenantA, j.ID)
}
