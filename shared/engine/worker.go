package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Claim limits.
const (
	MaxClaim     = 10               // SQS hands out at most ten messages a receive
	MaxClaimWait = 20 * time.Second // SQS's longest long-poll
)

// ClaimRequest is a worker's claim: up to Max leases from Queue, waiting
// up to WaitSeconds for the first. (Its wire form is wire.ClaimRequest.)
type ClaimRequest struct {
	Queue       string
	Max         int
	WaitSeconds int
	Worker      string // shown on the attempt
}

// Validate checks a claim and fills its defaults. Its errors name the
// fields as the API does.
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
	LeaseID        string
	JobID          string
	StepID         string
	Attempt        int
	MaxAttempts    int
	Input          json.RawMessage
	ExpiresAt      time.Time
	LeaseSeconds   int
	IdempotencyKey string
	// Deadline is when the attempt has run for the step's timeout_seconds:
	// a heartbeat after it hears 409 and the attempt is timed out.
	Deadline *time.Time
	// Resource is the resource whose slot the attempt holds.
	Resource *ClaimedResource
	// A large input is not inline (Input is nil): InputURL GETs it for the
	// lease's length, and InputRef says its size and SHA-256.
	InputRef *domain.DataRef
	InputURL string
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
	// that one). A claim that would wait first looks without waiting: one
	// that finds work holds no long-poll slot; one that finds none takes a
	// slot (429 past the tenant's bound) before it waits.
	c := &claim{e: e, tenant: tenant, r: r, deadline: time.Now().Add(time.Duration(r.WaitSeconds) * time.Second), looked: r.WaitSeconds == 0, releasePoll: func() {}}
	defer func() { c.releasePoll() }()
	for {
		asked := r.Max - len(c.out)
		ds, err := c.take(ctx)
		if err != nil || ds == nil {
			return c.out, err
		}
		c.claimAll(ctx, ds)
		// The request's part was taken by the jobs of its first take;
		// those of a later one take only their receive's.
		ctx = retab(ctx, domain.Usage{}, 0)
		c.settle.make(ctx, e)
		if len(ds) == 0 && len(c.out) == 0 && !c.looked && time.Until(c.deadline) > 0 {
			if err := c.hold(ctx); err != nil {
				return c.out, err
			}
			continue
		}
		// An empty poll ends the claim: it waited as long as it was asked.
		// So does a short one once a lease is in hand: the queue had no
		// more to hand out, and another look would be a receive that finds
		// nothing. At low load a claim thus costs one ReceiveMessage per
		// lane (a worker queue has one unless P0 or P2 work named it), one
		// ChangeMessageVisibilityBatch for its leases and one
		// DeleteMessageBatch if it drops any; one that finds nothing and
		// waits adds the long-poll (each LaneSlice on a queue with lanes).
		if len(ds) == 0 || len(c.out) >= r.Max || ctx.Err() != nil || len(c.out) > 0 && (len(ds) < asked || !time.Now().Before(c.deadline)) {
			return c.out, nil
		}
	}
}

// claim is one POST /v1/claim under way.
type claim struct {
	e           *Engine
	tenant      string
	r           ClaimRequest
	deadline    time.Time
	looked      bool // looked once without waiting, or holds a long-poll slot
	releasePoll func()
	out         []ClaimedLease
	settle      settlements // the queue calls of the deliveries in hand
}

// hold takes a long-poll slot before the claim first waits.
func (c *claim) hold(ctx context.Context) error {
	if c.looked {
		return nil
	}
	c.looked = true
	rel, err := c.e.HoldLongPoll(ctx, c.tenant, time.Until(c.deadline))
	if err == nil {
		c.releasePoll = rel
	}
	return err
}

// wait is how long the next take may long-poll: none before the first
// look or once a lease is in hand; whole seconds, rounded up (SQS
// long-polls in seconds, and a wait rounded down to 0 would poll in a
// busy loop).
func (c *claim) wait() time.Duration {
	if len(c.out) > 0 || !c.looked {
		return 0
	}
	return max(min((time.Until(c.deadline)+time.Second-1).Truncate(time.Second), MaxClaimWait), 0)
}

