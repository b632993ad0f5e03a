package bootstrap

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"
)

// decodeStrict decodes a sample event into aws-lambda-go's type, refusing
// fields the real type does not have (a typo would be silently dropped).
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), path)
}

// The sample events in events/ have the shapes Lambda delivers, and every
// HTTP sample hits a route the template declares for a function.
func TestSampleEventsMatchTemplate(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	routes := map[string]string{} // "METHOD /path" -> function
	for _, f := range tpl.Functions() {
		for _, r := range f.Routes {
			routes[r.Method+" "+r.Path] = f.LogicalID
		}
	}

	files, err := filepath.Glob("../../events/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		name := filepath.Base(path)
		switch {
		case strings.HasPrefix(name, "enqueue-"), strings.HasPrefix(name, "claim-"):
			var ev events.APIGatewayV2HTTPRequest
			decodeStrict(t, path, &ev)
			require.Equal(t, "2.0", ev.Version, name)
			fn, ok := routes[ev.RouteKey]
			require.True(t, ok, "%s: route %q not in template.yaml", name, ev.RouteKey)
			require.True(t, strings.HasPrefix(strings.ToLower(fn), strings.Split(name, "-")[0]), "%s routed to %s", name, fn)
			require.Equal(t, ev.RouteKey, ev.RequestContext.RouteKey, name)
			require.Equal(t, ev.RawPath, ev.RequestContext.HTTP.Path, name)
			require.Equal(t, strings.SplitN(ev.RouteKey, " ", 2)[0], ev.RequestContext.HTTP.Method, name)
			require.Equal(t, "$default", ev.RequestContext.Stage, name)
			require.NotEmpty(t, ev.RequestContext.RequestID, name)
			require.NotZero(t, ev.RequestContext.TimeEpoch, name)
			require.Equal(t, "Bearer dev-key", ev.Headers["authorization"], name)
			for _, p := range []string{"id", "lease"} {
				if strings.Contains(ev.RouteKey, "{"+p+"}") {
					require.NotEmpty(t, ev.PathParameters[p], "%s: pathParameters.%s", name, p)
					require.Contains(t, ev.RawPath, ev.PathParameters[p], name)
				}
			}
			if ev.Body != "" {
				require.True(t, json.Valid([]byte(ev.Body)), "%s: body is not JSON", name)
				require.Equal(t, "application/json", ev.Headers["content-type"], name)
			}
		case strings.HasPrefix(name, "execute-"):
			var ev events.SQSEvent
			decodeStrict(t, path, &ev)
			require.NotEmpty(t, ev.Records, name)
			for _, r := range ev.Records {
				require.Equal(t, "aws:sqs", r.EventSource, name)
				require.True(t, json.Valid([]byte(r.Body)), name)
				require.Contains(t, r.EventSourceARN, "-ReadyQueueP", name)
			}
		case strings.HasPrefix(name, "heartbeat-"):
			var ev events.CloudWatchEvent
			decodeStrict(t, path, &ev)
			require.Equal(t, "Scheduled Event", ev.DetailType, name)
			require.Equal(t, "aws.events", ev.Source, name)
		default:
			t.Errorf("%s: no check for this sample event (name it <function>-<what>.json)", name)
		}
	}
}
