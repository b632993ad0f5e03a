package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/shared/httpapi"
)

// template.yaml decides which function API Gateway sends a route to, and
// each function's IAM policy is scoped to its routes: a route put under the
// wrong function there, or served by the wrong one here, fails this test
// rather than failing on AWS only.
func TestTemplateRoutesMatchWhatEachFunctionServes(t *testing.T) {
	t.Parallel()
	path, err := devstack.FindTemplate()
	require.NoError(t, err)
	tmpl, err := bootstrap.Parse(path)
	require.NoError(t, err)

	inTemplate := map[string][]string{}
	for _, fn := range tmpl.Functions() {
		for _, r := range fn.Routes {
			if r.Path == "$default" {
				continue // the catch-all answers 404/405 itself (noRoute)
			}
			inTemplate[fn.LogicalID] = append(inTemplate[fn.LogicalID], r.Method+" "+r.Path)
		}
	}
	for id := range inTemplate {
		slices.Sort(inTemplate[id])
	}
	served := map[string][]string{}
	for _, fn := range []httpapi.Function{httpapi.EnqueueFunction, httpapi.ClaimFunction} {
		served[string(fn)] = httpapi.Routes(fn)
	}
	require.Equal(t, served, inTemplate)
}

func TestAFunctionRefusesAnotherFunctionsRoute(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	api := httpapi.New(nil, slog.New(slog.NewTextHandler(&logged, nil)), httpapi.EnqueueFunction)
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /v1/claim", RawPath: "/v1/claim"}
	ev.RequestContext.HTTP.Method = http.MethodPost
	res, err := api.Handle(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, res.StatusCode)
	require.Contains(t, res.Body, `"code":"internal"`, "the client learns nothing of the deployment")
	require.Contains(t, logged.String(), "served by ClaimFunction")
}
