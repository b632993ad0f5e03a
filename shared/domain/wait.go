package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Steps no executor runs (docs/model.md#waits-sleeps-and-timers): an
// approval gate waits for a person, a wait for a signal, a sleep for a
// time. Each holds its job without a function running; what ends it is a
// person, a signal, or a timer message that arrives at its instant (an SQS
// delay, sent at once up to the timer threshold and by the sweep within
// reach beyond it, arm.go), with the sweep's due index as the safety net.

// MaxKeptSignals bounds the signals a job keeps for waits not reached yet.
// Only a name some wait of the job may take is kept, at most one per such
// wait, so only a job with more waits than this reaches it.
const MaxKeptSignals = 64

// MaxSignalBytes bounds one signal's payload.
const MaxSignalBytes = 32 * 1024

// ready makes a step whose dependencies are done go on: an approval gate
// opens (NEEDS_USER), a wait starts waiting for its signal (taking one kept
// already), a sleep starts sleeping, and any other step is dispatched to
// its executor. It answers what to send.
func (j *Job) ready(s *Step, now time.Time) ([]Dispatch, error) {
	if w, ok := actionTypes.byName[s.Spec.Action.Type].(waitingAction); ok {
		return w.start(j, s, now)
	}
	s.ReadyAt = &now
	return []Dispatch{{Step: s}}, nil
}

// Timer is the runtime state the action types nothing runs
// (waitingAction) share while a step of theirs waits: the instant that
// ends the wait, if any, and whether the wait leaves its job parked.
type Timer struct {
	// WakeAt is when a sleep wakes.
	WakeAt *time.Time `json:"wake_at,omitempty"`
	// Deadline is when an approval gate or a wait times out (its
	// ActionDeadline).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Parked: the step waits for a signal with no deadline, or for a time
	// beyond the timer threshold (decided when it starts waiting), so the
	// job has nothing to poll. A gate, which waits on a person, never
	// parks.
	Parked bool `json:"parked,omitempty"`
}

// deadline sets a gate's or a wait's deadline and answers its timer.
func (j *Job) deadline(s *Step, seconds int, now time.Time) []Dispatch {
	if seconds <= 0 {
		return nil
	}
	dl := now.Add(time.Duration(seconds) * time.Second)
	s.Timer = &Timer{Deadline: &dl}
	return j.sendAt(s, dl, now)
}

// park marks a sleep or a wait that starts waiting parked if it leaves
// its job nothing to poll: it waits for a signal with no deadline, or for
// a time further off than the timer threshold.
func (j *Job) park(s *Step, now time.Time) {
	at := s.timerAt()
	if at != nil && at.Sub(now) <= time.Duration(j.ParkAfterSeconds)*time.Second {
		return
	}
	if s.Timer == nil {
		s.Timer = &Timer{}
	}
	s.Timer.Parked = true
}

// cancelled answers what a cancelled step keeps of its timer: that it was
// parked, which its stored document and the API's view of it have always
// said, and nothing more.
func (t *Timer) cancelled() *Timer {
	if t == nil || !t.Parked {
		return nil
	}
	return &Timer{Parked: true}
}

func (j *Job) index(s *Step) int {
	_, i, _ := j.Step(s.ID())
	return i
}

// timerAt answers the instant that ends a waiting step or an open gate,
// if any: a sleep's wake time, or a deadline (an approval gate's when
// NEEDS_USER; a step that asked a person has none).
func (s *Step) timerAt() *time.Time {
	switch {
	case s.Timer == nil:
		return nil
	case s.State == StepWaiting && s.Timer.WakeAt != nil:
		return s.Timer.WakeAt
	case s.State == StepWaiting || s.State == StepNeedsUser:
		return s.Timer.Deadline
	}
	return nil
}

// wake ends a waiting step SUCCEEDED with output (a signal's payload, or
// a sleep's own input) and releases what waited on it. An output that
// references data in the blob store is kept as a reference when it is
// one, else as the step's input, composed when read: the domain fetches
// nothing.
func (j *Job) wake(s *Step, output Data, detail string, now time.Time) ([]Dispatch, error) {
	if err := j.stepTo(s, StepEvWake, now, detail); err != nil {
		return nil, err
	}
	switch refs := output.Refs(); {
	case output.Ref() != nil:
		s.OutputRef = output.Ref()
	case len(refs) > 0:
		s.OutputIsInput = true // only a sleep's output is made of references
	default:
		raw, _ := output.Compose(nil)
		if len(raw) == 0 {
			raw = json.RawMessage(`null`)
		}
		s.Output = raw
	}
	s.Timer = nil
	return j.releaseAfter(j.index(s), now)
}

// Fire acts on a timer message for a step no executor runs: a job's start
// at run_at opens the step; a sleep past its wake time wakes; a wait or an
// approval gate past its deadline times out and fails the job. A timer
// that comes early answers *NotYetError; one with nothing left to act on
// (the step moved on, the job finished or was cancelled) an illegal
// transition.
func (j *Job) Fire(stepID string, now time.Time) ([]Dispatch, error) {
	s, i, err := j.Step(stepID)
	if err != nil {
		return nil, err
	}
	stale := &IllegalTransitionError{Kind: "step", ID: stepID, From: string(s.State), Event: "timer"}
	if j.State.Terminal() {
		return nil, stale
	}
	switch {
	case s.State == StepPending && s.ReadyAt != nil && j.depsMet(i):
		if now.Before(*s.ReadyAt) {
			return nil, &NotYetError{Until: *s.ReadyAt}
		}
		s.ReadyAt = nil
		out, err := j.ready(s, now)
		if err != nil {
			return nil, err
		}
		if err := j.settle(now); err != nil {
			return nil, err
		}
		return out, nil
	case s.timerAt() == nil:
		return nil, stale
	case now.Before(*s.timerAt()):
		return nil, &NotYetError{Until: *s.timerAt()}
	case s.State == StepWaiting && s.Timer.WakeAt != nil:
		out, err := j.wake(s, j.InputData(i), "slept until "+s.Timer.WakeAt.Format(time.RFC3339), now)
		if err != nil {
			return nil, err
		}
		if err := j.settle(now); err != nil {
			return nil, err
		}
		return out, nil
	default:
		// A deadline: only a step that waits has one.
		w, ok := actionTypes.byName[s.Spec.Action.Type].(waitingAction)
		if !ok {
			return nil, stale
		}
		return nil, j.timeOut(s, w.timedOut(s.Spec.Action), now)
	}
}

// FireDue fires every timer of the job that is past due at now: the
// sweep's safety net for a timer message that never came, and the end of
// a resource wait past its bound, but for the steps sent answers true for
// (nil: none). It answers what to send and how many timers it fired.
func (j *Job) FireDue(now time.Time, sent func(*Step) bool) ([]Dispatch, int, error) {
	var out []Dispatch
	n := 0
	for _, s := range j.Steps {
		// A step that fails the job cancels the others, so their timers
		// are gone from then on. One whose message the sweep has just sent
		// (sent) is fired by that message.
		if t := s.timerAt(); t == nil || now.Before(*t) || j.State.Terminal() || sent != nil && sent(s) {
			continue
		}
		ds, err := j.Fire(s.ID(), now)
		if err != nil {
			return out, n, err
		}
		out = append(out, ds...)
		n++
	}
	// A resource wait's bound is a timer too, with no message of its own.
	expired, err := j.ExpireResourceWaits(now)
	return out, n + expired, err
}

// timeOut ends a step that waited past its deadline: TIMED_OUT, then
// FAILED, and the job with it.
func (j *Job) timeOut(s *Step, msg string, now time.Time) error {
	for _, ev := range []StepEvent{StepEvTimeOut, StepEvFail} {
		if err := j.stepTo(s, ev, now, msg); err != nil {
			return err
		}
	}
	s.Error, s.Timer = &StepError{Class: ClassTimeout, Message: msg}, nil
	return j.settle(now)
}

// SignalRequest is a signal as a client sends it.
type SignalRequest struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// ID makes the signal idempotent: a second signal with the same id is
	// dropped.
	ID string `json:"id,omitempty"`
	// Request is set by the engine, once per request: a write of this
	// request that landed though its answer was lost (and was retried) is
	// found again, so the request is answered as delivered even without an
	// ID.
	Request string `json:"-"`
}

