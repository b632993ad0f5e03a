package actions_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/actions/lambdaclient"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// lambdaSetup is a stand-in for Lambda's Invoke API, answering per
// function name as Lambda does, with the real SDK client pointed at it: the
// classification is tested through the errors the SDK really makes.
type lambdaSetup struct {
	runner *actions.Runner
	mu     sync.Mutex
	got    []*http.Request
	bodies []string
	srv    *httptest.Server
}

func newLambdaSetup(t *testing.T) *lambdaSetup {
	t.Helper()
	s := &lambdaSetup{}
	apiError := func(w http.ResponseWriter, status int, code, msg string) {
		w.Header().Set("X-Amzn-ErrorType", code)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "message": msg})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got, s.bodies = append(s.got, r), append(s.bodies, string(body))
		s.mu.Unlock()
		switch r.PathValue("name") {
		case "echo":
			_, _ = w.Write([]byte(`{"echo":` + string(body) + `}`))
		case "llm":
			_, _ = w.Write([]byte(`{"answer":"otters","stepflow_cost":{"usd":0.0021}}`))
		case "own-field":
			_, _ = w.Write([]byte(`{"stepflow_cost":"a field of its own"}`))
		case "text":
			_, _ = w.Write([]byte(`plain words`))
		case "empty":
		case "big":
			_, _ = w.Write([]byte(`"` + strings.Repeat("a", actions.MaxOutputBytes) + `"`))
		case "fails":
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
			_, _ = w.Write([]byte(`{"errorType":"errorString","errorMessage":"boom: the disk is full"}`))
		case "fails-oddly":
			w.Header().Set("X-Amz-Function-Error", "Handled")
			_, _ = w.Write([]byte(`not json`))
		case "cut-short": // answers 200, then the connection drops mid-body
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte(`{"partial":`))
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		case "slow":
			<-r.Context().Done()
		case "throttled":
			w.Header().Set("Retry-After", "9")
			apiError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate Exceeded.")
		case "broken":
			apiError(w, http.StatusInternalServerError, "ServiceException", "internal")
		case "no-eni":
			apiError(w, http.StatusBadGateway, "ENILimitReachedException", "no ENI")
		case "not-ready":
			apiError(w, http.StatusBadGateway, "ResourceNotReadyException", "pending")
		case "denied":
			apiError(w, http.StatusForbidden, "AccessDeniedException", "not allowed")
		case "too-large":
			apiError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException", "request too large")
		case "bad-json":
			apiError(w, http.StatusBadRequest, "InvalidRequestContentException", "Could not parse request body into json")
		default:
			apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+r.PathValue("name"))
		}
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	s.runner = &actions.Runner{Lambda: lambdaclient.New(lambdaClient(s.srv.URL))}
	return s
}

func lambdaClient(endpoint string) *lambda.Client {
	return lambda.New(lambda.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

func (s *lambdaSetup) invoke(ctx context.Context, function, qualifier string) (json.RawMessage, *domain.Failure) {
	return s.runner.Run(ctx, engine.ActionCall{
		Spec:  domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: function, Qualifier: qualifier}}, TimeoutSeconds: 5},
		Input: json.RawMessage(`{"x":2}`), IdempotencyKey: "job/step/1", Tenant: "acme",
	})
}

func TestLambdaActionAnswers(t *testing.T) {
	t.Parallel()
	s := newLambdaSetup(t)
	ctx := context.Background()

	out, f := s.invoke(ctx, "echo", "live")
	require.Nil(t, f)
	require.JSONEq(t, `{"echo":{"x":2}}`, string(out), "the step input is the event; the answer the output")
	s.mu.Lock()
	r := s.got[0]
	s.mu.Unlock()
	require.Equal(t, "RequestResponse", r.Header.Get("X-Amz-Invocation-Type"))
	require.Equal(t, "live", r.URL.Query().Get("Qualifier"))
	cc, err := base64.StdEncoding.DecodeString(r.Header.Get("X-Amz-Client-Context"))
	require.NoError(t, err)
	require.JSONEq(t, `{"custom":{"idempotency_key":"job/step/1","tenant":"acme"}}`, string(cc), "the attempt's idempotency key and the job's tenant ride in the client context")

	out, f = s.invoke(ctx, "text", "")
	require.Nil(t, f)
	require.JSONEq(t, `"plain words"`, string(out))
	out, f = s.invoke(ctx, "empty", "")
	require.Nil(t, f)
	require.JSONEq(t, `null`, string(out))

	_, f = s.invoke(ctx, "big", "")
	require.Equal(t, domain.ClassFatal, f.Class)
	require.Contains(t, f.Message, fmt.Sprintf("answered %d bytes; the limit is %d", actions.MaxOutputBytes+2, actions.MaxOutputBytes))
}

// A function's answer may say what the attempt spent: the report is taken
// out of the output, into the call's Reported; a field of that name that
// is no report stays the function's own.
func TestLambdaActionAnswerReportsItsCost(t *testing.T) {
	t.Parallel()
	s := newLambdaSetup(t)
	call := func(function string) (json.RawMessage, float64) {
		var reported float64
		out, f := s.runner.Run(context.Background(), engine.ActionCall{
			Spec:  domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: function}}, TimeoutSeconds: 5},
			Input: json.RawMessage(`{}`), Reported: &reported,
		})
		require.Nil(t, f)
		return out, reported
	}
	out, usd := call("llm")
	require.JSONEq(t, `{"answer":"otters"}`, string(out))
	require.Equal(t, 0.0021, usd)
	out, usd = call("own-field")
	require.JSONEq(t, `{"stepflow_cost":"a field of its own"}`, string(out))
	require.Zero(t, usd)
}

