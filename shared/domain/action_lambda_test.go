package domain

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseLambdaFunction(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string]LambdaFunction{
		"echo":                         {Name: "echo"},
		"stepflow-fn-echo:live":        {Name: "stepflow-fn-echo", Qualifier: "live"},
		"my_fn:$LATEST":                {Name: "my_fn", Qualifier: "$LATEST"},
		"my-fn:7":                      {Name: "my-fn", Qualifier: "7"},
		"123456789012:function:f":      {Account: "123456789012", Name: "f"},
		"123456789012:function:f:live": {Account: "123456789012", Name: "f", Qualifier: "live"},
		"arn:aws:lambda:us-west-2:123456789012:function:my-function":    {"aws", "us-west-2", "123456789012", "my-function", ""},
		"arn:aws:lambda:us-west-2:123456789012:function:my-function:v1": {"aws", "us-west-2", "123456789012", "my-function", "v1"},
		"arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:g":   {"aws-us-gov", "us-gov-west-1", "123456789012", "g", ""},
		"arn:aws-cn:lambda:cn-north-1:123456789012:function:c:$LATEST":  {"aws-cn", "cn-north-1", "123456789012", "c", "$LATEST"},
		strings.Repeat("n", 64): {Name: strings.Repeat("n", 64)},
	} {
		f, ok := ParseLambdaFunction(ref)
		require.True(t, ok, ref)
		require.Equal(t, want, f, ref)
	}
	for _, bad := range []string{
		"", "my fn", "fn:", "fn:a:b", "fn/x", "arn:aws:s3:::bucket", ":fn",
		"arn:aws:lambda:us-west-2:12345:function:f", // not a 12-digit account
		strings.Repeat("n", 65),                     // a name is at most 64
		"arn:aws:lambda:us-west-2:123456789012:function:" + strings.Repeat("n", 64) + ":" + strings.Repeat("q", 60), // over 170
		"fn:al.ias",
		// The API's pattern lets each part go on its own; none of these is
		// a form Lambda documents. ("function:f" is one: name function,
		// alias f.)
		"us-east-1:123456789012:function:f", "arn:aws:lambda:f", "function:f:1",
		"arn:aws:lambda:123456789012:function:f", "arn::lambda:us-east-1:123456789012:function:f",
		"arn:aws:lambda:us-east-1:function:f", "us-east-1:function:f",
	} {
		_, ok := ParseLambdaFunction(bad)
		require.False(t, ok, bad)
	}
}

func TestLambdaStepSpec(t *testing.T) {
	t.Parallel()
	s, err := ParseJobSpec([]byte(step(`"id":"l","action":{"type":"lambda","function":"stepflow-fn-echo","qualifier":"live"},"timeout_seconds":270`)))
	require.NoError(t, err)
	st := s.Steps[0]
	require.Equal(t, "stepflow-fn-echo", st.Action.Function)
	require.Equal(t, "live", st.Action.Qualifier)
	require.Equal(t, MaxBuiltinSeconds, st.TimeoutSeconds)
	want := DefaultRetryPolicy()
	want.Classes = ClassDefaults()
	require.Equal(t, want, *st.Retry, "an executed action: retried by default, each class by its rule")
	require.Contains(t, Actions(), ActionLambda)
	require.True(t, Executed(ActionLambda))

	s, err = ParseJobSpec([]byte(step(`"id":"l","action":{"type":"lambda","function":"arn:aws:lambda:us-east-1:123456789012:function:f:3"}`)))
	require.NoError(t, err)
	require.Equal(t, DefaultTimeoutSecs, s.Steps[0].TimeoutSeconds)

	for _, tc := range []struct{ name, body, field string }{
		{"no function", step(`"id":"l","action":{"type":"lambda"}`), "steps[0].action.function"},
		{"bad function", step(`"id":"l","action":{"type":"lambda","function":"not a name"}`), "steps[0].action.function"},
		{"name too long", step(`"id":"l","action":{"type":"lambda","function":"` + strings.Repeat("f", 65) + `"}`), "steps[0].action.function"},
		{"bad qualifier", step(`"id":"l","action":{"type":"lambda","function":"f","qualifier":"a.b"}`), "steps[0].action.qualifier"},
		{"two qualifiers", step(`"id":"l","action":{"type":"lambda","function":"f:live","qualifier":"live"}`), "steps[0].action.qualifier"},
		{"timeout over the built-in bound", step(`"id":"l","action":{"type":"lambda","function":"f"},"timeout_seconds":271`), "steps[0].timeout_seconds"},
		{"function on http", step(`"id":"h","action":{"type":"http","url":"https://x.io","function":"f"}`), "steps[0].action.function"},
		{"qualifier on pass", step(`"id":"p","action":{"type":"pass","qualifier":"1"}`), "steps[0].action.qualifier"},
		{"url on lambda", step(`"id":"l","action":{"type":"lambda","function":"f","url":"https://x.io"}`), "steps[0].action.url"},
		{"in a replan", step(`"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"b","action":{"type":"lambda","function":"x y"}}]}`), "steps[0].action.steps[0].action.function"},
	} {
		_, err := ParseJobSpec([]byte(tc.body))
		var de *Error
		require.True(t, errors.As(err, &de), "%s: want *Error, got %v", tc.name, err)
		require.Equal(t, CodeInvalid, de.Code, tc.name)
		require.Equal(t, tc.field, de.Field, "%s: %v", tc.name, err)
	}
}
