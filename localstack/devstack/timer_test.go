package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
)

// By default there is no timer state machine (the heartbeat's sweep sends
// long delays); LongTimers StepFunctions makes the one bootstrap creates
// from template.yaml, and the functions get it. TimerThreshold replaces the
// template's threshold.
func TestTimerSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := devstack.Start(ctx, devstack.Options{StackName: "timer-settings", NoRunner: true, TimerThreshold: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.Empty(t, st.Resources.StateMachines)
	require.Empty(t, st.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"])
	require.Equal(t, "5", st.Resources.Env["STEPFLOW_TIMER_THRESHOLD"])

	sf, err := devstack.Start(ctx, devstack.Options{StackName: "timer-sfn", NoRunner: true, Parameters: map[string]string{"LongTimers": "StepFunctions"}})
	require.NoError(t, err)
	t.Cleanup(sf.Close)
	timer := sf.Resources.StateMachines["TimerStateMachine"]
	require.Regexp(t, `^arn:aws:states:us-east-1:\d{12}:stateMachine:timer-sfn-TimerStateMachine$`, timer)
	require.Equal(t, timer, sf.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"])
	require.Equal(t, "900", sf.Resources.Env["STEPFLOW_TIMER_THRESHOLD"])

	_, err = devstack.Start(ctx, devstack.Options{NoRunner: true, TimerThreshold: 1500 * time.Millisecond})
	require.ErrorContains(t, err, "timer threshold 1.5s: want whole seconds")
	_, err = devstack.Start(ctx, devstack.Options{NoRunner: true, Parameters: map[string]string{"LongTimers": "Cron"}})
	require.ErrorContains(t, err, `parameter LongTimers: "Cron" is not one of its AllowedValues`)
}
