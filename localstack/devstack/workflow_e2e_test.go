package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// The workflows, over HTTP against a whole local stack on the emulator.

// A sleep longer than the timer threshold sends nothing at submit: the
// heartbeat's sweep sends its message, once, when the wake time comes
// within the threshold, and it wakes the step on time.
func TestLongSleepIsSentByTheSweep(t *testing.T) {
	t.Parallel()
	faults := &stacktest.FaultSQS{}
	h := stacktest.New(t, stacktest.WithFaultSQS(faults), func(o *devstack.Options) { o.TimerThreshold = 2 * time.Second })
	require.Empty(t, h.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"], "no timer state machine by default")
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 5}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobParked, j.State, "beyond the threshold: parked")
	created := h.Events(t, keyA, j.ID)[0].At
	require.Zero(t, h.Sweep(t).Due, "not within reach yet")

	h.Clock.Advance(3 * time.Second) // the wake time is within the threshold
	sent := faults.Sent.Load()
	require.Equal(t, 1, h.Sweep(t).Due)
	require.Equal(t, sent+1, faults.Sent.Load(), "one message")
	require.Zero(t, h.Sweep(t).Due, "sent once: the next sweep finds nothing due")

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var woke time.Time
	for _, e := range h.Events(t, keyA, j.ID) {
		if e.Step == "nap" && e.Type == "step_succeeded" {
			woke = e.At
		}
	}
	require.False(t, woke.Before(created.Add(5*time.Second)), "woke at %s, created at %s", woke, created)
	h.CheckReplay(t, tenantA, j.ID)
}

// With LongTimers StepFunctions, a sleep longer than the timer threshold
// goes through a Step Functions execution: the emulator runs the state
// machine, which waits and then sends the message that wakes the step.
func TestLongSleepGoesThroughStepFunctions(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) {
		o.TimerThreshold = 2 * time.Second
		o.Parameters = map[string]string{"LongTimers": "StepFunctions"}
	})
	arn := h.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"]
	require.NotEmpty(t, arn)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 5}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobParked, j.State, "beyond the threshold: parked")
	submitted := time.Now()

	cfg, err := devstack.AWSConfig(context.Background(), h.Endpoint, "us-east-1")
	require.NoError(t, err)
	execs, err := sfn.NewFromConfig(cfg).ListExecutions(context.Background(), &sfn.ListExecutionsInput{StateMachineArn: aws.String(arn)})
	require.NoError(t, err)
	require.Len(t, execs.Executions, 1, "one timer execution")
	require.Contains(t, aws.ToString(execs.Executions[0].Name), j.ID)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var woke time.Time
	for _, e := range h.Events(t, keyA, j.ID) {
		if e.Step == "nap" && e.Type == "step_succeeded" {
			woke = e.At
		}
	}
	require.False(t, woke.Before(submitted.Add(4*time.Second)), "woke at %s, submitted at %s", woke, submitted)
	h.CheckReplay(t, tenantA, j.ID)
}
