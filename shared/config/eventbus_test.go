package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/engine"
)

// The template's JobStateEvents parameter chooses the events without
// removing the bus: Disabled (the default) empties EventBus, so no
// publisher is wired; Enabled, the old name of All, still deploys.
func TestJobStateEventsChoice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting, bus string
		events       engine.JobStateEvents
	}{
		{"", "", engine.JobStateEventsDisabled},
		{"Disabled", "", engine.JobStateEventsDisabled},
		{"Terminal", "b", engine.JobStateEventsTerminal},
		{"All", "b", engine.JobStateEventsAll},
		{"Enabled", "b", engine.JobStateEventsAll},
	} {
		s, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_EVENT_BUS": "b", "STEPFLOW_JOB_STATE_EVENTS": tc.setting}))
		require.NoError(t, err, tc.setting)
		require.Equal(t, tc.bus, s.EventBus, tc.setting)
		require.Equal(t, tc.events, s.JobStateEvents, tc.setting)
	}
	for _, bad := range []string{"off", "all", "terminal", "true"} {
		_, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_JOB_STATE_EVENTS": bad}))
		require.EqualError(t, err, `environment variable STEPFLOW_JOB_STATE_EVENTS must be Disabled, Terminal or All (Enabled, deprecated, means All), not "`+bad+`"`)
	}
}
