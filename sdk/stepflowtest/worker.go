package stepflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Task is one attempt of a worker step, as a handler gets it: what a claim
// answers a worker. Kept plain so that the SDK's worker package can hand
// its handlers the same type.
type Task struct {
	JobID  string
	StepID string
	// Attempt counts from 1; a retry is the next attempt.
	Attempt int
	// Input is the step's input: the previous step's output, the job's
	// payload for the first, {"payload", "deps"} in a DAG.
	Input json.RawMessage
	// IdempotencyKey names the attempt (job/step/attempt): pass it on to
	// the systems the handler calls, since execution is at least once.
	IdempotencyKey string

	costUSD float64
}

// ReportCost adds usd (US dollars) to what the attempt spent itself, an
// LLM call's tokens say; the sum is recorded with its outcome and added
// to its job's cost, as a worker's report is (worker.Task.ReportCost).
func (t *Task) ReportCost(usd float64) { t.costUSD += usd }

// Handler does the work of a worker step. Its output (any value
// encoding/json encodes; json.RawMessage passes as is; nil for none)
// completes the step; an error fails the attempt: a *Failure (Fail) with
// its class, any other error as class retryable.
type Handler func(ctx context.Context, task *Task) (output any, err error)

// Failure is an attempt's failure with its class, which decides what
// happens next (README, "Failure classes, retries and timeouts"):
// retryable, network, timeout, blocked, resource, fatal, needs_user.
type Failure struct {
	Class   string
	Message string
	// RetryAfter asks for the next attempt no sooner than this (whole
	// seconds, rounded up).
	RetryAfter time.Duration
}

func (f *Failure) Error() string { return f.Class + ": " + f.Message }

// Fail answers a failure of class with message, for a handler to return.
// For class needs_user the message is the prompt a person answers
// (env.Resume).
func Fail(class, message string) error { return &Failure{Class: class, Message: message} }

// HandleQueue serves the worker queue named queue with h from now on (a
// later call replaces it): each time the Env runs, it claims the queue's
// visible steps, as a worker would, and records h's answer under the lease.
// A handler runs in no time on the Env's clock.
func (e *Env) HandleQueue(queue string, h Handler) {
	e.t.Helper()
	if !domain.ValidName(queue) || h == nil {
		e.t.Fatalf("stepflowtest: HandleQueue(%q): a queue is 1 to 40 letters, digits, '-' or '_', and a handler is not nil", queue)
	}
	e.handlers[queue] = h
}

// runHandlers claims each handled queue until it has nothing visible, and
// runs each lease's handler; it answers how many ran.
func (e *Env) runHandlers() int {
	e.t.Helper()
	n := 0
	for _, q := range e.sortedQueues() {
		for {
			ls, err := e.engine.Claim(e.ctx, e.cfg.tenant, engine.ClaimRequest{Queue: q, Max: engine.MaxClaim, Worker: Worker})
			if err != nil {
				e.t.Fatalf("stepflowtest: claim from queue %q: %v", q, err)
			}
			if len(ls) == 0 {
				break
			}
			for _, l := range ls {
				n++
				e.runTask(e.handlers[q], l)
			}
		}
	}
	return n
}

// runTask runs a handler on one lease and records its outcome, as the
// worker protocol's complete and fail do.
func (e *Env) runTask(h Handler, l engine.ClaimedLease) {
	e.t.Helper()
	task := &Task{JobID: l.JobID, StepID: l.StepID, Attempt: l.Attempt, Input: l.Input, IdempotencyKey: l.IdempotencyKey}
	out, herr := h(e.ctx, task)
	var err error
	if herr == nil {
		var raw json.RawMessage
		if out != nil {
			raw, herr = json.Marshal(out)
			if herr != nil {
				herr = Fail(string(domain.ClassFatal), fmt.Sprintf("the handler's output cannot be encoded as JSON: %v", herr))
			}
		}
		if herr == nil {
			_, err = e.engine.CompleteReporting(e.ctx, e.cfg.tenant, l.LeaseID, raw, task.costUSD)
		}
	}
	if herr != nil {
		o := outcomeOf(herr)
		o.CostUSD = task.costUSD
		_, err = e.engine.Fail(e.ctx, e.cfg.tenant, l.LeaseID, o)
	}
	switch {
	case err == nil:
	case isRefusal(err):
		e.t.Logf("stepflowtest: the outcome of step %s of job %s (attempt %d) was refused: %v", l.StepID, l.JobID, l.Attempt, err)
	case domain.CodeOf(err) == domain.CodeTooLarge:
		e.t.Logf("stepflowtest: step %s of job %s (attempt %d): %v", l.StepID, l.JobID, l.Attempt, err)
	default:
		e.t.Fatalf("stepflowtest: record the outcome of step %s of job %s (attempt %d): %v", l.StepID, l.JobID, l.Attempt, err)
	}
}

// outcomeOf renders a handler's error as the worker protocol's fail body.
func outcomeOf(err error) engine.Outcome {
	var f *Failure
	if !errors.As(err, &f) {
		return engine.Outcome{Class: string(domain.ClassRetryable), Message: err.Error()}
	}
	o := engine.Outcome{Class: f.Class, Message: f.Message, RetryAfterSeconds: int((f.RetryAfter + time.Second - 1) / time.Second)}
	if f.Class == string(domain.ClassNeedsUser) {
		o.Prompt = f.Message
	}
	return o
}
