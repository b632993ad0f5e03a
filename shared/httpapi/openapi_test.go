package httpapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/views"
)

// spec is api/openapi.yaml as GET /v1/openapi.json answers it, decoded.
type spec struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Enum        []string `json:"enum"`
			Description string   `json:"description"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	doc, err := api.JSON()
	require.NoError(t, err)
	var s spec
	require.NoError(t, json.Unmarshal(doc, &s))
	return s
}

// The document is OpenAPI 3.1 as its schema has it, and every $ref in it
// resolves.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(api.YAML)
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.GetVersion())
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	require.True(t, ok, "%v", verrs)
	model, err := doc.BuildV3Model()
	require.NoError(t, err, "every $ref resolves")
	require.NotNil(t, model)

	// No member is null: in YAML's flow style an unquoted description with
	// a comma ends early and leaves the rest as a key of no value, which
	// JSON Schema ignores as an unknown keyword.
	raw, err := api.JSON()
	require.NoError(t, err)
	var tree any
	require.NoError(t, json.Unmarshal(raw, &tree))
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				require.NotNil(t, x, "%s.%s is null", path, k)
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk("", tree)
}

// Every route a function serves is in the document, and the document
// describes no route nothing serves.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	var served []string
	for _, fn := range []httpapi.Function{httpapi.EnqueueFunction, httpapi.ClaimFunction} {
		served = append(served, httpapi.Routes(fn)...)
	}
	slices.Sort(served)
	var described []string
	for path, item := range loadSpec(t).Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				described = append(described, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(described)
	require.Equal(t, served, described)
}

// The operations the document describes without a key (security: [])
// are the routes that answer without one.
func TestOpenAPIKeylessOperationsAreTheKeylessRoutes(t *testing.T) {
	t.Parallel()
	var open []string
	for path, item := range loadSpec(t).Paths {
		for method, raw := range item {
			var op struct{ Security *[]json.RawMessage }
			if json.Unmarshal(raw, &op) == nil && op.Security != nil && len(*op.Security) == 0 {
				open = append(open, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(open)
	require.Equal(t, httpapi.KeylessRoutes(), open)
}

// The document's enums are the domain's and the views': a state, word,
// class, action or error code added there and not here fails.
func TestOpenAPIEnumsAreTheDomains(t *testing.T) {
	t.Parallel()
	schemas := loadSpec(t).Components.Schemas
	strs := func(xs any) []string {
		var out []string
		switch xs := xs.(type) {
		case []domain.JobState:
			for _, x := range xs {
				out = append(out, string(x))
			}
		case []domain.StepState:
			for _, x := range xs {
				out = append(out, string(x))
			}
		case []domain.AttemptState:
			for _, x := range xs {
				out = append(out, string(x))
			}
		case []domain.FailureClass:
			for _, x := range xs {
				out = append(out, string(x))
			}
		case []string:
			out = xs
		default:
			panic(fmt.Sprintf("%T", xs))
		}
		return out
	}
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(httpapi.ErrorCodes())) {
		codes = append(codes, string(c))
	}
	for name, want := range map[string][]string{
		"JobState":     strs(domain.AllJobStates()),
		"StepState":    strs(domain.AllStepStates()),
		"AttemptState": strs(domain.AllAttemptStates()),
		"FailureClass": strs(domain.FailureClasses()),
		"ActionType":   strs(domain.Actions()),
		"ErrorCode":    codes,
		"Backoff":      {domain.BackoffExponential, domain.BackoffLinear, domain.BackoffFixed},
		"Overlap":      {string(domain.OverlapSkip), string(domain.OverlapAllow)},
		// The views' words, job and step.
		"TaskState":      views.JobWords(views.Task),
		"FormalState":    views.JobWords(views.Formal),
		"GatedState":     views.JobWords(views.Gated),
		"TaskStepState":  views.StepWords(views.Task),
		"GatedStepState": views.StepWords(views.Gated),
	} {
		require.ElementsMatch(t, want, schemas[name].Enum, "components.schemas.%s.enum", name)
	}
	// Each code's status, as ErrorCode's description lists them.
	desc := strings.Join(strings.Fields(schemas["ErrorCode"].Description), " ")
	for code, status := range httpapi.ErrorCodes() {
		require.Contains(t, desc, fmt.Sprintf("%s %d", code, status), "ErrorCode's description names %s's status", code)
	}
}

// The served document's servers name the address it was fetched from:
// the scheme API Gateway forwards, the domain, and a named stage's or a
// custom domain's base path ahead of the route in the raw path.
func TestOpenAPIServersNameTheAddressServedOn(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	a := httpapi.New(h.Engine, nil)
	servers := func(t *testing.T, domain, proto, stage, rawPath string) []map[string]string {
		t.Helper()
		ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /v1/openapi.json", RawPath: rawPath, Headers: map[string]string{}}
		if proto != "" {
			ev.Headers["x-forwarded-proto"] = proto
		}
		ev.RequestContext.DomainName, ev.RequestContext.Stage = domain, stage
		ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = "GET", rawPath
		res, err := a.Handle(t.Context(), ev)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, res.Body)
		var doc struct {
			Servers []map[string]string `json:"servers"`
			Paths   map[string]any      `json:"paths"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.Body), &doc))
		require.Contains(t, doc.Paths, "/v1/jobs", "the rest of the document is as written")
		return doc.Servers
	}
	url := func(t *testing.T, domain, proto, stage, rawPath string) string {
		t.Helper()
		s := servers(t, domain, proto, stage, rawPath)
		require.Len(t, s, 1)
		return s[0]["url"]
	}
	for _, c := range []struct{ name, domain, proto, stage, rawPath, want string }{
		{"make dev", "127.0.0.1:3000", "http", "$default", "/v1/openapi.json", "http://127.0.0.1:3000"},
		{"the default stage", "abc123.execute-api.eu-west-1.amazonaws.com", "https", "$default", "/v1/openapi.json", "https://abc123.execute-api.eu-west-1.amazonaws.com"},
		{"a named stage", "abc123.execute-api.eu-west-1.amazonaws.com", "https", "prod", "/prod/v1/openapi.json", "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"},
		{"a custom domain's base path", "api.example.com", "https", "prod", "/jobs/v1/openapi.json", "https://api.example.com/jobs"},
		{"a custom domain's root", "api.example.com", "https", "prod", "/v1/openapi.json", "https://api.example.com"},
		{"no forwarded scheme: API Gateway serves HTTPS only", "api.example.com", "", "$default", "/v1/openapi.json", "https://api.example.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, url(t, c.domain, c.proto, c.stage, c.rawPath))
		})
	}

	// A request naming no host, or one that is no host, gets the document as written.
	written := []map[string]string{{"url": "http://127.0.0.1:3000", "description": "make dev"}}
	require.Equal(t, written, servers(t, "", "https", "$default", "/v1/openapi.json"))
	require.Equal(t, written, servers(t, "evil.example/x?y", "https", "$default", "/v1/openapi.json"))
	require.Equal(t, written, servers(t, "user@evil.example", "https", "$default", "/v1/openapi.json"))

	// Over HTTP, through the local API Gateway, it is the harness's own URL.
	var doc struct {
		Servers []map[string]string `json:"servers"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/openapi.json", "", nil, &doc)
	require.Len(t, doc.Servers, 1)
	require.Equal(t, h.URL, doc.Servers[0]["url"])
}
