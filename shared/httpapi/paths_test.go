package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// TestMalformedPathsAreNotFound: encoded, doubled and trailing slashes
// answer the API's JSON 404, over HTTP through the runner (which routes
// as API Gateway does) for every method, and straight to the handler with
// the raw shapes a gateway might hand it.
func TestMalformedPathsAreNotFound(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, stacktest.KeyA, workerJob)
	bearer := "Bearer " + stacktest.KeyA

	paths := []string{
		"/v1/jobs/abc%2Fdef",
		"/v1/jobs/abc%2fdef",
		"/v1/jobs/abc%252Fdef", // API Gateway decodes twice: {id} would be "abc/def"
		"/v1//jobs",
		"//v1/jobs",
		"/v1/jobs//x",
		"/v1/jobs//events",
		"/v1/jobs/",
		"/v1/jobs//",
		"/v1/jobs/" + j.ID + "/",
		"/v1/jobs/" + j.ID + "/events/",
		"/v1/jobs/" + j.ID + "//events",
		"/v1/jobs/" + j.ID + "/cancel/",
		"/v1/claim/",
		"/v1/health/",
		"/v1//health",
	}
	for _, p := range paths {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			res, raw := call(t, h, m, p, bearer, "")
			requireError(t, res.StatusCode, raw, http.StatusNotFound, domain.CodeNotFound, "")
			require.Contains(t, res.Header.Get("Content-Type"), "application/json", "%s %s", m, p)
			require.Empty(t, res.Header.Get("Allow"), "%s %s", m, p)
		}
	}
	// GET /v1/jobs/{id} with {id} "<job>/events" (decoded twice). Another
	// method reaches $default with rawPath /v1/jobs/<job>/events, which
	// is all a gateway that decodes hands over: 405 there, as for the
	// decoded path itself.
	res, raw := call(t, h, http.MethodGet, "/v1/jobs/"+j.ID+"%252Fevents", bearer, "")
	requireError(t, res.StatusCode, raw, http.StatusNotFound, domain.CodeNotFound, "")

	// Nothing was cancelled or claimed on the way.
	require.Equal(t, domain.JobQueued, h.Get(t, stacktest.KeyA, j.ID).State)

	// Straight to the handler: a declared route whose raw path or
	// parameter is malformed answers 404, never the route.
	ctx := context.Background()
	for _, tc := range []struct {
		route, raw string
		params     map[string]string
	}{
		{"GET /v1/jobs/{id}", "/v1/jobs/abc%2Fdef", map[string]string{"id": "abc%2Fdef"}},
		{"GET /v1/jobs/{id}", "/v1/jobs/abc/def", map[string]string{"id": "abc/def"}},
		{"GET /v1/jobs/{id}", "/v1/jobs/" + j.ID + "/", map[string]string{"id": j.ID}},
		{"GET /v1/jobs/{id}", "/v1/jobs/" + j.ID, map[string]string{"id": j.ID + "/"}},
		{"GET /v1/jobs/{id}/events", "/v1//jobs/" + j.ID + "/events", map[string]string{"id": j.ID}},
		{"POST /v1/jobs/{id}/cancel", "/v1/jobs/" + j.ID + "%2F/cancel", map[string]string{"id": j.ID + "%2F"}},
		{"POST /v1/jobs/{id}/cancel", "/v1/jobs/x/" + j.ID + "/cancel", map[string]string{"id": "x/" + j.ID}},
		{"GET /v1/jobs", "/v1/jobs/", nil},
		{"GET /v1/jobs", "/v1//jobs", nil},
		{"$default", "/v1/jobs/", nil},
		{"$default", "/v1/jobs//", nil},
		{"$default", "/v1/jobs/abc%2Fdef", nil},
		{"$default", "/v1//jobs", nil},
	} {
		method := cutRoute(tc.route)
		ev := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: tc.route, RawPath: tc.raw, PathParameters: tc.params,
			Headers: map[string]string{"authorization": bearer},
		}
		ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = method, tc.raw
		ev.RequestContext.RouteKey, ev.RequestContext.RequestID = tc.route, "test"
		res, err := h.API.Handle(ctx, ev)
		require.NoError(t, err)
		requireError(t, res.StatusCode, []byte(res.Body), http.StatusNotFound, domain.CodeNotFound, "")
		require.NotContains(t, res.Headers, "allow", "%s %s", tc.route, tc.raw)
	}
	require.Equal(t, domain.JobQueued, h.Get(t, stacktest.KeyA, j.ID).State)

	// The well-formed paths still answer.
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID+"/events", stacktest.KeyA, nil, nil)
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", stacktest.KeyA, nil, nil)
}

// cutRoute answers a route key's method; $default has none, so it is
// sent as a GET.
func cutRoute(key string) string {
	if key == "$default" {
		return http.MethodGet
	}
	method, _, _ := strings.Cut(key, " ")
	return method
}
