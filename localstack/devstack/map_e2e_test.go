package devstack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// mapRunning counts a job's children of map id that are runnable or
// running.
func mapRunning(j stacktest.Job) int {
	n := 0
	for _, s := range j.Steps {
		switch s.State {
		case domain.StepPending, domain.StepLeased, domain.StepRunning, domain.StepRetrying:
			if len(s.ID) > 4 && s.ID[:5] == "each[" {
				n++
			}
		}
	}
	return n
}

// A map over a list in the payload runs a worker per item, never more than
// max_concurrency at once (checked while it runs), and its output is the
// items' outputs in order.
func TestAMapOfWorkerItemsKeepsItsConcurrency(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	items := make([]int, 30)
	for i := range items {
		items[i] = i
	}
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"xs": items}, "steps": []any{
		map[string]any{"id": "each", "action": map[string]any{"type": "map", "items": "payload.xs", "max_concurrency": 4,
			"step": map[string]any{"action": map[string]any{"type": "worker", "queue": "mapq"}}}},
		map[string]any{"id": "sum", "action": map[string]any{"type": "pass"}},
	}})
	done := 0
	for done < len(items) {
		require.LessOrEqual(t, mapRunning(h.Get(t, keyA, j.ID)), 4)
		leases := claim(t, h, keyA, "mapq", "w1", 10, 5)
		require.NotEmpty(t, leases)
		require.LessOrEqual(t, len(leases), 4, "at most max_concurrency handed out")
		for _, l := range leases {
			var in struct{ Item, Index int }
			require.NoError(t, json.Unmarshal(l.Input, &in))
			require.Equal(t, in.Item, in.Index)
			h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": in.Item * 10}, nil)
			done++
		}
	}
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var want []int
	for _, i := range items {
		want = append(want, i*10)
	}
	wantJSON, _ := json.Marshal(want)
	require.JSONEq(t, string(wantJSON), string(j.Steps[1].Output), "the step after runs on the list")
	code, body := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID+"/steps/each/output", keyA, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.JSONEq(t, string(wantJSON), string(body))
}

// An item failing with tolerated_failures 0 fails the map and the job and
// cancels the rest; a redrive runs that item again (and those it
// cancelled), not those that succeeded.
func TestAFailedItemFailsTheMapAndRedriveRunsIt(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"xs": []string{"a", "b", "c", "d"}}, "steps": []any{
		map[string]any{"id": "each", "action": map[string]any{"type": "map", "items": "payload.xs", "max_concurrency": 2,
			"step": map[string]any{"action": map[string]any{"type": "worker", "queue": "mapf"}, "retry": map[string]any{"max_attempts": 1}}}},
	}})
	leases := claim(t, h, keyA, "mapf", "w1", 10, 5)
	require.Len(t, leases, 2)
	for _, l := range leases {
		if l.StepID == "each[0]" {
			h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": "A"}, nil)
		} else {
			h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/fail", keyA, map[string]any{"class": "fatal", "message": "bad item"}, nil)
		}
	}
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)
	states := map[string]domain.StepState{}
	for _, s := range j.Steps {
		states[s.ID] = s.State
	}
	require.Equal(t, map[string]domain.StepState{"each": domain.StepFailed, "each[0]": domain.StepSucceeded, "each[1]": domain.StepFailed, "each[2]": domain.StepCancelled, "each[3]": domain.StepCancelled}, states)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", keyA, nil, nil)
	for done := 0; done < 3; {
		for _, l := range claim(t, h, keyA, "mapf", "w1", 10, 5) {
			require.NotEqual(t, "each[0]", l.StepID, "what succeeded is not run again")
			h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": l.StepID}, nil)
			done++
		}
	}
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	code, body := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID+"/steps/each/output", keyA, nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `["A","each[1]","each[2]","each[3]"]`, string(body))
}

// Many pass items run to the end, their outputs in order (make dev runs a
// thousand: docs/model.md#map has the figures).
func TestAManyItemMap(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	items := make([]string, 150)
	for i := range items {
		items[i] = fmt.Sprintf("i%d", i)
	}
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"xs": items}, "steps": []any{
		map[string]any{"id": "each", "action": map[string]any{"type": "map", "items": "payload.xs",
			"step": map[string]any{"action": map[string]any{"type": "pass"}, "output": "output.item"}}},
	}})
	// Polled slowly: each look reads every part of a job of 151 steps from
	// the one emulator the map's writes go to.
	require.Eventually(t, func() bool { return h.Get(t, keyA, j.ID).State == domain.JobCompleted }, time.Minute, 500*time.Millisecond)
	code, body := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID+"/steps/each/output", keyA, nil)
	require.Equal(t, http.StatusOK, code)
	var got []string
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, items, got)
}
