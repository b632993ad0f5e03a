// Command quality-platform runs the quality platform's lifecycle on
// stepflow: a gateway enqueues a P0 task under an Idempotency-Key, `stepflow
// worker -- ./run-qa.sh` runs it, a run that finds its environment not ready
// blocks the task until a retry finds it ready, and the finished task shows
// its retention; health before and after.
//
//	go run ./examples/quality-platform      # against make dev
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
)

// config is where the example runs, which CLI runs its worker, and where
// it prints.
type config struct {
	URL    string
	APIKey string
	// CLI is the stepflow command; empty: `stepflow` on PATH, else built
	// from this repository.
	CLI string
	// Script is run-qa.sh; empty: found in the working directory or in
	// examples/quality-platform under it.
	Script string
	Out    io.Writer // what happens, in the quality platform's words
	Log    io.Writer // the worker's own log
}

func main() {
	cfg := config{
		URL:    cmp.Or(os.Getenv("STEPFLOW_URL"), "http://127.0.0.1:3000"),
		APIKey: cmp.Or(os.Getenv("STEPFLOW_API_KEY"), "dev-key"),
		Out:    os.Stdout,
		Log:    os.Stderr,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "quality-platform:", err)
		os.Exit(1)
	}
}

const queue = "qa"

func run(ctx context.Context, cfg config) error {
	c, err := client.New(client.Config{BaseURL: cfg.URL, APIKey: cfg.APIKey, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Out, format+"\n", a...) }
	if err := printHealth(ctx, c, say); err != nil {
		return err
	}

	// The gateway validates the task and enqueues it with its priority,
	// under the task's id as Idempotency-Key: a gateway that retries after
	// a lost answer enqueues nothing twice.
	taskID := fmt.Sprintf("qa-%d", time.Now().UnixNano())
	p0 := 0
	blockedEvery := int64(1000) // the platform's heartbeat re-queues a blocked task every 5 minutes; this one every second
	task := client.JobRequest{
		Payload:  map[string]string{"task": taskID, "intent": "runQA", "project": "demo"},
		Priority: &p0,
		Steps: []client.StepSpec{{ID: "runQA", Action: client.Worker(queue, 30), Retry: &client.RetryPolicy{
			Classes: map[string]*client.RetryPolicy{client.ClassBlocked: {MaxAttempts: 60, Backoff: "fixed", InitialDelayMS: &blockedEvery}},
		}}},
	}
	j, err := c.Submit(ctx, task, client.WithIdempotencyKey(taskID))
	if err != nil {
		return fmt.Errorf("gateway enqueue: %w", err)
	}
	say("gateway: task %s inbox -> todo as job %s (P%d)", taskID, j.ID, j.Priority)
	again, err := c.Submit(ctx, task, client.WithIdempotencyKey(taskID))
	if err != nil {
		return fmt.Errorf("gateway enqueue again: %w", err)
	}
	if again.ID != j.ID || !again.Replayed {
		return fmt.Errorf("the repeated enqueue made job %s (replayed %t), not job %s", again.ID, again.Replayed, j.ID)
	}
	say("gateway: the same enqueue again answers job %s: nothing enqueued twice", again.ID)
	if j.Priority != 0 {
		return fmt.Errorf("job %s has priority %d, not 0 (P0)", j.ID, j.Priority)
	}

	// The worker comes up: the stepflow CLI running run-qa.sh for each
	// task of the queue, a child process. run-qa.sh reports blocked (exit
	// 75) until the staging environment is up: a file this program makes.
	tmp, err := os.MkdirTemp("", "quality-platform-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	staging := filepath.Join(tmp, "staging-ready")
	stopWorker, err := startWorker(ctx, cfg, tmp, staging, say)
	if err != nil {
		return err
	}
	defer stopWorker()

	// A blocked task, shown in the task view; then the environment comes
	// up and the next retry finds it ready.
	var blocked *taskDoc
	jb, err := await(ctx, c, j.ID, "the task to block", func(j *client.Job) bool {
		if j.State != client.JobRetrying {
			return false
		}
		v, err := taskView(ctx, c, j.ID)
		if err != nil || v.State != "blocked" {
			return false // it moved on between the two reads: wait for the next block
		}
		blocked = v
		return true
	})
	if err != nil {
		return err
	}
	if runs := jb.Steps[0].Attempts; len(runs) > 0 && runs[len(runs)-1].Error != nil {
		say("worker: run #%d %s (%s): the task is blocked", runs[len(runs)-1].N, runs[len(runs)-1].State, runs[len(runs)-1].Error.Class)
	}
	printTask(say, blocked)
	if err := os.WriteFile(staging, nil, 0o644); err != nil {
		return err
	}
	say("staging is up: the next retry unblocks the task")

	j, err = await(ctx, c, j.ID, "the task to finish", func(j *client.Job) bool { return j.State.Finished() })
	if err != nil {
		return err
	}
	if j.State != client.JobCompleted {
		return fmt.Errorf("task %s ended %s, not done", taskID, j.State)
	}
	s := j.Steps[0]
	for _, a := range s.Attempts {
		why := ""
		if a.Error != nil {
			why = fmt.Sprintf(" (%s: %s)", a.Error.Class, a.Error.Message)
		}
		say("  run #%d %s%s", a.N, a.State, why)
	}
	say("evidence: %s", s.Output)
	done, err := taskView(ctx, c, j.ID)
	if err != nil {
		return err
	}
	printTask(say, done)

	// Retention: the finished task is deleted by TTL at expires_at.
	if j.ExpiresAt == nil || j.EndedAt == nil || !j.ExpiresAt.After(*j.EndedAt) {
		return fmt.Errorf("task %s has no retention: expires_at %v, ended_at %v", taskID, j.ExpiresAt, j.EndedAt)
	}
	say("retention: done at %s, kept until %s (%.0f days)", j.EndedAt.Format(time.RFC3339), j.ExpiresAt.Format(time.RFC3339), j.ExpiresAt.Sub(*j.EndedAt).Hours()/24)
	if err := printHealth(ctx, c, say); err != nil {
		return err
	}
	if err := checkRuns(j, blocked, done); err != nil {
		return err
	}
	return stopWorker()
}

// startWorker starts `stepflow worker --queue qa -- ./run-qa.sh` and
// answers a stop that sends it SIGTERM and requires a clean exit (it
// drains: claims no more, lets a running script finish).
func startWorker(ctx context.Context, cfg config, tmp, staging string, say func(string, ...any)) (func() error, error) {
	cli, err := findCLI(ctx, cfg.CLI, tmp)
	if err != nil {
		return nil, err
	}
	script, err := findScript(cfg.Script)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cli, "worker", "--queue", queue, "--name", "qa-shell", "--drain-timeout", "10s", "--", "./"+filepath.Base(script))
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "STEPFLOW_URL="+cfg.URL, "STEPFLOW_API_KEY="+cfg.APIKey, "QA_STAGING_READY="+staging)
	cmd.Stdout, cmd.Stderr = cfg.Log, cfg.Log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	say("worker: %s worker --queue %s -- ./%s (pid %d)", filepath.Base(cli), queue, filepath.Base(script), cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	return func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("the worker did not exit cleanly: %w", err)
			}
			say("worker: stopped")
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("the worker did not stop within 30 s of SIGTERM")
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			return ctx.Err()
		}
	}, nil
}

