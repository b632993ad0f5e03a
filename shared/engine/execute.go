package engine

import (
	"cmp"
	"context"
	"errors"
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
	// Early: the message's job is not written yet. Submit sends a job's
	// first messages before its write (sendFirst), and one may come first;
	// it is hidden for a moment and must not be deleted.
	Early ExecuteResult = "early"
)

// Execute handles one ready-queue message: it takes the step's lease
// (takeLease: reclaiming an expired one), runs the built-in action, and
// records the outcome under the lease (finish), which dispatches what
// comes next. An instant step (pass, fail) is leased and recorded in one
// write. A built-in step that comes next is run here too, on the job as
// this process saved it (no read, no message), within the chain's budget
// (chain). An error means the message must come back (a batch item
// failure); the result and the error are the delivered message's.
func (e *Engine) Execute(ctx context.Context, d Delivery) (ExecuteResult, error) {
	ch := e.newChain(ctx)
	if d.Receives <= 1 {
		// Only a first delivery carries steps on its message: one that
		// came back may be taking up what a chain carried, and must leave
		// what it does in the due index (the message it holds may be
		// deleted by the chain that hid it).
		ch.token = d.Token
	}
	if d.Receives >= dueAfterReceives {
		e.ensureDue(ctx, d.Message)
	}
	res, err := e.execute(ctx, d, nil, ch)
	if errors.Is(err, domain.ErrContended) && d.Token != "" {
		// Other writers of the job won every race (branches of one job
		// ending together): the message comes back in a moment, not at
		// the queue's visibility timeout, minutes off.
		wait := contendedRetry + time.Duration(e.jitterRNG().Int64N(int64(contendedRetry)))
		if qerr := e.cfg.Queue.Extend(ctx, d.Token, wait); qerr != nil {
			e.cfg.Log.WarnContext(ctx, "a contended message was not shown again soon; it comes back at its visibility timeout", "job", d.Message.Job, "err", qerr)
		}
	}
	if err != nil {
		return res, err
	}
	// unsent: chained steps that neither ran nor went out. If the chain
	// carried steps out of the due index, the delivered message must come
	// back for them (stranded): it is not deleted.
	unsent := false
	for len(ch.next) > 0 {
		step := ch.next[0]
		ch.next = ch.next[1:]
		if ctx.Err() != nil {
			// The invocation is ending: what the chain kept is sent, in
			// one dispatch.
			unsent = !e.sendChained(ctx, d.Message.Tenant, d.Message.Job, ch.job, append([]string{step}, ch.next...)) || unsent
			break
		}
		// The job as the last change saved it; a change that failed leaves
		// none, and the next step reads it.
		from := ch.job
		ch.job = nil
		if k := ch.instantAfter(from, step); k > 0 {
			// A fan-out's branches one write made runnable together: one
			// write for all, not one each.
			if e.runTogether(ctx, d.Message, append([]string{step}, ch.next[:k]...), from, ch) {
				ch.next = ch.next[k:]
				ch.left -= k + 1
				continue
			}
			from = nil // a refused group leaves the job as it decided it: read it again
		}
		ch.left--
		if _, err := e.execute(ctx, Delivery{Message: Message{Tenant: d.Message.Tenant, Job: d.Message.Job, Step: step}}, from, ch); err != nil {
			// The step stays runnable: its message goes out as it would
			// have without the chain (and if that is lost, the sweep
			// sends it after DispatchGrace).
			e.cfg.Log.WarnContext(ctx, "a chained step did not run here; it is sent", "job", d.Message.Job, "step", step, "err", err)
			unsent = !e.sendChained(ctx, d.Message.Tenant, d.Message.Job, from, []string{step}) || unsent
		}
	}
	if unsent && ch.carried() {
		return res, fmt.Errorf("job %s: chained steps carried out of the due index were not sent; the message comes back for them", d.Message.Job)
	}
	return res, nil
}

// contendedRetry is the least a message whose lease lost every race waits
// before it comes back (up to twice that, jittered).
const contendedRetry = time.Second

// sendChained sends chained steps that did not run, on the job as it
// was before the try (its priority and each step's action say where), or
// as read now, and reports whether they went out. An invocation at its
// end still sends them (within publishTimeout), rather than leave them to
// the sweep or the delivered message.
func (e *Engine) sendChained(ctx context.Context, tenant, id string, j *domain.Job, steps []string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if j == nil {
		var err error
		if j, err = e.cfg.Store.Get(ctx, tenant, id); err != nil {
			e.cfg.Log.WarnContext(ctx, "chained steps were not sent; the sweep or their message brings them back", "job", id, "steps", steps, "err", err)
			return false
		}
	}
	var ds []domain.Dispatch
	for _, step := range steps {
		if s := mustStep(j, step); s != nil {
			ds = append(ds, domain.Dispatch{Step: s})
		}
	}
	return e.dispatch(ctx, j, ds)
}

