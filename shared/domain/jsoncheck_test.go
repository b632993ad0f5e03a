package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// nested answers an array nested n levels deep around v: nested(2, "1")
// is [[1]].
func nested(n int, v string) string {
	return strings.Repeat("[", n) + v + strings.Repeat("]", n)
}

// nestedObjects answers {"a":{"a":...v...}} nested n levels deep.
func nestedObjects(n int, v string) string {
	return strings.Repeat(`{"a":`, n) + v + strings.Repeat("}", n)
}

// requireInvalid checks err is a 400 naming field, with a message that
// holds want and is valid UTF-8 (nothing of a bad input echoed raw).
func requireInvalid(t *testing.T, err error, field, want string) {
	t.Helper()
	var de *Error
	require.True(t, errors.As(err, &de), "want *Error, got %T %v", err, err)
	require.Equal(t, CodeInvalid, de.Code, "%v", err)
	require.Equal(t, field, de.Field, "%v", err)
	require.Contains(t, de.Message, want, "%v", err)
	require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
	require.True(t, strings.HasPrefix(err.Error(), field+": "), "%q", err.Error())
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw    string
		field, inMsg string // field "" = accepted
	}{
		{"number", `1`, "", ""},
		{"string", `"x"`, "", ""},
		{"object", ` {"a":[1,{"b":null}],"c":"ü"} `, "", ""},
		{"array depth 64", nested(MaxJSONDepth, "1"), "", ""},
		{"empty array depth 64", nested(MaxJSONDepth, ""), "", ""},
		{"object depth 64", nestedObjects(MaxJSONDepth, "1"), "", ""},
		{"mixed depth 64", strings.Repeat(`{"a":[`, MaxJSONDepth/2) + strings.Repeat("]}", MaxJSONDepth/2), "", ""},
		{"same name in sibling objects", `{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]}`, "", ""},
		{"array depth 65", nested(MaxJSONDepth+1, "1"), "output", "nests 65 levels deep; the limit is 64"},
		{"object depth 65", nestedObjects(MaxJSONDepth+1, "1"), "output", "nests 65 levels deep; the limit is 64"},
		{"deep inside a wide value", `{"a":[1,2,` + nested(70, "") + `,3]}`, "output", "nests 72 levels deep; the limit is 64"},
		{"10000 deep", nested(10000, ""), "output", "nests 10000 levels deep; the limit is 64"},
		{"past the decoder's own limit", nested(10001, ""), "output", "nests at least 10000 levels deep; the limit is 64"},
		{"deep and unclosed", strings.Repeat("[", 10000), "output", "the limit is 64"},
		{"invalid UTF-8 in a value", `{"a":"x` + "\xff" + `y"}`, "output.a", "invalid UTF-8 at byte 7"},
		{"invalid UTF-8 deeper", `{"a":{"b":["ok","` + "\xc3\x28" + `"]}}`, "output.a.b[1]", "invalid UTF-8"},
		{"invalid UTF-8 in a key", `{"k` + "\xff" + `":1}`, "output", "invalid UTF-8"},
		{"invalid UTF-8 in a nested key", `{"a":{"k` + "\xfe" + `":1}}`, "output.a", "invalid UTF-8"},
		{"invalid UTF-8 outside strings", `[1,` + "\xff" + `]`, "output[1]", "invalid UTF-8"},
		{"overlong encoding", `"` + "\xc0\xaf" + `"`, "output", "invalid UTF-8"},
		{"duplicate at the top", `{"a":1,"b":2,"a":3}`, "output.a", "appears twice"},
		{"duplicate nested", `{"a":{"b":1,"b":2}}`, "output.a.b", "appears twice"},
		{"duplicate in an array's object", `{"a":[{"c":1},{"c":1,"c":2}]}`, "output.a[1].c", "appears twice"},
		{"duplicate spelt with an escape", `{"a":1,"\u0061":2}`, "output.a", "appears twice"},
		{"duplicate with an odd name", `{"a b":{"q.r":1,"q.r":2}}`, `output["a b"]["q.r"]`, "appears twice"},
		{"empty", ``, "output", "is empty"},
		{"blank", " \n\t", "output", "is empty"},
		{"truncated", `{"a":[1,`, "output", "truncated"},
		{"malformed", `{"a" 1}`, "output", "is not valid JSON at byte"},
		{"bare word", `{bad}`, "output", "is not valid JSON at byte"},
		{"trailing data", `{"a":1} x`, "output", "has data after the JSON value"},
		{"second value", `{"a":1}{}`, "output", "has data after the JSON value"},
		{"lone surrogate", `"\ud800"`, "output", "is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckJSON("output", []byte(tc.raw))
			if tc.field == "" {
				require.NoError(t, err)
				require.True(t, json.Valid([]byte(tc.raw)))
				return
			}
			requireInvalid(t, err, tc.field, tc.inMsg)
		})
	}
}

