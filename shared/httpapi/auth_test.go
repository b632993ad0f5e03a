package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/store"
)

// keyReads counts the API key lookups that reach the table: middleware in
// the stack's engine DynamoDB client that sees each GetItem, which goes on
// to the table.
type keyReads struct {
	mu     sync.Mutex
	byHash map[string]int
}

func (k *keyReads) getItem(_ context.Context, in any, call func() (any, error)) (any, error) {
	if pk, ok := in.(*dynamodb.GetItemInput).Key["pk"].(*ddb.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, "K#") {
		k.mu.Lock()
		k.byHash[strings.TrimPrefix(pk.Value, "K#")]++
		k.mu.Unlock()
	}
	return call()
}

// of answers how often key was looked up.
func (k *keyReads) of(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byHash[engine.HashKey(key)]
}

// total answers how many key lookups reached the table.
func (k *keyReads) total() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, c := range k.byHash {
		n += c
	}
	return n
}

func countingStack(t *testing.T, opts ...stacktest.Option) (*stacktest.Harness, *keyReads) {
	t.Helper()
	reads := &keyReads{byHash: map[string]int{}}
	opts = append(opts, stacktest.WithAPIOptions(awsfault.Around("DynamoDB", "GetItem", reads.getItem)))
	return stacktest.New(t, opts...), reads
}

// TestUnknownKeyIsReadOnce: repeated requests with one unknown key cost
// one table read until the refusal expires; a known key likewise. A key
// added while its refusal is cached works once the refusal expires.
func TestUnknownKeyIsReadOnce(t *testing.T) {
	t.Parallel()
	h, reads := countingStack(t)
	unknown := "nope-" + ulid.Make().String()
	const n = 40
	for range n {
		status, raw := h.Call(t, http.MethodGet, "/v1/jobs", unknown, nil)
		requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
	}
	require.Equal(t, 1, reads.of(unknown), "%d requests with one unknown key", n)

	for range n {
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", stacktest.KeyA, nil, nil)
	}
	require.Equal(t, 1, reads.of(stacktest.KeyA), "%d requests with one known key", n)

	// The refusal expires: the key is read again.
	h.Clock.Advance(httpapi.UnknownKeyTTL + 1e9)
	status, raw := h.Call(t, http.MethodGet, "/v1/jobs", unknown, nil)
	requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
	require.Equal(t, 2, reads.of(unknown))

	// A key added now is refused from the cache until the refusal expires.
	st := store.New(h.DynamoDB, h.Resources.Env["STEPFLOW_TABLE"])
	require.NoError(t, st.PutAPIKey(context.Background(), stacktest.TenantA, unknown))
	status, raw = h.Call(t, http.MethodGet, "/v1/jobs", unknown, nil)
	requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
	require.Equal(t, 2, reads.of(unknown))
	h.Clock.Advance(httpapi.UnknownKeyTTL + 1e9)
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", unknown, nil, nil)
	require.Equal(t, 3, reads.of(unknown))
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", unknown, nil, nil)
	require.Equal(t, 3, reads.of(unknown), "now a known key, cached")
}

// TestMalformedKeysAreRefusedUnread: a key over the length limit or with a
// control character is refused with 401 before any lookup.
func TestMalformedKeysAreRefusedUnread(t *testing.T) {
	t.Parallel()
	h, reads := countingStack(t)

	// Over HTTP, through the runner.
	long := strings.Repeat("k", httpapi.MaxKeyBytes+1)
	for _, key := range []string{long, "abc\tdef"} {
		status, raw := h.Call(t, http.MethodGet, "/v1/jobs", key, nil)
		requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
	}
	require.Zero(t, reads.total(), "a malformed key was looked up")
	// The longest allowed key is looked up (and unknown).
	status, raw := h.Call(t, http.MethodGet, "/v1/jobs", long[1:], nil)
	requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
	require.Equal(t, 1, reads.of(long[1:]))

	// Straight to the handler, with what no HTTP client sends.
	before := reads.total()
	for _, key := range []string{"a\x00b", "a\x01b", "a\x7fb", "a\u0085b", "a\nb", "a\xffb", strings.Repeat("é", 129)} {
		res, err := h.API.Handle(context.Background(), getJobEvent(newID(), "Bearer "+key))
		require.NoError(t, err)
		requireError(t, res.StatusCode, []byte(res.Body), http.StatusUnauthorized, domain.CodeUnauthorized, "")
	}
	require.Equal(t, before, reads.total(), "a malformed key was looked up")
}

func getJobEvent(id, auth string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "GET /v1/jobs/{id}", RawPath: "/v1/jobs/" + id,
		Headers: map[string]string{"authorization": auth}, PathParameters: map[string]string{"id": id},
	}
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = "GET", ev.RawPath
	ev.RequestContext.RouteKey, ev.RequestContext.RequestID = ev.RouteKey, "test"
	return ev
}

// TestUnknownKeyFloodStaysBounded: many distinct unknown keys fill only
// the unknown keys' cache, up to its bound, evicting the least recently
// used; the known keys stay cached.
func TestUnknownKeyFloodStaysBounded(t *testing.T) {
	t.Parallel()
	h, reads := countingStack(t, func(o *devstack.Options) { o.NoRunner = true })
	ctx := context.Background()
	handle := func(api *httpapi.API, key string) int {
		t.Helper()
		res, err := api.Handle(ctx, getJobEvent(newID(), "Bearer "+key))
		require.NoError(t, err)
		return res.StatusCode
	}

	// Real requests against a small bound.
	const bound, flood = 50, 200
	api := httpapi.New(h.Engine, nil)
	api.SetKeyCacheBounds(0, bound)
	require.Equal(t, http.StatusNotFound, handle(api, stacktest.KeyA), "authenticated; the job is unknown")
	keys := make([]string, flood)
	for i := range keys {
		keys[i] = fmt.Sprintf("flood-%d-%s", i, ulid.Make())
		require.Equal(t, http.StatusUnauthorized, handle(api, keys[i]))
	}
	known, unknown := api.KeyCacheLens()
	require.Equal(t, 1, known)
	require.Equal(t, bound, unknown)
	require.Equal(t, http.StatusNotFound, handle(api, stacktest.KeyA))
	require.Equal(t, 1, reads.of(stacktest.KeyA), "the flood evicted a known key")
	require.Equal(t, http.StatusUnauthorized, handle(api, keys[flood-1]))
	require.Equal(t, 1, reads.of(keys[flood-1]), "the newest unknown key is cached")
	require.Equal(t, http.StatusUnauthorized, handle(api, keys[0]))
	require.Equal(t, 2, reads.of(keys[0]), "the oldest unknown key was evicted")

	// The real bound: far more unknown keys than it holds.
	full := httpapi.New(h.Engine, nil)
	require.Equal(t, http.StatusNotFound, handle(full, stacktest.KeyB))
	for i := range httpapi.UnknownKeysMax + 5000 {
		full.CacheUnknownKey(engine.HashKey(fmt.Sprint("random-", i)))
	}
	known, unknown = full.KeyCacheLens()
	require.Equal(t, 1, known)
	require.Equal(t, httpapi.UnknownKeysMax, unknown)
	require.Equal(t, http.StatusNotFound, handle(full, stacktest.KeyB))
	require.Equal(t, 1, reads.of(stacktest.KeyB), "the flood evicted a known key")
}
