package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Every attempt, a built-in step's or a worker's, has one lifecycle: a
// delivered message takes a lease on its step (takeLease), the attempt
// runs on its input, and its outcome is recorded under the lease
// (finish). What differs is the lane the attempt takes: how long its lease
// is, how its input is handed over and how its message is settled.

// A lane is how an attempt reaches what runs it.
type lane struct {
	// worker is who runs it (a worker's name; "" for the execute function).
	worker string
	// viaWorker: a worker claimed it (POST /v1/claim). Its lease is the
	// step's lease_seconds, its message stays with the lease (a heartbeat
	// hides it longer, the outcome deletes it), and a large input is
	// handed over as a presigned URL. Otherwise the execute function runs
	// it in place, on its input whole, for the step's timeout.
	viaWorker bool
}

var readyLane = lane{}

func workerLane(worker string) lane { return lane{worker: worker, viaWorker: true} }

func (l lane) duration(e *Engine, s *domain.Step) time.Duration {
	if t := s.Spec.Action.Type; t == domain.ActionJob || t == domain.ActionStepFunctions {
		return childLease(s)
	}
	if l.viaWorker {
		return time.Duration(s.Spec.Action.LeaseSeconds) * time.Second
	}
	return e.builtinLease(s)
}

// input fetches (and for a worker, stores and presigns) step i's input
// for attempt n under a lease of ttl.
func (l lane) input(ctx context.Context, e *Engine, c *dataCache, j *domain.Job, i, n int, ttl time.Duration) (attemptInput, error) {
	if l.viaWorker {
		return e.workerInput(ctx, c, j, i, n, ttl)
	}
	raw, err := e.compose(ctx, c, j.InputData(i))
	return attemptInput{inline: raw}, err
}

// taken is what a delivery's try for a lease came to.
type taken struct {
	outcome leaseOutcome
	job     *domain.Job
	lease   *domain.Lease // outcome leased
	input   attemptInput  // outcome leased
	// on is the resource whose slot the lease holds, as the take read it.
	on      *domain.Resource
	hideFor time.Duration // outcome held: how long the holder's lease still runs
	until   time.Time     // outcome notYet: when the step is due
}

type leaseOutcome int

const (
	leased     leaseOutcome = iota // the attempt may run
	held                           // another holder's lease is live: the message waits for it
	notYet                         // not due yet (a backoff, run_at, a timer SQS capped)
	stale                          // nothing to do: a duplicate, the job moved on, or a reclaim spent the last attempt
	waiting                        // in line for a resource slot: a freed one sends the message again
	ended                          // the change ended the attempt at once (its input can never be had)
	fired                          // the message was a timer's (a sleep, a wait, a gate), and it fired
	recorded                       // an instant step: leased and its outcome recorded in the one write
	started                        // a job step: leased, and its child job made after the write
	unreadable                     // the job cannot be read; it is set aside
	absent                         // no such job (yet: Submit sends a job's first messages before its write)
)

// leasePrep is what a lease's prepare did, kept across the decisions of
// one change so a lost race repeats no I/O.
type leasePrep struct {
	slotKey string           // the lease id its slot was taken for (the slot's holder key)
	on      *domain.Resource // the resource of that slot, as the take read it
	until   time.Time        // when that slot expires
	wait    *domain.ResourceWait
	taken   []slot // every slot taken

	inputKey string // the lease id its input was made for
	input    attemptInput
	bad      *dataError // the input can never be had
	cache    dataCache

	instant instantRun // an instant step's outcome, run on that input
}

// instantRun is the outcome of an instant step (a domain.PureAction on
// the ready lane: pass, fail), run in prepare on the lease's input, so
// the decision leases the step and records the outcome in one write.
type instantRun struct {
	key     string // the lease id it was run for; "" for none
	output  json.RawMessage
	ref     *domain.DataRef
	failure *domain.Failure
}