func TestLambdaActionClassifiesFailures(t *testing.T) {
	t.Parallel()
	s := newLambdaSetup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		function string
		class    domain.FailureClass
		quote    string
	}{
		{"fails", domain.ClassRetryable, "function error (Unhandled): errorString: boom: the disk is full"},
		{"fails-oddly", domain.ClassRetryable, "function error (Handled): not json"},
		{"throttled", domain.ClassRetryable, "TooManyRequestsException (HTTP 429)"},
		{"broken", domain.ClassRetryable, "ServiceException (HTTP 500)"},
		{"no-eni", domain.ClassRetryable, "ENILimitReachedException (HTTP 502)"},
		{"not-ready", domain.ClassRetryable, "ResourceNotReadyException"},
		{"missing", domain.ClassFatal, "ResourceNotFoundException (HTTP 404): Function not found: missing"},
		{"denied", domain.ClassFatal, "AccessDeniedException (HTTP 403)"},
		{"too-large", domain.ClassFatal, "RequestTooLargeException (HTTP 413)"},
		{"bad-json", domain.ClassFatal, "InvalidRequestContentException (HTTP 400)"},
		{"cut-short", domain.ClassNetwork, "answer lost (HTTP 200)"},
	} {
		_, f := s.invoke(ctx, tc.function, "")
		require.NotNil(t, f, tc.function)
		require.Equal(t, tc.class, f.Class, "%s: %s", tc.function, f.Message)
		require.Contains(t, f.Message, "lambda "+tc.function+": "+tc.quote)
	}
	_, f := s.invoke(ctx, "throttled", "")
	require.Equal(t, 9*time.Second, f.RetryAfter, "a throttle's Retry-After is honoured")

	s.mu.Lock()
	require.Len(t, s.got, 12, "one request per attempt: the SDK retries nothing")
	s.mu.Unlock()
}

func TestLambdaActionWithoutAnswer(t *testing.T) {
	t.Parallel()
	s := newLambdaSetup(t)

	// The step's timeout_seconds: the Runner's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, f := s.invoke(ctx, "slow", "")
	require.Equal(t, domain.ClassTimeout, f.Class, f.Message)

	// No answer at all (connection refused) is class network.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	r := &actions.Runner{Lambda: lambdaclient.New(lambdaClient(closed.URL))}
	_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: "echo"}}}, Input: json.RawMessage(`{}`)})
	require.Equal(t, domain.ClassNetwork, f.Class)
	require.Contains(t, f.Message, "lambda echo: no answer")

	// No client configured: fatal, saying how to configure one.
	_, f = (&actions.Runner{}).Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: "echo"}}}, Input: json.RawMessage(`{}`)})
	require.Equal(t, domain.ClassFatal, f.Class)
	require.Contains(t, f.Message, "no Lambda client")
}

func TestLambdaAllowList(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"stepflow-fn-", "billing"}, actions.ParseLambdaAllow(" stepflow-fn-, ,billing,"))
	require.Nil(t, actions.ParseLambdaAllow(""))

	var none *actions.Runner
	require.NoError(t, none.CheckFunction("anything"))
	require.NoError(t, (&actions.Runner{}).CheckFunction("anything"), "an empty list leaves it to IAM")

	home := actions.LambdaHome{Partition: "aws", Region: "us-east-1", Account: "123456789012"}
	r := &actions.Runner{LambdaAllow: []string{"stepflow-fn-", "billing"}, LambdaHome: home}
	for _, ok := range []string{"stepflow-fn-echo", "stepflow-fn-echo:live", "billing", "billing-v2", "arn:aws:lambda:us-east-1:123456789012:function:stepflow-fn-echo:3", "123456789012:function:billing"} {
		require.NoError(t, r.CheckFunction(ok), ok)
	}
	for _, refused := range []string{"echo", "stepflow-echo", "arn:aws:lambda:us-east-1:123456789012:function:echo", "not a name"} {
		require.Error(t, r.CheckFunction(refused), refused)
	}

	// The allow list is of names: a name in another account, region or
	// partition is another function, refused whatever the list says.
	for _, runner := range []*actions.Runner{r, {LambdaHome: home}} {
		for ref, what := range map[string]string{
			"arn:aws:lambda:us-east-1:999999999999:function:stepflow-fn-echo":    "names account 999999999999",
			"999999999999:function:stepflow-fn-echo":                             "names account 999999999999",
			"arn:aws:lambda:eu-west-1:123456789012:function:stepflow-fn-echo":    "names region eu-west-1",
			"arn:aws-cn:lambda:us-east-1:123456789012:function:stepflow-fn-echo": "names partition aws-cn",
		} {
			err := runner.CheckFunction(ref)
			require.ErrorContains(t, err, what, ref)
			require.ErrorContains(t, err, "this stack's own functions", ref)
		}
	}
	// A stack that does not know its account takes names alone.
	unknown := &actions.Runner{LambdaHome: actions.LambdaHome{Partition: "aws", Region: "us-east-1"}}
	require.NoError(t, unknown.CheckFunction("stepflow-fn-echo"))
	require.ErrorContains(t, unknown.CheckFunction("123456789012:function:stepflow-fn-echo"), "does not know its own (STEPFLOW_AWS_ACCOUNT)")

	// Checked again when the step runs (a job from before the list
	// changed): refused without a request.
	s := newLambdaSetup(t)
	s.runner.LambdaAllow = []string{"stepflow-fn-"}
	_, f := s.invoke(context.Background(), "echo", "")
	require.Equal(t, domain.ClassFatal, f.Class)
	require.Contains(t, f.Message, "STEPFLOW_LAMBDA_ALLOW")
	s.mu.Lock()
	require.Empty(t, s.got)
	s.mu.Unlock()
}
