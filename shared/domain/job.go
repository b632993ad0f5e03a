package domain

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// leaseExpired is the error of an attempt whose lease ran out.
const leaseExpired = "lease expired before an outcome was reported"

// DispatchGrace is how long a runnable step may wait for its message, or a
// lease may stay expired, before the heartbeat's sweep acts on it. It bounds
// how long a message lost between a DynamoDB write and an SQS send delays a
// job.
const DispatchGrace = 60 * time.Second

// Retention is how long a finished job is kept, per terminal state, in
// days (the quality platform's cleanup rules, docs/model.md#retention),
// applied as a TTL. Zero fields take the defaults.
type Retention struct {
	CompletedDays int `json:"completed_days,omitempty"`
	FailedDays    int `json:"failed_days,omitempty"`
	CancelledDays int `json:"cancelled_days,omitempty"`
}

// DefaultRetention: completed 30 days, failed 14, cancelled 7.
var DefaultRetention = Retention{CompletedDays: 30, FailedDays: 14, CancelledDays: 7}

// For answers how long a job finished in state is kept.
func (r Retention) For(state JobState) time.Duration {
	days := map[JobState]int{
		JobCompleted: cmp.Or(r.CompletedDays, DefaultRetention.CompletedDays),
		JobFailed:    cmp.Or(r.FailedDays, DefaultRetention.FailedDays),
		JobCancelled: cmp.Or(r.CancelledDays, DefaultRetention.CancelledDays),
	}[state]
	return time.Duration(days) * 24 * time.Hour
}

// Job is a submitted job: its projection (state, steps, attempts) and its
// append-only event log, stored together so one conditional write changes
// both or neither.
type Job struct {
	Tenant         string          `json:"tenant"`
	ID             string          `json:"id"`
	State          JobState        `json:"state"`
	Version        int64           `json:"version"`
	Queue          string          `json:"queue"`
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	EndedAt        *time.Time      `json:"ended_at,omitempty"`
	Steps          []*Step         `json:"steps"`
	Events         []Event         `json:"events"`
	// DueAt is when the sweep must look at the job if nothing else moved it;
	// nil once it is finished or waits on a person.
	DueAt *time.Time `json:"due_at,omitempty"`
	// ExpiresAt is when retention deletes the finished job.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// DataDeletedAt is when the sweep deleted the job's data in the blob
	// store, at ExpiresAt (see DataDue).
	DataDeletedAt *time.Time `json:"data_deleted_at,omitempty"`
	// Graph: the steps run as a DAG by their depends_on (set when any step
	// declares one, and by a replan); otherwise each runs after the one
	// before it.
	Graph bool `json:"graph,omitempty"`
	// RunAt is when the job may start at the earliest.
	RunAt *time.Time `json:"run_at,omitempty"`
	// ParkAfterSeconds is the timer threshold the job was submitted under:
	// a job whose waits end further off than that, or never, is PARKED.
	ParkAfterSeconds int `json:"park_after_seconds,omitempty"`
	// Retention is what the job was submitted under (none: the defaults).
	Retention *Retention `json:"retention,omitempty"`
	// Signals are the signals the job received, each kept until a wait
	// of its name takes it.
	Signals []Signal `json:"signals,omitempty"`
	// ScheduleID names the schedule whose tick made the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// PayloadRef is the payload kept in the blob store (Payload is then
	// nil).
	PayloadRef *DataRef `json:"payload_ref,omitempty"`
	// ResourceWaitSeconds is the resource-wait bound the job was submitted
	// under, for its steps that name none (ResourceWaitBound).
	ResourceWaitSeconds int `json:"resource_wait_seconds,omitempty"`
	// Error says why the job failed: the failed step's error, or why no
	// step of it could ever run again (stall.go).
	Error *StepError `json:"error,omitempty"`
	// Stored is the store's own note of how it keeps the job, carried
	// from the read that answered it to the write after it (the DynamoDB
	// store keeps a long job in parts); nil where the store needs none.
	Stored StoredLayout `json:"-"`
	// CancelRequested is a cancel asked of the job while other writers
	// kept winning its races (Store.RequestCancel): no write that has not
	// seen it succeeds, and the writer that reads it cancels the job
	// before its own change. It is kept beside the job, not in it.
	CancelRequested bool `json:"-"`
	// Marks are attempts' outcomes recorded beside the job, by key, while
	// other writers kept winning its races (Store.MarkOutcome); MarksMade
	// is how many marks the stored job had been given when read. No write
	// that has not read every mark succeeds, and the writer that reads
	// them applies them with its own change: one write for many outcomes.
	Marks     map[string][]byte `json:"-"`
	MarksMade int64             `json:"-"`
	// Fetched is data the job keeps in the blob store, by key, fetched by
	// the engine for a decision that asked for it (NeedDataError: a
	// condition reading a large output); Unfetchable says, by key, why
	// some can never be (gone, corrupt, too large). Neither is stored.
	Fetched     map[string][]byte `json:"-"`
	Unfetchable map[string]string `json:"-"`
	// Released is what a change released beside what its call answered
	// (a map's progress, settled after every change): TakeReleased.
	Released []Dispatch `json:"-"`
	// Parent links a child job to the step whose attempt made it
	// (action_job.go); nil for any other job.
	Parent *ParentRef `json:"parent,omitempty"`
	// Orphans are child jobs whose attempt ended without them (a timeout,
	// a cancel): each is cancelled after the write that orphaned it, and
	// by the sweep, which forgets it once it has ended.
	Orphans []string `json:"orphans,omitempty"`
	// Usage is what the job has cost so far, in AWS's units (usage.go);
	// Spent what it has spent since it was read, which its next write
	// saves.
	Usage Usage `json:"usage,omitzero"`
	// Budget is what the job may cost (budget.go); nil for no bound.
	Budget *Budget `json:"budget,omitempty"`
	Spent  Usage   `json:"-"`
	// ItemBytes and ItemDue are the store's note of the item the job was
	// read from or last written as (its size, its due index entry), which
	// the units of its next write depend on; 0 and "" where unknown.
	ItemBytes int    `json:"-"`
	ItemDue   string `json:"-"`
	// CarriedDue is, for a job read from a message rather than the store
	// (the engine's carried first write), when it was due as written: the
	// store's note of its due entry, which a message cannot carry.
	CarriedDue *time.Time `json:"-"`
	// orphaned are those this change orphaned (TakeOrphaned).
	orphaned []string
	// settleLater holds settle off while a map's instant items are
	// recorded, each one's settling being the next one's work.
	settleLater bool
}

// StoredLayout is a store's note of how it keeps a job, opaque here.
type StoredLayout any

// Signal is a named message to a job's wait steps.
type Signal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"` // the sender's id for it: a repeat is dropped
	// Request is the engine's id of the request that delivered it
	// (SignalRequest.Request).
	Request string    `json:"request,omitempty"`
	At      time.Time `json:"at"`
	Step    string    `json:"step,omitempty"` // the wait that took it; "" while it is kept
}

