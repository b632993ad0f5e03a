package inmemory_test

// The hostile-tenant suite: probes a tenant could make against another,
// and the poison it could submit, each kept as a regression test over HTTP.

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

func workerStep(queue string) map[string]any {
	return map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": queue}}}}
}

func TestHugeFailureMessageEndsTheAttemptAtOnce(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, workerStep("q"))
	l := claim(t, h, keyA, "q", "w1", 1, 5)
	require.Len(t, l, 1)
	msg := strings.Repeat("boom ", 120*1024/5)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "fatal", "message": msg}, nil)

	got := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobFailed, got.State, "no redelivery, no wait for the lease")
	a := got.Steps[0].Attempts[0]
	require.Equal(t, domain.AttemptFailed, a.State)
	require.LessOrEqual(t, len(a.Error.Message), domain.MaxErrorMessageBytes)
	require.Contains(t, a.Error.Message, "truncated from")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestHealthIsEachTenantsOwn(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	var b0 engine.Health
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/health", stacktest.KeyB, nil, &b0)

	// Tenant a builds a backlog nobody works off.
	for range 12 {
		h.Submit(t, keyA, workerStep("stuck"))
	}
	var a, b engine.Health
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/health", keyA, nil, &a)
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/health", stacktest.KeyB, nil, &b)
	require.Equal(t, 12, a.Backlog)
	require.Equal(t, "degraded", a.Status, "%v", a.Reasons)
	require.Equal(t, b0, b, "tenant b's health did not move")
	require.Equal(t, "ok", b.Status)

	// A started job leaves the backlog.
	got := claim(t, h, keyA, "stuck", "w", 10, 0)
	require.Len(t, got, 10)
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/health", keyA, nil, &a)
	require.Equal(t, 2, a.Backlog)
}
