package devstack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// A critic's verdict, reported by a worker, decides which branch runs
// (the agent platform's shape); the skipped branch never runs, and the
// join runs on the one that did.
func TestAConditionOnAWorkersOutputPicksTheBranch(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"task": "t1"}, "steps": []any{
		map[string]any{"id": "critic", "action": map[string]any{"type": "worker", "queue": "critics"}},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}, "depends_on": []string{"critic"}, "when": "steps.critic.output.verdict == 'approve'"},
		map[string]any{"id": "revise", "action": map[string]any{"type": "worker", "queue": "writers"}, "depends_on": []string{"critic"}, "when": "steps.critic.output.verdict == 'revise'"},
		map[string]any{"id": "report", "action": map[string]any{"type": "pass"}, "depends_on": []string{"ship", "revise"}},
	}})
	leases := claim(t, h, keyA, "critics", "w1", 1, 5)
	require.Len(t, leases, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA, map[string]any{"output": map[string]any{"verdict": "approve"}}, nil)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	states := map[string]domain.StepState{}
	for _, s := range j.Steps {
		states[s.ID] = s.State
	}
	require.Equal(t, map[string]domain.StepState{"critic": domain.StepSucceeded, "ship": domain.StepSucceeded, "revise": domain.StepSkipped, "report": domain.StepSucceeded}, states)
	require.Empty(t, j.Steps[2].Attempts, "the skipped step never ran")
	require.JSONEq(t, `{"payload":{"task":"t1"},"deps":{"ship":{"payload":{"task":"t1"},"deps":{"critic":{"verdict":"approve"}}},"revise":null}}`, string(j.Steps[3].Output))
	require.Contains(t, h.EventTypes(t, keyA, j.ID), "step_skipped")
	h.CheckReplay(t, tenantA, j.ID)
}

// A condition is checked at submit: a bad one answers 400 naming it, and
// nothing is written.
func TestABadConditionIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	code, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "pass"}, "when": "steps.c.output == 1"},
	}})
	require.Equal(t, http.StatusBadRequest, code, string(body))
	var e struct {
		Error struct{ Field, Message string }
	}
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, "steps[1].when", e.Error.Field)
	require.Contains(t, e.Error.Message, "names steps.c, which the step does not depend on (it depends on a)")
	var list struct{ Jobs []any }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &list)
	require.Empty(t, list.Jobs)
}

// A worker is handed the input its step's expression makes, and the step
// keeps what its output expression makes of the worker's result; an
// output expression that cannot be evaluated fails its attempt, saying
// why.
func TestShapedInputsAndOutputs(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"site": "a.example", "n": 2}, "steps": []any{
		map[string]any{"id": "fetch", "action": map[string]any{"type": "pass"}, "input": "{'url': 'https://' + payload.site}"},
		map[string]any{"id": "judge", "action": map[string]any{"type": "worker", "queue": "judges"}, "depends_on": []string{"fetch"},
			"input": "{'url': steps.fetch.output.url, 'twice': payload.n * 2.0}", "output": "{'verdict': output.review.verdict}"},
	}})
	leases := claim(t, h, keyA, "judges", "w1", 1, 5)
	require.Len(t, leases, 1)
	require.JSONEq(t, `{"url":"https://a.example","twice":4}`, string(leases[0].Input))
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA,
		map[string]any{"output": map[string]any{"review": map[string]any{"verdict": "ok", "text": "long"}}}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"url":"https://a.example"}`, string(j.Steps[0].Output))
	require.JSONEq(t, `{"verdict":"ok"}`, string(j.Steps[1].Output))

	bad := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}, "output": "output.missing.deeper"},
	}})
	bad = h.AwaitState(t, keyA, bad.ID, domain.JobFailed)
	require.Equal(t, domain.StepFailed, bad.Steps[0].State)
	require.Equal(t, "output: no such key: missing", bad.Steps[0].Error.Message)
}

// A condition reads what the job keeps in S3 as well: a payload and a
// worker's output over the inline limit are fetched for the decision.
func TestAConditionReadsLargeData(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	long := strings.Repeat("x", 20<<10)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"mode": "full", "notes": long}, "steps": []any{
		map[string]any{"id": "critic", "action": map[string]any{"type": "worker", "queue": "big"}, "when": "payload.mode == 'full'"},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}, "depends_on": []string{"critic"}, "when": "steps.critic.output.verdict == 'approve'"},
		map[string]any{"id": "revise", "action": map[string]any{"type": "pass"}, "depends_on": []string{"critic"}, "when": "steps.critic.output.verdict != 'approve'"},
	}})
	leases := claim(t, h, keyA, "big", "w1", 1, 5)
	require.Len(t, leases, 1, "the condition on the stored payload held")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA,
		map[string]any{"output": map[string]any{"verdict": "approve", "text": long}}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Equal(t, domain.StepSucceeded, j.Steps[1].State)
	require.Equal(t, domain.StepSkipped, j.Steps[2].State)
	var got struct {
		Steps []struct {
			ID        string          `json:"id"`
			OutputRef *domain.DataRef `json:"output_ref"`
		} `json:"steps"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.NotNil(t, got.Steps[0].OutputRef, "the critic's output is kept in S3")
}
