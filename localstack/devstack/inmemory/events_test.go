package inmemory_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// A bad after or wait answers 400 naming it, before the job is read.
func TestEventsLongPollRefusesBadParameters(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})
	for _, q := range []string{"after=x", "after=-1", "after=", "after=1.5", "wait=21", "wait=-1", "wait=soon"} {
		status, raw := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID+"/events?"+q, keyA, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, raw)
		field, _, _ := strings.Cut(q, "=")
		require.Contains(t, string(raw), `"field":"`+field+`"`, q)
	}
	status, _ := h.Call(t, http.MethodGet, "/v1/jobs/"+j.ID+"/events?after=1&wait=1", stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
}
