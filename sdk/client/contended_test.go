package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/client"
)

// A 503 contended changed nothing, so every call retries it after its
// Retry-After, even a claim, which no other 5xx repeats.
func TestContendedIsRetriedOnEveryRoute(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	var first, second atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"contended","message":"lost every race; nothing was changed"}}`))
			return
		}
		second.Store(time.Now().UnixNano())
		_, _ = w.Write([]byte(`{"leases":[]}`))
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "k"})
	require.NoError(t, err)
	leases, err := c.Claim(t.Context(), client.ClaimRequest{Queue: "q"})
	require.NoError(t, err)
	require.Empty(t, leases)
	require.Equal(t, int64(2), n.Load(), "the claim was sent again")
	require.GreaterOrEqual(t, time.Duration(second.Load()-first.Load()), time.Second, "after Retry-After")
}