// takeLease takes a lease on the step a delivery names, in one change:
// an expired lease it finds is reclaimed first, a slot of a resource the
// step requires is taken for it and its input fetched (prepare), and the
// lease written (decide, commit). An instant step is run in prepare and
// its outcome recorded in the same write (outcome recorded). A slot the
// saved change does not hold is given back. An error means the message
// must come back. from, the job as this process saved it, saves a read;
// settle and chain are the change's (commit.go).
func (e *Engine) takeLease(ctx context.Context, d Delivery, l lane, from *domain.Job, settle *settlements, chain *chain) (taken, error) {
	m := d.Message
	n := nonce() // one per change: a slot taken for the lease stays its own
	var p leasePrep
	var t taken
	var timer bool
	j, err := e.commit(ctx, m.Tenant, m.Job, from, change{
		prepare: func(ctx context.Context, j *domain.Job, now time.Time) error {
			return e.prepareLease(ctx, &p, j, m.Step, n, l, now)
		},
		decide: func(j *domain.Job, now time.Time, fx *effects) error {
			t, timer = taken{}, false
			s, _, err := j.Step(m.Step)
			if err == nil && !domain.Executed(s.Spec.Action.Type) {
				// A sleep, a wait or a gate: its message is a timer, in the
				// same read and write as any other message.
				timer, t.outcome = true, fired
				fx.dispatch, err = j.Fire(m.Step, now)
				return err
			}
			return e.decideLease(j, m.Step, n, l, d.Token, &p, now, fx, &t)
		},
		settle: settle,
		chain:  chain,
	})
	t.job = j
	var keep slot
	if err == nil && t.outcome == leased && t.on != nil {
		keep = slot{t.on.ID, t.lease.ID}
	}
	p.giveBack(ctx, e, m.Tenant, keep)
	var notYetErr *domain.NotYetError
	switch {
	case errors.Is(err, errLiveLease):
		t.outcome = held
	case errors.As(err, &notYetErr):
		t.outcome, t.until = notYet, notYetErr.Until
	case errors.Is(err, domain.ErrNotFound):
		t.outcome = absent
	case isStale(err):
		t.outcome = stale
	case errors.Is(err, domain.ErrUnreadable):
		e.quarantine(ctx, m.Tenant, m.Job, err)
		t.outcome = unreadable
	case err != nil && timer:
		return t, fmt.Errorf("timer for step %s of job %s: %w", m.Step, m.Job, err)
	case err != nil:
		return t, fmt.Errorf("lease step %s of job %s: %w", m.Step, m.Job, err)
	}
	if t.outcome == held || t.outcome == stale || t.outcome == absent {
		e.passWake(ctx, m.Tenant, m.Wake) // this message found nothing to do: the next in line may
	}
	return t, nil
}

// takeLeases takes leases on the steps several deliveries of one job name,
// in one change: a claim that receives many branches of a fan-out leases
// them in one write instead of racing itself and their completions on the
// job once per branch. Each is decided as takeLease decides it. An error
// means nothing was written: errGroupRefused when a delivery's decision
// refused (a live lease, not due, a step not executed here), and the
// caller then takes them one by one, which answers each its own way.
func (e *Engine) takeLeases(ctx context.Context, ds []Delivery, l lane, settle *settlements) ([]taken, error) {
	return e.takeLeasesOn(ctx, ds, l, settle, nil, nil)
}

// takeLeasesOn is takeLeases on from when set (the job as this process
// saved it), with a chain that may keep what the write makes runnable.
func (e *Engine) takeLeasesOn(ctx context.Context, ds []Delivery, l lane, settle *settlements, from *domain.Job, chain *chain) ([]taken, error) {
	m := ds[0].Message
	ns, ps, ts := make([]string, len(ds)), make([]leasePrep, len(ds)), make([]taken, len(ds))
	for i := range ds {
		ns[i] = nonce()
	}
	j, err := e.commit(ctx, m.Tenant, m.Job, from, change{
		prepare: func(ctx context.Context, j *domain.Job, now time.Time) error {
			for i, d := range ds {
				if err := e.prepareLease(ctx, &ps[i], j, d.Message.Step, ns[i], l, now); err != nil {
					return err
				}
			}
			return nil
		},
		decide: func(j *domain.Job, now time.Time, fx *effects) error {
			for i, d := range ds {
				ts[i] = taken{}
				s, _, err := j.Step(d.Message.Step)
				if err != nil || !domain.Executed(s.Spec.Action.Type) {
					return errGroupRefused
				}
				if err := e.decideLease(j, d.Message.Step, ns[i], l, d.Token, &ps[i], now, fx, &ts[i]); err != nil {
					return errGroupRefused
				}
			}
			return nil
		},
		settle: settle,
		chain:  chain,
	})
	for i := range ds {
		var keep slot
		if err == nil && ts[i].outcome == leased && ts[i].on != nil {
			keep = slot{ts[i].on.ID, ts[i].lease.ID}
		}
		ps[i].giveBack(ctx, e, m.Tenant, keep)
		ts[i].job = j
		if err == nil && ts[i].outcome == stale {
			e.passWake(ctx, m.Tenant, ds[i].Message.Wake)
		}
	}
	return ts, err
}

