package bootstrap

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The stand-in environment holds what the template says of every setting
// but the resources' names, and what a parameter is set to.
func TestStandInEnvResolvesTheSettingsWithoutResources(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	env, err := tpl.StandInEnv("stepflow-3000")
	require.NoError(t, err)
	require.Equal(t, "stepflow-3000-JobsTable", env["STEPFLOW_TABLE"])
	require.Equal(t, "1800", env["STEPFLOW_LEASE_SECONDS"])
	require.Equal(t, "stepflow-fn-", env["STEPFLOW_LAMBDA_ALLOW"])
	require.Equal(t, defaultAccount, env["STEPFLOW_AWS_ACCOUNT"])
	require.Equal(t, "aws", env["STEPFLOW_AWS_PARTITION"])
	require.Empty(t, env["STEPFLOW_TIMER_STATE_MACHINE"], "the timer state machine only with LongTimers StepFunctions")

	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions"))
	env, err = tpl.StandInEnv("stepflow-3000")
	require.NoError(t, err)
	require.Contains(t, env["STEPFLOW_TIMER_STATE_MACHINE"], "stepflow-3000-TimerStateMachine")

	_, err = tpl.StandInEnv("3000")
	require.ErrorContains(t, err, "stack name")
}
