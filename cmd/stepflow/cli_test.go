package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/sdk/client"
)

// TestMain lets a test run this binary as the stepflow command itself
// (STEPFLOW_CLI_MAIN=1), to send it real signals.
func TestMain(m *testing.M) {
	if os.Getenv("STEPFLOW_CLI_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

type bundle struct {
	h   *stacktest.Harness
	c   *client.Client
	ctx context.Context
	dir string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupOn(t, stacktest.NewInMemory(t))
}

// setupOnEmulator is setup for the operator commands, which read the
// stack's AWS resources (its local state) as well as its API.
func setupOnEmulator(t *testing.T) *bundle {
	t.Helper()
	return setupOn(t, stacktest.New(t))
}

func setupOn(t *testing.T, h *stacktest.Harness) *bundle {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Timeout: time.Minute}})
	require.NoError(t, err)
	return &bundle{h: h, c: c, ctx: t.Context(), dir: t.TempDir()}
}

// result is what one command line did.
type result struct {
	code           int
	stdout, stderr string
}

// run runs a stepflow command line against the bundle's stack as tenant A.
func (b *bundle) run(t *testing.T, args ...string) result {
	t.Helper()
	return b.runCtx(b.ctx, t, "", args...)
}

func (b *bundle) runCtx(ctx context.Context, t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--url", b.h.URL, "--api-key", stacktest.KeyA}, args...)
	code := run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// submitJSON submits with the CLI and answers the job it printed.
func (b *bundle) submitJSON(t *testing.T, args ...string) client.Job {
	t.Helper()
	r := b.run(t, append([]string{"submit", "-o", "json"}, args...)...)
	require.Equal(t, 0, r.code, "%s", r.stderr)
	var j client.Job
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j), r.stdout)
	return j
}

func (b *bundle) await(t *testing.T, id string, cond func(*client.Job) bool) *client.Job {
	t.Helper()
	var j *client.Job
	require.Eventually(t, func() bool {
		var err error
		j, err = b.c.Job(b.ctx, id)
		require.NoError(t, err)
		return cond(j)
	}, 30*time.Second, 20*time.Millisecond, "job %s; last seen %+v", id, j)
	return j
}

func (b *bundle) write(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(b.dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	return p
}

func TestSubmitWatchAndTheJobCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	yamlJob := b.write(t, "job.yaml", `
payload:
  order: 7
steps:
  - id: fetch
    action: {type: pass}
  - id: ship
    action: {type: pass}
`, 0o644)
	r := b.run(t, "submit", "-f", yamlJob, "--watch")
	require.Equal(t, exitOK, r.code, "a completed job exits 0: %s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "job_completed")
	require.Regexp(t, `ship\s+pass\s+SUCCEEDED\s+1/`, r.stdout)
	id := strings.Fields(r.stdout)[1] // "job <id> submitted"

	r = b.run(t, "get", id)
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "COMPLETED")
	r = b.run(t, "events", id)
	require.Equal(t, 0, r.code)
	require.Regexp(t, `(?m)^1\s+.*job_created`, r.stdout)
	if r = b.run(t, "output", id, "ship"); !strings.Contains(r.stderr, "no route") { // the route comes with large data (issue 9)
		require.Equal(t, 0, r.code, r.stderr)
		require.JSONEq(t, `{"order":7}`, r.stdout)
	}

	failed := b.submitJSON(t, "--action", "fail", "--param", "class=fatal", "--param", "message=no such order")
	r = b.run(t, "watch", failed.ID)
	require.Equal(t, exitFailed, r.code, "a failed job exits %d: %s", exitFailed, r.stdout)
	require.Contains(t, r.stdout, "fatal: no such order")

	sleeping := b.submitJSON(t, "--action", "sleep", "--param", "seconds=3600", "--payload", `{"a":1}`)
	r = b.run(t, "cancel", sleeping.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "CANCELLED")
	r = b.run(t, "watch", sleeping.ID)
	require.Equal(t, exitCancelled, r.code)

	r = b.run(t, "list", "--state", "completed", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var page client.JobPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 1)
	require.Equal(t, id, page.Jobs[0].ID)
	r = b.run(t, "list", "--limit", "1")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "more: --cursor ")

	// Errors: the API's message naming the field, and exit 1.
	r = b.run(t, "submit", "--action", "worker", "--param", "queue=q", "--param", "url=http://x")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "steps[0].action.url")
	r = b.run(t, "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "404")
}