// errGroupRefused ends a decision of takeLeases that one of its deliveries
// refused.
var errGroupRefused = errors.New("a delivery of the group was refused")

// prepareLease does the I/O a lease on step stepID of j needs, when the
// step could be leased now (or once an expired lease is reclaimed): a
// slot of a resource it requires, taken for the lease's id, and its input.
// Done once per lease id: a lost race decided again within a tenth of the
// lease keeps both (a slot is taken again, with the same key, only when
// the step may no longer run on it or much of its time went by).
func (e *Engine) prepareLease(ctx context.Context, p *leasePrep, j *domain.Job, stepID, n string, l lane, now time.Time) error {
	s, i, err := j.Step(stepID)
	if err != nil || !domain.Executed(s.Spec.Action.Type) || !mayLease(j, s, now) {
		return nil
	}
	key := domain.LeaseRef{JobID: j.ID, StepIndex: i, Attempt: s.Attempt + 1, Nonce: n}.String()
	dur := l.duration(e, s)
	if s.Spec.Requires != nil && !p.holds(key, s, dur, now) {
		p.on, p.wait = nil, nil
		sr := newSlotRequest(j, s, i, n, now.Add(dur), now)
		r, wait, err := e.takeSlot(ctx, sr)
		switch {
		case err != nil:
			return err
		case wait != nil:
			p.wait = wait // a later decision looks for a slot again
			return nil
		}
		p.slotKey, p.on, p.until = key, r, sr.expires
		if sl := (slot{r.ID, key}); !slices.Contains(p.taken, sl) {
			p.taken = append(p.taken, sl)
		}
	}
	if p.inputKey != key {
		in, err := l.input(ctx, e, &p.cache, j, i, s.Attempt+1, dur)
		var bad *dataError
		if errors.As(err, &bad) {
			in, err = attemptInput{}, nil // the decision fails the attempt
		}
		if err != nil {
			return err // the message comes back and tries again
		}
		p.inputKey, p.input, p.bad = key, in, bad
	}
	if p.instant.key == key || l.viaWorker || p.bad != nil {
		return nil
	}
	return e.runInstant(ctx, p, j, s, key)
}

// runInstant runs step s when it is instant: its action is pure (it
// needs nothing but its input) and its outcome needs no I/O to record
// beyond storing a large output (a failure that replans, or one of class
// resource, goes the usual way: leased, then finished).
func (e *Engine) runInstant(ctx context.Context, p *leasePrep, j *domain.Job, s *domain.Step, key string) error {
	kind, _ := domain.LookupAction(s.Spec.Action.Type)
	pure, ok := kind.(domain.PureAction)
	if !ok {
		return nil
	}
	out, f := pure.Run(s.Spec.Action, p.input.inline)
	if f != nil && (len(f.Steps) > 0 || f.Class == domain.ClassResource) {
		return nil
	}
	if f == nil {
		f = shapeOutput(s, &out)
	}
	var ref *domain.DataRef
	if f == nil {
		var err error
		if out, ref, err = e.keepOutput(ctx, &p.cache, j, s.ID(), s.Attempt+1, out); err != nil {
			return err
		}
	}
	p.instant = instantRun{key: key, output: out, ref: ref, failure: f}
	return nil
}

// holds reports whether the slot taken earlier serves a lease key for
// step s of dur from now.
func (p *leasePrep) holds(key string, s *domain.Step, dur time.Duration, now time.Time) bool {
	return p.on != nil && p.slotKey == key && !slices.Contains(s.Avoid, p.on.ID) && p.until.Sub(now) >= dur*9/10
}