// Validate checks a signal's fields.
func (r *SignalRequest) Validate() error {
	switch {
	case !namePattern.MatchString(r.Name):
		return Invalid("name", "is required and must match %s", namePattern)
	case len(r.Payload) > MaxSignalBytes:
		return Invalid("payload", "is %d bytes; the limit is %d", len(r.Payload), MaxSignalBytes)
	case len(r.ID) > 128:
		return Invalid("id", "is longer than 128 characters")
	}
	if len(r.Payload) == 0 {
		r.Payload = json.RawMessage(`null`)
	}
	return CheckJSON("payload", r.Payload)
}

// What became of a signal (SignalOutcome.Outcome).
const (
	SignalDelivered = "delivered" // a wait took it: its step succeeded
	SignalKept      = "kept"      // kept for a wait of its name not reached yet
	SignalDropped   = "dropped"   // no wait of the job can take it: nothing written
)

// SignalOutcome says what became of a signal, and why.
type SignalOutcome struct {
	Outcome string `json:"outcome"`
	Step    string `json:"step,omitempty"` // the wait that took it
	Reason  string `json:"reason"`
	// Repeat: a signal of the same id (or the same request) came before;
	// the outcome is that signal's, and nothing was written.
	Repeat bool `json:"repeat,omitempty"`
}

