package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
)

// The functions get the timer state machine bootstrap created from
// template.yaml, and TimerThreshold replaces the template's threshold.
func TestTimerSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := devstack.Start(ctx, devstack.Options{StackName: "timer-settings", NoRunner: true, TimerThreshold: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	timer := st.Resources.StateMachines["TimerStateMachine"]
	require.Regexp(t, `^arn:aws:states:us-east-1:\d{12}:stateMachine:timer-settings-TimerStateMachine$`, timer)
	require.Equal(t, timer, st.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"])
	require.Equal(t, "5", st.Resources.Env["STEPFLOW_TIMER_THRESHOLD"])

	_, err = devstack.Start(ctx, devstack.Options{NoRunner: true, TimerThreshold: 1500 * time.Millisecond})
	require.ErrorContains(t, err, "timer threshold 1.5s: want whole seconds")
}