// take answers the next deliveries, nil (no error) when the claim should
// end with what it has. A queue no job named yet makes nothing (a
// mistyped name must not use up one of the tenant's queues), but a
// worker may start before its first job: it is looked for again every
// NoQueueRecheck, and long-polled once a submit made it.
func (c *claim) take(ctx context.Context) ([]Delivery, error) {
	ds, err := c.e.take(ctx, c.tenant, c.r.Queue, c.r.Max-len(c.out), c.wait())
	for errors.Is(err, ErrNoWorkerQueue) {
		step := min(time.Until(c.deadline), NoQueueRecheck)
		if step <= 0 {
			return nil, nil
		}
		if err := c.hold(ctx); err != nil {
			return nil, err
		}
		if !Sleep(ctx, step) {
			return nil, nil
		}
		ds, err = c.e.take(ctx, c.tenant, c.r.Queue, c.r.Max-len(c.out), c.wait())
	}
	if ds == nil && err == nil {
		ds = []Delivery{}
	}
	return ds, err
}

// claimAll leases what the deliveries name: those of one job together,
// in one write (takeLeases), each alone when that was refused.
func (c *claim) claimAll(ctx context.Context, ds []Delivery) {
	byJob := map[string][]Delivery{}
	var order []string
	for _, d := range ds {
		k := d.Message.Tenant + "/" + d.Message.Job
		if _, seen := byJob[k]; !seen {
			order = append(order, k)
		}
		byJob[k] = append(byJob[k], d)
	}
	for _, k := range order {
		group := byJob[k]
		// Each job takes its part of the request, and of the receive.
		ctx := retab(ctx, domain.Usage{SQSRequests: 1}, float64(len(group))/float64(len(ds)))
		if len(group) > 1 && group[0].Message.Tenant == c.tenant {
			ts, err := c.e.takeLeases(ctx, group, workerLane(c.r.Worker), &c.settle)
			for i, d := range group {
				skipped := func(err error) {
					c.e.cfg.Log.WarnContext(ctx, "claim skipped a message", "job", d.Message.Job, "step", d.Message.Step, "err", err)
				}
				switch {
				case err == nil:
					if cl := c.e.settleTaken(d, ts[i], &c.settle, skipped); cl != nil {
						c.out = append(c.out, *cl)
					}
				case errors.Is(err, domain.ErrContended):
					c.skipContended(d, err, skipped)
				}
			}
			if err == nil || errors.Is(err, domain.ErrContended) {
				continue
			}
		}
		for _, d := range group {
			c.claimOne(ctx, d)
		}
	}
}

// skipContended leaves a delivery whose job other writers held through
// every race (a wide fan-out's branches): its message is shown again in
// about a second, not at the end of the receive's visibility, for the
// next claim to take.
func (c *claim) skipContended(d Delivery, err error, skipped func(error)) {
	skipped(err)
	c.settle.hide(d.Token, c.e.now().Add(contendedRetry+time.Duration(c.e.jitterRNG().Int64N(int64(contendedRetry)))), skipped)
}

