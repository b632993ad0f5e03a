package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// A change is one conditional write of one job, in four phases:
//
//   - prepare does the I/O a decision on the job as loaded needs (a
//     resource slot taken, data fetched or stored, a URL presigned, a
//     worker queue made). It is keyed by the attempt and remembers what it
//     did, so the job prepared again after a lost race repeats none of it.
//   - decide changes the job and nothing else: no adapter is called while
//     it runs (TestDecisionsCallNoAdapter), so deciding again after a lost
//     race is free. What the change calls for besides itself it adds to
//     the effects.
//   - commit saves the job with one conditional write.
//   - effects: the saved change is observed (its log record, the
//     counters), then its effects are applied (acks, visibility, slots
//     given back, dispatches), and last its Job State Change events are
//     published, off the path to the next step (publish).
//
// Temporal's state machines return their tasks the same way
// (TransitionOutput{Tasks}); a crash between the write and the effects
// loses nothing: the sweep finds the step overdue and sends it again, and
// an unreturned slot comes back when its holder's lease ends.
type change struct {
	prepare func(ctx context.Context, j *domain.Job, now time.Time) error // nil: no I/O is needed
	decide  func(j *domain.Job, now time.Time, fx *effects) error
	// settle, when set, gathers the change's acks and hides instead of
	// making them, for a claim to make its deliveries' in batches.
	settle *settlements
	// chain, when set, may keep one of the change's dispatches for this
	// process to run next instead of sending it (execute.go).
	chain *chain
	// contended, when set, is called once, after the change's first lost
	// race (Cancel marks the job with it).
	contended func(ctx context.Context)
	// cancels is set on the change that cancels the job (cancelChange),
	// which a job marked for cancelling needs no other change before.
	cancels bool
	// mark, when set, answers the outcome mark to record beside the job
	// after the change's first lost race (finish's, once its outcome is
	// prepared; ok false for none): the next writer of the job applies it
	// with its own change (marks.go).
	mark func() (key string, rec []byte, ok bool)
}

// effects are what a saved change calls for besides its write.
type effects struct {
	ack      []string          // worker-queue messages to delete
	hide     []hidden          // messages to hide until a lease ends
	release  []slot            // resource slots to give back
	dispatch []domain.Dispatch // steps to send
	start    []childStart      // child jobs to make (child.go)
	cancel   []string          // orphaned child jobs to cancel
}

// hidden is a message kept from redelivery until a lease runs out.
type hidden struct {
	token string
	until time.Time
}

type slot struct{ resource, key string }

// endLease deletes an ended lease's message and gives back its slot.
func (fx *effects) endLease(l *domain.Lease) {
	if l == nil {
		return
	}
	if l.Token != "" {
		fx.ack = append(fx.ack, l.Token)
	}
	if l.Resource != "" {
		fx.release = append(fx.release, slot{l.Resource, l.ID})
	}
}

// errNoChange tells commit that the decision needs no write.
var errNoChange = errors.New("no change")

