package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/netguard"
)

// Submit refuses an http step whose URL the runner's guard refuses on its
// face, with 400 naming the step's url field, before anything is written:
// these engines have no store, so reaching one would panic.
func TestSubmitRefusesHTTPStepsTheGuardRefuses(t *testing.T) {
	t.Parallel()
	allowLoopback, err := netguard.ParseAllow("127.0.0.1/32")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		runner *actions.Runner
		url    string
		rule   string
	}{
		{"decimal loopback", nil, "http://2130706433/", "not a canonical dotted quad"},
		{"cloud metadata", nil, "http://169.254.169.254/latest/meta-data", "cloud metadata"},
		{"private", &actions.Runner{}, "http://10.0.0.1/", "10.0.0.1 is a private address"},
		{"ftp", &actions.Runner{}, "ftp://example.com/", "http or https"},
		{"loopback by default", &actions.Runner{}, "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next", "127.0.0.1 is a loopback address (set STEPFLOW_HTTP_ALLOW to allow it)"},
		{"the emulator", nil, "http://127.0.0.1:5000/moto-api/reset", "loopback"},
		{"IPv6 loopback", &actions.Runner{Guard: allowLoopback}, "http://[::1]:9001/", "::1 is a loopback address"},
		{"mapped metadata", &actions.Runner{Guard: allowLoopback}, "http://[::ffff:a9fe:a9fe]/", "cloud metadata"},
		{"odd spelling of an allowed address", &actions.Runner{Guard: allowLoopback}, "http://0x7f000001/", "not a canonical dotted quad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := engine.New(engine.Config{Runner: tc.runner})
			body := fmt.Sprintf(`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"http","url":%q}}]}`, tc.url)
			j, created, err := e.Submit(context.Background(), "tenant-a", []byte(body), "")
			require.Nil(t, j)
			require.False(t, created)
			var de *domain.Error
			require.True(t, errors.As(err, &de), "%v", err)
			require.Equal(t, domain.CodeInvalid, de.Code)
			require.Equal(t, "steps[1].action.url", de.Field)
			require.Contains(t, de.Message, tc.rule)
		})
	}
}

// Submit refuses a lambda step (or one a replan would add) whose function
// is outside the runner's allow list, or an ARN outside the stack's own
// account, region or partition, with 400 naming its function field,
// before anything is written.
func TestSubmitRefusesLambdaStepsOutsideTheAllowList(t *testing.T) {
	t.Parallel()
	home := actions.LambdaHome{Partition: "aws", Region: "us-east-1", Account: "123456789012"}
	e := engine.New(engine.Config{Runner: &actions.Runner{LambdaAllow: []string{"stepflow-fn-", "billing"}, LambdaHome: home}})
	for body, want := range map[string][2]string{
		`{"steps":[{"id":"a","action":{"type":"lambda","function":"other-fn"}}]}`:                                                         {"steps[0].action.function", "STEPFLOW_LAMBDA_ALLOW"},
		`{"steps":[{"id":"a","action":{"type":"lambda","function":"arn:aws:lambda:us-east-1:123456789012:function:echo"}}]}`:              {"steps[0].action.function", "STEPFLOW_LAMBDA_ALLOW"},
		`{"steps":[{"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"b","action":{"type":"lambda","function":"x"}}]}}]}`: {"steps[0].action.steps[0].action.function", "STEPFLOW_LAMBDA_ALLOW"},
		`{"steps":[{"id":"a","action":{"type":"lambda","function":"999999999999:function:stepflow-fn-echo"}}]}`:                           {"steps[0].action.function", "names account 999999999999"},
	} {
		j, _, err := e.Submit(context.Background(), "tenant-a", []byte(body), "")
		require.Nil(t, j)
		var de *domain.Error
		require.True(t, errors.As(err, &de), "%v", err)
		require.Equal(t, domain.CodeInvalid, de.Code)
		require.Equal(t, want[0], de.Field)
		require.Contains(t, de.Message, want[1])
	}
}
