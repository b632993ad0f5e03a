package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/client"
)

// A submit past the tenant's daily budget answers 402: an error the
// caller recognises, not retried (nothing changes until the day resets).
func TestA402IsBudgetExceededAndNotRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	body := `{"error":{"code":"budget_exceeded","message":"tenant dev spent its daily budget of $5"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "k", nil)
	_, err := c.Submit(t.Context(), client.JobRequest{Steps: []client.StepSpec{pass("a")}})
	require.True(t, client.IsBudgetExceeded(err), "%v", err)
	require.Equal(t, int32(1), calls.Load())
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusPaymentRequired, e.Status)
	require.Equal(t, "stepflow: 402 budget_exceeded: tenant dev spent its daily budget of $5", err.Error())

	// A 402 of something in front of the API, in its own words.
	body = `{"message":"over budget"}`
	_, err = c.Submit(t.Context(), client.JobRequest{Steps: []client.StepSpec{pass("a")}})
	require.True(t, client.IsBudgetExceeded(err), "%v", err)
	require.False(t, client.IsBudgetExceeded(nil))
}
