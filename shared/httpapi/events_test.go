package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/httpapi"
)

// awsEvents holds real payloads as AWS sends them (from aws-lambda-go's
// events/testdata, Apache License 2.0); projectEvents the project's own
// samples for `sam local invoke` and `make invoke`. Both are in the
// repository: a missing file fails the test.
const (
	awsEvents     = "testdata/aws-events"
	projectEvents = "../../events"
)

// apigwSamples are API Gateway's payload 2.0 requests, with and without
// authorizers, in awsEvents.
var apigwSamples = []string{
	"apigw-v2-request-iam.json",
	"apigw-v2-request-jwt-authorizer.json",
	"apigw-v2-request-lambda-authorizer.json",
	"apigw-v2-request-no-authorizer.json",
}

func readEvent(t *testing.T, path string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var ev events.APIGatewayV2HTTPRequest
	require.NoError(t, json.Unmarshal(raw, &ev), "decode %s", path)
	return ev
}

// TestRealAPIGatewayPayloads drives the handler with API Gateway's own
// payload 2.0 requests, with and without authorizers.
func TestRealAPIGatewayPayloads(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(awsEvents, "apigw-v2-request-*.json"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	require.ElementsMatch(t, apigwSamples, names, "API Gateway samples in %s", awsEvents)
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	api := httpapi.New(h.Engine, nil)
	ctx := context.Background()

	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()

			// As is: its route ($default) is none of ours.
			ev := readEvent(t, f)
			require.Equal(t, "$default", ev.RouteKey)
			res, err := api.Handle(ctx, ev)
			require.NoError(t, err)
			requireError(t, res.StatusCode, []byte(res.Body), http.StatusNotFound, domain.CodeNotFound, "")
			require.Equal(t, "application/json", res.Headers["content-type"])

			// Routed to the health check, with a key.
			ev = readEvent(t, f)
			ev.RouteKey, ev.RequestContext.RouteKey = "GET /v1/health", "GET /v1/health"
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			ev.Headers["authorization"] = "Bearer " + stacktest.KeyA
			res, err = api.Handle(ctx, ev)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.StatusCode, res.Body)
			var health map[string]any
			require.NoError(t, json.Unmarshal([]byte(res.Body), &health))
			require.Contains(t, health, "status")

			// Without the key it is refused, whatever the authorizer said.
			delete(ev.Headers, "authorization")
			res, err = api.Handle(ctx, ev)
			require.NoError(t, err)
			requireError(t, res.StatusCode, []byte(res.Body), http.StatusUnauthorized, domain.CodeUnauthorized, "")

			// Routed to submit, with a base64 body.
			ev = readEvent(t, f)
			ev.RouteKey, ev.RequestContext.RouteKey = "POST /v1/jobs", "POST /v1/jobs"
			ev.RequestContext.HTTP.Method = http.MethodPost
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			ev.Headers["Authorization"] = "Bearer " + stacktest.KeyA
			ev.Body = base64.StdEncoding.EncodeToString([]byte(`{"steps":[{"id":"s","action":{"type":"pass"}}],"payload":{"from":"` + filepath.Base(f) + `"}}`))
			ev.IsBase64Encoded = true
			res, err = api.Handle(ctx, ev)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, res.StatusCode, res.Body)
			var v struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
			require.Equal(t, "/v1/jobs/"+v.ID, res.Headers["location"])
			j, err := h.Engine.Get(ctx, stacktest.TenantA, v.ID)
			require.NoError(t, err)
			require.JSONEq(t, `{"from":"`+filepath.Base(f)+`"}`, string(j.Payload))
			require.NoError(t, domain.CheckReplay(j))

			// A body that is not base64 at all is a 400 naming the body.
			ev.Body = "{not base64"
			res, err = api.Handle(ctx, ev)
			require.NoError(t, err)
			requireError(t, res.StatusCode, []byte(res.Body), http.StatusBadRequest, domain.CodeInvalid, "body")
		})
	}
}

// TestProjectSampleEvents: the events/ samples `make invoke` sends decode
// and work once their dev key exists.
func TestProjectSampleEvents(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(projectEvents)
	require.NoError(t, err, "the project's sample events")
	h := stacktest.New(t, func(o *devstack.Options) {
		o.NoRunner = true
		o.APIKeys["dev-key"] = devstack.SampleTenant
		o.SampleJob = true // as make dev does
	})
	api := httpapi.New(h.Engine, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		file   string
		status int
		check  func(t *testing.T, res events.APIGatewayV2HTTPResponse)
	}{
		{"enqueue-submit.json", http.StatusCreated, func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
			var v struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
			j, err := h.Engine.Get(ctx, "dev", v.ID)
			require.NoError(t, err)
			require.JSONEq(t, `{"hello":"world"}`, string(j.Payload))
			require.Equal(t, "hello", j.Steps[0].ID())
		}},
		{"enqueue-health.json", http.StatusOK, func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
			require.Equal(t, "ok", v["status"])
		}},
		{"enqueue-get.json", http.StatusOK, func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
			var v struct {
				ID    string
				State domain.JobState
			}
			require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
			require.Equal(t, devstack.SampleJobID, v.ID, "the sample job make dev keeps")
			require.Equal(t, domain.JobQueued, v.State, "no runner here to run it")
		}},
		{"claim-claim.json", http.StatusOK, func(t *testing.T, res events.APIGatewayV2HTTPResponse) {
			var v struct{ Leases []json.RawMessage }
			require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
			require.NotNil(t, v.Leases)
			require.Empty(t, v.Leases)
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			ev := readEvent(t, filepath.Join(projectEvents, tc.file))
			res, err := api.Handle(ctx, ev)
			require.NoError(t, err)
			require.Equal(t, tc.status, res.StatusCode, res.Body)
			tc.check(t, res)
		})
	}

	// The same sample sent with tenant A's key makes A's job: the key, not
	// anything else in the event, names the tenant.
	ev := readEvent(t, filepath.Join(projectEvents, "enqueue-submit.json"))
	ev.Headers["authorization"] = "Bearer " + stacktest.KeyA
	res, err := api.Handle(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, res.Body)
	var v struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(res.Body), &v))
	_, err = h.Engine.Get(ctx, stacktest.TenantA, v.ID)
	require.NoError(t, err)
	_, err = h.Engine.Get(ctx, "dev", v.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
}