// execute is Execute of one delivery, on from when set (the job as this
// process saved it).
func (e *Engine) execute(ctx context.Context, d Delivery, from *domain.Job, ch *chain) (ExecuteResult, error) {
	delivered := from == nil // not a step a chain kept
	if delivered && d.Receives <= 1 {
		from = carriedJob(d.Message) // a first message: its lease needs no read
	}
	t, err := e.takeLease(ctx, d, readyLane, from, nil, ch)
	prompt := !d.SentAt.IsZero() && e.now().Sub(d.SentAt) < batchFirstDelay
	for pause := absentPause; err == nil && t.outcome == absent && delivered && d.Receives <= 1 && prompt && e.mayBeWritten(d) && pause <= absentPauseMax; pause *= 2 {
		// A first message sent before its job's write (sendFirst) mostly
		// comes while that write is in flight: a moment's wait finds the
		// job, where hiding the message (below) would start it seconds
		// late. Not a batch's, held back until its writes should be done:
		// one that comes before them waits for a batch of writes.
		if !Sleep(ctx, pause) {
			break
		}
		t, err = e.takeLease(ctx, d, readyLane, nil, nil, ch)
	}
	if err != nil {
		return "", err
	}
	switch t.outcome {
	case held:
		if s := stepOf(t.job, d.Message.Step); s != nil && s.Child != nil {
			// A copy of a job step's message: its child runs, and the
			// sweep, not this message, looks after it.
			return Stale, nil
		}
		if d.Token != "" {
			if qerr := e.cfg.Queue.Extend(ctx, d.Token, t.hideFor); qerr != nil {
				e.cfg.Log.WarnContext(ctx, "held message not hidden; it comes back at its visibility timeout", "job", d.Message.Job, "err", qerr)
			}
		}
		return Held, nil
	case notYet:
		// Early (a duplicate, or a delay the queue capped): sent again for
		// the rest, unless its message waits for the sweep, which sends
		// it in time.
		if s := mustStep(t.job, d.Message.Step); !s.AwaitsArm() {
			e.dispatch(ctx, t.job, []domain.Dispatch{{Step: s, Delay: t.until.Sub(e.now())}})
		}
		return Deferred, nil
	case stale:
		if delivered {
			stranded := t.job != nil && t.job.Stranded()
			if stranded && d.Receives <= 1 && d.Token != "" {
				// A copy of a message whose first delivery runs a chain
				// that carries the job's steps (SQS hands a message out
				// twice now and then): deleted, it would leave nothing to
				// bring them back if that chain died. It is hidden and
				// kept, and comes back to find the job moved on.
				if qerr := e.cfg.Queue.Extend(ctx, d.Token, carryVisibility); qerr != nil {
					e.cfg.Log.WarnContext(ctx, "a copy of a carrying chain's message was not hidden; it comes back at its visibility timeout", "job", d.Message.Job, "err", qerr)
				}
				return Held, nil
			}
			// A message that comes back to find its step done may be the
			// delivery of a chain that died (its invocation crashed or
			// timed out): the steps that chain would have run are taken up
			// again (resume), rather than left to the sweep. Those it
			// carried out of the due index (stranded) only this message
			// brings back, and it comes back only once that chain is past
			// carrying: they are taken up whenever they were made ready.
			ch.resume(t.job, e.now(), d.Receives > 1 && stranded)
		}
		return Stale, nil
	case unreadable:
		return Stale, nil
	case absent:
		if !delivered || !e.mayBeWritten(d) {
			return Stale, nil // the job expired, or its write never came
		}
		wait := absentRetry << min(max(d.Receives-1, 0), 4)
		if qerr := e.cfg.Queue.Extend(ctx, d.Token, wait); qerr != nil {
			e.cfg.Log.WarnContext(ctx, "a message early for its job was not hidden; it comes back at its visibility timeout", "job", d.Message.Job, "err", qerr)
		}
		return Early, nil
	case waiting:
		return Waiting, nil // in line for a slot: a freed one sends it again
	case started:
		if s := mustStep(t.job, d.Message.Step); s != nil && s.Spec.Action.Type == domain.ActionStepFunctions {
			e.awaitExecution(ctx, t, d.Message.Step)
		}
		return Executed, nil
	case fired, ended, recorded:
		return Executed, nil
	}
	return e.runLeased(ctx, d, t, t.job, ch)
}