// findCLI answers the stepflow command: the one given, the one on PATH, or
// one built from this repository into dir.
func findCLI(ctx context.Context, given, dir string) (string, error) {
	if given != "" {
		return given, nil
	}
	if p, err := exec.LookPath("stepflow"); err == nil {
		return p, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", fmt.Errorf("stepflow is not on PATH and this is not the stepflow repository to build it from (go install ./cmd/stepflow)")
	}
	return buildCLI(ctx, filepath.Dir(strings.TrimSpace(string(gomod))), dir)
}

// buildCLI builds cmd/stepflow of the repository at root into dir.
func buildCLI(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "stepflow")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/stepflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/stepflow: %w\n%s", err, out)
	}
	return bin, nil
}

// findScript answers run-qa.sh's absolute path.
func findScript(given string) (string, error) {
	for _, p := range []string{given, "run-qa.sh", filepath.Join("examples", "quality-platform", "run-qa.sh")} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", errors.New("run-qa.sh not found: run the example from the repository's root")
}

// checkRuns requires the runs the lifecycle promises: blocked runs, then
// one that succeeded; and the task blocked and then done.
func checkRuns(j *client.Job, blocked, done *taskDoc) error {
	runs := j.Steps[0].Attempts
	if len(runs) < 2 || runs[len(runs)-1].State != "succeeded" {
		return fmt.Errorf("want blocked runs then a succeeded one: %+v", runs)
	}
	for _, a := range runs[:len(runs)-1] {
		if a.State != "failed" || a.Error == nil || a.Error.Class != client.ClassBlocked {
			return fmt.Errorf("run #%d is %s (%+v), not failed as blocked", a.N, a.State, a.Error)
		}
	}
	if blocked.State != "blocked" || done.State != "done" || done.Priority != "P0" {
		return fmt.Errorf("task view: want blocked, then done at P0; got %s, then %s at %s", blocked.State, done.State, done.Priority)
	}
	if len(done.Runs) != len(runs) || done.Runs[len(runs)-1].State != "succeeded" {
		return fmt.Errorf("task view: runs %+v, want %d ending succeeded", done.Runs, len(runs))
	}
	return nil
}

