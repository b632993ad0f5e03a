package domain

import (
	"fmt"
	"slices"
	"strings"
)

// StepEvent is what moves a step from one state to another.
type StepEvent string

const (
	StepEvWaitDeps       StepEvent = "wait_deps"       // an upstream step is not done yet
	StepEvDepsMet        StepEvent = "deps_met"        // every upstream step succeeded
	StepEvLease          StepEvent = "lease"           // an executor or worker takes the lease
	StepEvStart          StepEvent = "start"           // the leaseholder starts (or resumes) running it
	StepEvSucceed        StepEvent = "succeed"         // critic decision accept
	StepEvFailRetryable  StepEvent = "fail_retryable"  // critic decision retry
	StepEvRetry          StepEvent = "retry"           // backoff scheduled
	StepEvFailResource   StepEvent = "fail_resource"   // critic decision switch_resource
	StepEvSwitchResource StepEvent = "switch_resource" // resource put on the avoid list
	StepEvFailFatal      StepEvent = "fail_fatal"      // critic decision replan or fatal, or attempts exhausted
	StepEvFail           StepEvent = "fail"            // final failure
	StepEvNeedsUser      StepEvent = "needs_user"      // critic decision needs_user, or an approval gate opens
	StepEvApprove        StepEvent = "approve"         // a person approves the gate
	StepEvReject         StepEvent = "reject"          // a person rejects the gate
	StepEvLeaseTimeout   StepEvent = "lease_timeout"   // the lease expired without an outcome
	StepEvRequeue        StepEvent = "requeue"         // a timed-out lease goes back to the queue
	StepEvTimeOut        StepEvent = "time_out"        // the attempt ran past timeout_seconds
	StepEvCancel         StepEvent = "cancel"          // the job was cancelled
	StepEvResume         StepEvent = "resume"          // a person answered: the step runs again with their input
	StepEvWait           StepEvent = "wait"            // a sleep or wait step starts waiting
	StepEvWake           StepEvent = "wake"            // its time came, or its signal arrived
	StepEvRedrive        StepEvent = "redrive"         // the failed job runs again from this step
	StepEvSkip           StepEvent = "skip"            // its condition (when) was false: it ends without running
	// StepEvResourceWaitExpired: no resource slot came within the step's
	// resource_wait_seconds (a failure of class resource with no attempt).
	StepEvResourceWaitExpired StepEvent = "resource_wait_expired"
)

// Transition is one row of a transition table: the event moves any of Sources
// to Destination. Everything else about an event is refused.
type Transition[S ~string, E ~string] struct {
	Event       E
	Sources     []S
	Destination S
}

