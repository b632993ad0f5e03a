package httpapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
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