// runLeased runs the step a delivery leased (t) and records its outcome;
// from, when set, is the job as the lease saved it.
func (e *Engine) runLeased(ctx context.Context, d Delivery, t taken, from *domain.Job, ch *chain) (ExecuteResult, error) {
	s, _, _ := t.job.Step(d.Message.Step)
	o := e.run(ctx, ActionCall{Spec: s.Spec, Input: t.input.inline, IdempotencyKey: t.job.IdempotencyToken(s), Tenant: t.job.Tenant})
	o.leaseID = t.lease.ID
	_, err := e.finish(ctx, d.Message.Tenant, o, from, ch)
	switch {
	case err == nil, domain.CodeOf(err) == domain.CodeTooLarge:
		return Executed, nil // recorded (an outcome too large to keep, as a fatal failure)
	case isStale(err):
		return Stale, nil // cancelled or taken over meanwhile: the outcome is refused
	}
	return "", fmt.Errorf("record outcome of step %s of job %s: %w", d.Message.Step, d.Message.Job, err)
}

// ChainSteps and ChainTime bound the steps one delivery runs after its
// own, and for how long it starts new ones: past either, what comes next
// goes through the ready queue, where the other tenants' work and higher
// priorities take their turn (SQS fair queues serve a quiet tenant's
// messages first). An instant step is one write, a few milliseconds on
// AWS: ChainSteps bounds those; ChainTime bounds when a chain takes a step
// that does I/O.
const (
	ChainSteps = 100
	ChainTime  = 2 * time.Second
)

// A chain is what an execute invocation may still run after the step it
// was delivered: the steps of the same job a change makes runnable now,
// on the ready lane, run by a built-in action that fits in the
// invocation's time left. It takes every instant one (pass, fail: one
// write each, so a fan-out of them runs here, one after another, rather
// than as parallel writers racing on the job) and at most one that does
// I/O (the others are sent, and run in parallel elsewhere). Durability is
// unchanged: a step is saved runnable before it runs, and a process that
// dies leaves it to the sweep as a lost message would (DispatchGrace).
type chain struct {
	// token is the delivered message's. A write whose dispatches the
	// chain all keeps may leave the job out of the due index (carries):
	// that message, hidden for carryVisibility, brings the steps back if
	// this invocation dies, as the sweep would, sooner and with no index
	// write.
	token       string
	hiddenAt    time.Time // when the message was last hidden for carrying; zero: not yet
	carryFailed bool
	left        int       // steps it may still run
	until       time.Time // wall time after which it takes no step that does I/O
	deadline    time.Time // the invocation's, less what finishing needs; zero: none
	next        []string  // the steps kept, to run in order
	io          bool      // one kept does I/O
	job         *domain.Job
	// dead is how long ago a step must have been made runnable for the
	// chain that kept it to be over: the longest an invocation runs (this
	// one's time at its start), at least ChainTime. A chain keeps all a
	// write makes runnable at once and may run them for longer than
	// ChainTime; taking its steps up sooner would race it.
	dead time.Duration
}

func (e *Engine) newChain(ctx context.Context) *chain {
	c := &chain{left: cmp.Or(e.cfg.ChainSteps, ChainSteps), until: time.Now().Add(cmp.Or(e.cfg.ChainTime, ChainTime)), dead: ChainTime}
	if dl, ok := ctx.Deadline(); ok {
		c.deadline = dl.Add(-2 * deadlineMargin)
		c.dead = max(c.dead, time.Until(dl))
	}
	return c
}

// chainPlan is which of a change's dispatches the chain keeps, decided
// before the change is saved (a write carrying them leaves the job out of
// the due index) and taken after.
type chainPlan struct {
	kept []string // step ids, in order
	io   bool     // the chain then holds a step that does I/O
	rest []domain.Dispatch
}

// carriesAll reports whether the chain keeps every dispatch of the plan.
func (p chainPlan) carriesAll() bool { return len(p.kept) > 0 && len(p.rest) == 0 }

// plan answers which of ds the chain would keep, on j as it is to be
// saved, and the rest to send.
func (c *chain) plan(j *domain.Job, ds []domain.Dispatch) chainPlan {
	if c == nil {
		return chainPlan{rest: ds}
	}
	late := time.Now().After(c.until)
	p := chainPlan{io: c.io}
	for _, d := range ds {
		pure, ok := c.runs(j, d)
		// Past ChainTime an instant step is still kept (up to ChainSteps):
		// sent, the steps of a fan-out would be as many writers racing on
		// the job, which is what a chain is for avoiding.
		if !ok || len(c.next)+len(p.kept) >= c.left || !pure && (p.io || late) {
			p.rest = append(p.rest, d)
			continue
		}
		p.kept = append(p.kept, d.Step.ID())
		p.io = p.io || !pure
	}
	return p
}

