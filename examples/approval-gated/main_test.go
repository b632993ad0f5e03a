package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// The example runs to its end against the whole local stack with two
// tenants, as it does against make dev started with two keys.
func TestApprovalGated(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.ScheduleEvery = time.Second })
	var out strings.Builder
	err := run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, OtherAPIKey: stacktest.KeyB, Out: &out})
	require.NoError(t, err, out.String())
	for _, line := range []string{
		"the same request again: run", "nothing created", "422 idempotency_mismatch",
		"another tenant: GET run -> 404, approve -> 404",
		"approved by ann at", "approved again: the same decision, nothing written",
	} {
		require.Contains(t, out.String(), line)
	}
	t.Log(out.String())
}

// A key the API does not know says how to start make dev with two tenants.
func TestApprovalGatedNeedsAnotherTenant(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	var out strings.Builder
	err := run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, OtherAPIKey: "other-key", Out: &out})
	require.ErrorContains(t, err, "STEPFLOW_API_KEYS=dev:dev-key,other:other-key")
}
