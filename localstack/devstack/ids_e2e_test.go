package devstack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// An id that is no path segment of its own is refused with 400 naming the
// field, before anything is written: "." and ".." (which every URL
// resolver takes for the directory or its parent, so no route could reach
// them again), control characters, over-long ones. A slash, however
// encoded, makes another path, which names no route (404, as API Gateway
// answers it). And '?' in a cron expression is EventBridge's "no specific
// value", alone in a day field, and refused anywhere else.
func TestIDsThatNameNoPathSegmentAndCronQuestionMarks(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	var e struct {
		Error struct{ Code, Message, Field string }
	}
	refused := func(status int, raw []byte, field, what string) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", what, raw)
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		require.Equal(t, field, e.Error.Field, "%s: %s", what, raw)
	}

	capacity := map[string]any{"capacity": 1}
	for _, id := range []string{".", "..", "%2E", "%2e%2E", "a%01b", "tab%09", strings.Repeat("r", 65)} {
		status, raw := h.Call(t, http.MethodPut, "/v1/resources/"+id, keyA, capacity)
		refused(status, raw, "id", id)
	}
	// An id holding a slash, sent encoded: refused as an id, not as a path.
	for _, id := range []string{"a%2Fb", "a%252Fb", "..%2F..", "x%2Fy%2Fz"} {
		status, raw := h.Call(t, http.MethodPut, "/v1/resources/"+id, keyA, capacity)
		refused(status, raw, "id", id)
		status, raw = h.Call(t, http.MethodGet, "/v1/schedules/"+id, keyA, nil)
		refused(status, raw, "id", id)
	}
	for _, path := range []string{"/v1/resources/", "/v1/resources//"} {
		status, raw := h.Call(t, http.MethodPut, path, keyA, capacity)
		require.Equal(t, http.StatusNotFound, status, "%s: %s", path, raw)
	}
	var listed struct{ Resources []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/resources", keyA, nil, &listed)
	require.Empty(t, listed.Resources, "nothing was written")
	h.JSON(t, http.StatusCreated, http.MethodPut, "/v1/resources/gpu.1", keyA, capacity, nil)

	// The same rule for the ids of steps and schedules.
	pass := map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "..", "action": map[string]any{"type": "pass"}},
	}})
	refused(status, raw, "steps[0].id", "step ..")
	status, raw = h.Call(t, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": ".", "every": "1h", "job": pass})
	refused(status, raw, "id", "schedule .")

	for _, cron := range []string{"? * * * *", "0 ? * * 1", "0 9 * ? 1", "0 9 ? * ?", "0 9 1,? * *"} {
		status, raw := h.Call(t, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "q", "cron": cron, "job": pass})
		refused(status, raw, "cron", cron)
		require.Contains(t, e.Error.Message, "'?'", cron)
	}
	var s struct {
		Cron   string
		NextAt time.Time `json:"next_at"`
	}
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "weekdays", "cron": "0 9 ? * 1-5", "job": pass}, &s)
	require.Equal(t, "0 9 ? * 1-5", s.Cron)
	require.Equal(t, 9, s.NextAt.Hour())
	require.Zero(t, s.NextAt.Minute())
	require.NotContains(t, []time.Weekday{time.Saturday, time.Sunday}, s.NextAt.Weekday(), "the days come from day-of-week")
}