// stepTransitions is the canonical step machine. Validation, the store's
// conditions, replay and the tests all read this one table.
var stepTransitions = []Transition[StepState, StepEvent]{
	{StepEvWaitDeps, []StepState{StepPending}, StepWaitingDeps},
	{StepEvDepsMet, []StepState{StepWaitingDeps}, StepPending},
	{StepEvSkip, []StepState{StepPending, StepWaitingDeps}, StepSkipped},
	{StepEvLease, []StepState{StepPending, StepWaitingDeps, StepSwitchingResource}, StepLeased},
	{StepEvStart, []StepState{StepLeased, StepRetrying, StepNeedsUser}, StepRunning},
	{StepEvSucceed, []StepState{StepRunning}, StepSucceeded},
	{StepEvFailRetryable, []StepState{StepRunning}, StepFailedRetryable},
	{StepEvRetry, []StepState{StepFailedRetryable, StepTimedOut}, StepRetrying},
	{StepEvFailResource, []StepState{StepRunning}, StepFailedResource},
	{StepEvResourceWaitExpired, []StepState{StepPending, StepRetrying, StepSwitchingResource}, StepFailedResource},
	{StepEvSwitchResource, []StepState{StepFailedResource}, StepSwitchingResource},
	// From PENDING: its condition could not be decided (it names what its
	// dependency's output lacks, say); the step fails without running.
	{StepEvFailFatal, []StepState{StepRunning, StepFailedResource, StepPending}, StepFailedFatal},
	{StepEvFail, []StepState{StepFailedFatal, StepFailedRetryable, StepTimedOut, StepLeaseTimeout}, StepFailed},
	{StepEvNeedsUser, []StepState{StepRunning, StepPending}, StepNeedsUser},
	{StepEvApprove, []StepState{StepNeedsUser}, StepSucceeded},
	{StepEvReject, []StepState{StepNeedsUser}, StepFailed},
	{StepEvLeaseTimeout, []StepState{StepLeased, StepRunning}, StepLeaseTimeout},
	{StepEvRequeue, []StepState{StepLeaseTimeout}, StepPending},
	{StepEvTimeOut, []StepState{StepRunning, StepNeedsUser, StepWaiting}, StepTimedOut},
	{StepEvResume, []StepState{StepNeedsUser}, StepPending},
	{StepEvWait, []StepState{StepPending}, StepWaiting},
	{StepEvWake, []StepState{StepWaiting}, StepSucceeded},
	{StepEvRedrive, []StepState{StepFailed, StepCancelled}, StepPending},
	{StepEvCancel, []StepState{
		StepPending, StepWaitingDeps, StepLeased, StepRunning, StepFailedRetryable, StepRetrying,
		StepFailedResource, StepSwitchingResource, StepFailedFatal, StepNeedsUser, StepLeaseTimeout, StepTimedOut,
		StepWaiting,
	}, StepCancelled},
}

// JobEvent is a job-level event of the formal job machine
// (docs/model.md#formal-job-machine), plus job_parked and job_retrying for
// the two states it names but gives no event.
type JobEvent string

const (
	JobEvCreated       JobEvent = "job_created"
	JobEvQueued        JobEvent = "job_queued"
	JobEvRequeued      JobEvent = "job_requeued"
	JobEvLeased        JobEvent = "job_leased"
	JobEvRunning       JobEvent = "job_running"
	JobEvWaiting       JobEvent = "job_waiting"
	JobEvParked        JobEvent = "job_parked"
	JobEvRetrying      JobEvent = "job_retrying"
	JobEvWaitCompleted JobEvent = "wait_completed"
	JobEvCompleted     JobEvent = "job_completed"
	JobEvFailed        JobEvent = "job_failed"
	JobEvCancelled     JobEvent = "job_cancelled"
)

// Notes are job-level events that move no state, as the formal machine's
// other events (plan_generated, node_started ...) do not: replay passes
// over them (docs/model.md#event-log-and-replay).
const (
	NoteSignalReceived = "signal_received" // a signal arrived (kept for a wait not reached yet, or taken by one)
	NoteReplanned      = "job_replanned"   // a replan put new steps in a failed step's place
	NoteBudgetExceeded = "budget_exceeded" // the job's cost passed its budget: no further step starts
	NoteBudgetSet      = "budget_set"      // a person set its budget (above what it cost): it goes on
)

// IsNote reports whether an event type is a note.
func IsNote(typ string) bool {
	return typ == NoteSignalReceived || typ == NoteReplanned || typ == NoteBudgetExceeded || typ == NoteBudgetSet
}

// JobInitial is the pseudo-state before job_created.
const JobInitial JobState = ""

// formalJobTransitions is the formal job machine's own state x event table
// (docs/model.md#formal-job-machine), verbatim: what consumers of the event
// stream hold a job's log against.
var formalJobTransitions = []Transition[JobState, JobEvent]{
	{JobEvCreated, []JobState{JobInitial}, JobQueued},
	{JobEvQueued, []JobState{JobInitial}, JobQueued},
	{JobEvRequeued, []JobState{JobInitial, JobQueued, JobRunning, JobRetrying, JobFailed}, JobQueued},
	{JobEvLeased, []JobState{JobQueued, JobRetrying}, JobRunning},
	{JobEvRunning, []JobState{JobQueued, JobRetrying}, JobRunning},
	{JobEvWaiting, []JobState{JobRunning}, JobWaiting},
	{JobEvWaitCompleted, []JobState{JobQueued, JobRunning, JobWaiting, JobParked, JobRetrying}, JobQueued},
	{JobEvCompleted, []JobState{JobRunning}, JobCompleted},
	{JobEvFailed, []JobState{JobRunning}, JobFailed},
	{JobEvCancelled, []JobState{JobRunning, JobWaiting, JobParked}, JobCancelled},
}