// printHealth prints the tenant's health as the heartbeat judges it.
func printHealth(ctx context.Context, c *client.Client, say func(string, ...any)) error {
	h, err := c.Health(ctx)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	switch h.Status {
	case "ok", "degraded", "unhealthy":
	default:
		return fmt.Errorf("health: status %q is none of ok, degraded, unhealthy", h.Status)
	}
	reasons := "no reasons"
	if len(h.Reasons) > 0 {
		reasons = strings.Join(h.Reasons, "; ")
	}
	say("health: %s (%s): backlog %d, blocked %d, done %d, failed %d in 24 h", h.Status, reasons, h.Backlog, h.Blocked, h.Completed, h.Failed)
	return nil
}

// taskDoc is GET /v1/jobs/{id}?view=task: the job as the quality
// platform's task, its attempts as runs.
type taskDoc struct {
	ID       string `json:"id"`
	View     string `json:"view"`
	State    string `json:"state"` // inbox, todo, doing, blocked, done, cancelled, or failed
	Priority string `json:"priority"`
	Steps    []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
	Runs []struct {
		Step  string `json:"step"`
		N     int    `json:"n"`
		State string `json:"state"` // queued, running, succeeded, failed, timeout, cancelled
	} `json:"runs"`
}

// taskView answers the job in the task view.
func taskView(ctx context.Context, c *client.Client, id string) (*taskDoc, error) {
	raw, err := c.GetView(ctx, id, "task")
	if err != nil {
		return nil, fmt.Errorf("task view: %w", err)
	}
	var v taskDoc
	if err := json.Unmarshal(raw, &struct{ View *string }{&v.View}); err != nil || v.View != "task" {
		return nil, fmt.Errorf("task view: the API answered view %q", v.View)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("task view: %w", err)
	}
	return &v, nil
}

func printTask(say func(string, ...any), v *taskDoc) {
	runs := make([]string, len(v.Runs))
	for i, r := range v.Runs {
		runs[i] = fmt.Sprintf("%s#%d %s", r.Step, r.N, r.State)
	}
	say("task view: %s %s, runs [%s]", v.State, v.Priority, strings.Join(runs, ", "))
}

// await answers the job once cond holds, within a minute (Client.Await).
func await(ctx context.Context, c *client.Client, id, what string, cond func(*client.Job) bool) (*client.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := c.Await(ctx, id, cond)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", what, err)
	}
	return j, nil
}