// TestCheckJSONDeepInput: nesting far past any limit neither panics nor
// costs an allocation per level (the tokenizer's stack grows by doubling;
// nothing recurses).
func TestCheckJSONDeepInput(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		nested(10000, ""),
		nested(100000, "1"),
		strings.Repeat("[", 200000),
		strings.Repeat(`{"a":`, 50000),
		strings.Repeat(`[{"a":`, 20000) + "1" + strings.Repeat("}]", 20000),
	} {
		require.NotPanics(t, func() {
			requireInvalid(t, CheckJSON("payload", []byte(raw)), "payload", "levels deep; the limit is 64")
		})
	}
}

// TestCheckJSONDeepAllocs is not parallel: testing.AllocsPerRun refuses
// to run beside other tests.
func TestCheckJSONDeepAllocs(t *testing.T) {
	deep := []byte(nested(10000, ""))
	allocs := testing.AllocsPerRun(3, func() { _ = CheckJSON("payload", deep) })
	require.Less(t, allocs, 500.0, "CheckJSON allocates per level")
}

func TestCheckJSONLargeFlat(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"rows":[`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"row-%d","tags":["a","b"]}`, i, i)
	}
	b.WriteString(`]}`)
	require.NoError(t, CheckJSON("payload", []byte(b.String())))
}

// payloadJob is a one-step job carrying payload.
func payloadJob(payload string) string {
	return `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":` + payload + `}`
}

