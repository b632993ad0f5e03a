package config_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions/lambdaclient"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

func lambdaEnv(extra map[string]string) func(string) string {
	env := map[string]string{
		"STEPFLOW_TABLE": "t", "STEPFLOW_QUEUE_P0": "q0", "STEPFLOW_QUEUE_P1": "q1", "STEPFLOW_QUEUE_P2": "q2",
		"STEPFLOW_WORKER_QUEUE_PREFIX": "w-", "STEPFLOW_LEASE_SECONDS": "60",
	}
	for k, v := range extra {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

func TestLambdaSettingsFromEnv(t *testing.T) {
	t.Parallel()
	s, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_LAMBDA_ENDPOINT": "http://127.0.0.1:3001", "STEPFLOW_LAMBDA_ALLOW": "stepflow-fn-"}))
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:3001", s.LambdaEndpoint)
	require.Equal(t, "stepflow-fn-", s.LambdaAllow)
	for _, bad := range []string{"127.0.0.1:3001", "ftp://x", "http://"} {
		_, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_LAMBDA_ENDPOINT": bad}))
		require.ErrorContains(t, err, "STEPFLOW_LAMBDA_ENDPOINT", bad)
	}
	_, err = config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_AWS_ACCOUNT": "12345"}))
	require.ErrorContains(t, err, "STEPFLOW_AWS_ACCOUNT")
}

// STEPFLOW_LAMBDA_ENDPOINT moves the lambda action's client alone: the
// other clients keep the AWS config's endpoint (here one nothing answers).
// STEPFLOW_LAMBDA_ALLOW reaches the runner's submit check.
func TestEngineWiresTheLambdaClient(t *testing.T) {
	t.Parallel()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = r.URL.Path
		_, _ = w.Write(append(append([]byte(`{"echo":`), b...), '}'))
	}))
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"), Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	s, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_LAMBDA_ENDPOINT": srv.URL, "STEPFLOW_LAMBDA_ALLOW": "stepflow-fn-",
		"STEPFLOW_AWS_ACCOUNT": "123456789012", "STEPFLOW_AWS_PARTITION": "aws"}))
	require.NoError(t, err)
	r := config.EngineConfig(s, config.ClientsFrom(cfg).WithLambda(lambdaclient.FromConfig, s.LambdaEndpoint), nil).Runner

	out, f := r.Run(context.Background(), engine.ActionCall{
		Spec:  domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: "stepflow-fn-echo"}}, TimeoutSeconds: 5},
		Input: json.RawMessage(`{"a":1}`),
	})
	require.Nil(t, f)
	require.JSONEq(t, `{"echo":{"a":1}}`, string(out))
	require.Equal(t, "/2015-03-31/functions/stepflow-fn-echo/invocations", got)
	checkFunction := func(function string) error {
		_, err := r.CheckAction(domain.ActionSpec{Type: domain.ActionLambda, LambdaAction: domain.LambdaAction{Function: function}})
		return err
	}
	require.NoError(t, checkFunction("stepflow-fn-echo"))
	require.ErrorContains(t, checkFunction("echo"), "STEPFLOW_LAMBDA_ALLOW")
	// The stack's home: the settings' account and partition, the client's
	// region.
	require.NoError(t, checkFunction("arn:aws:lambda:us-east-1:123456789012:function:stepflow-fn-echo"))
	require.ErrorContains(t, checkFunction("arn:aws:lambda:us-east-1:999999999999:function:stepflow-fn-echo"), "account 999999999999")
	require.ErrorContains(t, checkFunction("arn:aws:lambda:us-west-2:123456789012:function:stepflow-fn-echo"), "region us-west-2")
	require.ErrorContains(t, checkFunction("arn:aws-cn:lambda:us-east-1:123456789012:function:stepflow-fn-echo"), "partition aws-cn")
}
