package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
)

// Execute handles one ready-queue message: it takes the step's lease with a
// conditional write (reclaiming an expired one), runs the built-in action,
// records the outcome under the lease and dispatches what comes next. An
// error means the message must come back (a batch item failure).
func (e *Engine) Execute(ctx context.Context, d Delivery) (ExecuteResult, error) {
	m := d.Message
	var lease *domain.Lease
	var call ActionCall
	var hideFor time.Duration
	var fired []domain.Dispatch // what a timer's firing, or an attempt failed at once, calls for
	timer := false
	var cache dataCache
	var unreadable bool // the attempt failed at once: its input can never be had
	j, err := e.mutate(ctx, m.Tenant, m.Job, func(j *domain.Job, now time.Time) error {
		unreadable = false
		if s, _, err := j.Step(m.Step); err == nil && !domain.Executed(s.Spec.Action.Type) {
			// A sleep, a wait or a gate: its message is a timer, in the same
			// read and write as any other message.
			timer = true
			fired, err = j.Fire(m.Step, now)
			return err
		}
		s, i, hide, done, err := stepToLease(j, m.Step, now)
		if hideFor = hide; done {
			return err
		}
		lease, err = j.Lease(m.Step, domain.LeaseRequest{Nonce: nonce(), Duration: e.builtinLease(s)}, now)
		if err != nil {
			return err
		}
		// Built-in actions run on their input whole: what it references is
		// fetched in the same change as the lease, so a fetch that fails
		// writes nothing and the message comes back.
		in, err := e.compose(ctx, &cache, j.InputData(i))
		if de := (*dataError)(nil); errors.As(err, &de) {
			unreadable = true
			fired, err = failUnreadableInput(j, m.Step, lease.ID, de, now)
			return err
		}
		if err != nil {
			return err
		}
		call = ActionCall{Spec: s.Spec, Input: in, IdempotencyKey: j.IdempotencyToken(s)}
		return nil
	})
	var notYet *domain.NotYetError
	switch {
	case errors.Is(err, errLiveLease):
		if d.Token != "" {
			if qerr := e.Queue.Extend(ctx, d.Token, hideFor); qerr != nil {
				e.Log.Warn("held message not hidden; it comes back at its visibility timeout", "job", m.Job, "err", qerr)
			}
		}
		return Held, nil
	case errors.As(err, &notYet):
		// Early (a backoff, a run_at or a timer SQS capped): sent again for
		// the rest, through the timer service.
		e.dispatch(ctx, j, []domain.Dispatch{{Step: mustStep(j, m.Step), Delay: notYet.Until.Sub(e.now())}})
		return Deferred, nil
	case isStale(err):
		return Stale, nil
	case errors.Is(err, domain.ErrUnreadable):
		e.quarantine(ctx, m.Tenant, m.Job, err)
		return Stale, nil // redelivering it cannot help
	case err != nil && timer:
		return "", fmt.Errorf("timer for step %s of job %s: %w", m.Step, m.Job, err)
	case err != nil:
		return "", fmt.Errorf("lease step %s of job %s: %w", m.Step, m.Job, err)
	case timer:
		e.dispatch(ctx, j, fired)
		return Executed, nil
	case unreadable:
		e.dispatch(ctx, j, fired)
		return Executed, nil
	case lease == nil:
		return Stale, nil // the reclaim spent the last attempt: the job failed
	}

	runCtx, cancel := context.WithTimeout(ctx, time.Duration(call.Spec.TimeoutSeconds)*time.Second)
	if dl, ok := ctx.Deadline(); ok {
		runCtx, cancel = context.WithDeadline(runCtx, dl.Add(-deadlineMargin))
	}
	output, failure := e.Runner.Run(runCtx, call)
	cancel()
	if err := e.record(ctx, m.Tenant, m.Job, j, m.Step, lease.ID, output, failure); err != nil {
		if isStale(err) {
			return Stale, nil // cancelled or taken over meanwhile: the outcome is refused
		}
		return "", err
	}
	return Executed, nil
}

// applyOutcome records an attempt's outcome under its lease: a success
// with its output (inline, or ref), or the failure.
func applyOutcome(j *domain.Job, stepID, leaseID string, output json.RawMessage, ref *domain.DataRef, failure *domain.Failure, now time.Time, rng *mrand.Rand) ([]domain.Dispatch, error) {
	switch {
	case failure == nil && ref != nil:
		return j.CompleteRef(stepID, leaseID, *ref, now)
	case failure == nil:
		return j.Complete(stepID, leaseID, output, now)
	}
	return j.Fail(stepID, leaseID, *failure, now, rng)
}