// JobWidening is one pair the canonical job table adds to the formal job
// machine's, kept because a row of a lifecycle stepflow serves needs that
// very transition: the engine emits the formal machine's own sequence
// everywhere else (settle's path through the table, in the same write).
// The table of widenings in docs/model.md#formal-job-machine is generated
// from this list (go generate ./shared/domain).
type JobWidening struct {
	From      JobState
	Event     JobEvent
	To        JobState
	Lifecycle string // the lifecycle (a section of docs/model.md) whose row needs it
	Row       string // that row, in its own words
	Why       string // what stepflow does that makes it
}

// jobWidenings are every widening of the formal job table, each with the
// lifecycle row that requires it. Nothing else may be added to the table.
var jobWidenings = []JobWidening{
	{JobQueued, JobEvCancelled, JobCancelled, "approval-gated runs", "`PENDING -> CANCELED` (`POST /runs/{id}/cancel`)",
		"a client cancels a job before it starts, or between its steps"},
	{JobRunning, JobEvRetrying, JobRetrying, "quality-platform tasks", "`doing -> blocked` (the run failed and may be retried)",
		"the formal machine names Retrying but gives no event into it: a step backs off after a failure"},
	{JobWaiting, JobEvParked, JobParked, "formal job machine", "state Parked (a long wait that the scheduler skips; woken by a signal)",
		"the formal machine names Parked but gives no event into it: every wait left has no deadline or one beyond the timer threshold"},
	{JobWaiting, JobEvCompleted, JobCompleted, "approval-gated runs", "`WAITING_APPROVAL -> SUCCEEDED` (the approval completes the last gate)",
		"an approval, a signal or a sleep's time closes the job's last step"},
	{JobWaiting, JobEvFailed, JobFailed, "approval-gated runs", "`WAITING_APPROVAL -> FAILED` (a failure in what runs after the approval)",
		"a person rejects a gate, or a gate or a wait passes its deadline"},
}

// jobTransitions is the canonical job table: the formal machine's table
// plus jobWidenings, and nothing else.
var jobTransitions = widen(formalJobTransitions, jobWidenings)

// widen answers table with each widening's source added to its event's
// row, or a new row for an event the table does not have.
func widen(table []Transition[JobState, JobEvent], ws []JobWidening) []Transition[JobState, JobEvent] {
	out := make([]Transition[JobState, JobEvent], len(table))
	for i, t := range table {
		out[i] = Transition[JobState, JobEvent]{t.Event, slices.Clone(t.Sources), t.Destination}
	}
	for _, w := range ws {
		i := slices.IndexFunc(out, func(t Transition[JobState, JobEvent]) bool { return t.Event == w.Event })
		switch {
		case i < 0:
			out = append(out, Transition[JobState, JobEvent]{w.Event, []JobState{w.From}, w.To})
		case out[i].Destination != w.To || slices.Contains(out[i].Sources, w.From):
			panic(fmt.Sprintf("widening %s --%s--> %s: the table already has it, or leads %s elsewhere", w.From, w.Event, w.To, w.Event))
		default:
			out[i].Sources = append(out[i].Sources, w.From)
		}
	}
	return out
}

// jobMove is a change of job state, from one state to another.
type jobMove struct{ from, to JobState }

// jobEvRun stands in a settle path for the event that starts the job
// running: job_leased when a worker took the lease, job_running otherwise.
const jobEvRun JobEvent = "(run)"

