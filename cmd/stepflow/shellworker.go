package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
)

// defaultExitClasses maps a command's exit code to the failure class of
// its attempt; a code not here is retryable. 0 completes.
var defaultExitClasses = map[int]string{
	1:   client.ClassRetryable, // a plain error
	2:   client.ClassFatal,     // misuse: bad arguments or input (sh, bash, getopt)
	64:  client.ClassFatal,     // EX_USAGE
	65:  client.ClassFatal,     // EX_DATAERR
	66:  client.ClassFatal,     // EX_NOINPUT
	69:  client.ClassRetryable, // EX_UNAVAILABLE
	75:  client.ClassBlocked,   // EX_TEMPFAIL: try again later
	76:  client.ClassNetwork,   // EX_PROTOCOL
	124: client.ClassTimeout,   // timeout(1)
	126: client.ClassFatal,     // found but not executable
	127: client.ClassFatal,     // not found
}

// maxStdout bounds what a command's output may be: a worker's complete
// carries up to 5.5 MB.
const maxStdout = 5<<20 + 512<<10

func workerCmd(a *app) *cobra.Command {
	var o worker.Options
	var exitCodes string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "worker --queue QUEUE [--concurrency N] [--exit-codes CODE=CLASS,...] -- COMMAND [ARGS...]",
		Short: "Run a command for each step claimed from a worker queue",
		Long: `Claims steps from a worker queue and runs COMMAND for each, at most --concurrency at
once. The step's input is the command's stdin (JSON); its environment adds
STEPFLOW_JOB_ID, STEPFLOW_STEP_ID, STEPFLOW_ATTEMPT, STEPFLOW_MAX_ATTEMPTS,
STEPFLOW_IDEMPOTENCY_KEY (pass it on: execution is at-least-once), STEPFLOW_LEASE_ID
and, when set, STEPFLOW_DEADLINE (RFC 3339) and STEPFLOW_RESOURCE_ID. Its stdout is the
step's output: JSON when it parses, else a JSON string (empty: null). Its stderr goes
to this worker's stderr, each line led by job/step#attempt; its last lines are the
failure's message.

Exit 0 completes the step. Another code fails it with a class:
  1 retryable, 2 fatal, 64 fatal (EX_USAGE), 65 fatal (EX_DATAERR), 66 fatal
  (EX_NOINPUT), 69 retryable (EX_UNAVAILABLE), 75 blocked (EX_TEMPFAIL), 76 network
  (EX_PROTOCOL), 124 timeout (timeout(1)), 126 fatal, 127 fatal; any other code, or
  death by a signal, retryable.
--exit-codes changes or adds codes, e.g. --exit-codes 3=blocked,4=needs_user.

While the command runs the worker heartbeats its lease. When the job is cancelled or
the lease is lost, the command's process group gets SIGTERM, then SIGKILL after
--kill-grace, and nothing is reported. SIGTERM or SIGINT to the worker stops claiming
and waits --drain-timeout for running commands, then kills them as above and fails
their attempts as retryable.`,
		Example: `  stepflow worker --queue thumbnails -- ./make-thumbnail.sh
  stepflow worker --queue ci --concurrency 4 --exit-codes 3=blocked -- make -C repo test`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Queue == "" {
				return errors.New("--queue is required")
			}
			classes, err := exitClasses(exitCodes)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			// The log and the commands' stderr share one writer, a line at
			// a time.
			stderr := &lockedWriter{w: a.stderr}
			o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			sw := &shellWorker{argv: args, classes: classes, grace: grace, stderr: stderr}
			w, err := worker.New(c, o, sw.handle)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // a second signal ends the worker at once
			}()
			o.Log.Info("worker started", "queue", o.Queue, "concurrency", max(o.Concurrency, 1), "command", strings.Join(args, " "))
			return w.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Queue, "queue", "", "the worker queue to claim from")
	f.IntVar(&o.Concurrency, "concurrency", 1, "commands running at once")
	f.StringVar(&o.Name, "name", "", "the worker's name, shown on its attempts (default host-pid)")
	f.StringVar(&exitCodes, "exit-codes", "", "exit code to failure class, CODE=CLASS,... (over the default table)")
	f.DurationVar(&grace, "kill-grace", 10*time.Second, "how long a command has between SIGTERM and SIGKILL")
	f.DurationVar(&o.DrainTimeout, "drain-timeout", 30*time.Second, "how long a shutdown waits for running commands")
	return cmd
}

// exitClasses reads --exit-codes over the default table.
func exitClasses(spec string) (map[int]string, error) {
	m := map[int]string{}
	for k, v := range defaultExitClasses {
		m[k] = v
	}
	known := []string{client.ClassRetryable, client.ClassNetwork, client.ClassTimeout, client.ClassBlocked, client.ClassResource, client.ClassFatal, client.ClassNeedsUser, client.ClassReplan}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		code, class, ok := strings.Cut(pair, "=")
		n, err := strconv.Atoi(strings.TrimSpace(code))
		class = strings.TrimSpace(class)
		switch {
		case !ok || err != nil || n < 1 || n > 255:
			return nil, fmt.Errorf("--exit-codes: %q is not CODE=CLASS with a code from 1 to 255", pair)
		case !slices.Contains(known, class):
			return nil, fmt.Errorf("--exit-codes: %q is not a failure class (%s)", class, strings.Join(known, ", "))
		}
		m[n] = class
	}
	return m, nil
}

