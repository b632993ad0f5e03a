package costmeter

import (
	"net/http"
	"sync/atomic"
)

// APIRequestChunk is the size HTTP API requests are metered in: a
// request of up to 512 KB is one, a larger one one per 512 KB.
const APIRequestChunk = 512 * 1024

// APIRequests answers the HTTP API requests a request of bodyBytes is
// billed as.
func APIRequests(bodyBytes int64) int64 {
	return max(1, (bodyBytes+APIRequestChunk-1)/APIRequestChunk)
}

// APIGateway meters the requests an HTTP API is billed for: every request
// that reaches it, in 512 KB chunks.
type APIGateway struct{ requests atomic.Int64 }

// Handler answers next, each request metered.
func (a *APIGateway) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(APIRequests(max(r.ContentLength, 0)))
		next.ServeHTTP(w, r)
	})
}

// Requests answers the billed requests so far.
func (a *APIGateway) Requests() int64 { return a.requests.Load() }