// take notes j as saved, takes the steps p keeps, and answers the rest to
// send.
func (c *chain) take(j *domain.Job, p chainPlan) []domain.Dispatch {
	if c == nil {
		return p.rest
	}
	c.job = j
	c.next = append(c.next, p.kept...)
	c.io = p.io
	return p.rest
}

// keep notes j as saved, takes those of ds the chain runs, and answers
// the rest to send.
func (c *chain) keep(j *domain.Job, ds []domain.Dispatch) []domain.Dispatch {
	return c.take(j, c.plan(j, ds))
}

// carryVisibility is how long a chain hides its delivered message while
// it carries steps out of the due index; it hides it again for as long
// once carryWindow has passed since it last did (a chain slowed by a busy
// table: on AWS a chain's writes take milliseconds, and one hide does). A
// chain that dies leaves its steps to that message, which comes back
// within carryVisibility; a write that lands carryVisibility/2 after the
// last hide (slow, retried) puts its job back in the index, since the
// message may be back and gone.
const (
	carryVisibility = 10 * time.Second
	carryWindow     = 3 * time.Second
)

// carries reports whether a write the chain keeps every dispatch of may
// leave its job out of the due index, hiding the delivered message for
// carryVisibility when it has not, or not lately. A chain starts carrying
// only within ChainTime of its start.
func (c *chain) carries(ctx context.Context, e *Engine) bool {
	if c == nil || c.token == "" || c.carryFailed {
		return false
	}
	now := time.Now()
	if c.hiddenAt.IsZero() && now.After(c.until) {
		return false
	}
	if c.hiddenAt.IsZero() || now.Sub(c.hiddenAt) >= carryWindow {
		e.spendPending(ctx, domain.Usage{SQSRequests: 1}, 0) // the write about to be made saves it
		if err := e.cfg.Queue.Extend(ctx, c.token, carryVisibility); err != nil {
			c.carryFailed = true
			e.cfg.Log.WarnContext(ctx, "a chain's message was not hidden to carry its steps; they stay in the due index", "err", err)
			return false
		}
		c.hiddenAt = now
	}
	return true
}

// carried reports whether the chain carried steps out of the due index.
func (c *chain) carried() bool { return c != nil && !c.hiddenAt.IsZero() }

// carriedLate reports whether a carried write landed so late that the
// delivered message may already be back (and gone).
func (c *chain) carriedLate() bool {
	return c.carried() && time.Since(c.hiddenAt) >= carryVisibility/2
}

// resume takes up the steps of j a chain that died left runnable: those
// it may run, due since longer than an invocation runs (c.dead), or
// since any time when the chain carried them (stranded), holding no
// lease. Run here they cost what their messages would have; one whose
// message is only late finds, when it comes, its step done.
func (c *chain) resume(j *domain.Job, now time.Time, stranded bool) {
	if j == nil || j.State.Terminal() {
		return
	}
	dead := c.dead
	if stranded {
		dead = 0
	}
	var ds []domain.Dispatch
	for _, s := range j.Steps {
		if s.Lease == nil && s.ReadyAt != nil && !s.ReadyAt.After(now.Add(-dead)) && j.CanLease(s.ID(), now) == nil {
			ds = append(ds, domain.Dispatch{Step: s})
		}
	}
	if len(ds) == 0 {
		return
	}
	c.keep(j, ds)
	c.job = nil // read again: the job as this delivery found it may be behind
}

// instantAfter answers how many of the steps the chain keeps after step
// are, with it, instant steps of j (pure actions needing no slot), run
// together in one write (runTogether); 0 when step is not one or j is
// not known.
func (c *chain) instantAfter(j *domain.Job, step string) int {
	instant := func(id string) bool {
		s, _, err := j.Step(id)
		if err != nil || s.Spec.Requires != nil {
			return false
		}
		kind, _ := domain.LookupAction(s.Spec.Action.Type)
		_, pure := kind.(domain.PureAction)
		return pure
	}
	if j == nil || !instant(step) {
		return 0
	}
	k := 0
	for k < len(c.next) && instant(c.next[k]) {
		k++
	}
	return k
}