// mayLease reports whether step s of j could be leased at now: it can
// be, or it holds a lease that has run out (reclaimed first).
func mayLease(j *domain.Job, s *domain.Step, now time.Time) bool {
	if s.Lease != nil && (s.State == domain.StepLeased || s.State == domain.StepRunning) {
		return !now.Before(s.Lease.ExpiresAt)
	}
	return j.CanLease(s.ID(), now) == nil
}

// giveBack gives back every slot prepare took but the one the saved lease
// holds (keep; the zero slot for none).
func (p *leasePrep) giveBack(ctx context.Context, e *Engine, tenant string, keep slot) {
	for _, sl := range p.taken {
		if sl != keep {
			e.releaseSlot(ctx, tenant, sl.resource, sl.key)
		}
	}
	p.taken = nil
}

// errUnprepared: a decision needed I/O its prepare did not do. Not
// reached: prepare and decide see the same job at the same time.
var errUnprepared = errors.New("the lease's slot or input was not prepared")

// decideLease is the decision of takeLease for an executed step: settle
// an expired lease, then lease the step on what prepare took and fetched.
// It reads the engine's settings only.
func (e *Engine) decideLease(j *domain.Job, stepID, n string, l lane, token string, p *leasePrep, now time.Time, fx *effects, t *taken) error {
	s, i, err := j.Step(stepID)
	if err != nil {
		return err
	}
	if s.Lease != nil {
		t.hideFor = s.Lease.ExpiresAt.Sub(now) + time.Second
	}
	if done, err := reclaimIfExpired(j, s, now, fx); done || err != nil {
		t.outcome = stale // the reclaim spent the last attempt, or put the step in a backoff
		return err
	}
	if held, changed, err := j.HoldIfOverBudget(now); err != nil || held {
		// At its budget gate: the step does not start, and its message
		// is dropped; setting the budget sends it again.
		t.outcome = stale
		if err == nil && !changed {
			err = errNoChange
		}
		return err
	}
	if err := j.CanLease(stepID, now); err != nil {
		return err
	}
	key := domain.LeaseRef{JobID: j.ID, StepIndex: i, Attempt: s.Attempt + 1, Nonce: n}.String()
	req := domain.LeaseRequest{Worker: l.worker, ViaWorker: l.viaWorker, Nonce: n, Duration: l.duration(e, s)}
	if s.Spec.Requires != nil {
		if p.wait != nil {
			t.outcome = waiting
			return j.WaitForResource(stepID, p.wait, now)
		}
		if !p.holds(key, s, req.Duration, now) {
			return errUnprepared
		}
		// A lease never outlives its slot: decided again after a lost
		// race, it is shorter by the time the race took.
		req.Resource, req.Duration = p.on.ID, min(req.Duration, p.until.Sub(now))
	}
	if p.inputKey != key {
		return errUnprepared
	}
	if l.viaWorker {
		req.Token = token
	}
	lease, err := j.Lease(stepID, req, now)
	if err != nil {
		return err
	}
	if lease.ID != key {
		return fmt.Errorf("lease %s was taken for %s: %w", lease.ID, key, errUnprepared)
	}
	if p.bad != nil {
		t.outcome = ended // its slot is given back with those not kept
		ds, err := failUnreadableInput(j, stepID, lease.ID, p.bad, now)
		fx.dispatch = append(fx.dispatch, ds...)
		return err
	}
	if s.Child != nil {
		// A job step: the write names its child, made after it; the
		// child's end records the outcome (child.go).
		t.outcome, t.lease = started, lease
		fx.start = append(fx.start, childStart{step: stepID, input: p.input.inline})
		return nil
	}
	if p.instant.key == key {
		// Leased and recorded at once: the slot the lease took goes back
		// with those not kept. Several leases share the change (takeLeases):
		// what each releases adds to what the others did.
		t.outcome, t.lease = recorded, lease
		ds, err := applyOutcome(j, stepID, lease.ID, p.instant.output, p.instant.ref, p.instant.failure, now, e.jitterRNG())
		fx.dispatch = append(fx.dispatch, ds...)
		return err
	}
	if l.viaWorker {
		fx.hide = append(fx.hide, hidden{token, lease.ExpiresAt}) // the message stays with the lease
	}
	t.outcome, t.lease, t.input = leased, lease, p.input
	if req.Resource != "" {
		t.on = p.on
	}
	return nil
}