// settlePaths are the job events settle writes, all in one change, to take
// a job from an unfinished state to the state its steps imply: the direct
// event where the table has one, else the shortest way through it, as the
// formal machine would go, through RUNNING only when no other way as short
// exists. They are data, not a search: a test walks each through the job
// table and holds them to every pair the table can reach. A finished job
// is never settled, so none starts at one.
var settlePaths = map[jobMove][]JobEvent{
	{JobQueued, JobRunning}:   {jobEvRun},
	{JobQueued, JobWaiting}:   {jobEvRun, JobEvWaiting},
	{JobQueued, JobParked}:    {jobEvRun, JobEvWaiting, JobEvParked},
	{JobQueued, JobRetrying}:  {jobEvRun, JobEvRetrying},
	{JobQueued, JobCompleted}: {jobEvRun, JobEvCompleted},
	{JobQueued, JobFailed}:    {jobEvRun, JobEvFailed},
	{JobQueued, JobCancelled}: {JobEvCancelled},

	{JobRunning, JobQueued}:    {JobEvRequeued},
	{JobRunning, JobWaiting}:   {JobEvWaiting},
	{JobRunning, JobParked}:    {JobEvWaiting, JobEvParked},
	{JobRunning, JobRetrying}:  {JobEvRetrying},
	{JobRunning, JobCompleted}: {JobEvCompleted},
	{JobRunning, JobFailed}:    {JobEvFailed},
	{JobRunning, JobCancelled}: {JobEvCancelled},

	{JobWaiting, JobQueued}:    {JobEvWaitCompleted},
	{JobWaiting, JobRunning}:   {JobEvWaitCompleted, jobEvRun},
	{JobWaiting, JobParked}:    {JobEvParked},
	{JobWaiting, JobRetrying}:  {JobEvWaitCompleted, jobEvRun, JobEvRetrying},
	{JobWaiting, JobCompleted}: {JobEvCompleted},
	{JobWaiting, JobFailed}:    {JobEvFailed},
	{JobWaiting, JobCancelled}: {JobEvCancelled},

	{JobParked, JobQueued}:    {JobEvWaitCompleted},
	{JobParked, JobRunning}:   {JobEvWaitCompleted, jobEvRun},
	{JobParked, JobWaiting}:   {JobEvWaitCompleted, jobEvRun, JobEvWaiting},
	{JobParked, JobRetrying}:  {JobEvWaitCompleted, jobEvRun, JobEvRetrying},
	{JobParked, JobCompleted}: {JobEvWaitCompleted, jobEvRun, JobEvCompleted},
	{JobParked, JobFailed}:    {JobEvWaitCompleted, jobEvRun, JobEvFailed},
	{JobParked, JobCancelled}: {JobEvCancelled},

	{JobRetrying, JobQueued}:    {JobEvRequeued},
	{JobRetrying, JobRunning}:   {jobEvRun},
	{JobRetrying, JobWaiting}:   {jobEvRun, JobEvWaiting},
	{JobRetrying, JobParked}:    {jobEvRun, JobEvWaiting, JobEvParked},
	{JobRetrying, JobCompleted}: {jobEvRun, JobEvCompleted},
	{JobRetrying, JobFailed}:    {jobEvRun, JobEvFailed},
	{JobRetrying, JobCancelled}: {JobEvRequeued, JobEvCancelled},
}

// settlePath answers the job events that take a job from one state to
// another (none when they are the same), and false when settlePaths has
// no way.
func settlePath(from, to JobState, viaWorker bool) ([]JobEvent, bool) {
	if from == to {
		return nil, true
	}
	path, ok := settlePaths[jobMove{from, to}]
	if !ok {
		return nil, false
	}
	run := JobEvRunning
	if viaWorker {
		run = JobEvLeased
	}
	out := slices.Clone(path)
	for i, ev := range out {
		if ev == jobEvRun {
			out[i] = run
		}
	}
	return out, true
}

// next looks event up in table and answers the destination from state, or
// an *IllegalTransitionError.
func next[S ~string, E ~string](table []Transition[S, E], kind string, state S, event E) (S, error) {
	for _, t := range table {
		if t.Event != event {
			continue
		}
		if slices.Contains(t.Sources, state) {
			return t.Destination, nil
		}
		return state, &IllegalTransitionError{Kind: kind, From: string(state), Event: string(event)}
	}
	return state, &IllegalTransitionError{Kind: kind, From: string(state), Event: string(event)}
}