// A YAML spec's condition: get shows the step it skipped, never run, with
// the condition that skipped it.
func TestGetShowsASkippedStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.write(t, "cond.yaml", `
payload: {mode: quick}
steps:
  - id: fetch
    action: {type: pass}
  - id: deep
    action: {type: pass}
    when: payload.mode == "full"
`, 0o644)
	r := b.run(t, "submit", "-f", spec, "--watch")
	require.Equal(t, exitOK, r.code, "%s %s", r.stdout, r.stderr)
	id := strings.Fields(r.stdout)[1]
	r = b.run(t, "get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `deep\s+pass\s+SKIPPED\s+-\s+skipped: when payload.mode == "full" was false`, r.stdout)
}

// get shows no attempts (-) for a step that never ran and never will: one
// cancelled before it started, one left behind by a job that failed, a
// gate (a person decides it; nothing runs) of a job that completed.
func TestGetShowsNoAttemptsForAStepThatNeverRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := b.submitJSON(t, "-f", b.write(t, "fails.yaml", `
steps:
  - id: boom
    action: {type: fail, class: fatal, message: no}
  - id: later
    action: {type: pass}
    depends_on: [boom]
`, 0o644))
	b.await(t, failed.ID, func(j *client.Job) bool { return j.State == client.JobFailed })
	r := b.run(t, "get", failed.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `boom\s+fail\s+FAILED\s+1/3\s`, r.stdout)
	require.Regexp(t, `later\s+pass\s+\S+\s+-\s`, r.stdout)

	waiting := b.submitJSON(t, "--action", "worker", "--param", "queue=nobody")
	r = b.run(t, "get", waiting.ID)
	require.Regexp(t, `\s0/\d+\s`, r.stdout, "a step still to run shows its attempts")
	r = b.run(t, "cancel", waiting.ID)
	require.Equal(t, 0, r.code, r.stderr)
	r = b.run(t, "get", waiting.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `worker\s+CANCELLED\s+-\s`, r.stdout)
	require.NotContains(t, r.stdout, "0/")

	gated := b.submitJSON(t, "--action", "approval")
	b.await(t, gated.ID, func(j *client.Job) bool { return j.Steps[0].State == "NEEDS_USER" })
	require.Equal(t, 0, b.run(t, "approve", gated.ID, gated.Steps[0].ID).code)
	b.await(t, gated.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	r = b.run(t, "get", gated.ID)
	require.Regexp(t, `approval\s+SUCCEEDED\s+-\s`, r.stdout)
}

