package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// deadlineMargin is kept back from the function's deadline to record the
// outcome after an action that ran to its timeout.
const deadlineMargin = 5 * time.Second

// ExecuteResult says what became of one ready-queue message.
type ExecuteResult string

const (
	Executed ExecuteResult = "executed" // ran an attempt and recorded its outcome
	Stale    ExecuteResult = "stale"    // nothing to do: a duplicate, or the job moved on
	Deferred ExecuteResult = "deferred" // not due yet; sent again with the rest of its delay
	// Held: another executor holds a live lease on the step (a duplicate
	// delivery, or the redelivery of a crashed run whose lease began after
	// the message's visibility did). The message is hidden until the lease
	// runs out and must not be deleted: if the holder died, it comes back
	// and the step is reclaimed.
	Held ExecuteResult = "held"
	// Waiting: the step needs a resource whose slots are all held; it is in
	// line, and a freed slot sends its message again.
	Waiting ExecuteResult = "waiting"
)

// Execute handles one ready-queue message: it takes the step's lease
// (takeLease: reclaiming an expired one), runs the built-in action, and
// records the outcome under the lease (finish), which dispatches what
// comes next. An error means the message must come back (a batch item
// failure).
func (e *Engine) Execute(ctx context.Context, d Delivery) (ExecuteResult, error) {
	t, err := e.takeLease(ctx, d, readyLane, nil)
	if err != nil {
		return "", err
	}
	switch t.outcome {
	case held:
		if d.Token != "" {
			if qerr := e.cfg.Queue.Extend(ctx, d.Token, t.hideFor); qerr != nil {
				e.cfg.Log.WarnContext(ctx, "held message not hidden; it comes back at its visibility timeout", "job", d.Message.Job, "err", qerr)
			}
		}
		return Held, nil
	case notYet:
		// Early (a backoff, a run_at or a timer SQS capped): sent again for
		// the rest, through the timer service.
		e.dispatch(ctx, t.job, []domain.Dispatch{{Step: mustStep(t.job, d.Message.Step), Delay: t.until.Sub(e.now())}})
		return Deferred, nil
	case stale, unreadable:
		return Stale, nil
	case waiting:
		return Waiting, nil // in line for a slot: a freed one sends it again
	case fired, ended:
		return Executed, nil
	}
	s, _, _ := t.job.Step(d.Message.Step)
	o := e.run(ctx, ActionCall{Spec: s.Spec, Input: t.input.inline, IdempotencyKey: t.job.IdempotencyToken(s), Tenant: t.job.Tenant})
	o.leaseID = t.lease.ID
	_, err = e.finish(ctx, d.Message.Tenant, o, t.job)
	switch {
	case err == nil, domain.CodeOf(err) == domain.CodeTooLarge:
		return Executed, nil // recorded (an outcome too large to keep, as a fatal failure)
	case isStale(err):
		return Stale, nil // cancelled or taken over meanwhile: the outcome is refused
	}
	return "", fmt.Errorf("record outcome of step %s of job %s: %w", d.Message.Step, d.Message.Job, err)
}

// run runs a built-in action until the step's timeout or the invocation's
// deadline less the margin to record, whichever comes first (one context,
// one cancel).
func (e *Engine) run(ctx context.Context, call ActionCall) attemptOutcome {
	deadline := time.Now().Add(time.Duration(call.Spec.TimeoutSeconds) * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-deadlineMargin).Before(deadline) {
		deadline = dl.Add(-deadlineMargin)
	}
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	output, failure := e.cfg.Runner.Run(runCtx, call)
	cancel()
	if failure == nil && len(output) > 0 {
		// A built-in action's output comes from outside (an http answer):
		// poison JSON fails the attempt instead of being stored.
		if err := domain.CheckJSON("output", output); err != nil {
			output, failure = nil, &domain.Failure{Class: domain.ClassFatal, Message: "the action's output was refused: " + err.Error()}
		}
	}
	return attemptOutcome{output: output, failure: failure}
}

// LeaseMargin is what a built-in step's lease adds to its timeout_seconds:
// time to record the outcome after an action that ran to its timeout.
const LeaseMargin = 30 * time.Second

// builtinLease is how long the execute function holds a step: its own time
// bound plus LeaseMargin, at most BuiltinLease (the ready queues' visibility
// timeout). The lease, not the message's visibility, decides when a step
// whose executor died is reclaimed: the sweep does it once the lease runs
// out and sends a new message while the old one is still invisible (it
// meets a finished or re-leased step when it comes back, and is dropped).
func (e *Engine) builtinLease(s *domain.Step) time.Duration {
	d := time.Duration(s.Spec.TimeoutSeconds)*time.Second + LeaseMargin
	if e.cfg.BuiltinLease > 0 {
		d = min(d, e.cfg.BuiltinLease)
	}
	return d
}

func mustStep(j *domain.Job, id string) *domain.Step {
	s, _, _ := j.Step(id)
	return s
}
