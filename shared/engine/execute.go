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
	// Waiting: the step needs a resource whose slots are all held; it is in
	// line, and a freed slot sends its message again.
	Waiting ExecuteResult = "waiting"
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
	var fx sideEffects
	var cache dataCache
	timer, waiting := false, false
	var unreadable bool // the attempt failed at once: its input can never be had
	n := nonce()        // one per change: a slot taken for the lease stays its own
	j, err := e.mutate(ctx, m.Tenant, m.Job, func(j *domain.Job, now time.Time) error {
		fx.decided()
		timer, waiting, unreadable = false, false, false
		if s, _, err := j.Step(m.Step); err == nil && !domain.Executed(s.Spec.Action.Type) {
			// A sleep, a wait or a gate: its message is a timer, in the same
			// read and write as any other message.
			timer = true
			fired, err = j.Fire(m.Step, now)
			return err
		}
		s, i, hide, done, err := e.stepToLease(j, m.Step, now, &fx)
		if hideFor = hide; done {
			return err
		}
		dur := e.builtinLease(s)
		res, wait, err := e.slotFor(ctx, j, s, i, n, dur, now, &fx)
		if err != nil {
			return err
		}
		if wait != nil {
			waiting = true
			return j.WaitForResource(m.Step, wait, now)
		}
		lease, err = leaseOnSlot(j, m.Step, domain.LeaseRequest{Nonce: n, Duration: dur, Resource: res}, now, &fx)
		if err != nil {
			return err
		}
		// Built-in actions run on their input whole: what it references is
		// fetched in the same change as the lease, so a fetch that fails
		// writes nothing and the message comes back.
		in, err := e.compose(ctx, &cache, j.InputData(i))
		if de := (*dataError)(nil); errors.As(err, &de) {
			unreadable = true
			if res != "" {
				fx.release = append(fx.release, slot{res, lease.ID}) // the attempt ended
			}
			fired, err = failUnreadableInput(j, m.Step, lease.ID, de, now)
			return err
		}
		if err != nil {
			return err
		}
		call = ActionCall{Spec: s.Spec, Input: in, IdempotencyKey: j.IdempotencyToken(s), Tenant: j.Tenant}
		return nil
	})
	if err != nil || lease == nil {
		fx.dropAcquired(ctx, e, m.Tenant)
	}
	fx.settle(ctx, e, m.Tenant, j, err)
	var notYet *domain.NotYetError
	switch {
	case errors.Is(err, errLiveLease):
		if d.Token != "" {
			if qerr := e.Queue.Extend(ctx, d.Token, hideFor); qerr != nil {
				e.Log.WarnContext(ctx, "held message not hidden; it comes back at its visibility timeout", "job", m.Job, "err", qerr)
			}
		}
		e.passWake(ctx, m.Tenant, m.Wake)
		return Held, nil
	case errors.As(err, &notYet):
		// Early (a backoff, a run_at or a timer SQS capped): sent again for
		// the rest, through the timer service.
		e.dispatch(ctx, j, []domain.Dispatch{{Step: mustStep(j, m.Step), Delay: notYet.Until.Sub(e.now())}})
		return Deferred, nil
	case isStale(err):
		e.passWake(ctx, m.Tenant, m.Wake)
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
	case waiting:
		return Waiting, nil // in line for a slot: a freed one sends it again
	case unreadable:
		e.dispatch(ctx, j, fired)
		return Executed, nil
	case lease == nil:
		e.passWake(ctx, m.Tenant, m.Wake)
		return Stale, nil // the reclaim spent the last attempt: the job failed
	}

	// One deadline, the step's timeout or the invocation's less the margin
	// to record, whichever comes first: one context, one cancel.
	runDeadline := time.Now().Add(time.Duration(call.Spec.TimeoutSeconds) * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-deadlineMargin).Before(runDeadline) {
		runDeadline = dl.Add(-deadlineMargin)
	}
	runCtx, cancel := context.WithDeadline(ctx, runDeadline)
	output, failure := e.Runner.Run(runCtx, call)
	cancel()
	if err := e.record(ctx, m.Tenant, m.Job, j, m.Step, lease, output, failure); err != nil {
		if isStale(err) {
			return Stale, nil // cancelled or taken over meanwhile: the outcome is refused
		}
		return "", err
	}
	return Executed, nil
}

// sideEffects gathers what a change decided besides itself, to act on
// once it is saved: messages a reclaim calls for, slots to give back (an
// expired lease's), and the slot taken for a new lease (given back if the
// change is not saved).
type sideEffects struct {
	ds       []domain.Dispatch
	release  []slot
	acquired *slot
	// acquiredOn is the resource of acquired as the take read it: the
	// claim answers its capabilities and labels without reading it again.
	acquiredOn *domain.Resource
	// taken are the slots taken by earlier decisions of this change (lost
	// races), kept when decided again, given back if not.
	taken []slot
}

type slot struct{ resource, key string }

// decided starts a new decision of the change: what an earlier one
// gathered is dropped, except the slots it took.
func (fx *sideEffects) decided() {
	if fx.acquired != nil {
		fx.taken = append(fx.taken, *fx.acquired)
	}
	fx.ds, fx.release, fx.acquired, fx.acquiredOn = fx.ds[:0], fx.release[:0], nil, nil
}