// Step is one step of a job with its attempts.
type Step struct {
	Spec    StepSpec  `json:"spec"`
	State   StepState `json:"state"`
	Attempt int       `json:"attempt"` // attempts started so far
	Lease   *Lease    `json:"lease,omitempty"`
	// ReadyAt is when the step became (or becomes, after a backoff) runnable,
	// or was last re-dispatched.
	ReadyAt *time.Time `json:"ready_at,omitempty"`
	// Unsent is the instant (its ReadyAt, or its timer's) whose message was
	// not sent, being further off than the job's timer threshold: the job
	// is due when it comes within it, and the sweep sends it then (arm.go).
	Unsent       *time.Time      `json:"unsent,omitempty"`
	Redispatches int             `json:"redispatches,omitempty"`
	Output       json.RawMessage `json:"output,omitempty"`
	Error        *StepError      `json:"error,omitempty"`
	Attempts     []Attempt       `json:"attempts,omitempty"`
	Avoid        []string        `json:"avoid,omitempty"` // workers that failed it with class resource
	// Prompt is what the step asks of a person while it is NEEDS_USER;
	// UserInput is their answer, which the step's next attempts run on
	// (any executed step's: it is its failure class, not its action).
	Prompt    string          `json:"prompt,omitempty"`
	UserInput json.RawMessage `json:"user_input,omitempty"`
	// Timer is how a step of an action type nothing runs (a sleep, a
	// wait, an approval gate) waits: nil unless it has a wake time or a
	// deadline, or parks its job.
	Timer    *Timer    `json:"timer,omitempty"`
	Decision *Decision `json:"decision,omitempty"` // how a person closed an approval gate
	// AttemptBase is how many attempts the step had before the last
	// redrive: its retry budget counts from there.
	AttemptBase int `json:"attempt_base,omitempty"`
	// ReplacedBy names the steps a replan put in this step's place.
	ReplacedBy []string `json:"replaced_by,omitempty"`
	// ResourceWait: the step is runnable but every matching resource's
	// slots are held; a freed slot wakes it.
	ResourceWait *ResourceWait `json:"resource_wait,omitempty"`
	// OutputRef is the output kept in the blob store (Output is then nil).
	OutputRef *DataRef `json:"output_ref,omitempty"`
	// OutputIsInput: the step's output is its input, which references data
	// in the blob store and is composed when read (a sleep's): one of the
	// three forms of an output, with Output and OutputRef.
	OutputIsInput bool `json:"output_is_input,omitempty"`
	// A map's child (action_map.go): the map it belongs to, its item and
	// the item's index.
	MapOf string          `json:"map_of,omitempty"`
	Item  json.RawMessage `json:"item,omitempty"`
	Index int             `json:"index,omitempty"`
	// A map: Expanded once its items made its Children (added after every
	// step it had); OutputIsChildren once it succeeded, its output being
	// the list of theirs, composed when read.
	Expanded         bool `json:"expanded,omitempty"`
	Children         int  `json:"children,omitempty"`
	OutputIsChildren bool `json:"output_is_children,omitempty"`
	// Child is the child job a job step's live attempt waits on
	// (action_job.go).
	Child *ChildRun `json:"child,omitempty"`
}

// ResourceWait says which resources a step waits on for a slot (none when
// no resource matches its requirements yet).
type ResourceWait struct {
	Since time.Time `json:"since"`
	On    []string  `json:"on"`
	// Until is when the wait ends in a failure of class resource if no
	// slot came (Since + the step's resource_wait_seconds).
	Until *time.Time `json:"until,omitempty"`
}

// attemptsLeft reports whether the step may run again after its current
// attempt, within its general retry budget: the attempts since the last
// redrive, less those that failed in a class with a policy of its own
// (an expired lease always counts here).
func (s *Step) attemptsLeft() bool {
	n := 0
	for _, a := range s.Attempts {
		if a.N > s.AttemptBase && !s.ownPolicy(a) {
			n++
		}
	}
	return n < s.Spec.Retry.MaxAttempts
}

// ownPolicy reports whether attempt a failed in a class with a retry
// policy of its own.
func (s *Step) ownPolicy(a Attempt) bool {
	if a.Error == nil || a.Error.Message == leaseExpired {
		return false
	}
	_, own := s.Spec.Retry.For(a.Error.Class)
	return own
}

// retryFor answers, for a failure of class c just recorded, the policy
// that governs it, which retry of that policy this would be (0 for the
// first), and whether one is left.
func (s *Step) retryFor(c FailureClass) (p *RetryPolicy, retry int, left bool) {
	p, own := s.Spec.Retry.For(c)
	if !own {
		return p, s.Attempt - s.AttemptBase - 1, s.attemptsLeft()
	}
	n := 0
	for _, a := range s.Attempts {
		if a.N > s.AttemptBase && a.Error != nil && a.Error.Class == c && a.Error.Message != leaseExpired {
			n++
		}
	}
	return p, n - 1, n < p.MaxAttempts
}

// ID is the step's id.
func (s *Step) ID() string { return s.Spec.ID }