// unstorable answers the fatal failure to record instead of an outcome the
// job's item cannot hold, so the attempt ends now rather than the job
// sticking until its lease runs out; nil when err is no such refusal, or
// when the outcome refused was already that fatal failure.
func unstorable(err error, failure *domain.Failure) *domain.Failure {
	if domain.CodeOf(err) != domain.CodeTooLarge || failure != nil && failure.Unstorable {
		return nil
	}
	return &domain.Failure{Class: domain.ClassFatal, Unstorable: true,
		Message: domain.Truncate("the attempt's outcome could not be stored: "+err.Error(), 1024)}
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
	if e.BuiltinLease > 0 {
		d = min(d, e.BuiltinLease)
	}
	return d
}

func mustStep(j *domain.Job, id string) *domain.Step {
	s, _, _ := j.Step(id)
	return s
}

var errLiveLease = errors.New("step holds a live lease")

// stepToLease finds the step a delivery names and settles a lease it still
// holds (reclaimIfExpired); done means there is nothing to lease now, with
// err saying why (nil when a reclaim spent the last attempt). hideFor is
// how long a live holder's lease still runs.
func stepToLease(j *domain.Job, stepID string, now time.Time) (s *domain.Step, i int, hideFor time.Duration, done bool, err error) {
	if s, i, err = j.Step(stepID); err != nil {
		return nil, 0, 0, true, err
	}
	if s.Lease != nil {
		hideFor = s.Lease.ExpiresAt.Sub(now) + time.Second
	}
	held, err := reclaimIfExpired(j, s, now)
	return s, i, hideFor, held || err != nil, err
}

// reclaimIfExpired settles a step still marked leased before a new lease is
// taken: a live lease answers errLiveLease (a duplicate delivery: the
// holder's own message covers it); an expired one is reclaimed, and when
// that spent the last attempt the change is saved as it is (held true, no
// error) with nothing left to lease.
func reclaimIfExpired(j *domain.Job, s *domain.Step, now time.Time) (held bool, err error) {
	if (s.State != domain.StepLeased && s.State != domain.StepRunning) || s.Lease == nil {
		return false, nil
	}
	if now.Before(s.Lease.ExpiresAt) {
		return true, errLiveLease
	}
	if _, err := j.Reclaim(s.ID(), now); err != nil {
		return true, err
	}
	return s.State != domain.StepPending, nil
}

// isStale reports errors that mean a message or outcome has nothing left
// to act on: the job is gone or finished, the step moved on, the lease was
// lost, or another executor holds it.
func isStale(err error) bool {
	var ite *domain.IllegalTransitionError
	return errors.As(err, &ite) || errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrLeaseLost) || errors.Is(err, errLiveLease)
}

// record saves an attempt's outcome under its lease and dispatches the
// next step or the retry.
// leased, the job as this process saved it with the lease, saves a read;
// it is consumed.
func (e *Engine) record(ctx context.Context, tenant, jobID string, leased *domain.Job, stepID, leaseID string, output json.RawMessage, failure *domain.Failure) error {
	if failure == nil && len(output) > 0 {
		// A built-in action's output comes from outside (an http answer):
		// poison JSON fails the attempt instead of being stored.
		if err := domain.CheckJSON("output", output); err != nil {
			output, failure = nil, &domain.Failure{Class: domain.ClassFatal, Message: "the action's output was refused: " + err.Error()}
		}
	}
	var ds []domain.Dispatch
	var cache dataCache
	rng := e.jitterRNG()
	j, err := e.mutateFrom(ctx, tenant, jobID, leased, func(j *domain.Job, now time.Time) error {
		out, ref := output, (*domain.DataRef)(nil)
		if failure == nil {
			lr, err := domain.ParseLeaseID(leaseID)
			if err == nil {
				err = j.CheckLease(stepID, leaseID, now)
			}
			if err != nil {
				return err // nothing stored for an outcome that is refused
			}
			if out, ref, err = e.keepOutput(ctx, &cache, j, stepID, lr.Attempt, output); err != nil {
				return err
			}
		}
		var err error
		ds, err = applyOutcome(j, stepID, leaseID, out, ref, failure, now, rng)
		return err
	})
	if f := unstorable(err, failure); f != nil {
		return e.record(ctx, tenant, jobID, nil, stepID, leaseID, nil, f)
	}
	if err != nil {
		return fmt.Errorf("record outcome of step %s of job %s: %w", stepID, jobID, err)
	}
	e.dispatch(ctx, j, ds)
	return nil
}