// watch shows a map's items as its progress, and get counts them on the
// map's row rather than listing each.
func TestWatchAndGetShowAMapsProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.write(t, "map.yaml", `
payload: {xs: [1, 2, 3, 4, 5, 6]}
steps:
  - id: each
    action:
      type: map
      items: payload.xs
      max_concurrency: 2
      step: {action: {type: fail, class: fatal}}
      tolerated_failures: 10
`, 0o644)
	r := b.run(t, "submit", "-f", spec, "--watch")
	require.Equal(t, exitOK, r.code, "%s %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "map_progress")
	require.Contains(t, r.stdout, "each  6 of 6 items ended, 6 failed")
	require.NotContains(t, r.stdout, "each[3]", "no item's events one by one")
	id := strings.Fields(r.stdout)[1]
	r = b.run(t, "get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `each\s+map\s+SUCCEEDED\s+-\s+6 items: 6 FAILED`, r.stdout)
}

// A job step's child job: get shows it on the parent's step row and
// among the parent's children, the child shows its parent, and list
// --parent lists the parent's children.
func TestGetAndListShowAChildJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.write(t, "parent.yaml", `
payload: {order: 7}
steps:
  - id: sub
    action:
      type: job
      spec:
        steps:
          - id: inner
            action: {type: pass}
  - id: after
    action: {type: pass}
`, 0o644)
	r := b.run(t, "submit", "-f", spec, "--watch")
	require.Equal(t, exitOK, r.code, "%s %s", r.stdout, r.stderr)
	id := strings.Fields(r.stdout)[1]
	parent, err := b.c.Job(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, parent.Children, 1, "%+v", parent)
	child := parent.Children[0]

	r = b.run(t, "get", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^children\s+`+child+`$`, r.stdout)
	require.Regexp(t, `sub\s+job\s+SUCCEEDED\s+1/\d+\s+child `+child, r.stdout)
	require.NotContains(t, r.stdout, "parent ", "a job no step made has no parent")

	r = b.run(t, "get", child)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "parent   "+id+" (step sub, attempt 1)")
	require.Contains(t, r.stdout, "COMPLETED")
	require.NotContains(t, r.stdout, "children")

	r = b.run(t, "list", "--parent", id, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var page client.JobPage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Jobs, 1, "the parent's one child, not the parent")
	require.Equal(t, child, page.Jobs[0].ID)
	r = b.run(t, "list", "--parent", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, child+`\s+COMPLETED`, r.stdout)
	require.NotContains(t, r.stdout, id)
	r = b.run(t, "list", "--parent", child, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Empty(t, page.Jobs, "a child with no job steps has no children")
}

// Many children: the header names the first few, counts them all, and
// says how to list them.
func TestGetNamesTheFirstFewOfManyChildren(t *testing.T) {
	j := &client.Job{ID: "P", Children: []string{"A", "B"}}
	require.Equal(t, "A, B", children(j))
	j.Children = []string{"A", "B", "C", "D", "E", "F", "G"}
	require.Equal(t, "7: A, B, C, D, E, … (stepflow list --parent P)", children(j))
}

func TestGatesResourcesSchedulesAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gate := b.submitJSON(t, "--action", "approval", "--step", "ok")
	b.await(t, gate.ID, func(j *client.Job) bool { return j.State == client.JobWaiting })
	r := b.run(t, "approve", gate.ID, "ok", "--by", "ann")
	require.Equal(t, 0, r.code, r.stderr)
	j := b.await(t, gate.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	require.Equal(t, "ann", j.Steps[0].Decision.By)

	wait := b.submitJSON(t, "--action", "wait", "--param", "signal=paid")
	r = b.run(t, "signal", wait.ID, "paid", "--payload", `{"amount":5}`)
	require.Equal(t, 0, r.code, r.stderr)
	j = b.await(t, wait.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	require.JSONEq(t, `{"amount":5}`, string(j.Steps[0].Output))

	r = b.run(t, "resources", "put", "gpu-1", "--capability", "gpu", "--label", "zone=a", "--capacity", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "created")
	r = b.run(t, "resources", "list")
	require.Regexp(t, `gpu-1\s+2\s+0\s+0\s+gpu\s+zone=a`, r.stdout)
	r = b.run(t, "resources", "delete", "gpu-1")
	require.Equal(t, 0, r.code, r.stderr)

	jobFile := b.write(t, "job.json", `{"steps":[{"id":"a","action":{"type":"pass"}}]}`, 0o644)
	r = b.run(t, "schedules", "create", "--id", "hourly", "--every", "1h", "--job", jobFile)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schedule  hourly")
	r = b.run(t, "schedules", "pause", "hourly")
	require.Contains(t, r.stdout, "paused    true")
	r = b.run(t, "schedules", "list")
	require.Regexp(t, `hourly\s+1h0m0s\s+true`, r.stdout)
	replaced := filepath.Join(t.TempDir(), "hourly.yaml")
	require.NoError(t, os.WriteFile(replaced, []byte("id: hourly\nevery: 2h\njob:\n  steps:\n    - id: a\n      action: {type: pass}\n"), 0o600))
	r = b.run(t, "schedules", "replace", "hourly", "-f", replaced)
	require.Equal(t, 0, r.code, r.stderr)
	r = b.run(t, "schedules", "list")
	require.Regexp(t, `hourly\s+2h0m0s\s+true`, r.stdout, "replaced, still paused")
	r = b.run(t, "schedules", "delete", "hourly")
	require.Equal(t, 0, r.code)
	r = b.run(t, "schedules", "get", "hourly")
	require.Equal(t, exitError, r.code)

	r = b.run(t, "health", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var h client.Health
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &h))
	require.Equal(t, int64(2), h.Completed)
	r = b.run(t, "health")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "success rate  100.0% (24 h: 2 completed, 0 failed, 0 cancelled)")
	require.Contains(t, r.stdout, "note: too few finished jobs (2 of 20) to grade the success rate\n")
}

// The shell worker runs a real script per step: input on stdin, ids in
// the environment, stdout the output (JSON or a string), exit codes
// mapped to classes, heartbeats while it runs, and the script's process
// group killed when its job is cancelled.
func TestShellWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	script := b.write(t, "work.sh", `#!/bin/sh
in=$(cat)
echo "working on $STEPFLOW_STEP_ID" >&2
case "$in" in
  *json*) printf '{"job":"%s","key":"%s","in":%s}\n' "$STEPFLOW_JOB_ID" "$STEPFLOW_IDEMPOTENCY_KEY" "$in" ;;
  *text*) echo "hello world" ;;
  *slow*)
    while [ ! -e "`+b.dir+`/$STEPFLOW_JOB_ID.go" ]; do sleep 0.1; done
    echo '"slow done"' ;;
  *fatal*) echo "bad input" >&2; exit 2 ;;
  *tempfail*) exit 75 ;;
  *custom*) exit 3 ;;
  *hang*)
    echo $$ > "`+b.dir+`/$STEPFLOW_JOB_ID.pid"
    sleep 60 &
    echo $! > "`+b.dir+`/$STEPFLOW_JOB_ID.child"
    wait ;;
