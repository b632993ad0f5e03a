package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/engine"
)

// Operator keys reach the functions as their SHA-256 alone; a plain key
// there by mistake is refused, not taken as a hash nobody has.
func TestOperatorKeyHashesFromEnv(t *testing.T) {
	t.Parallel()
	s, err := config.FromEnv(lambdaEnv(nil))
	require.NoError(t, err)
	require.Empty(t, s.OperatorKeyHashes, "unset: no operator key")

	one, two := engine.HashKey("op-1"), engine.HashKey("op-2")
	s, err = config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_OPERATOR_KEY_HASHES": one + ", " + two + ","}))
	require.NoError(t, err)
	require.Equal(t, []string{one, two}, s.OperatorKeyHashes)

	for _, bad := range []string{"op-1", strings.ToUpper(one), one[:63], one + "," + "op-2"} {
		_, err := config.FromEnv(lambdaEnv(map[string]string{"STEPFLOW_OPERATOR_KEY_HASHES": bad}))
		require.ErrorContains(t, err, "environment variable STEPFLOW_OPERATOR_KEY_HASHES", bad)
		require.NotContains(t, err.Error(), "op-2", "a key put there by mistake is not written to the log")
	}
}
