package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Step Functions executions as steps (domain.ActionStepFunctions), on the
// child jobs' lifecycle (child.go): the write that leases the step names
// the execution, which is started after it (relate); the execute function
// then waits a moment for it (most state machines brought as steps end
// within seconds), and after that the sweep looks at it, each look twice
// as late (domain.ChildRun). Step Functions bills no API request, only
// transitions: a look is the sweep's read and write of the job. Its end
// records the attempt's outcome under the lease, as a worker's would; an
// attempt that ends otherwise (its timeout, a cancel) stops it.

// ExecutionWait bounds how long the execute function waits for an
// execution it started before leaving it to the sweep.
const ExecutionWait = 10 * time.Second

// startExecution starts the execution step c.step of j waits on, and
// reports whether it recorded the attempt's end instead (an execution
// that can never start fails it). One started before (a retried start)
// is left as it is; one not started for a passing cause is left to the
// sweep.
func (e *Engine) startExecution(ctx context.Context, j *domain.Job, c childStart) (ended bool) {
	s := mustStep(j, c.step)
	if s == nil || s.Child == nil || s.Lease == nil {
		return false
	}
	a := s.Spec.Action
	input := a.Input
	if len(input) == 0 {
		input = c.input
	}
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	var err error
	switch {
	case e.cfg.StateMachines == nil:
		err = domain.Invalid("state_machine", "this stack runs no Step Functions executions: it has no Step Functions client (shared/config wires one)")
	case len(input) > domain.MaxExecutionInputBytes:
		err = domain.Invalid("input", "is %d bytes; an execution's input is at most %d", len(input), domain.MaxExecutionInputBytes)
	default:
		err = e.cfg.StateMachines.Start(ctx, a.StateMachine, s.Child.ID, input)
	}
	switch {
	case err == nil:
		return false
	case domain.Transient(err):
		e.cfg.Log.WarnContext(ctx, "execution not started; the sweep starts it", "job", j.ID, "step", s.ID(), "execution", s.Child.ID, "err", err)
		return false
	}
	return e.failStart(ctx, j, s, fmt.Sprintf("execution of %s not started: %v", a.StateMachine, err))
}

// awaitExecution waits, within ExecutionWait and the invocation's time,
// for the execution the step it leased (t) started, and records its end
// if it came: a look each 100 ms at first, each twice as late after.
func (e *Engine) awaitExecution(ctx context.Context, t taken, stepID string) {
	s := mustStep(t.job, stepID)
	if s == nil || s.Child == nil || e.cfg.StateMachines == nil {
		return
	}
	wait := cmp.Or(e.cfg.ExecutionWait, ExecutionWait)
	if wait < 0 {
		return
	}
	until := time.Now().Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-deadlineMargin).Before(until) {
		until = dl.Add(-deadlineMargin)
	}
	for pause := 100 * time.Millisecond; time.Now().Add(pause).Before(until); pause = min(2*pause, 2*time.Second) {
		if !Sleep(ctx, pause) {
			return
		}
		x, err := e.cfg.StateMachines.Describe(ctx, s.Spec.Action.StateMachine, s.Child.ID)
		if err != nil || !x.Ended() {
			continue // the sweep looks again
		}
		e.recordExecution(ctx, t.job.Tenant, s.Lease.ID, s.Child.ID, x)
		return
	}
}

// sweepExecution is the sweep's look at step i's execution: one that
// never started is started; one that ended has its end recorded (ended);
// looked says the step waits on, to be looked at later.
func (e *Engine) sweepExecution(ctx context.Context, j *domain.Job, i int) (looked, ended bool) {
	s := j.Steps[i]
	if e.cfg.StateMachines == nil {
		return false, e.startExecution(ctx, j, childStart{step: s.ID()}) // fails it, saying why
	}
	x, err := e.cfg.StateMachines.Describe(ctx, s.Spec.Action.StateMachine, s.Child.ID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return e.restart(ctx, j, i, e.startExecution)
	case err != nil:
		e.cfg.Log.WarnContext(ctx, "an execution was not described; the sweep tries again", "job", j.ID, "execution", s.Child.ID, "err", err)
		return false, false
	case x.Ended():
		e.recordExecution(ctx, j.Tenant, s.Lease.ID, s.Child.ID, x)
		return false, true
	}
	return true, false
}

// recordExecution records an ended execution as the outcome of the
// attempt that started it: its output, or its error and cause.
func (e *Engine) recordExecution(ctx context.Context, tenant, leaseID, name string, x Execution) {
	o := attemptOutcome{leaseID: leaseID, child: name, usage: domain.Usage{SFNTransitions: float64(x.Transitions)}}
	switch x.Status {
	case "SUCCEEDED":
		o.output = x.Output
		if len(o.output) == 0 {
			o.output = json.RawMessage(`null`)
		}
		if err := domain.CheckJSON("output", o.output); err != nil {
			o.output, o.failure = nil, &domain.Failure{Class: domain.ClassFatal, Message: "execution " + name + " succeeded, but its output was refused: " + err.Error()}
		}
	case "TIMED_OUT":
		o.failure = &domain.Failure{Class: domain.ClassTimeout, Message: "execution " + name + " timed out"}
	case "ABORTED":
		o.failure = &domain.Failure{Class: domain.ClassFatal, Message: "execution " + name + " was aborted"}
	default: // FAILED, PENDING_REDRIVE
		msg := "execution " + name + " failed"
		if x.Error != "" {
			msg += ": " + x.Error
		}
		if x.Cause != "" {
			msg += ": " + x.Cause
		}
		o.failure = &domain.Failure{Class: domain.ClassFatal, Message: domain.Truncate(msg, domain.MaxErrorMessageBytes)}
	}
	if _, err := e.finish(ctx, tenant, o, nil, nil); err != nil && !isStale(err) {
		e.cfg.Log.WarnContext(ctx, "an execution's end was not recorded; the sweep looks again", "execution", name, "err", err)
	}
}

// stopExecution stops an orphaned execution, and reports whether it has
// ended (or never started).
func (e *Engine) stopExecution(ctx context.Context, stateMachine, name string) bool {
	if e.cfg.StateMachines == nil {
		return true // none was ever started here
	}
	if err := e.cfg.StateMachines.Stop(ctx, stateMachine, name, "its stepflow attempt ended (cancelled or timed out)"); err != nil {
		e.cfg.Log.WarnContext(ctx, "an orphaned execution was not stopped; the sweep tries again", "execution", name, "err", err)
		return false
	}
	return true
}