esac
`, 0o755)
	step := func(mode string, lease int) string {
		return b.submitJSON(t, "--action", "worker", "--param", "queue=sh", "--param", "lease_seconds="+strconv.Itoa(lease),
			"--max-attempts", "1", "--payload", `{"mode":"`+mode+`"}`).ID
	}
	jsonJob, textJob, slowJob := step("json", 0), step("text", 0), step("slow", 9)
	fatalJob, tempJob, customJob, hangJob := step("fatal", 0), step("tempfail", 0), step("custom", 0), step("hang", 9)

	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan int, 1)
	var logs syncBuffer
	go func() {
		done <- run(ctx, []string{"--url", b.h.URL, "--api-key", stacktest.KeyA, "worker", "--queue", "sh", "--concurrency", "8", "--exit-codes", "3=needs_user", "--kill-grace", "2s", "--", script}, nil, io.Discard, &logs)
	}()

	final := func(id string) *client.Job {
		return b.await(t, id, func(j *client.Job) bool { return j.State.Finished() || j.State == client.JobWaiting })
	}
	j := final(jsonJob)
	require.Equal(t, client.JobCompleted, j.State)
	require.JSONEq(t, `{"job":"`+jsonJob+`","key":"`+jsonJob+`/worker/1","in":{"mode":"json"}}`, string(j.Steps[0].Output))
	j = final(textJob)
	require.JSONEq(t, `"hello world"`, string(j.Steps[0].Output), "text on stdout is a JSON string")
	// The slow step runs until its lease was extended by a heartbeat (every
	// third of its 9 s).
	var first time.Time
	b.await(t, slowJob, func(j *client.Job) bool {
		if l := j.Steps[0].Lease; l != nil && first.IsZero() {
			first = l.ExpiresAt
		}
		return j.Steps[0].Lease != nil && j.Steps[0].Lease.ExpiresAt.After(first)
	})
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, slowJob+".go"), nil, 0o644))
	j = final(slowJob)
	require.Equal(t, client.JobCompleted, j.State, "%+v\n%s", j.Steps[0], &logs)
	require.JSONEq(t, `"slow done"`, string(j.Steps[0].Output))
	j = final(fatalJob)
	require.Equal(t, client.ClassFatal, j.Steps[0].Error.Class)
	require.Contains(t, j.Steps[0].Error.Message, "exited 2: working on worker\nbad input")
	j = final(tempJob)
	require.Equal(t, client.ClassBlocked, j.Steps[0].Attempts[0].Error.Class, "75 (EX_TEMPFAIL) is blocked")
	j = final(customJob)
	require.Equal(t, "NEEDS_USER", j.Steps[0].State, "--exit-codes 3=needs_user")

	pids := map[string]int{}
	require.Eventually(t, func() bool {
		for _, f := range []string{"pid", "child"} {
			raw, err := os.ReadFile(filepath.Join(b.dir, hangJob+"."+f))
			if err != nil || !strings.HasSuffix(string(raw), "\n") {
				return false
			}
			pids[f], _ = strconv.Atoi(strings.TrimSpace(string(raw)))
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	_, err := b.c.Cancel(b.ctx, hangJob)
	require.NoError(t, err, "%s", &logs)
	for f, pid := range pids {
		require.Eventually(t, func() bool { return !alive(pid) }, 30*time.Second, 20*time.Millisecond, "the script's %s (%d) was killed", f, pid)
	}
	stop()
	require.Equal(t, 0, <-done, "a worker that drained exits 0: %s", &logs)
	require.Contains(t, logs.String(), jsonJob+"/worker#1: working on worker", "stderr is logged under job/step#attempt")
}

// alive reports a process that exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// SIGTERM stops the worker claiming and lets the running command finish.
func TestShellWorkerDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := filepath.Join(b.dir, "started")
	script := b.write(t, "drain.sh", `#!/bin/sh
