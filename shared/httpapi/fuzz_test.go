package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/httpapi"
)

// Run briefly in CI:
//
//	go test -run='^$' -fuzz='^FuzzAPIGatewayEvent$' -fuzztime=10s ./shared/httpapi
//
// Plain `go test` runs it over its committed corpus
// (testdata/fuzz/FuzzAPIGatewayEvent/): real payload 2.0 events for every
// route, and malformed ones.

// FuzzAPIGatewayEvent: any JSON decoded as an API Gateway HTTP API
// payload 2.0 event and handed to the handler never panics, and is
// answered with a real HTTP status and a JSON body; an answer of 400 names
// what was wrong.
func FuzzAPIGatewayEvent(f *testing.F) {
	f.Add([]byte(`{"version":"2.0","routeKey":"GET /v1/health","rawPath":"/v1/health","headers":{"authorization":"Bearer fuzz-key"},"requestContext":{"http":{"method":"GET","path":"/v1/health"}}}`))
	// A real stack on the emulator, nothing polling it: "Bearer fuzz-key"
	// is tenant t1, so inputs get past authentication to the routes' own
	// decoding and validation and on to DynamoDB and SQS.
	h := stacktest.New(f, func(o *devstack.Options) {
		o.NoRunner = true
		o.APIKeys["fuzz-key"] = "t1"
		o.Log = slog.New(slog.DiscardHandler)
	})
	api := httpapi.New(h.Engine, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev events.APIGatewayV2HTTPRequest
		if json.Unmarshal(raw, &ev) != nil {
			return
		}
		// A claim long-polls up to wait_seconds: bound the call.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := api.Handle(ctx, ev)
		if err != nil {
			t.Fatalf("Handle answered an error (Lambda would answer 502): %v", err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 599 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if resp.IsBase64Encoded || !json.Valid([]byte(resp.Body)) {
			t.Fatalf("status %d: body is not JSON: %q", resp.StatusCode, resp.Body)
		}
		if ct := resp.Headers["content-type"]; !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("status %d: content-type %q", resp.StatusCode, ct)
		}
		if resp.StatusCode >= 400 {
			var body httpapi.ErrorBody
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
				t.Fatalf("status %d: not an error body: %s", resp.StatusCode, resp.Body)
			}
		}
	})
}
