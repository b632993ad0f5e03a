package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Claim limits.
const (
	MaxClaim     = 10               // SQS hands out at most ten messages a receive
	MaxClaimWait = 20 * time.Second // SQS's longest long-poll
)

// ClaimRequest is POST /v1/claim.
type ClaimRequest struct {
	Queue       string `json:"queue"`
	Max         int    `json:"max"`
	WaitSeconds int    `json:"wait_seconds"`
	Worker      string `json:"worker"`
}

// Validate checks a claim and fills its defaults.
func (r *ClaimRequest) Validate() error {
	if r.Queue == "" {
		r.Queue = domain.DefaultQueue
	}
	if r.Max == 0 {
		r.Max = 1
	}
	switch {
	case r.Max < 1 || r.Max > MaxClaim:
		return domain.Invalid("max", "must be between 1 and %d", MaxClaim)
	case r.WaitSeconds < 0 || r.WaitSeconds > int(MaxClaimWait/time.Second):
		return domain.Invalid("wait_seconds", "must be between 0 and %d", int(MaxClaimWait/time.Second))
	case len(r.Worker) > 128:
		return domain.Invalid("worker", "is longer than 128 characters")
	}
	if !domain.ValidName(r.Queue) {
		return domain.Invalid("queue", "must be 1 to 40 letters, digits, '-' or '_'")
	}
	return nil
}

// ClaimedLease is one lease handed to a worker.
type ClaimedLease struct {
	LeaseID        string          `json:"lease_id"`
	JobID          string          `json:"job_id"`
	StepID         string          `json:"step_id"`
	Attempt        int             `json:"attempt"`
	MaxAttempts    int             `json:"max_attempts"`
	Input          json.RawMessage `json:"input"`
	ExpiresAt      time.Time       `json:"expires_at"`
	LeaseSeconds   int             `json:"lease_seconds"`
	IdempotencyKey string          `json:"idempotency_key"`
	// Deadline is when the attempt has run for the step's timeout_seconds:
	// a heartbeat after it hears 409 and the attempt is timed out.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Resource is the resource whose slot the attempt holds.
	Resource *ClaimedResource `json:"resource,omitempty"`
	// A large input is not inline (input is null): InputURL GETs it for the
	// lease's length, and InputRef says its size and SHA-256.
	InputRef *domain.DataRef `json:"input_ref,omitempty"`
	InputURL string          `json:"input_url,omitempty"`
}

// Claim takes up to Max leases from a tenant's worker queue, long-polling
// up to WaitSeconds for the first. Each lease is a conditional write; the
// message then stays hidden for the lease's length, so if the worker dies
// SQS hands it out again when the lease has expired.
func (e *Engine) Claim(ctx context.Context, tenant string, r ClaimRequest) ([]ClaimedLease, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	// The long-poll runs on the wall clock, not the engine's (tests move
	// that one).
	deadline := time.Now().Add(time.Duration(r.WaitSeconds) * time.Second)
	var out []ClaimedLease
	// A claim that would wait first looks without waiting: one that finds
	// work holds no long-poll slot; one that finds none takes a slot (429
	// past the tenant's bound) before it waits.
	looked := r.WaitSeconds == 0
	release := func() {}
	defer func() { release() }()
	hold := func() error {
		if !looked {
			looked = true
			rel, err := e.HoldLongPoll(ctx, tenant, time.Until(deadline))
			if err != nil {
				return err
			}
			release = rel
		}
		return nil
	}
	for {
		wait := time.Duration(0)
		if len(out) == 0 && looked {
			// Whole seconds, rounded up: SQS long-polls in seconds, and a
			// wait rounded down to 0 would poll in a busy loop.
			wait = min((time.Until(deadline) + time.Second - 1).Truncate(time.Second), MaxClaimWait)
			wait = max(wait, 0)
		}
		ds, err := e.take(ctx, tenant, r.Queue, r.Max-len(out), wait)
		for errors.Is(err, ErrNoWorkerQueue) {
			// No job named this queue yet. A claim makes nothing (a
			// mistyped name must not use up one of the tenant's queues), but
			// a worker may start before its first job: look again every
			// NoQueueRecheck, and long-poll the queue once a submit made it.
			step := min(time.Until(deadline), NoQueueRecheck)
			if step <= 0 {
				return out, nil
			}
			if err := hold(); err != nil {
				return out, err
			}
			if !Sleep(ctx, step) {
				return out, nil
			}
			wait = max(min((time.Until(deadline)+time.Second-1).Truncate(time.Second), MaxClaimWait), 0)
			ds, err = e.take(ctx, tenant, r.Queue, r.Max-len(out), wait)
		}
		if err != nil {
			return out, err
		}
		for _, d := range ds {
			if d.Message.Tenant != tenant {
				// Queues are per tenant, so this cannot be our own work: leave
				// it for its owner rather than delete it.
				e.Log.WarnContext(ctx, "claim left a message of another tenant", "queue", r.Queue, "job", d.Message.Job)
				_ = e.Queue.Release(ctx, d.Token)
				continue
			}
			cl, err := e.claimOne(ctx, tenant, r.Worker, d)
			if err != nil {
				e.Log.WarnContext(ctx, "claim skipped a message", "job", d.Message.Job, "step", d.Message.Step, "err", err)
				continue
			}
			if cl != nil {
				out = append(out, *cl)
			}
		}
		if len(ds) == 0 && len(out) == 0 && !looked && time.Until(deadline) > 0 {
			if err := hold(); err != nil {
				return out, err
			}
			continue
		}
		// An empty poll ends the claim: it waited as long as it was asked.
		if len(ds) == 0 || len(out) >= r.Max || ctx.Err() != nil || len(out) > 0 && !time.Now().Before(deadline) {
			return out, nil
		}
	}
}