// commit runs one change of a job: it loads the job (or starts from one
// this process just saved, which saves a read when no one else wrote in
// between; from is consumed), prepares, decides and saves it, deciding
// again on a lost race, then observes the saved change and applies its
// effects. A decision answering errNoChange answers the job as loaded,
// without a write and without effects.
func (e *Engine) commit(ctx context.Context, tenant, id string, from *domain.Job, c change) (*domain.Job, error) {
	ctx, done := takeTurn(ctx, tenant, id)
	defer done()
	var data dataCache // stored data a decision asked for (NeedDataError)
	fetches := 0
	var carry domain.Usage // what lost races spent, saved by the write that wins
	for race := range maxRaces {
		j := from
		from = nil
		if j == nil {
			var err error
			if j, err = e.cfg.Store.Get(ctx, tenant, id); err != nil {
				return nil, err
			}
		}
		j.Spend(carry)
		carry = domain.Usage{}
		j.Fetched, j.Unfetchable = data.fetched, data.unfetchable
		if j.CancelRequested && !j.State.Terminal() && !c.cancels {
			// Asked to be cancelled while other writers held the job: the
			// cancel is saved first, then this change is decided on the
			// cancelled job, as if the cancel had won the race.
			cancelled, err := e.commit(ctx, tenant, id, j, cancelChange())
			if err != nil {
				return cancelled, err
			}
			j = cancelled
		}
		now := e.now()
		before := observeBefore(j)
		// Outcomes marked beside the job are applied first, on the job as
		// read, and saved with this change (or alone, if it makes none).
		var marked effects
		applied := false
		if len(j.Marks) > 0 {
			err := e.decideOnly(j, now, &marked, e.applyMarks)
			if retry, ferr := e.fetchAsked(ctx, err, &data, &fetches); retry || ferr != nil {
				if ferr != nil {
					return nil, ferr
				}
				continue
			}
			applied = err == nil
		}
		if c.prepare != nil {
			if err := c.prepare(ctx, j, now); err != nil {
				return j, err
			}
		}
		var fx effects
		if err := e.decideOnly(j, now, &fx, c.decide); err != nil && !(applied && errors.Is(err, errNoChange)) {
			if errors.Is(err, errNoChange) {
				return j, nil
			}
			if retry, ferr := e.fetchAsked(ctx, err, &data, &fetches); retry || ferr != nil {
				if ferr != nil {
					return nil, ferr
				}
				continue
			}
			return j, err
		}
		fx = marked.then(fx)
		fx.dispatch = append(fx.dispatch, j.TakeReleased()...) // a map's progress (settle)
		fx.cancel = append(fx.cancel, j.TakeOrphaned()...)
		fx.dispatch = append(fx.dispatch, e.armAtOnce(j, now)...)
		// A job whose cost passed its budget starts no further step: it
		// waits at its budget gate, and what the change would send to run
		// is held back (a timer's message still goes).
		if _, _, err := j.HoldIfOverBudget(now); err != nil {
			return j, err
		}
		if j.BudgetHeld() {
			fx.dispatch = heldBack(j, fx.dispatch)
		}
		// Steps this process's chain runs next are carried by its
		// delivered message, not the due index: a job that needs the
		// sweep for nothing else stays out of it (no index write now, and
		// none when it ends).
		plan := c.chain.plan(j, fx.dispatch)
		carried := plan.carriesAll() && j.DueOnlyFor(fx.dispatch) && c.chain.carries(ctx, e)
		if carried {
			j.LeaveDueIndex()
		}
		e.charge(ctx, j)
		effects := e.effectsUsage(j, fx, c.settle, plan.rest, before)
		j.Spend(effects)
		err := e.cfg.Store.Save(ctx, j, before.loaded)
		if errors.Is(err, domain.ErrVersionConflict) {
			carry = j.Spent // the effects were not made
			carry.Add(effects.Scaled(-1))
			if c.mark != nil && race == 0 {
				carry.WriteUnits++ // the mark's update (markOutcome)
			}
			if race == 0 && c.contended != nil {
				c.contended(ctx)
			}
			if race == 0 && c.mark != nil {
				e.markOutcome(ctx, tenant, id, c.mark)
			}
			if !lostRace(ctx, race) {
				return nil, ctx.Err()
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		// The change is saved: its effects are made even if the invocation
		// is ending (a dispatch lost to a cancelled context waits for the
		// sweep), within a bound of their own.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		states := e.observe(ectx, j, before)
		e.apply(ectx, j, fx, c.settle, c.chain, plan)
		e.publish(ectx, j, states)
		e.relate(ectx, j, fx, before.state)
		if carried && c.chain.carriedLate() {
			// The delivered message may be back and gone: the index, not
			// it, must bring the carried steps back.
			e.ensureDue(ectx, Message{Tenant: tenant, Job: id})
			c.chain.job = nil
		}
		cancel()
		return j, nil
	}
	return nil, fmt.Errorf("job %s: gave up after %d lost races: %w: %w", id, maxRaces, domain.ErrContended, domain.ErrVersionConflict)
}

// heldBack answers ds without the steps a job at its budget gate would
// start: those an executor or a worker leases.
func heldBack(j *domain.Job, ds []domain.Dispatch) []domain.Dispatch {
	out := ds[:0:0]
	for _, d := range ds {
		if !domain.Executed(d.Step.Spec.Action.Type) {
			out = append(out, d)
		}
	}
	return out
}

// fetchAsked fetches the stored data a decision's err asked for
// (domain.NeedDataError) into data, and reports whether to decide again,
// on the job read again: the decision half made is dropped.
func (e *Engine) fetchAsked(ctx context.Context, err error, data *dataCache, fetches *int) (bool, error) {
	need := (*domain.NeedDataError)(nil)
	if !errors.As(err, &need) || *fetches >= maxRaces {
		return false, nil
	}
	*fetches++
	return true, e.fetchForDecision(ctx, data, need.Refs)
}

// armAtOnce sends a job's messages that are too far off for an SQS delay
// at once, when the queue holds long delays itself (Config.TimerService);
// otherwise they wait for the sweep (domain.Job.Arm), and this answers
// none. Pure, as a decision is.
func (e *Engine) armAtOnce(j *domain.Job, now time.Time) []domain.Dispatch {
	if !e.cfg.TimerService {
		return nil
	}
	return j.ArmAll(now)
}

// decideOnly runs a decision, counted in e.deciding so a test's adapters
// can refuse any call made while one runs.
func (e *Engine) decideOnly(j *domain.Job, now time.Time, fx *effects, decide func(*domain.Job, time.Time, *effects) error) error {
	e.deciding.Add(1)
	defer e.deciding.Add(-1)
	return decide(j, now, fx)
}

// apply acts on a saved change's effects. A failure is logged, not
// returned: the change is saved, a message not deleted is dropped when it
// next comes, a slot not given back comes back when its lease expires, and
// the sweep sends an overdue step again.
func (e *Engine) apply(ctx context.Context, j *domain.Job, fx effects, settle *settlements, chain *chain, plan chainPlan) {
	ackFailed := func(err error) {
		e.cfg.Log.WarnContext(ctx, "a finished lease's message was not deleted; it is dropped when next received", "job", j.ID, "err", err)
	}
	hideFailed := func(err error) {
		// The lease is written; a message that shows up early finds it
		// live and is hidden again.
		e.cfg.Log.WarnContext(ctx, "a lease's message was not hidden for its length", "job", j.ID, "err", err)
	}
	for _, t := range fx.ack {
		if settle != nil {
			settle.ack(t, ackFailed)
		} else if err := e.cfg.Queue.Ack(ctx, t); err != nil {
			ackFailed(err)
		}
	}
	for _, h := range fx.hide {
		if settle != nil {
			settle.hide(h.token, h.until, hideFailed)
		} else if err := e.cfg.Queue.Extend(ctx, h.token, h.until.Sub(e.now())); err != nil {
			hideFailed(err)
		}
	}
	for _, r := range fx.release {
		e.releaseSlot(ctx, j.Tenant, r.resource, r.key)
	}
	e.dispatch(ctx, j, chain.take(j, plan))
}

// dispatch sends steps a saved change calls for, and reports whether they
// went out. A failed send is logged, not returned: the job is saved, and
// the sweep re-sends overdue steps.
func (e *Engine) dispatch(ctx context.Context, j *domain.Job, ds []domain.Dispatch) bool {
	if len(ds) == 0 {
		return true
	}
	e.touchDispatched(ctx, j, ds)
	if err := e.cfg.Queue.Dispatch(ctx, j, Route(j, ds)); err != nil {
		e.cfg.Log.WarnContext(ctx, "dispatch failed; the sweep will re-send", "job", j.ID, "err", err)
		return false
	}
	return true
}

// loadedJob is what observers of a change need of the job as it was
// loaded.
type loadedJob struct {
	state   domain.JobState
	loaded  int // events it had
	waiting bool
	steps   []stepSnapshot
	cost    int64 // its own cost as saved (costNano)
}

func observeBefore(j *domain.Job) loadedJob {
	return loadedJob{state: j.State, loaded: len(j.Events), waiting: j.WaitsOnPerson(), steps: snapshotSteps(j), cost: costNano(j)}
}

// costNano is what j has cost itself as saved, in billionths of a dollar:
// its child jobs' cost is theirs, counted by them.
func costNano(j *domain.Job) int64 {
	u := j.Usage
	u.ChildrenUSD = 0
	return int64(math.Round(u.Cost().USD * 1e9))
}

// observe tells every observer of a saved change: the counters (written
// when due, so no entry point has to flush them) and its log record. It
// answers the Job State Change events to publish once the change's
// effects are applied.
func (e *Engine) observe(ctx context.Context, j *domain.Job, before loadedJob) []JobStateChange {
	e.recordStats(j, before)
	states := e.afterWrite(ctx, j, before.state, before.loaded)
	e.flushStats(ctx, false)
	return states
}

// observeCreated is observe for a job just created.
func (e *Engine) observeCreated(ctx context.Context, j *domain.Job) []JobStateChange {
	e.noteCreated(j)
	states := e.afterWrite(ctx, j, domain.JobInitial, 0)
	e.flushStats(ctx, false)
	return states
}

// settlements are the acks and hides a claim's deliveries call for,
// gathered while each is decided and made together after (make): one
// DeleteMessageBatch and one ChangeMessageVisibilityBatch per ten of a
// queue, where one request each would be up to ten of each. A failed entry
// is handled as the single call's error was (failed).
type settlements struct {
	hides []settlement
	acks  []settlement
}

type settlement struct {
	token  string
	until  time.Time // hides only
	failed func(error)
}

func (s *settlements) hide(token string, until time.Time, failed func(error)) {
	s.hides = append(s.hides, settlement{token, until, failed})
}

func (s *settlements) ack(token string, failed func(error)) {
	s.acks = append(s.acks, settlement{token: token, failed: failed})
}

// make settles what was gathered and empties s. Each hide's length is
// taken from now, as its single call would.
func (s *settlements) make(ctx context.Context, e *Engine) {
	if len(s.hides) > 0 {
		now := e.now()
		es := make([]Extension, len(s.hides))
		for i, h := range s.hides {
			es[i] = Extension{Token: h.token, For: h.until.Sub(now)}
		}
		for i, err := range e.cfg.Queue.ExtendAll(ctx, es) {
			if err != nil {
				s.hides[i].failed(err)
			}
		}
	}
	if len(s.acks) > 0 {
		tokens := make([]string, len(s.acks))
		for i, a := range s.acks {
			tokens[i] = a.token
		}
		for i, err := range e.cfg.Queue.AckAll(ctx, tokens) {
			if err != nil {
				s.acks[i].failed(err)
			}
		}
	}
	s.hides, s.acks = nil, nil
}
