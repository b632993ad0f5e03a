package devstack_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// withLambda serves examples/functions and the local Lambda service's test
// probe (localstack/lambdaemu/testdata/probe) as `make dev` serves
// examples/functions: each built and run under the Lambda Runtime API,
// named under the template's prefix, stepflow-fn-; the template's example
// functions exist, as make dev deploys it (DeployExamples).
func withLambda(o *devstack.Options) {
	o.LambdaDirs = []string{"examples/functions", "localstack/lambdaemu/testdata"}
	o.Parameters = map[string]string{"DeployExamples": "true"}
}

func lambdaStep(function string, extra ...map[string]any) map[string]any {
	st := map[string]any{"id": "call", "action": map[string]any{"type": "lambda", "function": function}}
	for _, e := range extra {
		for k, v := range e {
			st[k] = v
		}
	}
	return st
}

func TestLambdaStepRunsEchoOnTheLocalStack(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withLambda)

	j := h.Submit(t, keyA, map[string]any{"steps": []any{lambdaStep("stepflow-fn-echo")}, "payload": map[string]any{"order": 42}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"echo":{"order":42}}`, string(j.Steps[0].Output))
	require.Len(t, j.Steps[0].Attempts, 1)
	h.CheckReplay(t, tenantA, j.ID)

	// The function runs as Lambda runs it, and hears the attempt's
	// idempotency key and the job's tenant; its output feeds the next step.
	j = h.Submit(t, keyA, map[string]any{"steps": []any{
		lambdaStep("arn:aws:lambda:us-east-1:123456789012:function:stepflow-fn-probe"),
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}, "payload": map[string]any{"n": 1}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var probe struct {
		FunctionName   string          `json:"function_name"`
		IdempotencyKey string          `json:"idempotency_key"`
		Tenant         string          `json:"tenant"`
		Event          json.RawMessage `json:"event"`
	}
	require.NoError(t, json.Unmarshal(j.Steps[1].Output, &probe), "%s", j.Steps[1].Output)
	require.Equal(t, "stepflow-fn-probe", probe.FunctionName)
	require.Equal(t, j.ID+"/call/1", probe.IdempotencyKey)
	require.Equal(t, tenantA, probe.Tenant)
	require.JSONEq(t, `{"n":1}`, string(probe.Event))
}

func TestLambdaStepFailuresOnTheLocalStack(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withLambda)

	// A function error is retried, then fails the job with its message.
	j := h.Submit(t, keyA, map[string]any{
		"steps":   []any{lambdaStep("stepflow-fn-probe", map[string]any{"retry": map[string]any{"max_attempts": 2, "initial_delay_ms": 100}})},
		"payload": map[string]any{"fail": "the disk is full"},
	})
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)
	s := j.Steps[0]
	require.Len(t, s.Attempts, 2, "retried once, then failed")
	for _, a := range s.Attempts {
		require.Equal(t, domain.ClassRetryable, a.Error.Class)
		require.Equal(t, "lambda stepflow-fn-probe: function error (Unhandled): errorString: the disk is full", a.Error.Message)
	}
	require.Contains(t, s.Error.Message, "the disk is full")
	h.CheckReplay(t, tenantA, j.ID)

	// A function no one deployed: fatal at once.
	j = h.Submit(t, keyA, map[string]any{"steps": []any{lambdaStep("stepflow-fn-nope")}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)
	require.Len(t, j.Steps[0].Attempts, 1, "not retried")
	require.Equal(t, domain.ClassFatal, j.Steps[0].Error.Class)
	require.Contains(t, j.Steps[0].Error.Message, "ResourceNotFoundException (HTTP 404): Function not found")

	// A function outside STEPFLOW_LAMBDA_ALLOW (the template's prefix) is
	// refused at submit, though the local service serves it as plain echo.
	var before struct{ Jobs []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &before)
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "lambda", "function": "echo"}},
	}})
	require.Equal(t, http.StatusBadRequest, status, "%s", raw)
	var e struct {
		Error struct{ Code, Message, Field string }
	}
	require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
	require.Equal(t, "invalid", e.Error.Code)
	require.Equal(t, "steps[1].action.function", e.Error.Field)
	require.Contains(t, e.Error.Message, "stepflow-fn-")

	// The allow list is of names: an ARN must name the stack's own
	// account (the emulator's), region and partition.
	for ref, why := range map[string]string{
		"arn:aws:lambda:us-east-1:999999999999:function:stepflow-fn-echo":    "names account 999999999999",
		"999999999999:function:stepflow-fn-echo":                             "names account 999999999999",
		"arn:aws:lambda:eu-west-1:123456789012:function:stepflow-fn-echo":    "names region eu-west-1",
		"arn:aws-cn:lambda:us-east-1:123456789012:function:stepflow-fn-echo": "names partition aws-cn",
		"us-east-1:123456789012:function:stepflow-fn-echo":                   "must be a Lambda function name", // no form Lambda documents
	} {
		status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
			map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
			map[string]any{"id": "b", "action": map[string]any{"type": "fail", "class": "replan", "steps": []any{
				map[string]any{"id": "c", "action": map[string]any{"type": "lambda", "function": ref}},
			}}},
		}})
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", ref, raw)
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		require.Equal(t, "steps[1].action.steps[0].action.function", e.Error.Field, ref)
		require.Contains(t, e.Error.Message, why, ref)
	}
	var after struct{ Jobs []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &after)
	require.Len(t, after.Jobs, len(before.Jobs), "nothing was written")

	// The stack's own account, as a partial ARN, is taken.
	j = h.Submit(t, keyA, map[string]any{"steps": []any{lambdaStep("123456789012:function:stepflow-fn-echo")}, "payload": 7})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"echo":7}`, string(j.Steps[0].Output))
}

// The README's quickstart: examples/functions/flaky fails a step's first
// attempt (a function error, retryable) and succeeds from the second, so
// the job ends COMPLETED after one retry, with no retry policy of its own.
func TestQuickstartFlakyStepSucceedsOnRetry(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withLambda)

	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "charge", "action": map[string]any{"type": "lambda", "function": "stepflow-fn-flaky"}},
	}, "payload": map[string]any{"order": 42}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	atts := j.Steps[0].Attempts
	require.Len(t, atts, 2)
	require.Equal(t, domain.AttemptFailed, atts[0].State)
	require.Equal(t, domain.ClassRetryable, atts[0].Error.Class)
	require.Contains(t, atts[0].Error.Message, "attempt 1 fails on purpose")
	require.Equal(t, domain.AttemptSucceeded, atts[1].State)
	require.JSONEq(t, `{"attempt":2,"input":{"order":42}}`, string(j.Steps[0].Output))
	h.CheckReplay(t, tenantA, j.ID)
}
