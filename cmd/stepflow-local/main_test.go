package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/localstack/lambdaemu"
	"github.com/stepflow/stepflow/shared/domain"
)

// declaredVariables are the variables template.yaml declares for every
// function: the only ones `sam local invoke --env-vars` passes on.
func declaredVariables(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../../template.yaml")
	require.NoError(t, err)
	var doc struct {
		Globals struct {
			Function struct {
				Environment struct {
					Variables map[string]yaml.Node `yaml:"Variables"`
				} `yaml:"Environment"`
			} `yaml:"Function"`
		} `yaml:"Globals"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	out := map[string]bool{}
	for k := range doc.Globals.Function.Environment.Variables {
		out[k] = true
	}
	return out
}

// The env-vars file make dev writes runs the functions' own binaries
// against the dev stack as `sam local invoke --env-vars` would: each built
// from functions/ and run under the Lambda Runtime API with only the
// variables SAM passes on (those template.yaml declares, from the file),
// the region and some credentials. The sample events then act on the
// sample job. What this cannot show is Docker's network: see docs/deploy.md.
func TestEnvVarsFileRunsTheFunctionsAsSAMLocalInvokeWould(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) {
		o.SampleJob = true
		o.APIKeys["dev-key"] = devstack.SampleTenant
	})
	h.AwaitState(t, "dev-key", devstack.SampleJobID, domain.JobCompleted)

	path := filepath.Join(t.TempDir(), "env.json")
	wrote, err := writeEnvVars(path, h.Stack)
	require.NoError(t, err)
	var file map[string]map[string]string
	require.NoError(t, json.Unmarshal(wrote, &file))
	require.ElementsMatch(t, []string{"EnqueueFunction", "ClaimFunction", "ExecuteFunction", "HeartbeatFunction"}, keys(file))
	declared := declaredVariables(t)
	require.True(t, declared["AWS_ENDPOINT_URL"], "template.yaml declares AWS_ENDPOINT_URL, or SAM drops it from the file")
	passed := map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} // SAM passes the caller's credentials
	for k, v := range file["EnqueueFunction"] {
		if declared[k] {
			passed[k] = v
		}
	}
	require.Equal(t, h.Endpoint, passed["AWS_ENDPOINT_URL"])
	require.Equal(t, h.Resources.Env["STEPFLOW_TABLE"], passed["STEPFLOW_TABLE"])
	for _, fn := range file {
		require.Equal(t, file["EnqueueFunction"], fn, "every function gets the template's Globals")
	}

	svc, err := lambdaemu.Start(context.Background(), "127.0.0.1:0", lambdaemu.Options{Dirs: []string{"../../functions"}, Env: passed, Region: "us-east-1"})
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	client := lambda.New(lambda.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(svc.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	invoke := func(fn, event string) []byte {
		t.Helper()
		payload, err := os.ReadFile(filepath.Join("../../events", event))
		require.NoError(t, err)
		out, err := client.Invoke(context.Background(), &lambda.InvokeInput{FunctionName: aws.String(fn), Payload: payload})
		require.NoError(t, err)
		require.Nil(t, out.FunctionError, "%s %s: %s", fn, event, out.Payload)
		return out.Payload
	}

	var res events.APIGatewayV2HTTPResponse
	require.NoError(t, json.Unmarshal(invoke("enqueue", "enqueue-get.json"), &res))
	require.Equal(t, 200, res.StatusCode, res.Body)
	var job struct {
		ID    string
		State domain.JobState
	}
	require.NoError(t, json.Unmarshal([]byte(res.Body), &job))
	require.Equal(t, devstack.SampleJobID, job.ID)
	require.Equal(t, domain.JobCompleted, job.State)

	require.NoError(t, json.Unmarshal(invoke("enqueue", "enqueue-submit.json"), &res))
	require.Equal(t, 201, res.StatusCode, res.Body)
	require.NoError(t, json.Unmarshal([]byte(res.Body), &job))
	h.AwaitState(t, "dev-key", job.ID, domain.JobCompleted) // the dev stack's runner runs what the function submitted

	require.NoError(t, json.Unmarshal(invoke("claim", "claim-claim.json"), &res))
	require.Equal(t, 200, res.StatusCode, res.Body)

	var batch events.SQSEventResponse
	require.NoError(t, json.Unmarshal(invoke("execute", "execute-sqs.json"), &batch))
	require.Empty(t, batch.BatchItemFailures, "the sample job's step is done: the message is acknowledged")

	invoke("heartbeat", "heartbeat-schedule.json")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// make invoke acts on the dev stack STEPFLOW_URL names, as the CLI does:
// its state file is found by that URL's port, ahead of STEPFLOW_ADDR and
// the default port. (t.Setenv: not parallel.)
func TestInvokeActsOnTheStackOfSTEPFLOW_URL(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // no dev stack's file but this test's
	h := stacktest.New(t, func(o *devstack.Options) {
		o.SampleJob = true
		o.APIKeys["dev-key"] = devstack.SampleTenant
	})
	h.AwaitState(t, "dev-key", devstack.SampleJobID, domain.JobCompleted)
	sf, err := devstate.PathForURL(h.URL)
	require.NoError(t, err)
	require.NoError(t, devstate.Write(sf, devstate.State{URL: h.URL, Endpoint: h.Endpoint, Region: "us-east-1", Stack: h.Name, Env: h.Resources.Env}))

	invoke := func(fn, event string) (string, error) {
		t.Helper()
		cmd := invokeCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{fn, filepath.Join("../../events", event)})
		err := cmd.ExecuteContext(t.Context())
		return out.String(), err
	}

	t.Setenv("STEPFLOW_URL", h.URL)
	t.Setenv("STEPFLOW_ADDR", "127.0.0.1:1") // no stack there: STEPFLOW_URL comes first
	out, err := invoke("enqueue", "enqueue-get.json")
	require.NoError(t, err)
	var res events.APIGatewayV2HTTPResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, 200, res.StatusCode, res.Body)
	var job struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(res.Body), &job))
	require.Equal(t, devstack.SampleJobID, job.ID)

	// Without it, the stack on STEPFLOW_ADDR, which is none here, is named.
	t.Setenv("STEPFLOW_URL", "")
	_, err = invoke("enqueue", "enqueue-get.json")
	require.ErrorContains(t, err, "no dev stack is running at 127.0.0.1:1")

	t.Setenv("STEPFLOW_URL", "127.0.0.1 3000")
	_, err = invoke("enqueue", "enqueue-get.json")
	require.ErrorContains(t, err, "STEPFLOW_URL")
}

// make dev deploys the template with its example functions, as it serves
// them for lambda steps; a stack on AWS has them only when asked.
func TestDevDeploysTheExampleFunctions(t *testing.T) {
	t.Parallel()
	ids := func(params map[string]string) []string {
		tpl, err := bootstrap.Parse("../../template.yaml")
		require.NoError(t, err)
		for k, v := range params {
			require.NoError(t, tpl.SetParameter(k, v))
		}
		var out []string
		for _, f := range tpl.Functions() {
			out = append(out, f.LogicalID)
		}
		return out
	}
	require.NotContains(t, ids(nil), "EchoFunction", "DeployExamples defaults to false")
	require.Subset(t, ids(devParameters()), []string{"EchoFunction", "FlakyFunction"})
	require.Subset(t, ids(devParametersOf(map[string]string{"STEPFLOW_TIMER_STATE_MACHINE": "arn"})), []string{"EchoFunction", "FlakyFunction"})
}