touch "`+started+`"
sleep 2
echo '"finished"'
`, 0o755)
	first := b.submitJSON(t, "--action", "worker", "--param", "queue=d").ID

	cmd := exec.Command(os.Args[0], "--url", b.h.URL, "--api-key", stacktest.KeyA, "worker", "--queue", "d", "--", script)
	cmd.Env = append(os.Environ(), "STEPFLOW_CLI_MAIN=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 30*time.Second, 10*time.Millisecond)
	second := b.submitJSON(t, "--action", "worker", "--param", "queue=d").ID
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	require.NoError(t, err, "the worker exits 0 after draining: %s", stderr.String())

	j, err := b.c.Job(b.ctx, first)
	require.NoError(t, err)
	require.Equal(t, client.JobCompleted, j.State, "the running command finished and completed its step")
	require.JSONEq(t, `"finished"`, string(j.Steps[0].Output))
	j, err = b.c.Job(b.ctx, second)
	require.NoError(t, err)
	require.Equal(t, client.JobQueued, j.State, "nothing was claimed after SIGTERM")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// localState writes the state file make dev would leave for the bundle's
// stack, and answers its path.
func (b *bundle) localState(t *testing.T) string {
	t.Helper()
	p := filepath.Join(b.dir, "dev.json")
	require.NoError(t, devstate.Write(p, devstate.State{URL: b.h.URL, Endpoint: b.h.Endpoint, Region: "us-east-1", Stack: b.h.Name, Env: b.h.Resources.Env}))
	return p
}

func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	b := setupOnEmulator(t)
	state := b.localState(t)
	r := b.run(t, "keys", "create", "ci", "--tenant", stacktest.TenantA, "--local-state", state, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var made struct{ Tenant, Name, ID, Key string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &made))
	require.NotEmpty(t, made.Key)

	// The new key works against the API.
	var out, errOut bytes.Buffer
	code := run(b.ctx, []string{"--url", b.h.URL, "--api-key", made.Key, "health"}, nil, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())

	r = b.run(t, "keys", "list", "--local-state", state)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, stacktest.TenantA+`\s+ci\s+`+made.ID, r.stdout)
	require.NotContains(t, r.stdout, made.Key, "a key is never shown again")
	r = b.run(t, "keys", "create", "ci", "--tenant", stacktest.TenantA, "--local-state", state)
	require.Equal(t, exitError, r.code, "a name is a tenant's once")

	r = b.run(t, "keys", "revoke", "ci", "--tenant", stacktest.TenantA, "--local-state", state)
	require.Equal(t, 0, r.code, r.stderr)
	// The API forgets a checked key within a minute of its clock.
	b.h.Clock.Advance(2 * time.Minute)
	code = run(b.ctx, []string{"--url", b.h.URL, "--api-key", made.Key, "health"}, nil, &out, &errOut)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut.String(), "401")

	// Without a state file or a table there is nothing to act on.
	r = b.run(t, "keys", "list", "--local-state", filepath.Join(b.dir, "none.json"))
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "make dev")
}