// NoQueueRecheck is how often a claim on a queue no job has named yet
// looks for it again (one GetQueueUrl each time).
const NoQueueRecheck = 2 * time.Second

// Sleep waits d or until ctx ends, answering false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// claimOne leases the step a worker-queue message names, or settles the
// message: deleted when stale, hidden again until a live lease or a backoff
// runs out.
func (e *Engine) claimOne(ctx context.Context, tenant, worker string, d Delivery) (*ClaimedLease, error) {
	jobID, stepID := d.Message.Job, d.Message.Step
	var lease *domain.Lease
	var hideFor time.Duration
	var fx sideEffects
	var in workerInput
	var cache dataCache
	var unreadable bool // the attempt failed at once: its input can never be had
	var ds []domain.Dispatch
	waiting := false
	n := nonce() // one per change: a slot taken for the lease stays its own
	j, err := e.mutate(ctx, tenant, jobID, func(j *domain.Job, now time.Time) error {
		fx.decided()
		waiting, unreadable = false, false
		s, i, hide, done, err := e.stepToLease(j, stepID, now, &fx)
		if hideFor = hide; done {
			return err
		}
		dur := time.Duration(s.Spec.Action.LeaseSeconds) * time.Second
		res, wait, err := e.slotFor(ctx, j, s, i, n, dur, now, &fx)
		if err != nil {
			return err
		}
		if wait != nil {
			waiting = true
			return j.WaitForResource(stepID, wait, now)
		}
		lease, err = leaseOnSlot(j, stepID, domain.LeaseRequest{
			Worker: worker, ViaWorker: true, Nonce: n, Duration: dur, Token: d.Token, Resource: res,
		}, now, &fx)
		if err != nil {
			return err
		}
		// In the same change as the lease: a fetch that fails writes
		// nothing, and the message comes back.
		in, err = e.workerInput(ctx, &cache, j, i, lease.Attempt, dur)
		if de := (*dataError)(nil); errors.As(err, &de) {
			unreadable = true
			ds, err = failUnreadableInput(j, stepID, lease.ID, de, now)
			if res != "" {
				fx.release = append(fx.release, slot{res, lease.ID}) // the attempt ended
			}
		}
		return err
	})
	if err != nil || lease == nil {
		fx.dropAcquired(ctx, e, tenant)
	}
	fx.settle(ctx, e, tenant, j, err)
	var notYet *domain.NotYetError
	switch {
	case errors.Is(err, errLiveLease):
		e.passWake(ctx, tenant, d.Message.Wake)
		return nil, e.Queue.Extend(ctx, d.Token, hideFor)
	case errors.As(err, &notYet):
		return nil, e.Queue.Extend(ctx, d.Token, notYet.Until.Sub(e.now()))
	case isStale(err):
		e.passWake(ctx, tenant, d.Message.Wake)
		return nil, e.Queue.Ack(ctx, d.Token)
	case errors.Is(err, domain.ErrUnreadable):
		e.quarantine(ctx, tenant, jobID, err)
		return nil, e.Queue.Ack(ctx, d.Token)
	case err != nil:
		return nil, err
	case waiting:
		return nil, e.Queue.Ack(ctx, d.Token) // in line for a slot: a freed one sends it again
	case lease == nil:
		e.passWake(ctx, tenant, d.Message.Wake)
		return nil, e.Queue.Ack(ctx, d.Token) // the reclaim spent the last attempt
	case unreadable:
		e.dispatch(ctx, j, ds)
		return nil, e.Queue.Ack(ctx, d.Token)
	}
	s, _, _ := j.Step(stepID)
	if err := e.Queue.Extend(ctx, d.Token, lease.ExpiresAt.Sub(e.now())); err != nil {
		// The lease is written; if the message shows up early, the next
		// claimer finds the lease live and hides it again.
		e.Log.WarnContext(ctx, "lease visibility not set", "lease", lease.ID, "err", err)
	}
	cl := &ClaimedLease{
		LeaseID: lease.ID, JobID: j.ID, StepID: stepID, Attempt: lease.Attempt, MaxAttempts: s.Spec.Retry.MaxAttempts,
		Input: in.inline, ExpiresAt: lease.ExpiresAt, LeaseSeconds: s.Spec.Action.LeaseSeconds, IdempotencyKey: j.IdempotencyToken(s),
		InputRef: in.ref, InputURL: in.url, Deadline: lease.Deadline,
	}
	if r := fx.acquiredOn; r != nil {
		cl.Resource = &ClaimedResource{ID: r.ID, Capabilities: r.Capabilities, Labels: r.Labels}
	}
	return cl, nil
}