// reclaimIfExpired settles a step still marked leased before a new lease
// is taken: a live lease answers errLiveLease (a duplicate delivery: the
// holder's own message covers it); an expired one is reclaimed (its slot
// given back once saved), and when that spent the last attempt, or timed
// the attempt out into a backoff, the change is saved as it is (done, no
// error) with nothing to lease now.
func reclaimIfExpired(j *domain.Job, s *domain.Step, now time.Time, fx *effects) (done bool, err error) {
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
	fx.dispatch = append(fx.dispatch, ds...)
	return s.State != domain.StepPending, nil
}

var errLiveLease = errors.New("step holds a live lease")

// isStale reports errors that mean a message or outcome has nothing left
// to act on: the job is gone or finished, the step moved on, the lease was
// lost, or another executor holds it.
func isStale(err error) bool {
	var ite *domain.IllegalTransitionError
	return errors.As(err, &ite) || errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrLeaseLost) || errors.Is(err, errLiveLease)
}

// attemptOutcome is how an attempt ended, as its runner reports it.
type attemptOutcome struct {
	leaseID string
	output  json.RawMessage // a success's
	failure *domain.Failure // nil: a success
	// child is the child job whose end this is (a job step's attempt).
	child string
	// costUSD is what the attempt reported it spent (domain.ReportCost);
	// children what the child job whose end this is cost, which its
	// parent's cost includes.
	costUSD  float64
	children float64
	// usage is what the attempt's own run cost the job beyond the
	// engine's requests (a Step Functions execution's transitions).
	usage domain.Usage
}

// finish records an attempt's outcome under its lease, in one change: the
// output stored where it goes, a resource failure told whether any other
// resource is left, a replan's steps checked and their queues made
// (prepare); the outcome applied (decide); then the message deleted, the
// slot given back and what comes next sent. An outcome the job's item
// cannot hold fails the attempt as fatal instead, and answers CodeTooLarge.
// from, the job as this process saved it with the lease, saves a read.
func (e *Engine) finish(ctx context.Context, tenant string, o attemptOutcome, from *domain.Job, chain *chain) (OutcomeResult, error) {
	_, res, err := e.finishOn(ctx, tenant, o, from, chain, nil)
	return res, err
}

// finishOn is finish answering the job as saved too (nil on an error),
// its message's deletion gathered in settle when one is given.
func (e *Engine) finishOn(ctx context.Context, tenant string, o attemptOutcome, from *domain.Job, chain *chain, settle *settlements) (*domain.Job, OutcomeResult, error) {
	ref, err := domain.ParseLeaseID(o.leaseID)
	if err == nil {
		err = checkID(ref.JobID)
	}
	if err != nil {
		return nil, OutcomeResult{}, err
	}
	var p outcomePrep
	var stepID string
	rng := e.jitterRNG()
	j, err := e.commit(ctx, tenant, ref.JobID, from, change{
		prepare: func(ctx context.Context, j *domain.Job, now time.Time) error {
			return e.prepareOutcome(ctx, &p, j, ref, o, now)
		},
		decide: func(j *domain.Job, now time.Time, fx *effects) error {
			s, err := leaseTarget(j, ref)
			if err != nil {
				return err
			}
			stepID = s.ID()
			if s.AlreadyRecorded(o.leaseID, o.failure == nil, now) {
				return errNoChange // a retry whose first answer was lost: answer it again
			}
			if p.failure == nil { // a success, or a failure under a lease the step no longer holds
				if err := j.CheckLease(stepID, o.leaseID, now); err != nil {
					return err // nothing stored for an outcome that is refused
				}
				if o.failure != nil {
					return errUnprepared // not reached: a failure under a held lease is prepared
				}
			}
			if s.Lease != nil && s.Lease.ID == o.leaseID {
				fx.endLease(s.Lease)
			}
			if o.child != "" {
				j.ChildEnded(stepID, o.child) // ended by its child: not cancelled
			}
			j.Usage.ChildrenUSD += o.children
			j.Usage.Add(o.usage)
			fx.dispatch, err = applyOutcome(j, stepID, o.leaseID, p.output, p.ref, p.failure, now, rng)
			if err == nil {
				j.ReportCost(stepID, ref.Attempt, o.costUSD)
			}
			return err
		},
		mark: func() (string, []byte, bool) {
			if !p.kept && !p.prepared {
				return "", nil, false
			}
			rec, ok := markOf(o.leaseID, p.output, p.ref, p.failure, e.now())
			return o.leaseID, rec, ok
		},
		chain:  chain,
		settle: settle,
	})
	if f := unstorable(err, o.failure); f != nil {
		// The attempt ends now, as a fatal failure; its runner still hears
		// that its outcome was too large.
		if _, _, ferr := e.finishOn(ctx, tenant, attemptOutcome{leaseID: o.leaseID, failure: f}, nil, nil, settle); ferr != nil {
			return nil, OutcomeResult{}, fmt.Errorf("lease %s: recording a fatal failure instead of an outcome too large (%v): %w", o.leaseID, err, ferr)
		}
		return nil, OutcomeResult{}, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("lease %s: %v; the attempt was failed as fatal", o.leaseID, err)}
	}
	if err != nil {
		return nil, OutcomeResult{}, fmt.Errorf("lease %s: %w", o.leaseID, err)
	}
	s, _, _ := j.Step(stepID)
	return j, OutcomeResult{JobID: j.ID, StepID: stepID, StepState: s.State, JobState: j.State}, nil
}

