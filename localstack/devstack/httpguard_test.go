package devstack_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// By default the local stack's http action reaches no loopback address,
// the emulator's included: a job aimed at /moto-api/reset is refused with
// 400 before anything is written.
func TestHTTPStepsIntoTheLocalNetworkAreRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	for _, u := range []string{
		h.Endpoint + "/moto-api/reset",
		"http://2130706433/",
		"http://169.254.169.254/latest/meta-data",
		"http://10.0.0.1/",
		"http://[::ffff:127.0.0.1]:9001/",
		"ftp://example.com/",
	} {
		status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
			map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
			map[string]any{"id": "hook", "action": map[string]any{"type": "http", "url": u}},
		}})
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", u, raw)
		var e struct {
			Error struct{ Code, Message, Field string }
		}
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		require.Equal(t, "invalid", e.Error.Code, u)
		require.Equal(t, "steps[1].action.url", e.Error.Field, u)
		require.NotEmpty(t, e.Error.Message, u)
	}
	var list struct{ Jobs []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &list)
	require.Empty(t, list.Jobs, "nothing was written")
}

// With loopback allowed explicitly (Options.HTTPAllow), an http step runs
// against a test server; a redirect out of the allowed range still fails
// the step as fatal.
func TestHTTPStepAgainstAnAllowedTestServer(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/hook":
			_, _ = w.Write([]byte(`{"hooked":true}`))
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	h := stacktest.New(t, func(o *devstack.Options) { o.HTTPAllow = "127.0.0.1/32" })

	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hook", "action": map[string]any{"type": "http", "url": srv.URL + "/hook"}}}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"hooked":true}`, string(j.Steps[0].Output))

	j = h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hook", "action": map[string]any{"type": "http", "url": srv.URL + "/to-metadata"}}}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)
	require.Len(t, j.Steps[0].Attempts, 1, "a refused destination is not retried")
	require.Equal(t, domain.ClassFatal, j.Steps[0].Error.Class)
	require.Contains(t, j.Steps[0].Error.Message, "169.254.169.254 is a link-local address (the cloud metadata service)")
	require.Equal(t, int64(2), hits.Load(), "the metadata address was never dialled")
	h.CheckReplay(t, tenantA, j.ID)

	// The allow list is narrow: another loopback address is still refused.
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{map[string]any{"id": "x", "action": map[string]any{"type": "http", "url": "http://127.0.0.2/"}}}})
	require.Equal(t, http.StatusBadRequest, status, "%s", raw)
}