// claimOne leases what one delivery names, adding it to the claim's out.
func (c *claim) claimOne(ctx context.Context, d Delivery) {
	e := c.e
	if d.Message.Tenant != c.tenant {
		// Queues are per tenant, so this cannot be our own work: leave it
		// for its owner rather than delete it.
		e.cfg.Log.WarnContext(ctx, "claim left a message of another tenant", "queue", c.r.Queue, "job", d.Message.Job)
		_ = e.cfg.Queue.Release(ctx, d.Token)
		return
	}
	skipped := func(err error) {
		e.cfg.Log.WarnContext(ctx, "claim skipped a message", "job", d.Message.Job, "step", d.Message.Step, "err", err)
	}
	cl, err := e.claimOne(ctx, c.tenant, c.r.Worker, d, &c.settle, skipped)
	if errors.Is(err, domain.ErrContended) {
		c.skipContended(d, err, skipped)
		return
	}
	if err != nil {
		skipped(err)
		return
	}
	if cl != nil {
		c.out = append(c.out, *cl)
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

// claimOne leases the step a worker-queue message names (takeLease), or
// settles the message: deleted when there is nothing to run, hidden again
// until a live lease or a backoff runs out. The message's queue calls,
// the lease's hide among them, are gathered in settle (a settle that
// fails calls skipped, as the claim's own error would be logged).
func (e *Engine) claimOne(ctx context.Context, tenant, worker string, d Delivery, settle *settlements, skipped func(error)) (*ClaimedLease, error) {
	var from *domain.Job
	if d.Receives <= 1 {
		from = carriedJob(d.Message) // a new job's message: its lease needs no read
	}
	t, err := e.takeLease(ctx, d, workerLane(worker), from, settle, nil)
	if err != nil {
		return nil, err
	}
	return e.settleTaken(d, t, settle, skipped), nil
}

// settleTaken settles a claimed delivery's message as its take left it,
// answering the lease the worker gets, if any.
func (e *Engine) settleTaken(d Delivery, t taken, settle *settlements, skipped func(error)) *ClaimedLease {
	switch t.outcome {
	case held:
		settle.hide(d.Token, e.now().Add(t.hideFor), skipped)
		return nil
	case notYet:
		settle.hide(d.Token, t.until, skipped)
		return nil
	case leased:
	default:
		// Nothing to run (stale, set aside, in line for a slot, ended at
		// once): a freed slot or the sweep sends it again if it must run.
		settle.ack(d.Token, skipped)
		return nil
	}
	j, lease := t.job, t.lease
	s, _, _ := j.Step(d.Message.Step)
	cl := &ClaimedLease{
		LeaseID: lease.ID, JobID: j.ID, StepID: s.ID(), Attempt: lease.Attempt, MaxAttempts: s.Spec.Retry.MaxAttempts,
		Input: t.input.inline, ExpiresAt: lease.ExpiresAt, LeaseSeconds: s.Spec.Action.LeaseSeconds, IdempotencyKey: j.IdempotencyToken(s),
		InputRef: t.input.ref, InputURL: t.input.url, Deadline: lease.Deadline,
	}
	if r := t.on; r != nil {
		cl.Resource = &ClaimedResource{ID: r.ID, Capabilities: r.Capabilities, Labels: r.Labels}
	}
	return cl
}

// ClaimedResource is the resource a claimed lease holds a slot of.
type ClaimedResource struct {
	ID           string
	Capabilities []string
	Labels       map[string]string
}

// leaseTarget resolves a lease id to its job and step, within the tenant.
func leaseTarget(j *domain.Job, ref domain.LeaseRef) (*domain.Step, error) {
	if ref.StepIndex >= len(j.Steps) {
		return nil, fmt.Errorf("lease %s: %w", ref, domain.ErrNotFound)
	}
	return j.Steps[ref.StepIndex], nil
}

// HeartbeatResult answers a heartbeat.
type HeartbeatResult struct {
	LeaseID         string
	ExpiresAt       *time.Time // nil once a cancel ended the lease
	CancelRequested bool
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
	h := &heartbeat{ref: ref, leaseID: leaseID, extend: extend, rng: e.jitterRNG()}
	res := HeartbeatResult{LeaseID: leaseID}
	j, err := e.commit(ctx, tenant, ref.JobID, nil, change{prepare: h.prepare(e), decide: h.decide})
	if err != nil {
		return res, fmt.Errorf("heartbeat lease %s: %w", leaseID, err)
	}
	switch {
	case h.cancelled:
		res.CancelRequested = true
	case h.timedOut:
		s, _, _ := j.Step(h.stepID)
		return res, fmt.Errorf("heartbeat lease %s: %w: the attempt ran past timeout_seconds (%d) and was timed out; stop this attempt's work", leaseID, domain.ErrLeaseLost, s.Spec.TimeoutSeconds)
	default:
		res.ExpiresAt = &h.lease.ExpiresAt
	}
	return res, nil
}

// heartbeat is one heartbeat's change.
type heartbeat struct {
	ref       domain.LeaseRef
	leaseID   string
	extend    time.Duration
	rng       *mrand.Rand
	slotUntil time.Time // the lease's slot, extended by prepare

	stepID    string
	cancelled bool          // the job was cancelled: nothing is extended
	timedOut  bool          // the attempt ran past its timeout_seconds and was ended
	lease     *domain.Lease // the lease extended
}

// prepare extends the lease's slot first: a lease never outlives its
// slot, or another attempt could take the slot while this one still runs.
// (A slot that outlives its lease only holds longer.)
func (h *heartbeat) prepare(e *Engine) func(context.Context, *domain.Job, time.Time) error {
	return func(ctx context.Context, j *domain.Job, now time.Time) error {
		s, err := leaseTarget(j, h.ref)
		if err != nil || !h.slotUntil.IsZero() || !h.extends(j, s, now) || s.Lease.Resource == "" {
			return nil // nothing to extend: the decision refuses, or ends the lease
		}
		until := now.Add(heartbeatExtension(s, h.extend))
		if err := e.cfg.Resources.ExtendHolder(ctx, j.Tenant, s.Lease.Resource, h.leaseID, until); err != nil {
			return fmt.Errorf("extend the slot of resource %s: %w", s.Lease.Resource, err)
		}
		h.slotUntil = until
		return nil
	}
}

// extends reports whether the heartbeat extends step s's lease at now.
func (h *heartbeat) extends(j *domain.Job, s *domain.Step, now time.Time) bool {
	return !s.CancelledUnder(h.leaseID, now) && !j.PastDeadline(s.ID(), h.leaseID, now) && j.CheckLease(s.ID(), h.leaseID, now) == nil
}

func (h *heartbeat) decide(j *domain.Job, now time.Time, fx *effects) error {
	h.cancelled, h.timedOut = false, false
	s, err := leaseTarget(j, h.ref)
	if err != nil {
		return err
	}
	h.stepID = s.ID()
	if s.CancelledUnder(h.leaseID, now) {
		h.cancelled = true
		return errNoChange
	}
	if j.PastDeadline(s.ID(), h.leaseID, now) {
		// The attempt ran for its timeout_seconds: it ends TIMED_OUT now,
		// and its holder hears that it lost the lease.
		h.timedOut = true
		fx.endLease(s.Lease)
		fx.dispatch, err = j.TimeOut(s.ID(), h.leaseID, now, h.rng)
		return err
	}
	d := heartbeatExtension(s, h.extend)
	if h.extends(j, s, now) && s.Lease.Resource != "" {
		if h.slotUntil.IsZero() {
			return errUnprepared
		}
		d = min(d, h.slotUntil.Sub(now))
	}
	if h.lease, err = j.Heartbeat(s.ID(), h.leaseID, d, now); err != nil {
		return err
	}
	if h.lease.Token != "" {
		fx.hide = append(fx.hide, hidden{h.lease.Token, h.lease.ExpiresAt})
	}
	return nil
}

// heartbeatExtension is how long a heartbeat extends step s's lease by:
// what it asks, else the step's lease_seconds.
func heartbeatExtension(s *domain.Step, extend time.Duration) time.Duration {
	if extend > 0 {
		return extend
	}
	return time.Duration(s.Spec.Action.LeaseSeconds) * time.Second
}

// Outcome is a worker's failure, as Fail takes it. Fail checks it and
// names its fields as the API does (class, retry_after_seconds, ...).
type Outcome struct {
	Class             string
	Message           string
	RetryAfterSeconds int
	// Prompt is what a needs_user failure asks of a person (shown on the
	// step until someone resumes it).
	Prompt string
	// Steps are what a replan failure puts in the step's place.
	Steps []domain.StepSpec
	// CostUSD is what the attempt reported it spent.
	CostUSD float64
}

// OutcomeResult answers an outcome: where the step and job went.
type OutcomeResult struct {
	JobID     string
	StepID    string
	StepState domain.StepState
	JobState  domain.JobState
}

// Complete records a worker's success under its lease. An output over the
// inline limit goes to the blob store, up to MaxOutputBytes; without one,
// outputs are bound by the job's item.
func (e *Engine) Complete(ctx context.Context, tenant, leaseID string, output json.RawMessage) (OutcomeResult, error) {
	return e.CompleteReporting(ctx, tenant, leaseID, output, 0)
}

// CompleteReporting is Complete of a worker that reports what the
// attempt spent (costUSD, a dollar amount; 0 for nothing).
func (e *Engine) CompleteReporting(ctx context.Context, tenant, leaseID string, output json.RawMessage, costUSD float64) (OutcomeResult, error) {
	o, err := e.success(leaseID, output, costUSD)
	if err != nil {
		return OutcomeResult{}, err
	}
	return e.finish(ctx, tenant, o, nil, nil)
}

// success checks a worker's success before anything is stored.
func (e *Engine) success(leaseID string, output json.RawMessage, costUSD float64) (attemptOutcome, error) {
	limit := domain.MaxBodyBytes
	if e.cfg.Blobs != nil {
		limit = MaxOutputBytes
	}
	if len(output) > limit {
		return attemptOutcome{}, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("output is %d bytes; the limit is %d", len(output), limit)}
	}
	if err := domain.CheckReported("cost.usd", costUSD); err != nil {
		return attemptOutcome{}, err
	}
	return attemptOutcome{leaseID: leaseID, output: output, costUSD: costUSD}, nil
}

// Fail records a worker's failure under its lease; its class decides the
// step's fate.
func (e *Engine) Fail(ctx context.Context, tenant, leaseID string, o Outcome) (OutcomeResult, error) {
	a, err := failureOf(leaseID, o)
	if err != nil {
		return OutcomeResult{}, err
	}
	return e.finish(ctx, tenant, a, nil, nil)
}

// failureOf checks a worker's failure, naming its fields as the API does,
// before anything is stored.
func failureOf(leaseID string, o Outcome) (attemptOutcome, error) {
	class, err := domain.ParseFailureClass("class", o.Class)
	if err != nil {
		return attemptOutcome{}, err
	}
	if o.RetryAfterSeconds < 0 || o.RetryAfterSeconds > 7*24*3600 {
		return attemptOutcome{}, domain.Invalid("retry_after_seconds", "must be between 0 and %d", 7*24*3600)
	}
	if o.Prompt != "" && class != domain.ClassNeedsUser {
		return attemptOutcome{}, domain.Invalid("prompt", "applies to class needs_user only, not %s", class)
	}
	if o.Steps != nil && class != domain.ClassReplan {
		return attemptOutcome{}, domain.Invalid("steps", "applies to class replan only, not %s", class)
	}
	msg := o.Message
	if msg == "" {
		msg = cmp.Or(o.Prompt, "worker reported "+string(class))
	}
	if err := domain.CheckReported("cost.usd", o.CostUSD); err != nil {
		return attemptOutcome{}, err
	}
	f := &domain.Failure{Class: class, Message: msg, Prompt: o.Prompt, Steps: o.Steps, RetryAfter: time.Duration(o.RetryAfterSeconds) * time.Second}
	return attemptOutcome{leaseID: leaseID, failure: f, costUSD: o.CostUSD}, nil
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
	if err := e.checkTargets(steps, "steps", j.Queue); err != nil {
		return nil, err
	}
	return steps, e.ensureWorkerQueues(ctx, tenant, steps, "steps", j.Queue)
}