// NextStepState answers where event takes a step in state.
func NextStepState(state StepState, event StepEvent) (StepState, error) {
	return next(stepTransitions, "step", state, event)
}

// NextJobState answers where event takes a job in state.
func NextJobState(state JobState, event JobEvent) (JobState, error) {
	return next(jobTransitions, "job", state, event)
}

// JobSources lists the states event may leave, for the store's conditions.
func JobSources(event JobEvent) []JobState {
	for _, t := range jobTransitions {
		if t.Event == event {
			return t.Sources
		}
	}
	return nil
}

// IllegalTransitionError says that event cannot move a job or step from its
// state. It answers 409.
type IllegalTransitionError struct {
	Kind  string // "job" or "step"
	ID    string
	From  string
	Event string
	// Message is what the person who asked is told, when a client asked
	// for it (cancel, redrive, approve...): the state the job or step is
	// in and what is allowed, in their words rather than the tables'.
	Message string
}

// refused is an illegal transition a client asked for, with what to tell
// them.
func refused(kind, id, from, event, format string, args ...any) *IllegalTransitionError {
	return &IllegalTransitionError{Kind: kind, ID: id, From: from, Event: event, Message: fmt.Sprintf(format, args...)}
}

func (e *IllegalTransitionError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	from := e.From
	if from == "" {
		from = "(initial)"
	}
	if e.ID != "" {
		return fmt.Sprintf("%s %s is %s: %s is not allowed", e.Kind, e.ID, from, e.Event)
	}
	return fmt.Sprintf("%s in state %s: %s is not allowed", e.Kind, from, e.Event)
}

// SaveSources answers the job states a change may be saved from: the
// sources of its first new job event (after the loadedEvents the job had
// when read), or the job's own state when the change has no job event. A
// store saves the change only if the stored job is still in one of them.
func SaveSources(j *Job, loadedEvents int) []JobState {
	for _, ev := range j.Events[min(loadedEvents, len(j.Events)):] {
		if ev.Step == "" {
			return JobSources(JobEvent(ev.Type))
		}
	}
	return []JobState{j.State}
}

// StepTable answers a copy of the step machine's transitions, for tools and
// tests outside the package; the table itself cannot be changed from there.
func StepTable() []Transition[StepState, StepEvent] { return slices.Clone(stepTransitions) }

// JobTable answers a copy of the canonical job table's transitions.
func JobTable() []Transition[JobState, JobEvent] { return slices.Clone(jobTransitions) }

// FormalJobTable answers a copy of the formal job machine's own table.
func FormalJobTable() []Transition[JobState, JobEvent] { return slices.Clone(formalJobTransitions) }

// JobWidenings answers the pairs the canonical job table adds to the
// formal one, each with the lifecycle row that requires it.
func JobWidenings() []JobWidening { return slices.Clone(jobWidenings) }

// CheckFormal walks a job's state events through the formal job machine's
// table plus the documented widenings (JobWidenings), as a consumer of the
// event stream holds them, and names the first pair that is neither. It
// reads nothing of the canonical table, so it is a second opinion beside
// Replay.
func CheckFormal(events []Event) error {
	state := JobInitial
	for _, ev := range events {
		if ev.Step != "" || IsNote(ev.Type) || strings.HasPrefix(ev.Type, "step_") {
			continue
		}
		event := JobEvent(ev.Type)
		if to, err := next(formalJobTransitions, "job", state, event); err == nil {
			state = to
			continue
		}
		i := slices.IndexFunc(jobWidenings, func(w JobWidening) bool { return w.From == state && w.Event == event })
		if i < 0 {
			from := string(state)
			if state == JobInitial {
				from = "(initial)"
			}
			return fmt.Errorf("event %d: %s --%s--> is neither in the formal job table nor a documented widening (docs/model.md#formal-job-machine)", ev.Seq, from, event)
		}
		state = jobWidenings[i].To
	}
	return nil
}
