package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
)

const (
	operatorKey = "op-key"
	keyA        = "key-a"
	keyB        = "key-b"
)

// fixedGauges answers the same queue readings each sweep.
type fixedGauges engine.QueueReadings

func (g fixedGauges) QueueDepths(context.Context, int) (engine.QueueReadings, error) {
	return engine.QueueReadings(g), nil
}

// operatorAPI answers an API over the in-memory adapters, with tenants a
// and b and one operator key, as functions/enqueue wires it.
func operatorAPI(t *testing.T) (*httpapi.API, *engine.Engine) {
	t.Helper()
	store := memory.NewStore()
	store.AddKey("tenant-a", keyA)
	store.AddKey("tenant-b", keyB)
	e := engine.New(engine.Config{
		Store: store, Queue: memory.NewQueue(time.Now), Runner: &actions.Runner{}, Log: slog.New(slog.DiscardHandler),
		Gauges: fixedGauges{Stack: []engine.QueueDepth{{Queue: "P0", Visible: 3}, {Queue: "DLQ", Visible: 1}}, WorkerLanes: 0},
	})
	api := httpapi.New(e, slog.New(slog.DiscardHandler))
	api.MetricsText, api.OperatorText = prometheus.Exposition, prometheus.OperatorExposition
	api.OperatorKeyHashes = []string{engine.HashKey("another-op-key"), engine.HashKey(operatorKey)}
	return api, e
}

// handle sends one request as API Gateway would, under its route key.
func handle(t *testing.T, api *httpapi.API, routeKey, path, key, body string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	method, _, _ := strings.Cut(routeKey, " ")
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: routeKey, RawPath: path, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path}},
	}
	if key != "" {
		ev.Headers = map[string]string{"authorization": "Bearer " + key}
	}
	if id, ok := strings.CutPrefix(path, "/v1/jobs/"); ok {
		ev.PathParameters = map[string]string{"id": id}
	}
	resp, err := api.Handle(context.Background(), ev)
	require.NoError(t, err)
	return resp
}

func families(t *testing.T, resp events.APIGatewayV2HTTPResponse) map[string]*dto.MetricFamily {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode, resp.Body)
	require.Equal(t, prometheus.ContentType, resp.Headers["content-type"])
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(resp.Body))
	require.NoError(t, err, resp.Body)
	return fams
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// An operator key opens the stack's operator metrics on GET /v1/metrics
// and nothing else; a tenant's key keeps answering that tenant's own; an
// unknown key is refused.
func TestOperatorKeyScopesMetrics(t *testing.T) {
	t.Parallel()
	api, e := operatorAPI(t)
	_, err := e.Sweep(context.Background())
	require.NoError(t, err)

	op := families(t, handle(t, api, "GET /v1/metrics", "/v1/metrics", operatorKey, ""))
	for _, f := range []string{"queue_messages", "sweep_duration_seconds", "leases_live", "timers_waiting", "steps_by_state"} {
		require.Contains(t, op, f)
	}
	queues := map[string]float64{}
	for _, m := range op["queue_messages"].GetMetric() {
		l := labels(m)
		queues[l["queue"]+"/"+l["state"]] = m.GetGauge().GetValue()
	}
	require.InDelta(t, 3, queues["P0/visible"], 0, "the sweep's reading, kept: no SQS call on this request")
	require.InDelta(t, 1, queues["DLQ/visible"], 0)

	for _, key := range []string{keyA, keyB} {
		own := families(t, handle(t, api, "GET /v1/metrics", "/v1/metrics", key, ""))
		require.Contains(t, own, "steps_by_state", "the tenant's own step metrics")
		for name := range own {
			require.True(t, strings.HasPrefix(name, "step"), "a tenant's key sees no operator metric: %s", name)
		}
	}
	for _, key := range []string{"", "not-a-key", operatorKey + "x"} {
		require.Equal(t, http.StatusUnauthorized, handle(t, api, "GET /v1/metrics", "/v1/metrics", key, "").StatusCode, "key %q", key)
	}
	require.Equal(t, http.StatusUnauthorized, handle(t, api, "GET /v1/jobs", "/v1/jobs", operatorKey, "").StatusCode,
		"an operator key is no tenant's: every other route refuses it")
	require.Equal(t, http.StatusUnauthorized, handle(t, api, "GET /v1/health", "/v1/health", operatorKey, "").StatusCode)

	api.OperatorKeyHashes = nil
	require.Equal(t, http.StatusUnauthorized, handle(t, api, "GET /v1/metrics", "/v1/metrics", operatorKey, "").StatusCode,
		"with no operator key configured, it is an unknown key")
}

// Every request is counted under its route key (never its raw path), by
// status class, with its duration; the operator's answer holds what this
// process counted up to it.
func TestRequestsAreCountedByRoute(t *testing.T) {
	t.Parallel()
	api, _ := operatorAPI(t)
	const pass = `{"steps":[{"id":"p","action":{"type":"pass"}}]}`
	for range 2 {
		require.Equal(t, http.StatusCreated, handle(t, api, "POST /v1/jobs", "/v1/jobs", keyA, pass).StatusCode)
	}
	require.Equal(t, http.StatusBadRequest, handle(t, api, "POST /v1/jobs", "/v1/jobs", keyA, `{"steps":[]}`).StatusCode)
	for _, id := range []string{"01KDVDNA00SAMP1E0J0B000001", "01KDVDNA00SAMP1E0J0B000002"} {
		require.Equal(t, http.StatusNotFound, handle(t, api, "GET /v1/jobs/{id}", "/v1/jobs/"+id, keyB, "").StatusCode)
	}
	require.Equal(t, http.StatusNotFound, handle(t, api, "$default", "/v1/nowhere", keyA, "").StatusCode)
	require.Equal(t, http.StatusNotFound, handle(t, api, "GET /v1/nowhere/{id}", "/v1/nowhere/1", keyA, "").StatusCode,
		"a route key the API does not serve counts as $default")

	op := families(t, handle(t, api, "GET /v1/metrics", "/v1/metrics", operatorKey, ""))
	reqs := map[string]float64{}
	for _, m := range op["api_requests_total"].GetMetric() {
		l := labels(m)
		reqs[l["route"]+" "+l["code"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{
		"POST /v1/jobs 2xx":     2,
		"POST /v1/jobs 4xx":     1,
		"GET /v1/jobs/{id} 4xx": 2,
		"$default 4xx":          2,
	}, reqs)
	for _, m := range op["api_request_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		var n float64
		for k, v := range reqs {
			if strings.HasPrefix(k, labels(m)["route"]+" ") {
				n += v
			}
		}
		require.InDelta(t, n, float64(h.GetSampleCount()), 0, "a duration for each request: %s", labels(m)["route"])
		require.Positive(t, h.GetSampleSum())
	}
}
