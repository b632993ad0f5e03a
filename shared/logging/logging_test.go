package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/logging"
	"github.com/stepflow/stepflow/shared/memory"
)

// bundle is an engine on the in-memory adapters logging to out.
type bundle struct {
	ctx   context.Context
	e     *engine.Engine
	clock *memory.Clock
}

func setup(t *testing.T, log *slog.Logger) *bundle {
	t.Helper()
	clock := memory.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	e := engine.New(engine.Config{Store: memory.NewStore(), Queue: memory.NewQueue(clock.Now), BuiltinLease: 1800 * time.Second, Log: log, Now: clock.Now})
	return &bundle{ctx: context.Background(), e: e, clock: clock}
}

func (b *bundle) claim(t *testing.T, queue, worker string) engine.ClaimedLease {
	t.Helper()
	ls, err := b.e.Claim(b.ctx, "acme", engine.ClaimRequest{Queue: queue, Max: 1, Worker: worker})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	return ls[0]
}

var clockPrefix = regexp.MustCompile(`^\d\d:\d\d:\d\d `)

// lines answers what was logged, a line each, with the time of day (the
// record's own, the wall clock's) checked and cut off.
func lines(t *testing.T, out *bytes.Buffer) []string {
	t.Helper()
	var got []string
	for l := range strings.Lines(out.String()) {
		require.Regexp(t, clockPrefix, l)
		got = append(got, strings.TrimSuffix(clockPrefix.ReplaceAllString(l, ""), "\n"))
	}
	return got
}

// make dev's lines are the engine's change records, one per saved write,
// rendered: the job's state, and each step the write moved.
func TestDevLogShowsOneLinePerChange(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	b := setup(t, logging.Dev(&out, slog.LevelInfo))
	j, _, err := b.e.Submit(b.ctx, "acme", []byte(`{"steps":[
		{"id":"render","action":{"type":"worker","queue":"gpu"},"retry":{"max_attempts":2,"backoff":"fixed","initial_delay_ms":1000}},
		{"id":"ship","action":{"type":"worker","queue":"gpu"}}]}`), "")
	require.NoError(t, err)
	l := b.claim(t, "gpu", "w1")
	_, err = b.e.Fail(b.ctx, "acme", l.LeaseID, engine.Outcome{Class: "retryable", Message: "GPU\nbusy"})
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	l = b.claim(t, "gpu", "w2")
	_, err = b.e.Complete(b.ctx, "acme", l.LeaseID, json.RawMessage(`{}`))
	require.NoError(t, err)
	_, err = b.e.Cancel(b.ctx, "acme", j.ID)
	require.NoError(t, err)

	id := j.ID
	require.Equal(t, []string{
		"job " + id + " QUEUED    created",
		"job " + id + " RUNNING   step render RUNNING attempt 1 worker w1",
		"job " + id + " RETRYING  step render RETRYING attempt 1 (retryable: GPU busy)",
		"job " + id + " RUNNING   step render RUNNING attempt 2 worker w2",
		"job " + id + " QUEUED    step render SUCCEEDED attempt 2; step ship PENDING",
		"job " + id + " CANCELLED step ship CANCELLED",
	}, lines(t, &out))
}

func TestChangeLine(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 12, 0, 1, 0, time.UTC)
	c := engine.Change{
		Job: "01JOB", From: domain.JobRunning, To: domain.JobFailed,
		Steps: []engine.StepChange{
			{Step: "a", State: domain.StepFailed, Attempt: 3, Error: &domain.StepError{Class: domain.ClassFatal, Message: strings.Repeat("x", 300)}},
			{Step: "b", State: domain.StepCancelled, Detail: "another step failed"},
		},
		Events: []domain.Event{{Type: domain.NoteReplanned, Detail: "step a replaced by c"}},
	}
	line := logging.ChangeLine(at, c)
	require.True(t, strings.HasPrefix(line, "12:00:01 job 01JOB FAILED    step a FAILED attempt 3 (fatal: xxx"), line)
	require.Contains(t, line, "(truncated from 300 bytes)); step b CANCELLED (another step failed); job replanned (step a replaced by c)")
	require.Equal(t, "12:00:01 job 01JOB QUEUED    created by schedule nightly",
		logging.ChangeLine(at, engine.Change{Job: "01JOB", To: domain.JobQueued, Schedule: "nightly"}))

	// A cancel of a long job names a few steps, and counts the rest.
	long := engine.Change{Job: "01JOB", From: domain.JobRunning, To: domain.JobCancelled}
	for i := range 5000 {
		long.Steps = append(long.Steps, engine.StepChange{Step: fmt.Sprintf("s%04d", i), State: domain.StepCancelled})
	}
	line = logging.ChangeLine(at, long)
	require.True(t, strings.HasSuffix(line, "step s0010 CANCELLED; and 4989 more"), line)
	require.Less(t, len(line), 400)
}

