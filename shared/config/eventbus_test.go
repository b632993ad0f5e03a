package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/config"
)

// The template's JobStateEvents parameter switches the bus off without
// removing it: Disabled empties EventBus, so no publisher is wired.
func TestJobStateEventsSwitch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ setting, bus string }{
		{"", "b"}, {"Enabled", "b"}, {"Disabled", ""},
	} {
		s, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_EVENT_BUS": "b", "STEPFLOW_JOB_STATE_EVENTS": tc.setting}))
		require.NoError(t, err, tc.setting)
		require.Equal(t, tc.bus, s.EventBus, tc.setting)
	}
	_, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_JOB_STATE_EVENTS": "off"}))
	require.ErrorContains(t, err, "STEPFLOW_JOB_STATE_EVENTS must be Enabled or Disabled")
}