// runTogether leases and records the instant steps a chain kept in one
// change on from (takeLeasesOn), the chain keeping what that write makes
// runnable; a step that turns out not instant (its failure replans) is
// run and recorded after, as the chain runs any. false when the change
// was refused, and nothing was written.
func (e *Engine) runTogether(ctx context.Context, m Message, steps []string, from *domain.Job, ch *chain) bool {
	ds := make([]Delivery, len(steps))
	for i, step := range steps {
		ds[i] = Delivery{Message: Message{Tenant: m.Tenant, Job: m.Job, Step: step}}
	}
	ts, err := e.takeLeasesOn(ctx, ds, readyLane, nil, from, ch)
	if err != nil {
		return false
	}
	for i, t := range ts {
		if t.outcome != leased {
			continue
		}
		if _, err := e.runLeased(ctx, ds[i], t, nil, ch); err != nil {
			// Leased and not recorded: its lease runs out and the sweep
			// reclaims it, as for a process that died.
			e.cfg.Log.WarnContext(ctx, "a chained step's outcome was not recorded; its lease runs out", "job", m.Job, "step", ds[i].Message.Step, "err", err)
		}
	}
	return true
}

// runs reports whether the chain may run d's step itself, and whether
// that step is instant.
func (c *chain) runs(j *domain.Job, d domain.Dispatch) (pure, ok bool) {
	if d.Delay > 0 || d.Wake != "" || DestinationOf(j, d.Step).Kind != ToReady {
		return false, false
	}
	kind, found := domain.LookupAction(d.Step.Spec.Action.Type)
	if !found || kind.Executor() != domain.ExecutorBuiltIn {
		return false, false
	}
	if _, pure = kind.(domain.PureAction); pure || c.deadline.IsZero() {
		return pure, true
	}
	return false, time.Until(c.deadline) > time.Duration(d.Step.Spec.TimeoutSeconds)*time.Second
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
	var reported float64
	call.Reported = &reported
	output, failure := e.cfg.Runner.Run(runCtx, call)
	cancel()
	if domain.CheckReported("stepflow_cost.usd", reported) != nil {
		reported = 0 // a function's answer is not refused for its cost; a nonsense figure is dropped
	}
	if failure == nil && len(output) > 0 {
		// A built-in action's output comes from outside (an http answer):
		// poison JSON fails the attempt instead of being stored.
		if err := domain.CheckJSON("output", output); err != nil {
			output, failure = nil, &domain.Failure{Class: domain.ClassFatal, Message: "the action's output was refused: " + err.Error()}
		}
	}
	return attemptOutcome{output: output, failure: failure, costUSD: reported}
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

// stepOf is mustStep of a job that may be nil (a take that read none).
func stepOf(j *domain.Job, id string) *domain.Step {
	if j == nil {
		return nil
	}
	return mustStep(j, id)
}

func mustStep(j *domain.Job, id string) *domain.Step {
	s, _, _ := j.Step(id)
	return s
}

// A job's first messages may go out before its write (sendFirst): a
// delivery that finds no job is hidden for absentRetry, doubling with
// each receive, while its job may still be written. Its fifth receive
// comes a minute after the send, past any submit's invocation (API
// Gateway gives one 30 s), so it is dropped then, before the queue's
// maxReceiveCount (5) would dead-letter it.
const (
	absentRetry  = 4 * time.Second
	absentWindow = time.Minute
)

// A first delivery that finds no job, received within batchFirstDelay
// of its send, looks again after absentPause, doubling up to
// absentPauseMax (375 ms in all: four reads), before it hides its
// message.
const (
	absentPause    = 25 * time.Millisecond
	absentPauseMax = 200 * time.Millisecond
)

// mayBeWritten reports whether the job of a delivery that found none may
// still be written: its message was sent less than absentWindow ago.
func (e *Engine) mayBeWritten(d Delivery) bool {
	return d.Token != "" && !d.SentAt.IsZero() && e.now().Sub(d.SentAt) < absentWindow
}

// dueAfterReceives is the receive from which a delivery makes sure its job
// is in the due index before anything else. A job whose first messages
// went out before its write is not (sendFirst): the message itself is
// what runs it. A message received this often may be one whose handler
// dies before its first write, and which the queue will dead-letter; the
// sweep then sends the step again, as it would a lost message.
const dueAfterReceives = 3

// ensureDue puts a job in the due index if it is unfinished and not
// there: one read, and a write only for a job that needs it.
func (e *Engine) ensureDue(ctx context.Context, m Message) {
	_, err := e.commit(ctx, m.Tenant, m.Job, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		if j.State.Terminal() || j.DueAt != nil || !j.Resweep() {
			return errNoChange
		}
		return nil
	}})
	if err != nil && !isStale(err) {
		e.cfg.Log.WarnContext(ctx, "a redelivered message's job was not put in the due index", "job", m.Job, "err", err)
	}
}