// TestParseJobSpecPoison: bodies a hostile tenant could send to make a job
// unreadable, or to smuggle past strict decoding, are refused with a 400
// that names where.
func TestParseJobSpecPoison(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body   string
		field, inMsg string
	}{
		// Depth counts from the top of the body: the payload, one level
		// down, may nest 63 levels.
		{"payload 10000 deep", payloadJob(nested(10000, "")), "payload", "nests at least 10000 levels deep; the limit is 64"},
		{"payload 9998 deep", payloadJob(nested(9998, "")), "payload", "nests 9999 levels deep; the limit is 64"},
		{"payload objects too deep", payloadJob(nestedObjects(MaxJSONDepth, "1")), "payload", "nests 65 levels deep; the limit is 64"},
		{"body 65 deep at the boundary", payloadJob(nested(MaxJSONDepth, "")), "payload", "nests 65 levels deep; the limit is 64"},
		{"deep inside a step's retry", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}},{"id":"c","action": {"type": "pass"},"retry":` + nested(70, "") + `}]}`, "steps[2].retry", "levels deep; the limit is 64"},
		{"deep inside a retry member", step(`"id":"a","action": {"type": "pass"},"retry":{"max_attempts":` + nested(70, "1") + `}`), "steps[0].retry.max_attempts", "levels deep"},
		{"deep inside an unknown member", `{"extra":` + nested(70, "") + `,"steps":[]}`, "extra", "levels deep"},
		{"deep body", nested(MaxJSONDepth+1, ""), "body", "levels deep"},
		// UTF-8 only.
		{"invalid UTF-8 in a payload value", payloadJob(`{"name":"caf` + "\xe9" + `"}`), "payload.name", "invalid UTF-8"},
		{"invalid UTF-8 in a payload key", payloadJob(`{"caf` + "\xe9" + `":1}`), "payload", "invalid UTF-8"},
		{"invalid UTF-8 in a step id", step(`"id":"a` + "\xff" + `","action":{"type":"pass"}`), "steps[0].id", "invalid UTF-8"},
		{"invalid UTF-8 in a top-level key", `{"ste` + "\xff" + `ps":[]}`, "body", "invalid UTF-8"},
		{"invalid UTF-8 between values", `{"steps":[]` + "\xff" + `}`, "body", "invalid UTF-8"},
		// Field names are exact.
		{"STEPS", `{"STEPS":[{"id":"a","action":{"type":"pass"}}]}`, "STEPS", "is not a known field"},
		{"Steps", `{"Steps":[{"id":"a","action":{"type":"pass"}}]}`, "Steps", "is not a known field"},
		{"Payload", `{"steps":[{"id":"a","action":{"type":"pass"}}],"Payload":{}}`, "Payload", "is not a known field"},
		{"ID in a step", `{"steps":[{"id":"a","action":{"type":"pass"}},{"ID":"b","action":{"type":"pass"}}]}`, "steps[1].ID", "is not a known field"},
		{"Max_Attempts in a retry", step(`"id":"a","action":{"type":"pass"},"retry":{"Max_Attempts":2}`), "steps[0].retry.Max_Attempts", "is not a known field"},
		// Duplicate members.
		{"duplicate at the top", `{"steps":[{"id":"a","action":{"type":"pass"}}],"steps":[{"id":"b","action":{"type":"pass"}}]}`, "steps", "appears twice"},
		{"duplicate queue", `{"queue":"a","steps":[{"id":"a","action":{"type":"pass"}}],"queue":"b"}`, "queue", "appears twice"},
		{"duplicate in a step", `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"id":"c"}]}`, "steps[1].id", "appears twice"},
		{"duplicate in a retry", step(`"id":"a","action":{"type":"pass"},"retry":{"max_attempts":1,"max_attempts":5}`), "steps[0].retry.max_attempts", "appears twice"},
		{"duplicate in the payload", payloadJob(`{"a":{"b":1,"b":2}}`), "payload.a.b", "appears twice"},
		{"duplicate in a payload array", payloadJob(`{"a":[{"b":1},{"b":1,"b":2}]}`), "payload.a[1].b", "appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseJobSpec([]byte(tc.body))
			require.Nil(t, s)
			requireInvalid(t, err, tc.field, tc.inMsg)
			// DecodeStrict alone answers the same.
			var spec JobSpec
			require.Equal(t, err, DecodeStrict([]byte(tc.body), &spec))
		})
	}
}

func TestParseJobSpecAtTheLimits(t *testing.T) {
	t.Parallel()
	// The body nests 64 deep: the payload 63.
	s, err := ParseJobSpec([]byte(payloadJob(nested(MaxJSONDepth-1, `"x"`))))
	require.NoError(t, err)
	require.Equal(t, nested(MaxJSONDepth-1, `"x"`), string(s.Payload))

	// A large flat document just under the body limit is accepted, and its
	// payload kept byte for byte (white space included).
	var b strings.Builder
	b.WriteString("{ \"n\" : [ ")
	for i := 0; b.Len() < MaxJobSpecBytes-1000; i++ {
		fmt.Fprintf(&b, "%d, \"s-%d\" , ", i, i)
	}
	b.WriteString("0 ]\n}")
	payload := b.String()
	s, err = ParseJobSpec([]byte(payloadJob(payload)))
	require.NoError(t, err)
	require.Equal(t, payload, string(s.Payload))
	require.Equal(t, DefaultQueue, s.Queue)

	// Unicode, escaped or not, is fine; so is a name that differs only in
	// case inside the free-form payload.
	s, err = ParseJobSpec([]byte(payloadJob(`{"naïve":"日本","esc":"\u00e9\ud83d\ude00","A":1,"a":2}`)))
	require.NoError(t, err)
	require.Equal(t, `{"naïve":"日本","esc":"\u00e9\ud83d\ude00","A":1,"a":2}`, string(s.Payload))
}

// TestDecodeStrictRawAndNull: json.RawMessage fields keep their bytes; an
// absent member stays unset and null means what it meant before.
func TestDecodeStrictRawAndNull(t *testing.T) {
	t.Parallel()
	type outcome struct {
		Output  json.RawMessage `json:"output,omitempty"`
		Class   string          `json:"class,omitempty"`
		Retries *int            `json:"retries,omitempty"`
		N       int             `json:"n"`
	}
	for _, tc := range []struct {
		body    string
		want    outcome
		wantRaw string
	}{
		{`{}`, outcome{}, ""},
		{`{"output":null}`, outcome{}, "null"},
		{`{"output": { "a" : [1, 2.50] } }`, outcome{}, `{ "a" : [1, 2.50] }`},
		{`{"output":"s","class":"fatal","retries":null,"n":null}`, outcome{Class: "fatal"}, `"s"`},
		{`{"retries":0,"n":7}`, outcome{Retries: new(int), N: 7}, ""},
	} {
		var got outcome
		require.NoError(t, DecodeStrict([]byte(tc.body), &got), tc.body)
		require.Equal(t, tc.wantRaw, string(got.Output), tc.body)
		got.Output = nil
		require.Equal(t, tc.want, got, tc.body)
	}
	for body, field := range map[string]string{
		`{"Output":1}`:            "Output",
		`{"output":1,"output":2}`: "output",
		`{"n":"1"}`:               "n",
		`{"n":1.5}`:               "n",
	} {
		var got outcome
		var de *Error
		require.ErrorAs(t, DecodeStrict([]byte(body), &got), &de, body)
		require.Equal(t, field, de.Field, body)
	}
}