// ClaimedResource is the resource a claimed lease holds a slot of.
type ClaimedResource struct {
	ID           string            `json:"id"`
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// leaseTarget resolves a lease id to its job and step, within the tenant.
func leaseTarget(j *domain.Job, ref domain.LeaseRef) (*domain.Step, error) {
	if ref.StepIndex >= len(j.Steps) {
		return nil, fmt.Errorf("lease %s: %w", ref, domain.ErrNotFound)
	}
	return j.Steps[ref.StepIndex], nil
}

// HeartbeatResult answers POST /v1/leases/{lease}/heartbeat.
type HeartbeatResult struct {
	LeaseID         string     `json:"lease_id"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"` // absent once a cancel ended the lease
	CancelRequested bool       `json:"cancel_requested"`
}

// Heartbeat extends a worker's lease by extend (the step's lease_seconds
// when zero), in DynamoDB and in the message's visibility. A lease whose job
// was cancelled answers cancel_requested and is not extended; a lease
// taken over or expired answers ErrLeaseLost.
func (e *Engine) Heartbeat(ctx context.Context, tenant, leaseID string, extend time.Duration) (HeartbeatResult, error) {
	ref, err := domain.ParseLeaseID(leaseID)
	if err == nil {
		err = checkID(ref.JobID)
	}
	if err != nil {
		return HeartbeatResult{}, err
	}
	var lease, ended *domain.Lease
	var ds []domain.Dispatch
	var stepID string
	rng := e.jitterRNG()
	res := HeartbeatResult{LeaseID: leaseID}
	j, err := e.mutate(ctx, tenant, ref.JobID, func(j *domain.Job, now time.Time) error {
		ended = nil
		s, err := leaseTarget(j, ref)
		if err != nil {
			return err
		}
		stepID = s.ID()
		if s.CancelledUnder(leaseID, now) {
			res.CancelRequested = true
			return errNoChange
		}
		if j.PastDeadline(s.ID(), leaseID, now) {
			// The attempt ran for its timeout_seconds: it ends TIMED_OUT
			// now, and its holder hears that it lost the lease.
			ended = s.Lease
			ds, err = j.TimeOut(s.ID(), leaseID, now, rng)
			return err
		}
		d := extend
		if d <= 0 {
			d = time.Duration(s.Spec.Action.LeaseSeconds) * time.Second
		}
		if lease, err = j.Heartbeat(s.ID(), leaseID, d, now); err != nil {
			return err
		}
		// The slot is extended first: a lease never outlives its slot, or
		// another attempt could take the slot while this one still runs.
		// (A slot that outlives its lease only holds longer.)
		if lease.Resource != "" {
			if err := e.Resources.ExtendHolder(ctx, tenant, lease.Resource, lease.ID, lease.ExpiresAt); err != nil {
				return fmt.Errorf("extend the slot of resource %s: %w", lease.Resource, err)
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("heartbeat lease %s: %w", leaseID, err)
	}
	if res.CancelRequested {
		return res, nil
	}
	if ended != nil {
		e.endLease(ctx, tenant, j, stepID, ended, ds)
		s, _, _ := j.Step(stepID)
		return res, fmt.Errorf("heartbeat lease %s: the attempt ran past timeout_seconds (%d) and was timed out: %w", leaseID, s.Spec.TimeoutSeconds, domain.ErrLeaseLost)
	}
	res.ExpiresAt = &lease.ExpiresAt
	if lease.Token != "" {
		if err := e.Queue.Extend(ctx, lease.Token, lease.ExpiresAt.Sub(e.now())); err != nil {
			e.Log.WarnContext(ctx, "heartbeat could not extend the message's visibility", "lease", leaseID, "err", err)
		}
	}
	return res, nil
}

// Outcome is POST /v1/leases/{lease}/complete or /fail.
type Outcome struct {
	Output            json.RawMessage `json:"output,omitempty"`
	Class             string          `json:"class,omitempty"`
	Message           string          `json:"message,omitempty"`
	RetryAfterSeconds int             `json:"retry_after_seconds,omitempty"`
	// Prompt is what a needs_user failure asks of a person (shown on the
	// step until someone resumes it).
	Prompt string `json:"prompt,omitempty"`
	// Steps are what a replan failure puts in the step's place.
	Steps []domain.StepSpec `json:"steps,omitempty"`
}

// OutcomeResult answers an outcome: where the step and job went.
type OutcomeResult struct {
	JobID     string           `json:"job_id"`
	StepID    string           `json:"step_id"`
	StepState domain.StepState `json:"step_state"`
	JobState  domain.JobState  `json:"job_state"`
}

// Complete records a worker's success under its lease. An output over the
// inline limit goes to the blob store, up to MaxOutputBytes; without one,
// outputs are bound by the job's item.
func (e *Engine) Complete(ctx context.Context, tenant, leaseID string, output json.RawMessage) (OutcomeResult, error) {
	limit := domain.MaxBodyBytes
	if e.Blobs != nil {
		limit = MaxOutputBytes
	}
	if len(output) > limit {
		return OutcomeResult{}, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("output is %d bytes; the limit is %d", len(output), limit)}
	}
	return e.finishLease(ctx, tenant, leaseID, output, nil)
}

// Fail records a worker's failure under its lease; its class decides the
// step's fate.
func (e *Engine) Fail(ctx context.Context, tenant, leaseID string, o Outcome) (OutcomeResult, error) {
	class, err := domain.ParseFailureClass("class", o.Class)
	if err != nil {
		return OutcomeResult{}, err
	}
	if o.RetryAfterSeconds < 0 || o.RetryAfterSeconds > 7*24*3600 {
		return OutcomeResult{}, domain.Invalid("retry_after_seconds", "must be between 0 and %d", 7*24*3600)
	}
	if o.Prompt != "" && class != domain.ClassNeedsUser {
		return OutcomeResult{}, domain.Invalid("prompt", "applies to class needs_user only, not %s", class)
	}
	if o.Steps != nil && class != domain.ClassReplan {
		return OutcomeResult{}, domain.Invalid("steps", "applies to class replan only, not %s", class)
	}
	msg := o.Message
	if msg == "" {
		msg = cmp.Or(o.Prompt, "worker reported "+string(class))
	}
	f := &domain.Failure{Class: class, Message: msg, Prompt: o.Prompt, Steps: o.Steps, RetryAfter: time.Duration(o.RetryAfterSeconds) * time.Second}
	return e.finishLease(ctx, tenant, leaseID, nil, f)
}

func (e *Engine) finishLease(ctx context.Context, tenant, leaseID string, output json.RawMessage, failure *domain.Failure) (OutcomeResult, error) {
	ref, err := domain.ParseLeaseID(leaseID)
	if err == nil {
		err = checkID(ref.JobID)
	}
	if err != nil {
		return OutcomeResult{}, err
	}
	var stepID string
	var ended *domain.Lease
	var ds []domain.Dispatch
	var cache dataCache
	rng := e.jitterRNG()
	j, err := e.mutate(ctx, tenant, ref.JobID, func(j *domain.Job, now time.Time) error {
		ended = nil
		s, err := leaseTarget(j, ref)
		if err != nil {
			return err
		}
		stepID = s.ID()
		if s.AlreadyRecorded(leaseID, failure == nil, now) {
			return errNoChange // a retry whose first answer was lost: answer it again
		}
		ended = s.Lease
		f := failure
		if f != nil && f.Class == domain.ClassResource && s.Lease != nil && s.Lease.Resource != "" && s.Lease.ID == leaseID {
			none, err := e.noOtherResource(ctx, tenant, s, s.Lease.Resource)
			if err != nil {
				return err
			}
			withRes := *f
			withRes.NoOtherResource = none
			f = &withRes
		}
		if f != nil && len(f.Steps) > 0 {
			replan := *f
			if replan.Steps, err = e.prepareReplan(ctx, tenant, j, stepID, f.Steps); err != nil {
				return err
			}
			f = &replan
		}
		out, dataRef := output, (*domain.DataRef)(nil)
		if f == nil {
			if err := j.CheckLease(stepID, leaseID, now); err != nil {
				return err // nothing stored for an outcome that is refused
			}
			if out, dataRef, err = e.keepOutput(ctx, &cache, j, stepID, ref.Attempt, output); err != nil {
				return err
			}
		}
		ds, err = applyOutcome(j, stepID, leaseID, out, dataRef, f, now, rng)
		return err
	})
	if f := unstorable(err, failure); f != nil {
		// The attempt ends now, as a fatal failure; the worker still hears
		// that its outcome was too large.
		if _, ferr := e.finishLease(ctx, tenant, leaseID, nil, f); ferr != nil {
			return OutcomeResult{}, fmt.Errorf("lease %s: %w (and recording the failure: %v)", leaseID, err, ferr)
		}
		return OutcomeResult{}, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("lease %s: %v; the attempt was failed as fatal", leaseID, err)}
	}
	if err != nil {
		return OutcomeResult{}, fmt.Errorf("lease %s: %w", leaseID, err)
	}
	if ended != nil {
		e.endLease(ctx, tenant, j, stepID, ended, ds)
	}
	s, _, _ := j.Step(stepID)
	return OutcomeResult{JobID: j.ID, StepID: stepID, StepState: s.State, JobState: j.State}, nil
}

// endLease acts on a worker's lease that a saved change ended: its
// message is deleted, its slot given back, and what the change calls for
// sent.
func (e *Engine) endLease(ctx context.Context, tenant string, j *domain.Job, stepID string, l *domain.Lease, ds []domain.Dispatch) {
	if l.Token != "" {
		if err := e.Queue.Ack(ctx, l.Token); err != nil {
			e.Log.WarnContext(ctx, "finished lease's message not deleted; it is dropped when next received", "lease", l.ID, "err", err)
		}
	}
	e.releaseSlot(ctx, tenant, l.Resource, l.ID)
	e.dispatch(ctx, j, ds)
}

// prepareReplan validates the steps a worker's replan brings against the
// job they would join (a copy, with its defaults filled) and makes their
// worker queues: a bad replan answers 400 naming the field with nothing
// written.
func (e *Engine) prepareReplan(ctx context.Context, tenant string, j *domain.Job, stepID string, steps []domain.StepSpec) ([]domain.StepSpec, error) {
	steps = slices.Clone(steps)
	if err := domain.ValidateSteps(steps, "steps", j.Queue); err != nil {
		return nil, err
	}
	if err := j.CheckReplan(stepID, steps, "steps"); err != nil {
		return nil, err
	}
	if err := e.checkTargets(steps, "steps"); err != nil {
		return nil, err
	}
	return steps, e.ensureWorkerQueues(ctx, tenant, steps, "steps")
}