// settle acts on a saved change: it sends the reclaim's messages and
// gives back the slots of expired leases and of earlier decisions.
func (fx *sideEffects) settle(ctx context.Context, e *Engine, tenant string, j *domain.Job, err error) {
	for _, t := range fx.taken {
		if fx.acquired == nil || t != *fx.acquired {
			e.releaseSlot(ctx, tenant, t.resource, t.key)
		}
	}
	fx.taken = nil
	if err != nil {
		return
	}
	e.dispatch(ctx, j, fx.ds)
	for _, r := range fx.release {
		e.releaseSlot(ctx, tenant, r.resource, r.key)
	}
}

// dropAcquired gives back the slot taken for a lease that was not written.
func (fx *sideEffects) dropAcquired(ctx context.Context, e *Engine, tenant string) {
	if fx.acquired != nil {
		e.releaseSlot(ctx, tenant, fx.acquired.resource, fx.acquired.key)
		fx.acquired = nil
	}
}

// slotFor takes a slot for a step that requires a resource, for a lease of
// dur from now, once the step can be leased; a wait when every matching
// resource is full. A step that requires nothing needs no slot.
// The slot's key is the id the lease will have (its nonce chosen by the
// caller, once per change), which leaseOnSlot checks.
func (e *Engine) slotFor(ctx context.Context, j *domain.Job, s *domain.Step, i int, nonce string, dur time.Duration, now time.Time, fx *sideEffects) (string, *domain.ResourceWait, error) {
	if s.Spec.Requires == nil {
		return "", nil, nil
	}
	if err := j.CanLease(s.ID(), now); err != nil {
		return "", nil, err
	}
	sr := newSlotRequest(j, s, i, nonce, now.Add(dur), now)
	r, wait, err := e.takeSlot(ctx, sr)
	if err != nil || r == nil {
		return "", wait, err
	}
	fx.acquired, fx.acquiredOn = &slot{r.ID, sr.key}, r
	return r.ID, nil, nil
}

// leaseOnSlot takes the lease a slot was taken for: its id must be the
// slot's key, or the slot would hold for no lease.
func leaseOnSlot(j *domain.Job, stepID string, req domain.LeaseRequest, now time.Time, fx *sideEffects) (*domain.Lease, error) {
	lease, err := j.Lease(stepID, req, now)
	if err == nil && fx.acquired != nil && lease.ID != fx.acquired.key {
		return nil, fmt.Errorf("lease %s was taken on the slot of %s: %w", lease.ID, fx.acquired.key, errSlotMismatch)
	}
	return lease, err
}

var errSlotMismatch = errors.New("a lease's id differs from its slot's key")

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
// err saying why (nil when a reclaim spent the last attempt, or put the
// step in a backoff). hideFor is how long a live holder's lease still runs.
func (e *Engine) stepToLease(j *domain.Job, stepID string, now time.Time, fx *sideEffects) (s *domain.Step, i int, hideFor time.Duration, done bool, err error) {
	if s, i, err = j.Step(stepID); err != nil {
		return nil, 0, 0, true, err
	}
	if s.Lease != nil {
		hideFor = s.Lease.ExpiresAt.Sub(now) + time.Second
	}
	held, err := reclaimIfExpired(j, s, now, fx)
	return s, i, hideFor, held || err != nil, err
}

// reclaimIfExpired settles a step still marked leased before a new lease is
// taken: a live lease answers errLiveLease (a duplicate delivery: the
// holder's own message covers it); an expired one is reclaimed (its slot
// given back once saved), and when that spent the last attempt, or timed
// the attempt out into a backoff, the change is saved as it is (held true,
// no error) with nothing to lease now.
func reclaimIfExpired(j *domain.Job, s *domain.Step, now time.Time, fx *sideEffects) (held bool, err error) {
	if (s.State != domain.StepLeased && s.State != domain.StepRunning) || s.Lease == nil {
		return false, nil
	}
	if now.Before(s.Lease.ExpiresAt) {
		return true, errLiveLease
	}
	if res := s.Lease.Resource; res != "" {
		fx.release = append(fx.release, slot{res, s.Lease.ID})
	}
	ds, err := j.Reclaim(s.ID(), now)
	if err != nil {
		return true, err
	}
	fx.ds = append(fx.ds, ds...)
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
func (e *Engine) record(ctx context.Context, tenant, jobID string, leased *domain.Job, stepID string, lease *domain.Lease, output json.RawMessage, failure *domain.Failure) error {
	leaseID := lease.ID
	if failure != nil && failure.Class == domain.ClassResource && lease.Resource != "" && leased != nil {
		if s, _, err := leased.Step(stepID); err == nil {
			if none, err := e.noOtherResource(ctx, tenant, s, lease.Resource); err == nil {
				f := *failure
				f.NoOtherResource = none
				failure = &f
			}
		}
	}
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
		return e.record(ctx, tenant, jobID, nil, stepID, lease, nil, f)
	}
	if err != nil {
		return fmt.Errorf("record outcome of step %s of job %s: %w", stepID, jobID, err)
	}
	e.releaseSlot(ctx, tenant, lease.Resource, lease.ID)
	e.dispatch(ctx, j, ds)
	return nil
}
