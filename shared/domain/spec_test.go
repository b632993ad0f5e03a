package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func i64(v int64) *int64 { return &v }

func TestParseJobSpecDefaults(t *testing.T) {
	t.Parallel()
	defRetry := RetryPolicy{MaxAttempts: 3, Backoff: BackoffExponential, InitialDelayMS: i64(1000), MaxDelayMS: i64(30000), Classes: ClassDefaults()}
	for _, tc := range []struct {
		name  string
		body  string
		check func(t *testing.T, s *JobSpec)
	}{
		{"minimal pass", `{"steps":[{"id":"a","action":{"type":"pass"}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, DefaultQueue, s.Queue)
			require.Equal(t, Priority(1), *s.Priority)
			require.JSONEq(t, `{}`, string(s.Payload))
			require.Len(t, s.Steps, 1)
			st := s.Steps[0]
			require.Equal(t, "a", st.ID)
			require.Equal(t, ActionPass, st.Action.Type)
			require.Equal(t, 60, st.TimeoutSeconds)
			require.Equal(t, defRetry, *st.Retry)
			require.Zero(t, st.Action.LeaseSeconds)
			require.Empty(t, st.Action.Queue)
		}},
		{"null payload becomes {}", `{"payload":null,"steps":[{"id":"a","action":{"type":"pass"}}]}`, func(t *testing.T, s *JobSpec) {
			require.JSONEq(t, `{}`, string(s.Payload))
		}},
		{"payload kept", `{"payload":{"k":[1,2]},"queue":"q-1","priority":0,"steps":[{"id":"a","action":{"type":"pass"}}]}`, func(t *testing.T, s *JobSpec) {
			require.JSONEq(t, `{"k":[1,2]}`, string(s.Payload))
			require.Equal(t, "q-1", s.Queue)
			require.Equal(t, Priority(0), *s.Priority)
		}},
		{"worker defaults to job queue", `{"queue":"gpu","steps":[{"id":"w","action":{"type":"worker"}}]}`, func(t *testing.T, s *JobSpec) {
			st := s.Steps[0]
			require.Equal(t, "gpu", st.Action.Queue)
			require.Equal(t, DefaultLeaseSecs, st.Action.LeaseSeconds)
			require.Zero(t, st.TimeoutSeconds, "a worker's attempt is bounded by its lease unless it sets timeout_seconds")
			require.Equal(t, defRetry, *st.Retry)
		}},
		{"worker own queue, long timeout", `{"steps":[{"id":"w","action":{"type":"worker","queue":"other","lease_seconds":30},"timeout_seconds":43200}]}`, func(t *testing.T, s *JobSpec) {
			st := s.Steps[0]
			require.Equal(t, "other", st.Action.Queue)
			require.Equal(t, 30, st.Action.LeaseSeconds)
			require.Equal(t, MaxLeaseSeconds, st.TimeoutSeconds)
		}},
		{"sleep of a year, one attempt", `{"steps":[{"id":"s","action":{"type":"sleep","seconds":31536000}}]}`, func(t *testing.T, s *JobSpec) {
			require.Zero(t, s.Steps[0].TimeoutSeconds)
			require.Equal(t, 1, s.Steps[0].Retry.MaxAttempts)
		}},
		{"wait with deadline", `{"steps":[{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":30}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, "go", s.Steps[0].Action.Signal)
			require.Equal(t, 30, s.Steps[0].Action.TimeoutSeconds)
		}},
		{"run_at kept in UTC", `{"run_at":"2030-01-02T03:04:05+02:00","steps":[{"id":"a","action":{"type":"pass"}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, "2030-01-02T01:04:05Z", s.RunAt.Format(time.RFC3339))
		}},
		{"replan steps validated and filled", `{"queue":"q","steps":[{"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"b","action":{"type":"worker"}}]}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, "q", s.Steps[0].Action.Steps[0].Action.Queue)
		}},
		{"fail with class", `{"steps":[{"id":"f","action":{"type":"fail","class":"needs_user","message":"why"}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, string(ClassNeedsUser), s.Steps[0].Action.Class)
			require.Equal(t, "why", s.Steps[0].Action.Message)
		}},
		{"http", `{"steps":[{"id":"h","action":{"type":"http","url":"https://example.com/x?y=1"}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, "https://example.com/x?y=1", s.Steps[0].Action.URL)
		}},
		{"retry partially given", `{"steps":[{"id":"a","action":{"type":"pass"},"retry":{"max_attempts":0,"backoff":"linear","initial_delay_ms":60000}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, RetryPolicy{MaxAttempts: 3, Backoff: BackoffLinear, InitialDelayMS: i64(60000), MaxDelayMS: i64(60000)}, *s.Steps[0].Retry)
		}},
		{"retry bounds accepted", `{"steps":[{"id":"a","action":{"type":"pass"},"retry":{"max_attempts":100,"backoff":"fixed","initial_delay_ms":0,"max_delay_ms":0,"jitter":true}}]}`, func(t *testing.T, s *JobSpec) {
			require.Equal(t, RetryPolicy{MaxAttempts: 100, Backoff: BackoffFixed, InitialDelayMS: i64(0), MaxDelayMS: i64(0), Jitter: true}, *s.Steps[0].Retry)
		}},
		{"id charset and length", fmt.Sprintf(`{"steps":[{"id":"A-z_0.9","action":{"type":"pass"}},{"id":%q,"action":{"type":"pass"}}]}`, strings.Repeat("x", 64)), func(t *testing.T, s *JobSpec) {
			require.Len(t, s.Steps, 2)
			require.NotSame(t, s.Steps[0].Retry, s.Steps[1].Retry)
		}},
		{"MaxSteps steps", manySteps(MaxSteps), func(t *testing.T, s *JobSpec) {
			require.Len(t, s.Steps, MaxSteps)
		}},
		{"surrounding whitespace", " \n{\"steps\":[{\"id\":\"a\",\"action\":{\"type\":\"pass\"}}]}\n\t", func(t *testing.T, s *JobSpec) {
			require.Len(t, s.Steps, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseJobSpec([]byte(tc.body))
			require.NoError(t, err)
			tc.check(t, s)
		})
	}
}

func manySteps(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"pass"}}`, i)
	}
	return `{"steps":[` + strings.Join(steps, ",") + `]}`
}

// step wraps one step object in a job body.
func step(fields string) string { return `{"steps":[{` + fields + `}]}` }

func TestParseJobSpecErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, field string
	}{
		{"malformed JSON", `{"steps":[}`, "body"},
		{"bare word", `{bad}`, "body"},
		{"truncated", `{"steps":`, "body"},
		{"empty body", ``, "body"},
		{"blank body", " \n\t", "body"},
		{"not an object", `[]`, "body"},
		{"trailing data", `{"steps":[{"id":"a","action":{"type":"pass"}}]} x`, "body"},
		{"second object", `{"steps":[{"id":"a","action":{"type":"pass"}}]}{}`, "body"},
		{"unknown top-level field", `{"stepz":[],"steps":[{"id":"a","action":{"type":"pass"}}]}`, "stepz"},
		{"unknown step field", step(`"id":"a","action":{"type":"pass"},"retires":3`), "steps[0].retires"},
		{"unknown retry field", step(`"id":"a","action":{"type":"pass"},"retry":{"attempts":3}`), "steps[0].retry.attempts"},
		{"steps wrong type", `{"steps":"x"}`, "steps"},
		{"priority wrong type", `{"priority":"high","steps":[{"id":"a","action":{"type":"pass"}}]}`, "priority"},
		{"priority fractional", `{"priority":1.5,"steps":[{"id":"a","action":{"type":"pass"}}]}`, "priority"},
		{"null body", `null`, "steps"},
		{"no steps", `{}`, "steps"},
		{"empty steps", `{"steps":[]}`, "steps"},
		{"too many steps", manySteps(MaxSteps + 1), "steps"},
		{"duplicate ids", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"a","action":{"type":"pass"}}]}`, "steps[1].id"},
		{"missing id", step(`"action":{"type":"pass"}`), "steps[0].id"},
		{"bad id chars", step(`"id":"a b","action":{"type":"pass"}`), "steps[0].id"},
		{"id slash", step(`"id":"a/b","action":{"type":"pass"}`), "steps[0].id"},
		{"id dot", step(`"id":".","action":{"type":"pass"}`), "steps[0].id"},      // no route could name it
		{"id dot-dot", step(`"id":"..","action":{"type":"pass"}`), "steps[0].id"}, // (approve, resume, output)
		{"id too long", step(fmt.Sprintf(`"id":%q,"action":{"type":"pass"}`, strings.Repeat("x", 65))), "steps[0].id"},
		{"bad id in second step", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"ü","action":{"type":"pass"}}]}`, "steps[1].id"},
		{"unknown action", step(`"id":"a","action":{"type":"explode"}`), "steps[0].action.type"},
		{"missing action", step(`"id":"a"`), "steps[0].action.type"},
		{"action as a bare string", step(`"id":"a","action":"pass"`), "steps[0].action"},
		{"action without type", step(`"id":"a","action":{"url":"https://x.io"}`), "steps[0].action.url"},
		{"action in second step", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"PASS"}}]}`, "steps[1].action.type"},
		{"sleep without seconds", step(`"id":"a","action":{"type":"sleep"}`), "steps[0].action.seconds"},
		{"sleep negative", step(`"id":"a","action":{"type":"sleep","seconds":-1}`), "steps[0].action.seconds"},
		{"sleep over a year", step(`"id":"a","action":{"type":"sleep","seconds":31536000.5}`), "steps[0].action.seconds"},
		{"timeout on sleep", step(`"id":"a","action":{"type":"sleep","seconds":1},"timeout_seconds":5`), "steps[0].timeout_seconds"},
		{"retry on sleep", step(`"id":"a","action":{"type":"sleep","seconds":1},"retry":{"max_attempts":2}`), "steps[0].retry"},
		{"wait without signal", step(`"id":"a","action":{"type":"wait"}`), "steps[0].action.signal"},
		{"wait bad signal", step(`"id":"a","action":{"type":"wait","signal":"a b"}`), "steps[0].action.signal"},
		{"wait deadline over a year", step(`"id":"a","action":{"type":"wait","signal":"s","timeout_seconds":31536001}`), "steps[0].action.timeout_seconds"},
		{"wait step timeout", step(`"id":"a","action":{"type":"wait","signal":"s"},"timeout_seconds":5`), "steps[0].timeout_seconds"},
		{"signal on approval", step(`"id":"a","action":{"type":"approval","signal":"s"}`), "steps[0].action.signal"},
		{"approval deadline negative", step(`"id":"a","action":{"type":"approval","timeout_seconds":-1}`), "steps[0].action.timeout_seconds"},
		{"approval retry", step(`"id":"a","action":{"type":"approval"},"retry":{"max_attempts":2}`), "steps[0].retry"},
		{"action timeout on pass", step(`"id":"a","action":{"type":"pass","timeout_seconds":5}`), "steps[0].action.timeout_seconds"},
		{"prompt without needs_user", step(`"id":"a","action":{"type":"fail","class":"fatal","prompt":"p"}`), "steps[0].action.prompt"},
		{"steps without replan", step(`"id":"a","action":{"type":"fail","class":"fatal","steps":[]}`), "steps[0].action.steps"},
		{"replan step invalid", step(`"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"b","action":{"type":"http"}}]}`), "steps[0].action.steps[0].action.url"},
		{"replan step id taken", `{"steps":[{"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"z","action":{"type":"pass"}}]}},{"id":"z","action":{"type":"pass"}}]}`, "steps[0].action.steps[0].id"},
		{"run_at not a time", `{"run_at":"tomorrow","steps":[{"id":"a","action":{"type":"pass"}}]}`, "run_at"},
		{"fail without class", step(`"id":"a","action":{"type":"fail"}`), "steps[0].action.class"},
		{"fail bad class", step(`"id":"a","action":{"type":"fail","class":"flaky"}`), "steps[0].action.class"},
		{"http without url", step(`"id":"a","action":{"type":"http"}`), "steps[0].action.url"},
		{"http relative url", step(`"id":"a","action":{"type":"http","url":"/x"}`), "steps[0].action.url"},
		{"http ftp url", step(`"id":"a","action":{"type":"http","url":"ftp://example.com/x"}`), "steps[0].action.url"},
		{"http no host", step(`"id":"a","action":{"type":"http","url":"https:///x"}`), "steps[0].action.url"},
		{"http garbage url", step(`"id":"a","action":{"type":"http","url":"http://[::1"}`), "steps[0].action.url"},
		{"url on pass", step(`"id":"a","action":{"type":"pass","url":"https://example.com"}`), "steps[0].action.url"},
		{"seconds on pass", step(`"id":"a","action":{"type":"pass","seconds":1}`), "steps[0].action.seconds"},
		{"class on sleep", step(`"id":"a","action":{"type":"sleep","seconds":1,"class":"fatal"}`), "steps[0].action.class"},
		{"message on pass", step(`"id":"a","action":{"type":"pass","message":"m"}`), "steps[0].action.message"},
		{"queue on http", step(`"id":"a","action":{"type":"http","url":"https://x.io","queue":"q"}`), "steps[0].action.queue"},
		{"lease_seconds on pass", step(`"id":"a","action":{"type":"pass","lease_seconds":5}`), "steps[0].action.lease_seconds"},
		{"worker queue with spaces", step(`"id":"a","action":{"type":"worker","queue":"a b"}`), "steps[0].action.queue"},
		{"worker lease negative", step(`"id":"a","action":{"type":"worker","lease_seconds":-1}`), "steps[0].action.lease_seconds"},
		{"worker lease too long", step(`"id":"a","action":{"type":"worker","lease_seconds":43201}`), "steps[0].action.lease_seconds"},
		{"worker timeout too long", step(`"id":"a","action":{"type":"worker"},"timeout_seconds":43201`), "steps[0].timeout_seconds"},
		{"timeout too large for built-in", step(`"id":"a","action":{"type":"pass"},"timeout_seconds":271`), "steps[0].timeout_seconds"},
		{"timeout negative", step(`"id":"a","action":{"type":"pass"},"timeout_seconds":-5`), "steps[0].timeout_seconds"},
		{"max_attempts negative", step(`"id":"a","action":{"type":"pass"},"retry":{"max_attempts":-1}`), "steps[0].retry.max_attempts"},
		{"max_attempts too many", step(`"id":"a","action":{"type":"pass"},"retry":{"max_attempts":101}`), "steps[0].retry.max_attempts"},
		{"backoff bogus", step(`"id":"a","action":{"type":"pass"},"retry":{"backoff":"bogus"}`), "steps[0].retry.backoff"},
		{"initial delay negative", step(`"id":"a","action":{"type":"pass"},"retry":{"initial_delay_ms":-1}`), "steps[0].retry.initial_delay_ms"},
		{"initial delay too long", step(`"id":"a","action":{"type":"pass"},"retry":{"initial_delay_ms":604800001}`), "steps[0].retry.initial_delay_ms"},
		{"max delay below initial", step(`"id":"a","action":{"type":"pass"},"retry":{"initial_delay_ms":5000,"max_delay_ms":4999}`), "steps[0].retry.max_delay_ms"},
		{"max delay too long", step(`"id":"a","action":{"type":"pass"},"retry":{"max_delay_ms":604800001}`), "steps[0].retry.max_delay_ms"},
		{"retry in second step", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"retry":{"backoff":"x"}}]}`, "steps[1].retry.backoff"},
		{"priority 3", `{"priority":3,"steps":[{"id":"a","action":{"type":"pass"}}]}`, "priority"},
		{"priority negative", `{"priority":-1,"steps":[{"id":"a","action":{"type":"pass"}}]}`, "priority"},
		{"queue with spaces", `{"queue":"my queue","steps":[{"id":"a","action":{"type":"pass"}}]}`, "queue"},
		{"queue too long", fmt.Sprintf(`{"queue":%q,"steps":[{"id":"a","action":{"type":"pass"}}]}`, strings.Repeat("q", 41)), "queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseJobSpec([]byte(tc.body))
			require.Nil(t, s)
			var de *Error
			require.True(t, errors.As(err, &de), "want *Error, got %T %v", err, err)
			require.Equal(t, CodeInvalid, de.Code, "%v", err)
			require.Equal(t, tc.field, de.Field, "%v", err)
			require.Equal(t, CodeInvalid, CodeOf(err))
			require.True(t, strings.HasPrefix(err.Error(), tc.field+": "), "%q", err.Error())
		})
	}
}

func TestActionAsAStringSaysWhatItMustBe(t *testing.T) {
	t.Parallel()
	_, err := ParseJobSpec([]byte(step(`"id":"a","action":"pass"`)))
	require.EqualError(t, err, `steps[0].action: must be an object such as {"type": "pass"} (an action's type and its own parameters), not JSON string`)
}

