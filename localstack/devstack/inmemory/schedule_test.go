package inmemory_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// The schedules' routes over HTTP; the engine's ticks are
// shared/engine's tests and localstack/devstack's.

func TestScheduleRoutesRefuseBadInputAndOtherTenants(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	job := map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}
	for _, tc := range []struct {
		body  any
		field string
	}{
		{map[string]any{"every": "1m", "job": job}, "id"},
		{map[string]any{"id": "s", "cron": "every day", "job": job}, "cron"},
		{map[string]any{"id": "s", "cron": "0 9 * * *", "time_zone": "Atlantis/Capital", "job": job}, "time_zone"},
		{map[string]any{"id": "s", "every": "100ms", "job": job}, "every"},
		{map[string]any{"id": "s", "every": "1m", "overlap": "queue", "job": job}, "overlap"},
		{map[string]any{"id": "s", "every": "1m", "job": map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "nope"}}}}}, "job.steps[0].action.type"},
		{map[string]any{"id": "s", "every": "1m", "job": job, "jobs": job}, "jobs"},
	} {
		status, raw := h.Call(t, http.MethodPost, "/v1/schedules", keyA, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%v: %s", tc.body, raw)
		require.Contains(t, string(raw), `"field":"`+tc.field+`"`, "%s", raw)
	}
	var list struct {
		Schedules  []stacktest.ScheduleView `json:"schedules"`
		NextCursor string                   `json:"next_cursor"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules", keyA, nil, &list)
	require.Empty(t, list.Schedules, "nothing written")

	body := map[string]any{"id": "nightly", "cron": "0 3 * * *", "time_zone": "Asia/Tokyo", "job": job}
	var s stacktest.ScheduleView
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, body, &s)
	require.Equal(t, "Asia/Tokyo", s.TimeZone)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/schedules", keyA, body, &s) // the same body: the same schedule
	body["cron"] = "0 4 * * *"
	status, raw := h.Call(t, http.MethodPost, "/v1/schedules", keyA, body)
	require.Equal(t, http.StatusConflict, status, "%s", raw)
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "hourly", "cron": "0 * * * *", "job": job}, nil)
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "often", "every": "90s", "job": job}, nil)

	var got []string
	path := "/v1/schedules?limit=2"
	for {
		h.JSON(t, http.StatusOK, http.MethodGet, path, keyA, nil, &list)
		for _, s := range list.Schedules {
			got = append(got, s.ID)
		}
		if list.NextCursor == "" {
			break
		}
		path = "/v1/schedules?limit=2&cursor=" + list.NextCursor
	}
	require.Equal(t, []string{"hourly", "nightly", "often"}, got)

	for _, r := range [][2]string{
		{http.MethodGet, "/v1/schedules/nightly"}, {http.MethodDelete, "/v1/schedules/nightly"},
		{http.MethodPost, "/v1/schedules/nightly/pause"}, {http.MethodPost, "/v1/schedules/nightly/resume"},
	} {
		status, _ := h.Call(t, r[0], r[1], stacktest.KeyB, nil)
		require.Equal(t, http.StatusNotFound, status, "another tenant's schedule: %s %s", r[0], r[1])
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules", stacktest.KeyB, nil, &list)
	require.Empty(t, list.Schedules)
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules/nightly", keyA, nil, &s)
	require.False(t, s.Paused, "untouched by the other tenant")

	for path, field := range map[string]string{
		"/v1/jobs?schedule=a%20b":  "schedule",
		"/v1/schedules?limit=0":    "limit",
		"/v1/schedules?cursor=zzz": "cursor",
	} {
		status, raw := h.Call(t, http.MethodGet, path, keyA, nil)
		require.Equal(t, http.StatusBadRequest, status, path)
		require.Contains(t, string(raw), `"field":"`+field+`"`, "%s: %s", path, raw)
	}
	status, raw = h.Call(t, http.MethodPost, "/v1/schedules/nightly/pause", keyA, map[string]any{"until": "never"})
	require.Equal(t, http.StatusBadRequest, status, "%s", raw)
	status, _ = h.Call(t, http.MethodGet, "/v1/schedules/no-such", keyA, nil)
	require.Equal(t, http.StatusNotFound, status)
	status, raw = h.Call(t, http.MethodPut, "/v1/schedules/nightly", keyA, nil)
	require.Equal(t, http.StatusBadRequest, status, "a replace needs a body: %s", raw)
	status, _ = h.Call(t, http.MethodPut, "/v1/schedules/no-such", keyA, map[string]any{"id": "no-such", "every": "5s", "job": map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}})
	require.Equal(t, http.StatusNotFound, status, "a replace makes no schedule")
	status, _ = h.Call(t, http.MethodPatch, "/v1/schedules/nightly", keyA, nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)
}
