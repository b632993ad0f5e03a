package devstack_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// stateMachine makes a state machine on the emulator (whose Step
// Functions executes Pass, Wait, Choice, Succeed and Fail) and answers
// its client.
func stateMachine(t *testing.T, name, definition string) *sfn.Client {
	t.Helper()
	ctx := context.Background()
	cfg, err := devstack.AWSConfig(ctx, stacktest.Endpoint(t), "us-east-1")
	require.NoError(t, err)
	sf := sfn.NewFromConfig(cfg)
	_, err = sf.CreateStateMachine(ctx, &sfn.CreateStateMachineInput{Name: aws.String(name), Definition: aws.String(definition),
		RoleArn: aws.String("arn:aws:iam::123456789012:role/stepflow-sm")})
	require.NoError(t, err)
	return sf
}

// A state machine brought as a step runs on the step's input and the step
// succeeds with its output; one that fails fails the step with its error
// and cause.
func TestAStateMachineRunsAsAStep(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	suffix := strings.ToLower(strings.ReplaceAll(h.Name, "_", "-"))
	ok, bad := "stepflow-sm-ok-"+suffix, "stepflow-sm-bad-"+suffix
	stateMachine(t, ok, `{"StartAt": "Greet", "States": {"Greet": {"Type": "Pass", "Parameters": {"hello.$": "$.name", "from": "sfn"}, "End": true}}}`)
	stateMachine(t, bad, `{"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Orders.Invalid", "Cause": "no such order"}}}`)

	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"name": "otter"}, "steps": []any{
		map[string]any{"id": "greet", "action": map[string]any{"type": "stepfunctions", "state_machine": ok}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"hello": "otter", "from": "sfn"}`, string(j.Steps[0].Output))
	require.JSONEq(t, `{"hello": "otter", "from": "sfn"}`, string(j.Steps[1].Output))
	// Its one state's transition is in the job's cost, read from the
	// execution's history once it ended.
	var costed struct {
		Cost domain.Cost `json:"cost"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &costed)
	require.Equal(t, 1.0, costed.Cost.Units.SFNTransitions)
	stored, err := h.Engine.Get(context.Background(), tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.ExecutionName(j.ID, "greet", 1), stored.Steps[0].Attempts[0].Child, "named from job, step and attempt")

	f := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "boom", "retry": map[string]any{"max_attempts": 1}, "action": map[string]any{"type": "stepfunctions", "state_machine": bad}},
	}})
	f = h.AwaitState(t, keyA, f.ID, domain.JobFailed)
	require.Equal(t, domain.ClassFatal, f.Steps[0].Error.Class)
	require.Contains(t, f.Steps[0].Error.Message, "failed: Orders.Invalid: no such order")
	h.CheckReplay(t, tenantA, j.ID)
	h.CheckReplay(t, tenantA, f.ID)

	// Only this stack's state machines under the allowed prefix.
	for sm, want := range map[string]string{
		"other-machine": "must start with one of stepflow-sm-",
		"arn:aws:states:us-east-1:999999999999:stateMachine:stepflow-sm-x": "names account 999999999999",
	} {
		code, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
			map[string]any{"id": "s", "action": map[string]any{"type": "stepfunctions", "state_machine": sm}}}})
		require.Equal(t, http.StatusBadRequest, code, sm)
		require.Contains(t, string(body), `"field":"steps[0].action.state_machine"`)
		require.Contains(t, string(body), want)
	}
}

// Cancelling the job stops the execution its step runs.
func TestCancellingAJobStopsItsExecution(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	name := "stepflow-sm-wait-" + strings.ToLower(strings.ReplaceAll(h.Name, "_", "-"))
	sf := stateMachine(t, name, `{"StartAt": "Nap", "States": {"Nap": {"Type": "Wait", "Seconds": 3600, "End": true}}}`)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "nap", "action": map[string]any{"type": "stepfunctions", "state_machine": name}}}})
	var exec string
	h.Await(t, keyA, j.ID, "its execution started", func(j stacktest.Job) bool {
		exec = j.Steps[0].Execution
		return exec != ""
	})
	arn := "arn:aws:states:us-east-1:123456789012:execution:" + name + ":" + exec
	ctx := context.Background()
	out, err := sf.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
	require.NoError(t, err)
	require.Equal(t, "RUNNING", string(out.Status))

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", keyA, nil, nil)
	require.Eventually(t, func() bool {
		out, err := sf.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		return err == nil && string(out.Status) == "ABORTED"
	}, 10*time.Second, 50*time.Millisecond, "the execution is stopped")
	h.CheckReplay(t, tenantA, j.ID)
}

// An execution the execute function does not wait out is looked at by
// the sweep, which records its end.
func TestTheSweepRecordsAnExecutionsEnd(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) {
		o.Env = map[string]string{"STEPFLOW_SFN_WAIT_SECONDS": "0"} // left to the sweep at once
	})
	name := "stepflow-sm-swept-" + strings.ToLower(strings.ReplaceAll(h.Name, "_", "-"))
	stateMachine(t, name, `{"StartAt": "Done", "States": {"Done": {"Type": "Pass", "Result": {"swept": true}, "End": true}}}`)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "s", "action": map[string]any{"type": "stepfunctions", "state_machine": name}}}})
	h.Await(t, keyA, j.ID, "its execution started", func(j stacktest.Job) bool { return j.Steps[0].Execution != "" })
	require.Equal(t, domain.JobRunning, h.Get(t, keyA, j.ID).State, "nothing waits for it")

	h.Clock.Advance(domain.DispatchGrace)
	h.Sweep(t)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"swept": true}`, string(j.Steps[0].Output))
}