func TestParseJobSpecWrongTypeInsideStep(t *testing.T) {
	t.Parallel()
	// The decoder reports the path without the index; it still names the
	// field and answers 400.
	_, err := ParseJobSpec([]byte(step(`"id":"a","action":{"type":"sleep","seconds":"x"}`)))
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, CodeInvalid, de.Code)
	require.Equal(t, "steps[0].action.seconds", de.Field)
}

func TestParseJobSpecTooLarge(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat(" ", MaxJobSpecBytes)
	body := []byte(`{"steps":[{"id":"a","action":{"type":"pass"}}]}` + pad)
	require.Greater(t, len(body), MaxJobSpecBytes)
	s, err := ParseJobSpec(body)
	require.Nil(t, s)
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, CodeTooLarge, de.Code)
	require.Equal(t, CodeTooLarge, CodeOf(err))
	require.Equal(t, fmt.Sprintf("body is %d bytes; the limit is %d", len(body), MaxJobSpecBytes), de.Message)

	// Exactly at the limit is decoded (and valid).
	_, err = ParseJobSpec(body[:MaxJobSpecBytes])
	require.NoError(t, err)
}

func TestParseFailureClass(t *testing.T) {
	t.Parallel()
	for _, c := range []FailureClass{ClassRetryable, ClassResource, ClassFatal, ClassNeedsUser, ClassTimeout} {
		got, err := ParseFailureClass("class", string(c))
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	for _, s := range []string{"", "Fatal", "retry"} {
		_, err := ParseFailureClass("x.class", s)
		var de *Error
		require.ErrorAs(t, err, &de)
		require.Equal(t, "x.class", de.Field)
		require.Equal(t, CodeInvalid, de.Code)
	}
}

func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	var v struct {
		A int `json:"a"`
	}
	require.NoError(t, DecodeStrict([]byte(`{"a":1}`), &v))
	require.Equal(t, 1, v.A)
	for body, field := range map[string]string{`{"b":1}`: "b", `{"a":"x"}`: "a", `{"a":1} 2`: "body", `1`: "body"} {
		err := DecodeStrict([]byte(body), &v)
		var de *Error
		require.ErrorAs(t, err, &de, body)
		require.Equal(t, field, de.Field, body)
	}
}

func TestErrorSentinels(t *testing.T) {
	t.Parallel()
	for err, code := range map[error]Code{
		ErrNotFound:                                    CodeNotFound,
		fmt.Errorf("wrapped: %w", ErrLeaseLost):        CodeLeaseLost,
		ErrIdempotencyMismatch:                         CodeIdempotencyMismatch,
		ErrUnauthorized:                                CodeUnauthorized,
		ErrVersionConflict:                             CodeInternal,
		Invalid("f", "bad %d", 1):                      CodeInvalid,
		&IllegalTransitionError{Kind: "job"}:           CodeConflict,
		fmt.Errorf("x: %w", &IllegalTransitionError{}): CodeConflict,
	} {
		require.Equal(t, code, CodeOf(err), "%v", err)
	}
	require.Equal(t, "f: bad 1", Invalid("f", "bad %d", 1).Error())
	require.Equal(t, "not found", ErrNotFound.Error())
}
