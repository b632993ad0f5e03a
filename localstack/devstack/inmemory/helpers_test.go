package inmemory_test

import (
	"net/http"
	"testing"

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
