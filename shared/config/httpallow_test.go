package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/config"
)

func TestHTTPAllowFromEnv(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		"STEPFLOW_TABLE": "t", "STEPFLOW_QUEUE_P0": "q0", "STEPFLOW_QUEUE_P1": "q1", "STEPFLOW_QUEUE_P2": "q2",
		"STEPFLOW_WORKER_QUEUE_PREFIX": "w-", "STEPFLOW_LEASE_SECONDS": "60",
	}
	for _, tc := range []struct {
		allow, err string
	}{
		{"", ""},
		{"127.0.0.1/32,localhost", ""},
		{"10.0.0.0/33", "STEPFLOW_HTTP_ALLOW"},
		{"2130706433", "STEPFLOW_HTTP_ALLOW"},
	} {
		env := map[string]string{"STEPFLOW_HTTP_ALLOW": tc.allow}
		for k, v := range base {
			env[k] = v
		}
		s, err := config.FromEnv(func(k string) string { return env[k] })
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.allow)
			continue
		}
		require.NoError(t, err, tc.allow)
		require.Equal(t, tc.allow, s.HTTPAllow)
	}
}
