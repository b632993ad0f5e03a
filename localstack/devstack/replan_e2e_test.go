package devstack_test

// Replans that would close a dependency cycle, and signal floods with names
// no wait listens for: each probe of issue 17 kept as a test over HTTP on
// the emulator.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

func passStep(id string, deps ...string) map[string]any {
	s := map[string]any{"id": id, "action": map[string]any{"type": "pass"}}
	if len(deps) > 0 {
		s["depends_on"] = deps
	}
	return s
}

// A worker's replan whose new step depends on a step after the replanned
// one (directly, or three steps down) answers 400 naming the dependency,
// and writes nothing: the job, its events and the tenant's worker queues
// are as they were, and the lease still takes a good outcome.
func TestReplanThatClosesACycleIsRefused(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "x", "action": map[string]any{"type": "worker", "queue": "planner"}},
		passStep("y", "x"), passStep("z", "y"), passStep("w", "z"),
	}})
	l := claim(t, h, keyA, "planner", "w", 1, 10)
	require.Len(t, l, 1)
	_, before := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil)
	events := h.EventTypes(t, keyA, j.ID)
	queues := workerQueueCount(t, h)

	for _, on := range []string{"y", "w"} {
		status, body := h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan", "steps": []any{
			map[string]any{"id": "fresh", "action": map[string]any{"type": "worker", "queue": "fresh-queue"}},
			map[string]any{"id": "n", "action": map[string]any{"type": "pass"}, "depends_on": []string{"fresh", on}},
		}})
		require.Equal(t, http.StatusBadRequest, status, "on %s: %s", on, body)
		require.Contains(t, string(body), `"field":"steps[1].depends_on[1]"`, "on %s", on)
		require.Contains(t, string(body), "cycle")
	}
	_, after := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil)
	require.JSONEq(t, string(before), string(after), "the job is unchanged")
	require.Equal(t, events, h.EventTypes(t, keyA, j.ID), "no event")
	require.Equal(t, queues, workerQueueCount(t, h), "no queue made")

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan", "steps": []any{passStep("n")}}, nil)
	done := h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Len(t, done.Steps, 5)
	h.CheckReplay(t, tenantA, j.ID)
}

// The fail action's replan that would close a cycle, at its own level or
// in the replan its steps carry, answers 400 at submit naming the path.
func TestFailActionReplanThatClosesACycleIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	for field, x := range map[string]map[string]any{
		"steps[0].action.steps[0].depends_on[0]": {"id": "x", "action": map[string]any{"type": "fail", "class": "replan", "steps": []any{passStep("n", "y")}}},
		"steps[0].action.steps[0].action.steps[0].depends_on[0]": {"id": "x", "action": map[string]any{"type": "fail", "class": "replan", "steps": []any{
			map[string]any{"id": "n", "action": map[string]any{"type": "fail", "class": "replan", "steps": []any{passStep("m", "z")}}},
		}}},
	} {
		status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{x, passStep("y", "x"), passStep("z", "y")}})
		require.Equal(t, http.StatusBadRequest, status, "%s", body)
		require.Contains(t, string(body), fmt.Sprintf(`"field":%q`, field))
	}
	var list struct{ Jobs []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &list)
	require.Empty(t, list.Jobs, "nothing submitted")
}

// 100 signals with names no wait of the job listens for are dropped,
// writing nothing; the job's own signal is then still kept, and taken.
func TestUnknownSignalsCannotLockOutTheWait(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "ready", "action": map[string]any{"type": "wait", "signal": "ready"}},
		map[string]any{"id": "go", "action": map[string]any{"type": "wait", "signal": "go"}},
		passStep("after"),
	}})
	h.AwaitState(t, keyA, j.ID, domain.JobParked)
	type answer struct {
		State  domain.JobState      `json:"state"`
		Signal domain.SignalOutcome `json:"signal"`
	}
	for k := range 100 {
		var a answer
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": fmt.Sprint("junk-", k)}, &a)
		require.Equal(t, domain.SignalDropped, a.Signal.Outcome)
	}
	var a answer
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "go", "payload": "early"}, &a)
	require.Equal(t, domain.SignalKept, a.Signal.Outcome)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "ready"}, &a)
	require.Equal(t, domain.SignalOutcome{Outcome: domain.SignalDelivered, Step: "ready", Reason: "step ready was waiting for it"}, a.Signal)

	done := h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `"early"`, string(done.Steps[1].Output))
	received := 0
	for _, ev := range h.Events(t, keyA, j.ID) {
		if ev.Type == domain.NoteSignalReceived {
			received++
		}
	}
	require.Equal(t, 2, received, "the dropped signals left no event")
	h.CheckReplay(t, tenantA, j.ID)
}
