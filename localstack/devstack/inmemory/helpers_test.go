package inmemory_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/wire"
)

const (
	keyA    = stacktest.KeyA
	tenantA = stacktest.TenantA
)

// claim claims up to max leases from queue over HTTP, waiting up to wait
// seconds.
func claim(t *testing.T, h *stacktest.Harness, key, queue, worker string, max, wait int) []wire.ClaimedLease {
	t.Helper()
	var c struct {
		Leases []wire.ClaimedLease `json:"leases"`
	}
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/claim", key, map[string]any{"queue": queue, "max": max, "wait_seconds": wait, "worker": worker}, &c)
	return c.Leases
}

// conflict checks a 409 conflict answer and answers its message.
func conflict(t *testing.T, status int, body []byte) string {
	t.Helper()
	require.Equal(t, http.StatusConflict, status, "%s", body)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.Equal(t, "conflict", e.Error.Code, "%s", body)
	return e.Error.Message
}
