package statemachines

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Only the stack's own state machines under an allowed prefix may run: a
// user-supplied ARN never reaches another account's, region's or
// partition's.
func TestOnlyTheStacksOwnAllowedStateMachinesRun(t *testing.T) {
	t.Parallel()
	x := New(nil, Home{Region: "eu-west-1", Account: "123456789012"}, nil)
	for sm, want := range map[string]string{
		"stepflow-sm-orders": "",
		"arn:aws:states:eu-west-1:123456789012:stateMachine:stepflow-sm-orders": "",
		"orders": "must start with one of stepflow-sm- (STEPFLOW_SFN_ALLOW)",
		"arn:aws:states:eu-west-1:999999999999:stateMachine:stepflow-sm-orders":    "names account 999999999999",
		"arn:aws:states:us-east-1:123456789012:stateMachine:stepflow-sm-orders":    "names region us-east-1",
		"arn:aws-cn:states:eu-west-1:123456789012:stateMachine:stepflow-sm-orders": "names partition aws-cn",
		"stepflow-sm-a/b": "is not a state machine's name or ARN",
	} {
		err := x.Check(sm)
		if want == "" {
			require.NoError(t, err, sm)
			continue
		}
		require.ErrorContains(t, err, want, sm)
	}
	arn, err := x.executionARN("stepflow-sm-orders", "01J-abc-1")
	require.NoError(t, err)
	require.Equal(t, "arn:aws:states:eu-west-1:123456789012:execution:stepflow-sm-orders:01J-abc-1", arn)

	other := New(nil, Home{Region: "eu-west-1", Account: "123456789012"}, ParseAllow(" team-a- , team-b-"))
	require.NoError(t, other.Check("team-b-flow"))
	require.ErrorContains(t, other.Check("stepflow-sm-orders"), "team-a-, team-b-")
	require.ErrorContains(t, New(nil, Home{}, nil).Check("stepflow-sm-x"), "does not know its own region and account")
}
