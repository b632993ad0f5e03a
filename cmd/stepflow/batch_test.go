package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/client"
)

// Several files are one batch: a line per file with its job or its
// error, exit code 1 when any was refused, and the others submitted.
func TestSubmitSeveralFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.write(t, "a.json", `{"steps":[{"id":"a","action":{"type":"pass"}}]}`, 0o644)
	bad := b.write(t, "bad.yaml", "steps:\n  - id: b\n    action: {type: nope}\n", 0o644)
	keyed := b.write(t, "keyed.json", `{"idempotency_key":"order-9","steps":[{"id":"c","action":{"type":"pass"}}]}`, 0o644)

	r := b.run(t, "submit", a, bad, keyed)
	require.Equal(t, exitError, r.code, "%s %s", r.stdout, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	require.Regexp(t, `^`+a+`\t[0-9A-Z]{26} QUEUED$`, lines[0])
	require.Contains(t, lines[1], bad+"\terror: ")
	require.Contains(t, lines[1], "jobs[1].steps[0].action.type")
	require.Contains(t, r.stderr, "1 of 3 jobs refused")
	for _, l := range []string{lines[0], lines[2]} {
		id := strings.Fields(l)[1]
		b.await(t, id, func(j *client.Job) bool { return j.State == client.JobCompleted })
	}

	// JSON output; a file's own key answers its job again.
	r = b.run(t, "submit", "-o", "json", keyed, a)
	require.Equal(t, exitOK, r.code, "%s", r.stderr)
	var answers []struct {
		File           string      `json:"file"`
		Job            *client.Job `json:"job"`
		IdempotencyKey string      `json:"idempotency_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &answers), r.stdout)
	require.Len(t, answers, 2)
	require.Equal(t, "order-9", answers[0].IdempotencyKey)
	require.Equal(t, strings.Fields(lines[2])[1], answers[0].Job.ID, "the same job again")
	require.NotEqual(t, strings.Fields(lines[0])[1], answers[1].Job.ID, "a file without a key is a new job")

	// More than one batch's worth goes in several requests.
	var many []string
	for i := range 27 {
		many = append(many, b.write(t, fmt.Sprintf("j%d.json", i), `{"steps":[{"id":"p","action":{"type":"pass"}}]}`, 0o644))
	}
	r = b.run(t, append([]string{"submit"}, many...)...)
	require.Equal(t, exitOK, r.code, "%s", r.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 27)

	// One file is today's submit; flags that take one job refuse several.
	r = b.run(t, "submit", a)
	require.Equal(t, exitOK, r.code, "%s", r.stderr)
	require.Regexp(t, `^[0-9A-Z]{26} QUEUED\n$`, r.stdout)
	r = b.run(t, "submit", a, keyed, "--watch")
	require.Equal(t, exitError, r.code)
	r = b.run(t, "submit", a, "-f", keyed)
	require.Equal(t, exitError, r.code)
}