// Other records are one line each, the level left out at Info.
func TestDevLogOtherRecords(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := logging.Dev(&out, slog.LevelInfo).With("fn", "execute").WithGroup("sweep")
	log.Debug("not shown")
	log.Info("swept", "due", 2, "note", "two words")
	log.WarnContext(logging.With(context.Background(), slog.String("request_id", "r-1")), "dispatch failed", "err", errors.New(`boom "x"`))
	require.Equal(t, []string{
		`swept fn=execute sweep.due=2 sweep.note="two words"`,
		`WARN dispatch failed fn=execute sweep.err="boom \"x\"" sweep.request_id=r-1`,
	}, lines(t, &out))
}

// On Lambda every record is a JSON object; a change's attributes are the
// record's own, beside the request ids of the context it was logged with.
func TestJSONLogCarriesTheChangeAndTheRequestIDs(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	b := setup(t, logging.JSON(&out, slog.LevelDebug))
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "lambda-1"})
	ctx = logging.With(ctx, slog.String("request_id", "apigw-1"))
	j, _, err := b.e.Submit(ctx, "acme", []byte(`{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}}]}`), "")
	require.NoError(t, err)
	out.Reset()
	l := b.claim(t, "gpu", "w1")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rec), out.String())
	require.Equal(t, engine.ChangeMessage, rec["msg"])
	require.Equal(t, "DEBUG", rec["level"])
	require.Nil(t, rec["request_id"], "a claim made without the request's context carries none")

	out.Reset()
	_, err = b.e.Complete(ctx, "acme", l.LeaseID, json.RawMessage(`{}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out.Bytes(), &rec), out.String())
	for k, v := range map[string]any{
		"msg": engine.ChangeMessage, "tenant": "acme", "job": j.ID, "state": "COMPLETED", "from": "RUNNING",
		"step": "render", "step_state": "SUCCEEDED", "attempt": 1.0,
		"request_id": "apigw-1", "aws_request_id": "lambda-1",
	} {
		require.Equal(t, v, rec[k], k)
	}
	require.Equal(t, []any{"step_succeeded", "job_completed"}, rec["events"])
}

// On Lambda the change records are written only when the function's
// ApplicationLogLevel (AWS_LAMBDA_LOG_LEVEL) is DEBUG: at the default INFO
// a job's transitions cost no log ingestion, and warnings still show.
// make dev's logger shows them at any level.
func TestChangeRecordsOnLambdaOnlyAtDebug(t *testing.T) {
	t.Parallel()
	run := func(log *slog.Logger) {
		b := setup(t, log)
		_, _, err := b.e.Submit(b.ctx, "acme", []byte(`{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}}]}`), "")
		require.NoError(t, err)
		l := b.claim(t, "gpu", "w1")
		_, err = b.e.Complete(b.ctx, "acme", l.LeaseID, json.RawMessage(`{}`))
		require.NoError(t, err)
		log.Warn("still shown")
	}
	for env, changes := range map[string]int{"": 0, "INFO": 0, "info": 0, "WARN": 0, "DEBUG": 3, "TRACE": 3} {
		level := logging.LambdaLevel(func(k string) string {
			require.Equal(t, "AWS_LAMBDA_LOG_LEVEL", k)
			return env
		})
		var out bytes.Buffer
		run(logging.JSON(&out, level))
		got := strings.Count(out.String(), `"msg":"`+engine.ChangeMessage+`"`)
		require.Equal(t, changes, got, "AWS_LAMBDA_LOG_LEVEL=%q: %s", env, out.String())
		require.Contains(t, out.String(), "still shown", "AWS_LAMBDA_LOG_LEVEL=%q", env)
	}
	require.Equal(t, slog.LevelError, logging.LambdaLevel(func(string) string { return "ERROR" }))

	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		var out bytes.Buffer
		run(logging.Dev(&out, level))
		got := lines(t, &out)
		require.Len(t, got, 4, "make dev at %s: %q", level, got)
		require.Contains(t, got[0], "QUEUED    created")
		require.Equal(t, "WARN still shown", got[3])
	}
}