// shellWorker runs a command per task.
type shellWorker struct {
	argv    []string
	classes map[int]string
	grace   time.Duration
	stderr  io.Writer
}

// lockedWriter serialises writes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (sw *shellWorker) handle(ctx context.Context, t *worker.Task) (any, error) {
	cmd := exec.Command(sw.argv[0], sw.argv[1:]...)
	in := t.Input
	if len(in) == 0 {
		in = json.RawMessage("null")
	}
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(),
		"STEPFLOW_JOB_ID="+t.JobID, "STEPFLOW_STEP_ID="+t.StepID,
		"STEPFLOW_ATTEMPT="+strconv.Itoa(t.Attempt), "STEPFLOW_MAX_ATTEMPTS="+strconv.Itoa(t.MaxAttempts),
		"STEPFLOW_IDEMPOTENCY_KEY="+t.IdempotencyKey, "STEPFLOW_LEASE_ID="+t.LeaseID)
	if t.Deadline != nil {
		cmd.Env = append(cmd.Env, "STEPFLOW_DEADLINE="+t.Deadline.UTC().Format(time.RFC3339))
	}
	if t.Resource != nil {
		cmd.Env = append(cmd.Env, "STEPFLOW_RESOURCE_ID="+t.Resource.ID)
	}
	out := &capped{max: maxStdout}
	cmd.Stdout = out
	tail := &lineLog{prefix: fmt.Sprintf("%s/%s#%d: ", t.JobID, t.StepID, t.Attempt), to: sw.stderr}
	cmd.Stderr = tail
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, worker.Fail(client.ClassFatal, fmt.Sprintf("start %s: %v", sw.argv[0], err))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// Cancelled, lease lost, past its timeout or shut down: the whole
		// process group goes, politely first.
		signalGroup(cmd, syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(sw.grace):
			signalGroup(cmd, syscall.SIGKILL)
			err = <-done
		}
		tail.flush()
		return nil, fmt.Errorf("stopped (%v): %w", context.Cause(ctx), errors.Join(err, ctx.Err()))
	}
	tail.flush()
	if out.over {
		return nil, worker.Fail(client.ClassFatal, fmt.Sprintf("stdout passed %d bytes, the most an output may be", maxStdout))
	}
	if err != nil {
		return nil, sw.failure(err, tail.last())
	}
	stdout := bytes.TrimSpace(out.buf.Bytes())
	switch {
	case len(stdout) == 0:
		return json.RawMessage("null"), nil
	case json.Valid(stdout):
		return json.RawMessage(stdout), nil
	}
	return strings.TrimRight(out.buf.String(), "\r\n"), nil
}

// failure maps a command's end to its class and message.
func (sw *shellWorker) failure(err error, stderrTail string) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return worker.Fail(client.ClassRetryable, err.Error())
	}
	code := ee.ExitCode()
	msg := fmt.Sprintf("%s exited %d", sw.argv[0], code)
	if code < 0 {
		msg = fmt.Sprintf("%s: %v", sw.argv[0], ee)
	}
	if stderrTail != "" {
		msg += ": " + stderrTail
	}
	class, ok := sw.classes[code]
	if !ok {
		class = client.ClassRetryable
	}
	return worker.Fail(class, msg)
}

// capped keeps up to max bytes and notes more.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

// lineLog writes a command's stderr a line at a time under a prefix and
// keeps its last lines for the failure message.
type lineLog struct {
	prefix  string
	to      io.Writer // one Write a line
	partial []byte
	lines   []string
}

const tailLines, tailBytes = 5, 2048

func (l *lineLog) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 64<<10 { // a very long line: write what came
		l.emit(string(l.partial))
		l.partial = nil
	}
	return len(p), nil
}

func (l *lineLog) emit(line string) {
	line = strings.TrimRight(line, "\r")
	_, _ = io.WriteString(l.to, l.prefix+line+"\n")
	if strings.TrimSpace(line) == "" {
		return
	}
	l.lines = append(l.lines, line)
	if len(l.lines) > tailLines {
		l.lines = l.lines[len(l.lines)-tailLines:]
	}
}

func (l *lineLog) flush() {
	if len(l.partial) > 0 {
		l.emit(string(l.partial))
		l.partial = nil
	}
}

// last answers the last lines written, at most tailBytes.
func (l *lineLog) last() string {
	s := strings.Join(l.lines, "\n")
	if len(s) > tailBytes {
		s = "…" + s[len(s)-tailBytes:]
	}
	return s
}
