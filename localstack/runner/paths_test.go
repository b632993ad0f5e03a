package runner_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/runner"
)

// pathRunner serves the routes a stepflow function declares, with or
// without a $default route, and records the last event it handed over.
type pathRunner struct {
	url  string
	mu   sync.Mutex
	last *events.APIGatewayV2HTTPRequest
}

func startPathRunner(t *testing.T, withDefault bool) *pathRunner {
	t.Helper()
	pr := &pathRunner{}
	routes := []bootstrap.Route{
		{Method: "GET", Path: "/v1/jobs"}, {Method: "POST", Path: "/v1/jobs"},
		{Method: "GET", Path: "/v1/jobs/{id}"}, {Method: "GET", Path: "/v1/jobs/{id}/events"},
	}
	if withDefault {
		routes = append(routes, bootstrap.Route{Method: "ANY", Path: "$default"})
	}
	h := func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		pr.mu.Lock()
		pr.last = &ev
		pr.mu.Unlock()
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{}`}, nil
	}
	pr.url = start(t, &runner.Runner{
		Stack:    &bootstrap.Stack{Functions: []bootstrap.Function{{LogicalID: "Api", Routes: routes}}},
		Handlers: runner.Handlers{HTTP: map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){"Api": h}},
		Log:      slog.Default(),
	})
	return pr
}

// do sends a request with the path exactly as given (no cleaning) and
// answers the status, the body and the event the function got (nil when
// it was not invoked).
func (pr *pathRunner) do(t *testing.T, method, path string) (int, string, *events.APIGatewayV2HTTPRequest) {
	t.Helper()
	pr.mu.Lock()
	pr.last = nil
	pr.mu.Unlock()
	req, err := http.NewRequest(method, pr.url+path, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return res.StatusCode, string(body), pr.last
}

// malformedPaths route to no declared route: API Gateway HTTP APIs route
// on the path decoded once, so %2F is a separator there, and no declared
// route has an empty segment (a doubled or trailing slash).
var malformedPaths = []string{
	"/v1/jobs/abc%2Fdef",
	"/v1/jobs/abc%2fdef",
	"/v1//jobs",
	"//v1/jobs",
	"/v1/jobs//x",
	"/v1/jobs//events",
	"/v1/jobs/",
	"/v1/jobs/abc/",
	"/v1/jobs/abc/events/",
	"/v1/jobs//",
}

func TestMalformedPathsReachOnlyTheDefaultRoute(t *testing.T) {
	t.Parallel()
	pr := startPathRunner(t, true)
	for _, p := range malformedPaths {
		status, _, ev := pr.do(t, http.MethodGet, p)
		require.Equal(t, http.StatusOK, status, p)
		require.NotNil(t, ev, "%s: the $default route's function is invoked", p)
		require.Equal(t, "$default", ev.RouteKey, "%s routed to a declared route", p)
		require.Equal(t, "$default", ev.RequestContext.RouteKey, p)
		require.Empty(t, ev.PathParameters, p)
	}
	// The well-formed paths still route, with their parameters.
	_, _, ev := pr.do(t, http.MethodGet, "/v1/jobs/abc/events")
	require.NotNil(t, ev)
	require.Equal(t, "GET /v1/jobs/{id}/events", ev.RouteKey)
	require.Equal(t, map[string]string{"id": "abc"}, ev.PathParameters)
	_, _, ev = pr.do(t, http.MethodGet, "/v1/jobs")
	require.NotNil(t, ev)
	require.Equal(t, "GET /v1/jobs", ev.RouteKey)
}

func TestMalformedPathsWithoutDefaultRouteAreNotFound(t *testing.T) {
	t.Parallel()
	pr := startPathRunner(t, false)
	for _, p := range malformedPaths {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			status, body, ev := pr.do(t, m, p)
			require.Equal(t, http.StatusNotFound, status, "%s %s", m, p)
			require.JSONEq(t, `{"message":"Not Found"}`, body, "%s %s", m, p)
			require.Nil(t, ev, "%s %s reached the function", m, p)
		}
	}
}

// TestPathIsDecodedAgainForTheFunction: API Gateway HTTP APIs decode the
// path a second time for rawPath and the parameters (live captures:
// /a%252Fb arrives as rawPath /a/b; /a%25zz is refused with 400), so a
// doubly encoded slash reaches {id} as '/': the function must refuse it
// (shared/httpapi does).
func TestPathIsDecodedAgainForTheFunction(t *testing.T) {
	t.Parallel()
	pr := startPathRunner(t, true)
	_, _, ev := pr.do(t, http.MethodGet, "/v1/jobs/abc%252Fdef")
	require.NotNil(t, ev)
	require.Equal(t, "GET /v1/jobs/{id}", ev.RouteKey)
	require.Equal(t, map[string]string{"id": "abc/def"}, ev.PathParameters)
	require.Equal(t, "/v1/jobs/abc/def", ev.RawPath)
	require.Equal(t, "/v1/jobs/abc/def", ev.RequestContext.HTTP.Path)

	_, _, ev = pr.do(t, http.MethodGet, "/v1/jobs/a%20b")
	require.NotNil(t, ev)
	require.Equal(t, map[string]string{"id": "a b"}, ev.PathParameters)
	require.Equal(t, "/v1/jobs/a b", ev.RawPath)

	status, body, ev := pr.do(t, http.MethodGet, "/v1/jobs/50%25zz")
	require.Equal(t, http.StatusBadRequest, status)
	require.JSONEq(t, `{"message":"Bad Request"}`, body)
	require.Nil(t, ev)
}