// Lease is the right to run one attempt until ExpiresAt. Its ID is the
// fencing token: a write that names another lease is refused.
type Lease struct {
	ID        string    `json:"id"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
	Worker    string    `json:"worker,omitempty"`
	// Token is the queue's handle on the delivery the lease was taken from
	// (opaque here), so a heartbeat can extend it and completion ack it.
	Token string `json:"token,omitempty"`
	// Resource is the resource whose slot the attempt holds.
	Resource string `json:"resource,omitempty"`
	// Deadline is when the attempt has run for its step's timeout_seconds:
	// no heartbeat extends the lease past it, and one after it times the
	// attempt out.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// StepError is why an attempt failed.
type StepError struct {
	Class   FailureClass `json:"class"`
	Message string       `json:"message"`
}

// Attempt is one execution of a step.
type Attempt struct {
	N     int          `json:"n"`
	State AttemptState `json:"state"`
	// Lease is the id of the lease the attempt ran under: its holder may
	// repeat its outcome, or learn of a cancel, after the lease is gone.
	Lease string `json:"lease,omitempty"`
	// LeaseUntil is when the attempt's lease would have run out. Until then
	// its holder may repeat its outcome or hear cancel_requested; after it
	// the lease is simply lost.
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
	Worker     string          `json:"worker,omitempty"`
	Resource   string          `json:"resource,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	EndedAt    *time.Time      `json:"ended_at,omitempty"`
	Error      *StepError      `json:"error,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	OutputRef  *DataRef        `json:"output_ref,omitempty"` // the output kept in the blob store
	// Child is the child job the attempt made (a job step's).
	Child string `json:"child,omitempty"`
	// CostUSD is what the attempt said it spent (ReportCost).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Event is one entry of a job's log. Type is a job event (job_created ...)
// or step_<state> for a step transition.
type Event struct {
	Seq     int       `json:"seq"`
	Type    string    `json:"type"`
	At      time.Time `json:"at"`
	Step    string    `json:"step,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// Dispatch is a message the caller must send after the job is saved: the
// step is runnable at Delay from now.
type Dispatch struct {
	Step  *Step
	Delay time.Duration
	// Wake names the resource whose freed slot woke the step: if the step
	// has nothing to do by then, it wakes the next in line.
	Wake string
}

// NewJob builds a job from a validated spec: QUEUED, its first steps
// PENDING (from run_at, if it is ahead) and the others WAITING_DEPS on the
// steps they depend on, or in order on the step before them (the
// approval-gated runs' order of position,
// docs/model.md#approval-gated-runs). Outstanding answers what to send.
func NewJob(tenant, id string, spec *JobSpec, idemKey string, now time.Time) (*Job, error) {
	j := &Job{
		Tenant: tenant, ID: id, Queue: spec.Queue, Priority: int(*spec.Priority),
		Payload: spec.Payload, IdempotencyKey: idemKey, CreatedAt: now, UpdatedAt: now,
		Graph: spec.DAG(), ParkAfterSeconds: int(cmp.Or(spec.ParkAfter, DefaultTimerThreshold) / time.Second),
		ScheduleID:          spec.ScheduleID,
		PayloadRef:          spec.PayloadRef,
		ResourceWaitSeconds: int(cmp.Or(spec.ResourceWait, DefaultResourceWait) / time.Second),
	}
	if spec.Retention != (Retention{}) && spec.Retention != DefaultRetention {
		r := spec.Retention
		j.Retention = &r
	}
	if spec.RunAt != nil && spec.RunAt.After(now) {
		j.RunAt = spec.RunAt
	}
	if spec.Budget != nil {
		j.Budget = &Budget{USD: spec.Budget.USD}
	}
	if err := j.jobTo(JobEvCreated, now, ""); err != nil {
		return nil, err
	}
	if j.PayloadRef != nil && spec.PayloadStored != nil {
		j.Fetched = map[string][]byte{j.PayloadRef.Key: spec.PayloadStored}
		defer func() { j.Fetched = nil }()
	}
	for i := range spec.Steps {
		j.Steps = append(j.Steps, &Step{Spec: spec.Steps[i], State: StepPending})
	}
	// Every step that waits on another does so before any first step goes
	// on: a zero sleep ends at once and releases what follows it.
	for i, s := range j.Steps {
		if len(j.deps(i)) > 0 {
			if err := j.stepTo(s, StepEvWaitDeps, now, ""); err != nil {
				return nil, err
			}
		}
	}
	for i, s := range j.Steps {
		if len(j.deps(i)) > 0 {
			continue
		}
		if run, err := j.condition(i); j.RunAt != nil && err == nil && run {
			s.ReadyAt = j.RunAt // it opens, or is leased, when its message comes at run_at
			j.holdUnsent(s, *j.RunAt, now)
			continue
		}
		if _, err := j.open(i, now); err != nil {
			return nil, err
		}
	}
	if err := j.settle(now); err != nil {
		return nil, err
	}
	j.Released = nil // the first messages are what Outstanding answers
	return j, nil
}

// DefaultTimerThreshold is the longest delay sent as an SQS delay; a
// longer one waits in the due index until the sweep sends it within reach
// (arm.go) (STEPFLOW_TIMER_THRESHOLD). SQS allows at most 900 s.
const DefaultTimerThreshold = 900 * time.Second

// Step finds a step by id.
func (j *Job) Step(id string) (*Step, int, error) {
	if i, ok := j.positions()[id]; ok {
		return j.Steps[i], i, nil
	}
	return nil, -1, fmt.Errorf("job %s has no step %q: %w", j.ID, id, ErrNotFound)
}

// deps answers the positions of the steps step i waits for: those it
// depends_on in a DAG, else the step before it.
func (j *Job) deps(i int) []int {
	if !j.Graph && j.Steps[i].MapOf == "" { // a map's child names its own
		if i == 0 {
			return nil
		}
		return []int{i - 1}
	}
	var out []int
	pos := j.positions()
	for _, id := range j.Steps[i].Spec.DependsOn {
		if k, ok := pos[id]; ok {
			out = append(out, k)
		}
	}
	return out
}

// waitsOn reports whether step k waits for step i (deps(k) holds i),
// without building deps(k): every completion asks it of every waiting
// step.
func (j *Job) waitsOn(k, i int) bool {
	if !j.Graph && j.Steps[k].MapOf == "" {
		return k == i+1
	}
	id := j.Steps[i].Spec.ID
	return slices.Contains(j.Steps[k].Spec.DependsOn, id) && j.positions()[id] == i
}

// depsMet reports whether every step step i waits for is done (it
// succeeded, or its condition skipped it).
func (j *Job) depsMet(i int) bool {
	for _, k := range j.deps(i) {
		if !j.doneFor(j.Steps[k]) {
			return false
		}
	}
	return true
}

// doneFor reports whether what depends on s may go on: s is done, or is
// a failed child of a map that tolerates its failure.
func (j *Job) doneFor(s *Step) bool {
	return s.State.Done() || s.State == StepFailed && s.MapOf != "" && j.tolerated(s)
}

// Input answers what step i runs on. In order: the job's payload for the
// first step, the previous step's output after that (as in Step
// Functions). In a DAG: the payload for a step that depends on nothing,
// else {"payload": ..., "deps": {"<step id>": <its output>, ...}}. It is
// for a job that references no data in the blob store; InputData keeps
// the references, for the engine to fetch.
func (j *Job) Input(i int) json.RawMessage {
	in, _ := j.InputData(i).Compose(nil)
	return in
}

// withUserInput adds a person's answer to a step's input: as "user_input"
// beside the input's own members when it is an object, else as
// {"input": ..., "user_input": ...}.
func withUserInput(in, ui json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(in, &obj) != nil || obj == nil {
		obj = map[string]json.RawMessage{"input": in}
	}
	obj["user_input"] = ui
	out, _ := json.Marshal(obj)
	return out
}

// Runnable lists the steps waiting for an executor now or after a backoff.
func (j *Job) Runnable() []*Step {
	var out []*Step
	for _, s := range j.Steps {
		if s.State.leasable() {
			out = append(out, s)
		}
	}
	return out
}

func (s StepState) leasable() bool {
	return s == StepPending || s == StepRetrying || s == StepSwitchingResource
}

func (s StepState) leased() bool { return s == StepLeased || s == StepRunning }

// NotYetError says a retrying step's backoff has not run out.
type NotYetError struct{ Until time.Time }

func (e *NotYetError) Error() string { return "not runnable before " + e.Until.Format(time.RFC3339) }

// LeaseRequest asks for a lease on a step.
type LeaseRequest struct {
	Worker    string        // who runs it: a worker's name, or "" for the built-in executor
	ViaWorker bool          // taken through /v1/claim (job_leased) rather than run in place (job_running)
	Nonce     string        // random part of the lease id
	Duration  time.Duration // lease length
	Token     string        // the queue's handle on the delivery it came from
	Resource  string        // the resource whose slot the attempt took, if any
}

// Lease gives step id a lease for one new attempt and starts it: PENDING
// -> LEASED -> RUNNING, or RETRYING -> RUNNING. A lease found expired is
// reclaimed first (LEASE_TIMEOUT -> PENDING), in the same change.
func (j *Job) Lease(stepID string, req LeaseRequest, now time.Time) (*Lease, error) {
	if j.State.Terminal() {
		return nil, &IllegalTransitionError{Kind: "job", ID: j.ID, From: string(j.State), Event: string(JobEvRunning)}
	}
	s, i, err := j.Step(stepID)
	if err != nil {
		return nil, err
	}
	if s.State.leased() && s.Lease != nil && !now.Before(s.Lease.ExpiresAt) {
		if _, err := j.reclaim(s, now); err != nil {
			return nil, err
		}
		if j.State.Terminal() {
			return nil, &IllegalTransitionError{Kind: "job", ID: j.ID, From: string(j.State), Event: string(JobEvRunning)}
		}
	}
	if err := j.leasable(s, i, now); err != nil {
		return nil, err
	}
	if s.Spec.Requires != nil && req.Resource == "" {
		return nil, &IllegalTransitionError{Kind: "step", ID: stepID, From: string(s.State), Event: string(StepEvLease) + " (it requires a resource and none was given)"}
	}
	s.Attempt++
	lease := &Lease{
		ID:        LeaseRef{JobID: j.ID, StepIndex: i, Attempt: s.Attempt, Nonce: req.Nonce}.String(),
		Attempt:   s.Attempt,
		ExpiresAt: now.Add(req.Duration),
		Worker:    req.Worker,
		Token:     req.Token,
		Resource:  req.Resource,
	}
	if s.Spec.Action.Type == ActionJob || s.Spec.Action.Type == ActionStepFunctions {
		// Its lease is its child's run: timeout_seconds, else a year.
		d := lease.ExpiresAt
		lease.Deadline = &d
	}
	if t := s.Spec.TimeoutSeconds; t > 0 && s.Spec.Action.Type == ActionWorker {
		d := now.Add(time.Duration(t) * time.Second)
		lease.Deadline = &d
		if d.Before(lease.ExpiresAt) {
			lease.ExpiresAt = d
		}
	}
	if s.State != StepRetrying {
		if err := j.stepTo(s, StepEvLease, now, req.Worker); err != nil {
			return nil, err
		}
	}
	if err := j.stepTo(s, StepEvStart, now, ""); err != nil {
		return nil, err
	}
	s.Lease = lease
	s.ReadyAt = nil
	s.Redispatches = 0
	s.ResourceWait = nil
	s.Attempts = append(s.Attempts, Attempt{N: s.Attempt, State: AttemptRunning, Lease: lease.ID, Worker: req.Worker, Resource: req.Resource, StartedAt: &now})
	switch s.Spec.Action.Type {
	case ActionJob:
		j.startChild(s, lease, now)
	case ActionStepFunctions:
		j.startExecution(s, lease, now)
	}
	if err := j.settleVia(now, req.ViaWorker); err != nil {
		return nil, err
	}
	return lease, nil
}

// CanLease answers why step id cannot be leased now (nil if it can), with
// no change: the engine asks before it takes a resource's slot for it. A
// step whose lease expired is reclaimed before this is asked.
func (j *Job) CanLease(stepID string, now time.Time) error {
	if j.State.Terminal() {
		return &IllegalTransitionError{Kind: "job", ID: j.ID, From: string(j.State), Event: string(JobEvRunning)}
	}
	s, i, err := j.Step(stepID)
	if err != nil {
		return err
	}
	return j.leasable(s, i, now)
}

func (j *Job) leasable(s *Step, i int, now time.Time) error {
	stepID := s.ID()
	if !s.State.leasable() {
		return &IllegalTransitionError{Kind: "step", ID: stepID, From: string(s.State), Event: string(StepEvLease)}
	}
	if !j.depsMet(i) {
		return &IllegalTransitionError{Kind: "step", ID: stepID, From: string(StepWaitingDeps), Event: string(StepEvLease)}
	}
	if !Executed(s.Spec.Action.Type) {
		return &IllegalTransitionError{Kind: "step", ID: stepID, From: string(s.State), Event: string(StepEvLease) + " (no executor runs a " + s.Spec.Action.Type + " step)"}
	}
	if s.ReadyAt != nil && now.Before(*s.ReadyAt) {
		return &NotYetError{Until: *s.ReadyAt} // a retry's backoff, or run_at
	}
	return nil
}

// WaitForResource notes that a runnable step found every matching
// resource's slots held: it waits in line (a freed slot wakes it), and the
// sweep looks at it later each time, as for a re-dispatch.
// A wait is bounded: it keeps the time it began across its looks, and
// one found past its bound fails the step instead (expireResourceWait).
func (j *Job) WaitForResource(stepID string, w *ResourceWait, now time.Time) error {
	s, _, err := j.Step(stepID)
	if err != nil {
		return err
	}
	if old := s.ResourceWait; old != nil {
		w.Since = old.Since
	}
	until := w.Since.Add(j.ResourceWaitBound(s))
	w.Until = &until
	s.ResourceWait = w
	if !now.Before(until) {
		return j.expireResourceWait(s, now)
	}
	j.Redispatched(s, now)
	return nil
}

// Reclaim ends a step's expired lease: LEASE_TIMEOUT, then PENDING for
// another attempt, or FAILED once the attempts are spent.
func (j *Job) Reclaim(stepID string, now time.Time) ([]Dispatch, error) {
	s, _, err := j.Step(stepID)
	if err != nil {
		return nil, err
	}
	if !s.State.leased() || s.Lease == nil || now.Before(s.Lease.ExpiresAt) {
		return nil, &IllegalTransitionError{Kind: "step", ID: stepID, From: string(s.State), Event: string(StepEvLeaseTimeout)}
	}
	return j.reclaim(s, now)
}

// reclaim ends an expired lease. An attempt that ran to its
// timeout_seconds (its lease stopped at the deadline) timed out, and the
// timeout policy applies; otherwise its holder went quiet: LEASE_TIMEOUT,
// then PENDING for another attempt, or FAILED once the attempts are spent.
func (j *Job) reclaim(s *Step, now time.Time) ([]Dispatch, error) {
	if d := s.Lease.Deadline; d != nil && !s.Lease.ExpiresAt.Before(*d) {
		return j.fail(s, Failure{Class: ClassTimeout, Message: timeoutMessage(s)}, now, nil)
	}
	if err := j.stepTo(s, StepEvLeaseTimeout, now, "lease "+s.Lease.ID+" expired"); err != nil {
		return nil, err
	}
	j.endAttempt(s, AttemptTimeout, &StepError{Class: ClassTimeout, Message: leaseExpired}, nil, now)
	s.Lease = nil
	if !s.attemptsLeft() {
		s.Error = s.Attempts[len(s.Attempts)-1].Error
		if err := j.stepTo(s, StepEvFail, now, "attempts exhausted"); err != nil {
			return nil, err
		}
		if err := j.settle(now); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if err := j.stepTo(s, StepEvRequeue, now, ""); err != nil {
		return nil, err
	}
	s.ReadyAt = &now
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return []Dispatch{{Step: s}}, nil
}

func timeoutMessage(s *Step) string {
	if s.Spec.TimeoutSeconds == 0 {
		return "ran for a year, the longest a step without timeout_seconds may"
	}
	return fmt.Sprintf("ran past timeout_seconds (%d)", s.Spec.TimeoutSeconds)
}

// PastDeadline reports whether leaseID's attempt has run for its step's
// timeout_seconds: its heartbeat times it out instead of extending it.
func (j *Job) PastDeadline(stepID, leaseID string, now time.Time) bool {
	s, _, err := j.Step(stepID)
	return err == nil && s.Lease != nil && s.Lease.ID == leaseID && s.Lease.Deadline != nil && !now.Before(*s.Lease.Deadline)
}

// TimeOut ends leaseID's attempt as having run past its timeout_seconds
// (TIMED_OUT, attempt state timeout); the timeout policy decides what
// follows.
func (j *Job) TimeOut(stepID, leaseID string, now time.Time, rng *rand.Rand) ([]Dispatch, error) {
	s, _, err := j.Step(stepID)
	if err != nil {
		return nil, err
	}
	if !s.State.leased() || s.Lease == nil || s.Lease.ID != leaseID {
		return nil, j.leaseLost(s, leaseID, now)
	}
	return j.fail(s, Failure{Class: ClassTimeout, Message: timeoutMessage(s)}, now, rng)
}

// checkLease answers the leased step that leaseID still holds at now.
func (j *Job) checkLease(stepID, leaseID string, now time.Time) (*Step, int, error) {
	s, i, err := j.Step(stepID)
	if err != nil {
		return nil, -1, err
	}
	if !s.State.leased() || s.Lease == nil || s.Lease.ID != leaseID || !now.Before(s.Lease.ExpiresAt) {
		return nil, -1, j.leaseLost(s, leaseID, now)
	}
	return s, i, nil
}

// leaseLost answers ErrLeaseLost for leaseID, which no longer holds step
// s at now, saying why, so that its holder knows whether its work counted
// and whether to stop: the step completed (under this lease or another),
// the lease expired, another attempt took the step over, or the job was
// cancelled.
func (j *Job) leaseLost(s *Step, leaseID string, now time.Time) error {
	a := s.AttemptUnder(leaseID)
	var why string
	switch {
	case a != nil && a.State == AttemptSucceeded:
		why = fmt.Sprintf("step %q already completed under this lease (attempt %d); its outcome stands and nothing more is taken", s.ID(), a.N)
	case s.State == StepSucceeded:
		why = fmt.Sprintf("step %q already completed under another lease (attempt %d); stop this attempt's work, it is not needed", s.ID(), s.Attempt)
	case j.State == JobCancelled:
		why = "the job was cancelled; stop this attempt's work: nothing more is taken under this lease"
	case s.State == StepCancelled:
		why = fmt.Sprintf("step %q was cancelled as its job ended %s; stop this attempt's work", s.ID(), j.State)
	case s.Lease != nil && s.Lease.ID == leaseID:
		why = fmt.Sprintf("the lease expired at %s with no heartbeat to extend it (heartbeat well within lease_seconds); the step runs again as another attempt",
			s.Lease.ExpiresAt.UTC().Format(time.RFC3339))
	case a != nil && s.Lease != nil && s.State.leased():
		why = fmt.Sprintf("attempt %d was taken over: attempt %d holds step %q under another lease; stop this attempt's work", a.N, s.Lease.Attempt, s.ID())
	case a != nil && a.State == AttemptTimeout && a.Error != nil && a.Error.Message == leaseExpired:
		until := ""
		if a.LeaseUntil != nil {
			until = " at " + a.LeaseUntil.UTC().Format(time.RFC3339)
		}
		why = fmt.Sprintf("the lease expired%s with no heartbeat to extend it and attempt %d was ended; step %q is %s", until, a.N, s.ID(), s.State)
	case a != nil && a.State == AttemptTimeout:
		why = fmt.Sprintf("attempt %d ran past the step's timeout and was ended; step %q is %s", a.N, s.ID(), s.State)
	case a != nil:
		why = fmt.Sprintf("attempt %d already ended (%s); step %q is %s", a.N, a.State, s.ID(), s.State)
	default:
		why = fmt.Sprintf("no attempt of step %q ran under this lease; the step is %s", s.ID(), s.State)
	}
	return fmt.Errorf("%w: %s", ErrLeaseLost, why)
}

// Heartbeat extends a live lease to now+extend.
func (j *Job) Heartbeat(stepID, leaseID string, extend time.Duration, now time.Time) (*Lease, error) {
	s, _, err := j.checkLease(stepID, leaseID, now)
	if err != nil {
		return nil, err
	}
	s.Lease.ExpiresAt = now.Add(extend)
	if d := s.Lease.Deadline; d != nil && d.Before(s.Lease.ExpiresAt) {
		s.Lease.ExpiresAt = *d // timeout_seconds bounds the attempt, heartbeats or not
	}
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return s.Lease, nil
}

// CheckLease answers ErrLeaseLost (wrapped) unless leaseID still holds
// step stepID at now: what an outcome under it needs.
func (j *Job) CheckLease(stepID, leaseID string, now time.Time) error {
	_, _, err := j.checkLease(stepID, leaseID, now)
	return err
}

// Complete records a successful attempt under leaseID and makes the next
// step runnable, or completes the job.
func (j *Job) Complete(stepID, leaseID string, output json.RawMessage, now time.Time) ([]Dispatch, error) {
	if len(output) == 0 {
		output = json.RawMessage(`null`)
	}
	return j.complete(stepID, leaseID, output, nil, now)
}

// CompleteRef is Complete with an output kept in the blob store: the step
// and its attempt hold the reference.
func (j *Job) CompleteRef(stepID, leaseID string, ref DataRef, now time.Time) ([]Dispatch, error) {
	return j.complete(stepID, leaseID, nil, &ref, now)
}

func (j *Job) complete(stepID, leaseID string, output json.RawMessage, ref *DataRef, now time.Time) ([]Dispatch, error) {
	s, i, err := j.checkLease(stepID, leaseID, now)
	if err != nil {
		return nil, err
	}
	if err := j.stepTo(s, StepEvSucceed, now, ""); err != nil {
		return nil, err
	}
	j.endAttempt(s, AttemptSucceeded, nil, output, now)
	s.Attempts[len(s.Attempts)-1].OutputRef = ref
	s.Output, s.OutputRef, s.Error, s.Lease = output, ref, nil, nil
	out, err := j.releaseAfter(i, now)
	if err != nil {
		return nil, err
	}
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return out, nil
}

// releaseAfter releases every step waiting only on step i (and others
// already done), at once: fan-out and fan-in. It answers what to dispatch.
func (j *Job) releaseAfter(i int, now time.Time) ([]Dispatch, error) {
	if s := j.Steps[i]; s.MapOf != "" {
		return j.releaseLane(s, now) // nothing but its lane's next item waits on an item
	}
	var out []Dispatch
	for k, n := range j.Steps {
		if n.State != StepWaitingDeps || !j.waitsOn(k, i) || !j.depsMet(k) {
			continue
		}
		d, err := j.open(k, now)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return out, nil
}

// open starts step i, whose dependencies are done, as its condition
// says: it runs (ready); it is skipped, and what waits only on it and on
// steps done goes on; or, when its condition cannot be decided, it fails
// without running. It answers what to dispatch.
func (j *Job) open(i int, now time.Time) ([]Dispatch, error) {
	s := j.Steps[i]
	run, err := j.condition(i)
	if need := (*NeedDataError)(nil); errors.As(err, &need) {
		return nil, err // the engine fetches it and decides again
	}
	if err == nil && !run {
		if err := j.stepTo(s, StepEvSkip, now, "when is false"); err != nil {
			return nil, err
		}
		// In a job of steps in order the next step runs on what this one
		// would have: the skipped step passes its input on.
		s.OutputIsInput = !j.Graph
		return j.releaseAfter(i, now)
	}
	if err != nil {
		return nil, j.failUnrun(s, "when: "+err.Error(), now)
	}
	if s.State == StepWaitingDeps {
		if err := j.stepTo(s, StepEvDepsMet, now, ""); err != nil {
			return nil, err
		}
	}
	return j.ready(s, now)
}

// failUnrun fails a step that never ran (its condition, a map's items or
// its items' failures): fatal, with no attempt, PENDING (after deps_met
// when it waited) -> FAILED_FATAL -> FAILED.
func (j *Job) failUnrun(s *Step, msg string, now time.Time) error {
	msg = Truncate(msg, MaxErrorMessageBytes)
	s.Error = &StepError{Class: ClassFatal, Message: msg}
	evs := []StepEvent{StepEvFailFatal, StepEvFail}
	if s.State == StepWaitingDeps {
		evs = append([]StepEvent{StepEvDepsMet}, evs...)
	}
	for _, ev := range evs {
		if err := j.stepTo(s, ev, now, msg); err != nil {
			return err
		}
	}
	return nil
}

// Failure is an attempt's failed outcome.
type Failure struct {
	Class      FailureClass
	Message    string
	RetryAfter time.Duration // the remote asked to wait at least this long
	Prompt     string        // class needs_user: what to ask the person (the message if empty)
	Steps      []StepSpec    // class replan: the steps to put in the failed step's place
	// Unstorable marks the fatal failure recorded in place of an outcome
	// the job's item could not hold.
	Unstorable bool
	// NoOtherResource: class resource, and every resource that matches the
	// step's requirements is on its avoid list: there is nothing to switch to.
	NoOtherResource bool
}

// Fail records a failed attempt under leaseID and applies the critic
// decision its class names: retry after the backoff, switch resource, wait
// for a person, or fail.
func (j *Job) Fail(stepID, leaseID string, f Failure, now time.Time, rng *rand.Rand) ([]Dispatch, error) {
	s, _, err := j.checkLease(stepID, leaseID, now)
	if err != nil {
		return nil, err
	}
	return j.fail(s, f, now, rng)
}

func (j *Job) fail(s *Step, f Failure, now time.Time, rng *rand.Rand) ([]Dispatch, error) {
	if f.Class == ClassReplan && s.MapOf != "" {
		// A map's items are alike: one is not replaced by other steps.
		f.Message += "; a map's item is not replanned (replan the job's own steps)"
		f.Steps = nil
	}
	if f.Class == ClassReplan {
		if err := j.CheckReplan(s.ID(), f.Steps, "steps"); err != nil {
			// A worker's replan was checked before (400), a fail action's
			// at submit; one that still cannot join ends the step for
			// good, saying why, rather than leaving the outcome unrecorded.
			f.Message += "; its replan was refused: " + err.Error()
			f.Steps = nil
		}
	}
	serr := &StepError{Class: f.Class, Message: Truncate(f.Message, MaxErrorMessageBytes)}
	attemptState := AttemptFailed
	if f.Class == ClassTimeout {
		attemptState = AttemptTimeout
	}
	worker := s.Lease.Worker
	if s.Lease.Resource != "" {
		worker = s.Lease.Resource // the resource, not its executor, failed it
	}
	j.endAttempt(s, attemptState, serr, nil, now)
	s.Error, s.Lease = serr, nil
	var steps []StepEvent
	var out []Dispatch
	switch f.Class {
	case ClassRetryable, ClassNetwork, ClassBlocked, ClassTimeout:
		steps, out = j.retryAfterFailure(s, f, now, rng)
	case ClassResource:
		steps, out = j.switchResource(s, f, worker, now)
	case ClassNeedsUser:
		steps = []StepEvent{StepEvNeedsUser}
		s.Prompt = Truncate(cmp.Or(f.Prompt, f.Message), MaxErrorMessageBytes)
	case ClassReplan:
		for _, ev := range []StepEvent{StepEvFailFatal, StepEvFail} {
			if err := j.stepTo(s, ev, now, serr.Message); err != nil {
				return nil, err
			}
		}
		out, err := j.replan(s, f.Steps, now)
		if err != nil {
			return nil, err
		}
		if err := j.settle(now); err != nil {
			return nil, err
		}
		return out, nil
	default:
		steps = []StepEvent{StepEvFailFatal, StepEvFail}
	}
	for _, ev := range steps {
		if err := j.stepTo(s, ev, now, serr.Message); err != nil {
			return nil, err
		}
	}
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return out, nil
}

// retryAfterFailure decides what follows a failure of a class that is
// retried (retryable, network, blocked, timeout): the step events and,
// while its policy has a retry left, the step again after the backoff.
func (j *Job) retryAfterFailure(s *Step, f Failure, now time.Time, rng *rand.Rand) ([]StepEvent, []Dispatch) {
	policy, retry, left := s.retryFor(f.Class)
	first := StepEvFailRetryable
	if f.Class == ClassTimeout {
		first = StepEvTimeOut
	}
	switch {
	case left:
		at := now.Add(max(policy.Delay(retry, rng), f.RetryAfter))
		s.ReadyAt = &at
		return []StepEvent{first, StepEvRetry}, j.sendAt(s, at, now)
	case f.Class == ClassTimeout:
		return []StepEvent{first, StepEvFail}, nil
	default:
		return []StepEvent{StepEvFailFatal, StepEvFail}, nil
	}
}

// switchResource decides what follows a failure of class resource: the
// step runs again, avoiding worker (the resource or executor that failed
// it), while its budget has a retry left and another resource may take it.
func (j *Job) switchResource(s *Step, f Failure, worker string, now time.Time) ([]StepEvent, []Dispatch) {
	_, _, left := s.retryFor(f.Class)
	if !left || f.NoOtherResource {
		return []StepEvent{StepEvFailResource, StepEvFailFatal, StepEvFail}, nil
	}
	if worker != "" {
		s.Avoid = append(s.Avoid, worker)
	}
	s.ReadyAt = &now
	return []StepEvent{StepEvFailResource, StepEvSwitchResource}, []Dispatch{{Step: s}}
}

// Approve closes an open approval gate: the step SUCCEEDED, with the
// decision as its output, and the steps after it run. Approving a gate
// approved already changes nothing (false); a gate rejected, timed out or
// not open, or a step that is no gate, is a conflict.
func (j *Job) Approve(stepID string, d Decision, now time.Time) ([]Dispatch, bool, error) {
	s, i, err := j.gate(stepID, d, true)
	if err != nil || s == nil {
		return nil, false, err
	}
	d.Approved, d.At = true, now
	if err := j.stepTo(s, StepEvApprove, now, d.describe()); err != nil {
		return nil, false, err
	}
	s.Decision, s.Timer = &d, nil
	s.Output, _ = json.Marshal(d)
	out, err := j.releaseAfter(i, now)
	if err != nil {
		return nil, false, err
	}
	if err := j.settle(now); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// Reject closes an open approval gate: the step FAILED, and with it the
// job. Rejecting a gate rejected already changes nothing (false).
func (j *Job) Reject(stepID string, d Decision, now time.Time) (bool, error) {
	s, _, err := j.gate(stepID, d, false)
	if err != nil || s == nil {
		return false, err
	}
	d.Approved, d.At = false, now
	if err := j.stepTo(s, StepEvReject, now, d.describe()); err != nil {
		return false, err
	}
	s.Decision, s.Timer = &d, nil
	s.Error = &StepError{Class: ClassFatal, Message: Truncate(d.describe(), MaxErrorMessageBytes)}
	if err := j.settle(now); err != nil {
		return false, err
	}
	return true, nil
}

// gate answers the open gate a decision is for, or nil with no error when
// the same decision was made already.
func (j *Job) gate(stepID string, d Decision, approve bool) (*Step, int, error) {
	s, i, err := j.Step(stepID)
	if err != nil {
		return nil, 0, err
	}
	event := map[bool]StepEvent{true: StepEvApprove, false: StepEvReject}[approve]
	verb := map[bool]string{true: "approved", false: "rejected"}[approve]
	switch {
	case s.Spec.Action.Type != ActionApproval:
		return nil, 0, refused("step", stepID, string(s.State), string(event)+" (not an approval gate: a step waiting on a person is resumed)",
			"step %q is a %s step, not an approval gate; only an approval step can be %s (a step waiting on a person's input is resumed)", stepID, s.Spec.Action.Type, verb)
	case s.Decision != nil && s.Decision.Approved == approve:
		return nil, 0, nil
	case s.Decision != nil:
		return nil, 0, refused("step", stepID, string(s.State), string(event),
			"step %q was %s already; a gate is decided once", stepID, map[bool]string{true: "approved", false: "rejected"}[s.Decision.Approved])
	case j.State.Terminal():
		return nil, 0, refused("step", stepID, string(s.State), string(event),
			"the job is %s; only a gate of a job that has not finished can be %s", j.State, verb)
	case s.State != StepNeedsUser:
		return nil, 0, refused("step", stepID, string(s.State), string(event),
			"step %q is %s; only an open gate (NEEDS_USER) can be %s", stepID, s.State, verb)
	}
	return s, i, nil
}

func (d Decision) describe() string {
	verb := map[bool]string{true: "approved", false: "rejected"}[d.Approved]
	out := verb
	if d.By != "" {
		out += " by " + d.By
	}
	if d.Key != "" {
		out += " (key " + d.Key + ")"
	}
	if d.Comment != "" {
		out += ": " + d.Comment
	}
	return out
}

// Resume answers a step waiting on a person (NEEDS_USER): it goes back to
// PENDING with their input, for a new attempt, and the job back to the
// queue. A step that is not waiting is an illegal transition.
func (j *Job) Resume(stepID string, input json.RawMessage, now time.Time) ([]Dispatch, error) {
	s, _, err := j.Step(stepID)
	if err != nil {
		return nil, err
	}
	if j.State.Terminal() {
		return nil, refused("job", j.ID, string(j.State), string(JobEvWaitCompleted),
			"the job is %s; only a step of a job that has not finished can be resumed", j.State)
	}
	if s.Spec.Action.Type == ActionApproval {
		return nil, refused("step", stepID, string(s.State), string(StepEvResume)+" (an approval gate is approved or rejected)",
			"step %q is an approval gate; approve or reject it instead", stepID)
	}
	if s.State != StepNeedsUser {
		return nil, refused("step", stepID, string(s.State), string(StepEvResume),
			"step %q is %s; only a step waiting on a person (NEEDS_USER) can be resumed", stepID, s.State)
	}
	if len(input) == 0 {
		input = json.RawMessage(`null`)
	}
	if err := j.stepTo(s, StepEvResume, now, "resumed with a person's input"); err != nil {
		return nil, err
	}
	s.UserInput, s.Prompt, s.ReadyAt = input, "", &now
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return []Dispatch{{Step: s}}, nil
}

func (j *Job) notCancellable() error {
	return refused("job", j.ID, string(j.State), string(JobEvCancelled), "the job is %s; only a job that has not finished can be cancelled", j.State)
}

// Cancel ends the job and every unfinished step at once; a lease still out
// is fenced off, so its holder's outcome is refused. Cancelling a cancelled
// job changes nothing and answers false.
func (j *Job) Cancel(now time.Time) (bool, error) {
	if j.State == JobCancelled {
		return false, nil
	}
	if j.State.Terminal() {
		return false, j.notCancellable()
	}
	if err := j.cancelOpen(now, ""); err != nil {
		return false, err
	}
	// A job backing off (RETRYING) is requeued and cancelled, as the
	// formal machine cancels only from where it allows it.
	path, ok := settlePath(j.State, JobCancelled, false)
	if !ok {
		return false, j.notCancellable()
	}
	for _, ev := range path {
		if err := j.jobTo(ev, now, ""); err != nil {
			return false, err
		}
	}
	if err := j.settle(now); err != nil {
		return false, err
	}
	return true, nil
}

// cancelOpen ends every unfinished step CANCELLED: a lease still out is
// fenced off (its attempt ends cancelled, so its holder hears
// cancel_requested and its outcome is refused), and nothing is left
// waiting inside a finished job.
func (j *Job) cancelOpen(now time.Time, detail string) error {
	for _, s := range j.Steps {
		if s.State.Terminal() {
			continue
		}
		switch {
		case s.Lease != nil && !now.Before(s.Lease.ExpiresAt):
			// Its lease had run out: the attempt timed out before the cancel.
			j.endAttempt(s, AttemptTimeout, &StepError{Class: ClassTimeout, Message: leaseExpired}, nil, now)
		case s.Lease != nil:
			j.endAttempt(s, AttemptCancelled, nil, nil, now)
		}
		if err := j.stepTo(s, StepEvCancel, now, detail); err != nil {
			return err
		}
		s.Lease, s.ReadyAt, s.Timer, s.ResourceWait = nil, nil, s.Timer.cancelled(), nil
	}
	return nil
}

// Redispatched notes that the sweep sent step's message again, so the next
// sweep waits twice as long before doing it again.
func (j *Job) Redispatched(s *Step, now time.Time) error {
	s.Redispatches++
	s.Unsent = nil // it is sent now
	if s.State.leasable() && (s.ReadyAt == nil || s.ReadyAt.Before(now)) {
		s.ReadyAt = &now
	}
	if err := j.settle(now); err != nil {
		return err
	}
	j.Resweep()
	return nil
}

// Resweep sets the due time to when the job next needs the sweep, later
// as well as earlier, and reports whether it moved. The sweep calls it on
// every job it looks at.
func (j *Job) Resweep() bool {
	want := j.due()
	if (want == nil) == (j.DueAt == nil) && (want == nil || want.Equal(*j.DueAt)) {
		return false
	}
	j.DueAt = want
	return true
}

func (j *Job) endAttempt(s *Step, state AttemptState, serr *StepError, output json.RawMessage, now time.Time) {
	j.orphan(s) // a child job it still waits on ends with it
	if n := len(s.Attempts); n > 0 && !s.Attempts[n-1].State.Terminal() {
		a := &s.Attempts[n-1]
		a.State, a.Error, a.Output, a.EndedAt = state, serr, output, &now
		if s.Lease != nil {
			until := s.Lease.ExpiresAt
			a.LeaseUntil = &until
		}
	}
}

// stepTo applies event to s through the step table and logs step_<state>.
func (j *Job) stepTo(s *Step, event StepEvent, now time.Time, detail string) error {
	to, err := NextStepState(s.State, event)
	if err != nil {
		if ie, ok := err.(*IllegalTransitionError); ok {
			ie.ID = s.Spec.ID
		}
		return err
	}
	s.State = to
	j.log(to.EventType(), s.Spec.ID, s.Attempt, detail, now)
	return nil
}

// jobTo applies event to the job through the job table and logs it.
func (j *Job) jobTo(event JobEvent, now time.Time, detail string) error {
	to, err := NextJobState(j.State, event)
	if err != nil {
		if ie, ok := err.(*IllegalTransitionError); ok {
			ie.ID = j.ID
		}
		return err
	}
	j.State = to
	j.log(string(event), "", 0, detail, now)
	return nil
}

func (j *Job) log(typ, step string, attempt int, detail string, now time.Time) {
	detail = Truncate(detail, MaxEventDetailBytes)
	j.Events = append(j.Events, Event{Seq: len(j.Events) + 1, Type: typ, At: now, Step: step, Attempt: attempt, Detail: detail})
}

// Bounds on what a failure writes into the job's item, which DynamoDB caps
// at 400 KB: an attempt's error message is cut to MaxErrorMessageBytes, the
// copy in the event log to MaxEventDetailBytes, each ending in "…
// (truncated from N bytes)".
const (
	MaxErrorMessageBytes = 4096
	MaxEventDetailBytes  = 512
)

// Truncate cuts s to at most limit bytes on a UTF-8 boundary, saying so.
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	note := fmt.Sprintf("… (truncated from %d bytes)", len(s))
	cut := max(limit-len(note), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + note
}

// settle moves the job to the state its steps imply, by the job events
// settlePaths declares for that change, and recomputes when the sweep must
// next look at it. An error is a bug (the step transitions that got here
// were legal): the caller's change is refused, not half written.
func (j *Job) settle(now time.Time) error { return j.settleVia(now, false) }

func (j *Job) settleVia(now time.Time, viaWorker bool) error {
	if j.settleLater {
		return nil // a map's instant items: settled once, after the last
	}
	j.UpdatedAt = now
	if !j.State.Terminal() {
		if err := j.progressMaps(now); err != nil {
			return err
		}
		want := j.impliedState()
		detail := "another step failed"
		if want == JobFailed {
			j.Error = j.failedStepError()
		} else if why := j.stalled(); why != "" {
			// No step can ever run again: the job fails now, saying why,
			// rather than rest QUEUED for ever.
			want, detail = JobFailed, why
			j.Error = &StepError{Class: ClassFatal, Message: Truncate(why, MaxErrorMessageBytes)}
		}
		if want == JobFailed {
			// A failed step fails the job: the steps that can no longer run
			// end now, and running siblings are fenced.
			if err := j.cancelOpen(now, detail); err != nil {
				return err
			}
		}
		path, ok := settlePath(j.State, want, viaWorker)
		if !ok {
			return &IllegalTransitionError{Kind: "job", ID: j.ID, From: string(j.State), Event: "settle to " + string(want)}
		}
		for _, ev := range path {
			why := ""
			if ev == JobEvFailed && j.Error != nil {
				why = j.Error.Message
			}
			if err := j.jobTo(ev, now, why); err != nil {
				return err
			}
		}
	}
	if j.State.Terminal() {
		if j.EndedAt == nil {
			j.EndedAt = &now
		}
		var r Retention
		if j.Retention != nil {
			r = *j.Retention
		}
		exp := now.Add(r.For(j.State))
		j.ExpiresAt = &exp
	}
	j.dropStaleUnsent()
	// The due time only moves earlier here: pushing it later on every lease
	// and heartbeat would rewrite the due index each time. A job found due
	// too early costs the sweep one look, and Resweep pushes it on. A write
	// made once the due time has come (an executor behind a burst) sets the
	// true one: the sweep would otherwise load the job while its messages
	// are still expected, only to do the same.
	switch want := j.due(); {
	case want == nil || j.State.Terminal():
		j.DueAt = want // a finished job is due once, exactly when it expires
	case j.DueAt == nil || want.Before(*j.DueAt) || !j.DueAt.After(now):
		j.DueAt = want
	}
	return nil
}

// impliedState is the job state the steps imply: FAILED once a step
// failed (one a replan replaced does not count), COMPLETED once every step
// is done, RUNNING while one is leased, WAITING while one waits on a
// person, a signal or a timer, PARKED when all that is left waits on
// signals or timers beyond the threshold (nothing polls it), RETRYING
// while a failed step waits out its backoff right after running, and
// QUEUED otherwise.
func (j *Job) impliedState() JobState {
	var t stepTally
	for _, s := range j.Steps {
		if s.ReplacedBy != nil {
			continue
		}
		if s.State == StepFailed && s.MapOf != "" {
			continue // a child's failure is its map's to judge (progressMaps)
		}
		if s.State == StepFailed {
			return JobFailed
		}
		t.add(s)
	}
	switch {
	case t.notDone == 0:
		return JobCompleted
	case t.running:
		return JobRunning
	case t.waiting || t.parked && (t.runnable || t.retrying) || j.BudgetHeld() && (t.runnable || t.retrying):
		return JobWaiting
	case t.parked:
		return JobParked
	case t.retrying && (j.State == JobRunning || j.State == JobRetrying):
		return JobRetrying
	default:
		return JobQueued
	}
}

// stepTally is what impliedState counts of a job's steps.
type stepTally struct {
	notDone                                      int
	running, waiting, parked, runnable, retrying bool
}

func (t *stepTally) add(s *Step) {
	switch s.State {
	case StepLeased, StepRunning:
		t.running = true
	case StepNeedsUser:
		t.waiting = true
	case StepWaiting:
		parked := s.Timer != nil && s.Timer.Parked
		t.parked = t.parked || parked
		t.waiting = t.waiting || !parked
	case StepRetrying:
		t.retrying = true
	case StepPending, StepSwitchingResource, StepFailedRetryable, StepFailedResource, StepLeaseTimeout, StepTimedOut, StepFailedFatal:
		t.runnable = true
	}
	if !s.State.Done() {
		t.notDone++
	}
}

// due answers when the sweep must look at the job: a message not sent yet,
// as its instant comes within the timer threshold (arm.go); a runnable
// step whose message should have been taken by then, a lease that should
// have been reclaimed by then, or a timer (a sleep's end, a gate's or a
// wait's deadline) whose message should have come by then. Each
// re-dispatch doubles the wait. A parked job with no deadline is never due. A finished
// job is due only to have its stored data deleted, when it expires.
func (j *Job) due() *time.Time {
	if j.State.Terminal() {
		if at, ok := j.orphansDue(); ok {
			return &at
		}
		if j.StoresData() && j.DataDeletedAt == nil {
			return j.ExpiresAt
		}
		return nil
	}
	// One instant, not one allocated per step: this runs on every write.
	var at time.Time
	found := false
	for _, s := range j.Steps {
		t, ok := j.stepDue(s)
		if ok && (!found || t.Before(at)) {
			at, found = t, true
		}
	}
	if t, ok := j.orphansDue(); ok && (!found || t.Before(at)) {
		at, found = t, true
	}
	if !found {
		return nil
	}
	return &at
}

// stepDue answers when the sweep must look at the job for step s, if it
// must.
func (j *Job) stepDue(s *Step) (time.Time, bool) {
	if s.State.Terminal() || s.State == StepWaitingDeps {
		return time.Time{}, false // none of the cases below holds for it: most of a large job
	}
	if j.BudgetHeld() && s.State.leasable() {
		return time.Time{}, false // at its budget gate: nothing is sent until a person acts
	}
	switch {
	case s.AwaitsArm():
		return j.armAt(s), true // its message is sent then
	case s.State.leasable() && s.ReadyAt != nil:
		t := s.resendAt()
		if end := j.resourceWaitEnds(s); end != nil && end.Before(t) {
			t = *end // the sweep fails a wait past its bound
		}
		return t, true
	case s.State.leased() && s.Lease != nil && s.Child != nil:
		return minTime(s.Child.CheckAt, s.Lease.ExpiresAt), true // a child job's look, or its timeout
	case s.State.leased() && s.Lease != nil:
		return s.Lease.ExpiresAt.Add(leaseGrace(s)), true
	case s.timerAt() != nil:
		return s.timerAt().Add(DispatchGrace), true
	}
	return time.Time{}, false
}

// SentBeforeWrite takes a new job out of the due index when ds, its first
// messages, go out before its first write: a delivery of each is what
// runs its step, so the sweep has nothing to send again unless one is
// lost, and each later write puts the job back in the index as it needs.
// It does so only when nothing else of the job needs the sweep (a timer
// beyond the queue's reach, a resource wait's bound), and reports
// whether it did.
func (j *Job) SentBeforeWrite(ds []Dispatch) bool {
	if !j.DueOnlyFor(ds) {
		return false
	}
	j.LeaveDueIndex()
	return true
}

// LeaveDueIndex takes the job out of the due index, for a caller that
// found what needs the sweep covered by messages in flight (DueOnlyFor).
func (j *Job) LeaveDueIndex() { j.DueAt = nil }

// DueOnlyFor reports whether ds, messages in flight, cover everything of
// the job the sweep would otherwise look at.
func (j *Job) DueOnlyFor(ds []Dispatch) bool {
	sent := make(map[*Step]bool, len(ds))
	for _, d := range ds {
		if d.Wake != "" {
			return false
		}
		sent[d.Step] = true
	}
	for _, s := range j.Steps {
		if _, due := j.stepDue(s); due && (!sent[s] || j.resourceWaitEnds(s) != nil) {
			return false
		}
	}
	return true
}

// Stranded reports whether something of an unfinished job needs the
// sweep though the job is not in the due index: steps a chain carried
// (the engine's execute, which kept them out of the index while its
// delivered message would bring them back) and did not run.
func (j *Job) Stranded() bool {
	return !j.State.Terminal() && j.DueAt == nil && j.due() != nil
}

// leaseGrace is how long the sweep leaves an expired lease alone. A worker
// step's message comes back when its lease runs out and the next claim
// reclaims it, so the sweep only backs that up, after DispatchGrace. A
// built-in step's message stays invisible far longer than its lease (the
// ready queues' visibility is six times the function's timeout), so the
// sweep reclaims it as soon as the lease has run out.
func leaseGrace(s *Step) time.Duration {
	if s.Spec.Action.Type == ActionWorker {
		return DispatchGrace
	}
	return 0
}

// NeedsSweep answers what the sweep does for step at now: re-dispatch a
// runnable step whose message is overdue, or reclaim an expired lease.
func (j *Job) NeedsSweep(s *Step, now time.Time) (redispatch, reclaim bool) {
	switch {
	case j.State.Terminal():
		return false, false
	case s.State.leasable() && s.ReadyAt != nil:
		return !now.Before(s.resendAt()), false
	case s.State.leased() && s.Lease != nil:
		return false, !now.Before(s.Lease.ExpiresAt.Add(leaseGrace(s)))
	}
	return false, false
}

// resendAt is when the sweep sends a runnable step's message again: each
// re-send waits longer (to 64 min), except for a step in line for a
// resource, whose wake is one message that must not strand it for an hour
// if lost (at most 4 min).
func (s *Step) resendAt() time.Time {
	shift := min(s.Redispatches, 6)
	if s.ResourceWait != nil {
		shift = min(shift, 2)
	}
	return s.ReadyAt.Add(DispatchGrace << shift)
}

// AttemptUnder answers the attempt that ran under leaseID, if any.
func (s *Step) AttemptUnder(leaseID string) *Attempt {
	for i := len(s.Attempts) - 1; i >= 0; i-- {
		if s.Attempts[i].Lease == leaseID {
			return &s.Attempts[i]
		}
	}
	return nil
}

// CancelledUnder reports whether leaseID's attempt was live when its job
// was cancelled and its lease would still be: its holder is told to stop
// rather than that it lost.
func (s *Step) CancelledUnder(leaseID string, now time.Time) bool {
	a := s.AttemptUnder(leaseID)
	return s.State == StepCancelled && a != nil && a.State == AttemptCancelled && a.LeaseUntil != nil && now.Before(*a.LeaseUntil)
}

// AlreadyRecorded reports whether leaseID's attempt already ended with the
// outcome now reported again (a retry of a request whose answer was lost):
// success for a completion, failure for a failure.
func (s *Step) AlreadyRecorded(leaseID string, success bool, now time.Time) bool {
	a := s.AttemptUnder(leaseID)
	if a == nil || a.LeaseUntil == nil || !now.Before(*a.LeaseUntil) {
		return false
	}
	if success {
		return a.State == AttemptSucceeded
	}
	// A reported timeout also ends the attempt "timeout"; an expired lease
	// does too, but that is no outcome of the holder's.
	return a.State == AttemptFailed || a.State == AttemptTimeout && a.Error != nil && a.Error.Message != leaseExpired
}

// IdempotencyToken is the key an attempt passes to the action, so the
// systems it calls can drop duplicates: job/step/attempt.
func (j *Job) IdempotencyToken(s *Step) string {
	return fmt.Sprintf("%s/%s/%d", j.ID, s.Spec.ID, s.Attempt)
}

// LeaseRef is what a lease id names: the job, the step's position, the
// attempt, and a random nonce that makes it unguessable.
type LeaseRef struct {
	JobID     string
	StepIndex int
	Attempt   int
	Nonce     string
}

// String renders the lease id clients see.
func (r LeaseRef) String() string {
	return fmt.Sprintf("%s.%d.%d.%s", r.JobID, r.StepIndex, r.Attempt, r.Nonce)
}

// ParseLeaseID reads a lease id; a malformed one is simply not found.
func ParseLeaseID(s string) (LeaseRef, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return LeaseRef{}, fmt.Errorf("lease %q: %w", s, ErrNotFound)
	}
	idx, err1 := strconv.Atoi(parts[1])
	att, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || idx < 0 || att < 1 {
		return LeaseRef{}, fmt.Errorf("lease %q: %w", s, ErrNotFound)
	}
	return LeaseRef{JobID: parts[0], StepIndex: idx, Attempt: att, Nonce: parts[3]}, nil
}
