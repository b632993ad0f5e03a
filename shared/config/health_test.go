package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/engine"
)

func TestHealthThresholdsFromEnv(t *testing.T) {
	t.Parallel()
	s, err := config.FromEnv(lambdaEnv(nil))
	require.NoError(t, err)
	require.Equal(t, engine.DefaultHealthThresholds(), s.Health, "unset: the quality platform's")

	s, err = config.FromEnv(lambdaEnv(map[string]string{
		"STEPFLOW_HEALTH_SUCCESS_OK_PERCENT": "99", "STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT": "90", "STEPFLOW_HEALTH_SUCCESS_MIN_JOBS": "5",
		"STEPFLOW_HEALTH_BACKLOG_DEGRADED": "100", "STEPFLOW_HEALTH_BACKLOG_UNHEALTHY": "500",
		"STEPFLOW_HEALTH_BLOCKED_DEGRADED": "1", "STEPFLOW_HEALTH_BLOCKED_UNHEALTHY": "2",
		"STEPFLOW_HEALTH_AVG_DURATION_SECONDS": "60", "STEPFLOW_HEALTH_FAILURES_24H": "20",
		"STEPFLOW_HEARTBEAT_SECONDS": "5",
	}))
	require.NoError(t, err)
	require.Equal(t, engine.HealthThresholds{
		SuccessOK: 0.99, SuccessUnhealthy: 0.90, SuccessMinJobs: 5, BacklogDegraded: 100, BacklogUnhealthy: 500,
		BlockedDegraded: 1, BlockedUnhealthy: 2, AvgDuration: time.Minute, Failures24h: 20, SweepEvery: 5 * time.Second,
	}, s.Health)

	for name, bad := range map[string]map[string]string{
		"STEPFLOW_HEALTH_SUCCESS_OK_PERCENT":        {"STEPFLOW_HEALTH_SUCCESS_OK_PERCENT": "101"},
		"STEPFLOW_HEALTH_BACKLOG_DEGRADED":          {"STEPFLOW_HEALTH_BACKLOG_DEGRADED": "ten"},
		"STEPFLOW_HEALTH_FAILURES_24H":              {"STEPFLOW_HEALTH_FAILURES_24H": "0"},
		"STEPFLOW_HEALTH_SUCCESS_MIN_JOBS":          {"STEPFLOW_HEALTH_SUCCESS_MIN_JOBS": "-1"},
		"STEPFLOW_HEARTBEAT_SECONDS":                {"STEPFLOW_HEARTBEAT_SECONDS": "-1"},
		"STEPFLOW_HEALTH_AVG_DURATION_SECONDS":      {"STEPFLOW_HEALTH_AVG_DURATION_SECONDS": "1.5"},
		"STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT": {"STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT": "96"},
		"STEPFLOW_HEALTH_BLOCKED_UNHEALTHY":         {"STEPFLOW_HEALTH_BLOCKED_DEGRADED": "5", "STEPFLOW_HEALTH_BLOCKED_UNHEALTHY": "4"},
	} {
		_, err := config.FromEnv(lambdaEnv(bad))
		require.ErrorContains(t, err, "environment variable "+name, "%v", bad)
	}
}