// Written reports whether the signal changed the job.
func (o SignalOutcome) Written() bool { return !o.Repeat && o.Outcome != SignalDropped }

// Signal delivers a signal (see Deliver) and reports whether it changed
// the job.
func (j *Job) Signal(r SignalRequest, now time.Time) ([]Dispatch, bool, error) {
	ds, o, err := j.Deliver(r, now)
	return ds, o.Written(), err
}

// repeatedSignal answers the outcome of a signal whose id (or request)
// the job has seen already.
func (j *Job) repeatedSignal(r SignalRequest) (SignalOutcome, bool) {
	for _, sg := range j.Signals {
		if r.ID != "" && sg.ID == r.ID || r.Request != "" && sg.Request == r.Request {
			if sg.Step != "" {
				return SignalOutcome{Outcome: SignalDelivered, Step: sg.Step, Repeat: true, Reason: "a repeat: step " + sg.Step + " took this signal already"}, true
			}
			return SignalOutcome{Outcome: SignalKept, Repeat: true, Reason: "a repeat: this signal is kept already"}, true
		}
	}
	return SignalOutcome{}, false
}

// waitingFor answers the first wait step waiting for signal name, if any.
func (j *Job) waitingFor(name string) *Step {
	for _, s := range j.Steps {
		if s.State == StepWaiting && s.Spec.Action.Type == ActionWait && s.Spec.Action.Signal == name {
			return s
		}
	}
	return nil
}

// Deliver delivers a signal: the first step waiting for its name succeeds
// with the payload as its output and the job goes on. With no such step
// yet the signal is kept, and the first wait of its name to be reached
// takes it, but only while the job has a wait of that name without a
// signal kept for it (a wait step not done yet, or one a fail action's
// replan would add): any other is dropped, writing nothing, so a flood of
// names nothing waits for cannot fill the job's kept signals and lock out
// the ones its waits do wait for. A signal whose id was seen already
// changes nothing and answers that signal's outcome; a finished job
// refuses it.
func (j *Job) Deliver(r SignalRequest, now time.Time) ([]Dispatch, SignalOutcome, error) {
	// A repeat of a delivered signal's id writes nothing, even once the
	// job has finished: the sender's retry of a request whose answer was
	// lost (the signal may have ended the job) hears what it first would.
	if o, repeat := j.repeatedSignal(r); repeat {
		return nil, o, nil
	}
	if j.State.Terminal() {
		return nil, SignalOutcome{}, refused("job", j.ID, string(j.State), "signal "+r.Name, "the job is %s; only a job that has not finished takes signals", j.State)
	}
	if s := j.waitingFor(r.Name); s != nil {
		j.Signals = append(j.Signals, Signal{Name: r.Name, Payload: r.Payload, ID: r.ID, Request: r.Request, At: now})
		j.log(NoteSignalReceived, "", 0, r.Name+": taken by step "+s.ID(), now)
		out, err := j.takeSignal(s, len(j.Signals)-1, now)
		if err != nil {
			return nil, SignalOutcome{}, err
		}
		if err := j.settle(now); err != nil {
			return nil, SignalOutcome{}, err
		}
		return out, SignalOutcome{Outcome: SignalDelivered, Step: s.ID(), Reason: "step " + s.ID() + " was waiting for it"}, nil
	}
	kept, keptOfName := 0, 0
	for _, sg := range j.Signals {
		if sg.Step == "" {
			kept++
			if sg.Name == r.Name {
				keptOfName++
			}
		}
	}
	switch waits := j.waitsFor(r.Name); {
	case waits == 0:
		return nil, SignalOutcome{Outcome: SignalDropped, Reason: fmt.Sprintf("no wait step of this job (nor of a replan its fail actions carry) waits for signal %q; nothing was kept", r.Name)}, nil
	case keptOfName >= waits:
		return nil, SignalOutcome{Outcome: SignalDropped, Reason: fmt.Sprintf("each of the job's %d wait step(s) for signal %q has a signal kept already; nothing more was kept", waits, r.Name)}, nil
	case kept >= MaxKeptSignals:
		return nil, SignalOutcome{}, &Error{Code: CodeConflict, Message: fmt.Sprintf("job %s keeps %d signals no wait has taken; it takes no more", j.ID, kept)}
	}
	j.Signals = append(j.Signals, Signal{Name: r.Name, Payload: r.Payload, ID: r.ID, Request: r.Request, At: now})
	j.log(NoteSignalReceived, "", 0, r.Name+": kept until a wait for it is reached", now)
	if err := j.settle(now); err != nil {
		return nil, SignalOutcome{}, err
	}
	return nil, SignalOutcome{Outcome: SignalKept, Reason: "no wait for it is reached yet; the first to be reached takes it"}, nil
}

