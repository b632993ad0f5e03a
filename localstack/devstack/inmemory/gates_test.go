package inmemory_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

func TestNeedsUserStepResumesWithThePersonsInput(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"doc": "x"}, "steps": []any{
		map[string]any{"id": "review", "action": map[string]any{"type": "worker", "queue": "people"}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	l := claim(t, h, keyA, "people", "w1", 1, 5)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "needs_user", "prompt": "Which locale?"}, nil)

	var got struct {
		State domain.JobState `json:"state"`
		Steps []struct {
			State     domain.StepState `json:"state"`
			Prompt    string           `json:"prompt"`
			UserInput json.RawMessage  `json:"user_input"`
		} `json:"steps"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.Equal(t, domain.JobWaiting, got.State)
	require.Equal(t, domain.StepNeedsUser, got.Steps[0].State)
	require.Equal(t, "Which locale?", got.Steps[0].Prompt)

	path := "/v1/jobs/" + j.ID + "/steps/review/resume"
	status, _ := h.Call(t, http.MethodPost, path, stacktest.KeyB, map[string]any{"input": "fr"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/nope/resume", keyA, map[string]any{"input": "fr"})
	require.Equal(t, http.StatusNotFound, status, "an unknown step")
	status, body := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/after/resume", keyA, map[string]any{"input": "fr"})
	require.Equal(t, `step "after" is WAITING_DEPS; only a step waiting on a person (NEEDS_USER) can be resumed`, conflict(t, status, body), "a step that is not waiting")

	got.Steps = nil // decode afresh: an absent prompt must read empty
	h.JSON(t, http.StatusOK, http.MethodPost, path, keyA, map[string]any{"input": map[string]any{"locale": "fr"}}, &got)
	require.Equal(t, domain.StepPending, got.Steps[0].State)
	require.Empty(t, got.Steps[0].Prompt)
	status, body = h.Call(t, http.MethodPost, path, keyA, map[string]any{"input": "again"})
	require.Equal(t, `step "review" is PENDING; only a step waiting on a person (NEEDS_USER) can be resumed`, conflict(t, status, body), "resumed already")

	again := claim(t, h, keyA, "people", "w2", 1, 5)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempt)
	require.JSONEq(t, `{"doc":"x","user_input":{"locale":"fr"}}`, string(again[0].Input))
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+again[0].LeaseID+"/complete", keyA, map[string]any{"output": "done"}, nil)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	h.CheckReplay(t, tenantA, j.ID)
}

func eventsOf(t *testing.T, h *stacktest.Harness, id string) []domain.Event {
	t.Helper()
	return h.Events(t, keyA, id)
}

func TestApprovalGateHoldsItsJobUntilApproved(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "build", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}},
		map[string]any{"id": "deploy", "action": map[string]any{"type": "pass"}},
	}})
	j = h.Await(t, keyA, j.ID, "at the gate", func(j stacktest.Job) bool { return j.Steps[1].State == domain.StepNeedsUser })
	require.Equal(t, domain.JobWaiting, j.State)
	require.Equal(t, domain.StepWaitingDeps, j.Steps[2].State, "nothing runs past a closed gate")
	require.Empty(t, j.Steps[1].Attempts, "no executor ever runs a gate")

	gate := "/v1/jobs/" + j.ID + "/steps/gate/"
	status, _ := h.Call(t, http.MethodPost, gate+"approve", stacktest.KeyB, map[string]any{"by": "mallory"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/nope/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, http.StatusNotFound, status, "an unknown step")
	status, body := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/deploy/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, `step "deploy" is a pass step, not an approval gate; only an approval step can be approved (a step waiting on a person's input is resumed)`, conflict(t, status, body))
	status, body = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/gate/resume", keyA, map[string]any{"input": 1})
	require.Equal(t, `step "gate" is an approval gate; approve or reject it instead`, conflict(t, status, body))

	h.JSON(t, http.StatusOK, http.MethodPost, gate+"approve", keyA, map[string]any{"by": "ann", "comment": "ship it"}, nil)
	n := len(eventsOf(t, h, j.ID))
	h.JSON(t, http.StatusOK, http.MethodPost, gate+"approve", keyA, map[string]any{"by": "ann"}, nil)
	status, body = h.Call(t, http.MethodPost, gate+"reject", keyA, map[string]any{"by": "bob"})
	require.Equal(t, `step "gate" was approved already; a gate is decided once`, conflict(t, status, body), "reject after approve")
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	status, body = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", keyA, nil)
	require.Equal(t, "the job is COMPLETED; only a job that has not finished can be cancelled", conflict(t, status, body))
	evs := eventsOf(t, h, j.ID)
	var approved []domain.Event
	for _, e := range evs {
		if e.Step == "gate" && e.Type == "step_succeeded" {
			approved = append(approved, e)
		}
	}
	require.Len(t, approved, 1, "the second approve wrote nothing")
	require.Regexp(t, `^approved by ann \(key key_[0-9a-f]{12}\): ship it$`, approved[0].Detail)
	require.GreaterOrEqual(t, len(evs), n)
	h.CheckReplay(t, tenantA, j.ID)
}