// outcomePrep is an outcome as prepare made it ready to apply.
type outcomePrep struct {
	prepared bool // a failure, under the lease it names
	kept     bool // a success, its output kept, under the lease it names
	output   json.RawMessage
	ref      *domain.DataRef
	failure  *domain.Failure
	cache    dataCache
}

// prepareOutcome makes an outcome ready to apply to j: a success's output
// stored when it goes to the blob store (under the attempt's key, written
// before the job is: an object whose job write is then lost is harmless
// garbage under the job's prefix), a resource failure told whether another
// resource is left, a replan checked against the job and its queues made.
func (e *Engine) prepareOutcome(ctx context.Context, p *outcomePrep, j *domain.Job, ref domain.LeaseRef, o attemptOutcome, now time.Time) error {
	s, err := leaseTarget(j, ref)
	if err != nil || s.AlreadyRecorded(o.leaseID, o.failure == nil, now) {
		return nil
	}
	if o.failure == nil {
		if j.CheckLease(s.ID(), o.leaseID, now) != nil {
			return nil // refused by the decision: nothing is stored for it
		}
		p.failure = nil
		out := o.output
		if f := shapeOutput(s, &out); f != nil {
			p.failure, p.prepared = f, true // it cannot be kept: the attempt fails
			return nil
		}
		p.output, p.ref, err = e.keepOutput(ctx, &p.cache, j, s.ID(), ref.Attempt, out)
		p.kept = err == nil
		return err
	}
	if p.prepared || s.Lease == nil || s.Lease.ID != o.leaseID {
		return nil // a failure under a lost lease is refused (409) before its replan is checked
	}
	f := *o.failure
	if f.Class == domain.ClassResource && s.Lease != nil && s.Lease.Resource != "" && s.Lease.ID == o.leaseID {
		if f.NoOtherResource, err = e.noOtherResource(ctx, j.Tenant, s, s.Lease.Resource); err != nil {
			return err
		}
	}
	if len(f.Steps) > 0 {
		if f.Steps, err = e.prepareReplan(ctx, j.Tenant, j, s.ID(), f.Steps); err != nil {
			return err
		}
	}
	p.failure, p.prepared = &f, true
	return nil
}

// shapeOutput makes *out what step s keeps of it (its output
// expression), or answers the fatal failure the attempt ends with when
// that cannot be evaluated.
func shapeOutput(s *domain.Step, out *json.RawMessage) *domain.Failure {
	shaped, err := domain.ShapeOutput(s, *out)
	if err != nil {
		return &domain.Failure{Class: domain.ClassFatal, Message: domain.Truncate(err.Error(), domain.MaxErrorMessageBytes)}
	}
	*out = shaped
	return nil
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