// waitsFor counts the wait steps of the job that may still take a signal
// of name: those not done, and those a fail action's replan (at any depth)
// would add to a step not replaced yet. A worker's replan is decided when
// it happens, so the waits it may add are not known before.
func (j *Job) waitsFor(name string) int {
	n := 0
	count := func(_ string, st *StepSpec) error {
		if st.Action.Type == ActionWait && st.Action.Signal == name {
			n++
		}
		return nil
	}
	for _, s := range j.Steps {
		if s.State.Done() || s.ReplacedBy != nil {
			continue
		}
		_ = count("", &s.Spec)
		_ = WalkSteps(s.Spec.Action.Steps, "", count)
	}
	return n
}

// keptSignal answers the position of the earliest kept signal of name, or
// -1.
func (j *Job) keptSignal(name string) int {
	for k, sg := range j.Signals {
		if sg.Step == "" && sg.Name == name {
			return k
		}
	}
	return -1
}

// takeSignal gives signal k to the waiting step s: it succeeds with the
// payload as its output.
func (j *Job) takeSignal(s *Step, k int, now time.Time) ([]Dispatch, error) {
	j.Signals[k].Step = s.ID()
	return j.wake(s, Data{raw: j.Signals[k].Payload}, "signal "+j.Signals[k].Name, now)
}

// Outstanding answers the messages a job that has not started needs: each
// runnable step's (at its ready time) and each timer's, but for those
// further off than the timer threshold, which the sweep sends (Arm). A
// submission sends them; sending them twice is harmless.
func (j *Job) Outstanding(now time.Time) []Dispatch {
	var out []Dispatch
	for _, s := range j.Steps {
		if s.AwaitsArm() {
			continue
		}
		var at *time.Time
		switch {
		case s.State.leasable() && s.Lease == nil:
			at = s.ReadyAt
		default:
			at = s.timerAt()
		}
		if at == nil && !s.State.leasable() {
			continue
		}
		d := time.Duration(0)
		if at != nil && at.After(now) {
			d = at.Sub(now)
		}
		out = append(out, Dispatch{Step: s, Delay: d})
	}
	return out
}

// Started reports whether any step of the job has run or ended.
func (j *Job) Started() bool {
	for _, s := range j.Steps {
		if s.Attempt > 0 || s.State.Terminal() {
			return true
		}
	}
	return false
}

// WaitsOnPerson reports whether the unfinished job waits on a person (a
// step NEEDS_USER): what health counts as blocked. A job that sleeps or
// waits for a signal moves on by itself.
func (j *Job) WaitsOnPerson() bool {
	if j.State.Terminal() {
		return false
	}
	if j.BudgetHeld() {
		return true // at its budget gate: a person raises the budget or cancels
	}
	for _, s := range j.Steps {
		if s.State == StepNeedsUser {
			return true
		}
	}
	return false
}
