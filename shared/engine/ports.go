package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// The engine's ports: what it needs of the world, in its own terms. The
// DynamoDB and SQS adapters (shared/store, shared/queue) implement them at
// the edge, and so do the in-memory adapters (shared/memory), under one
// contract suite (shared/enginetest). Nothing here names a table, a queue
// URL or a receipt handle.

// Store keeps jobs: each change is one conditional write on the version it
// was decided at, so of two writers racing on one version exactly one wins
// (the other gets domain.ErrVersionConflict).
type Store interface {
	// Create writes a new job. With an idempotency key, the key's first
	// job is answered instead (created false) when requestHash matches,
	// else domain.ErrIdempotencyMismatch.
	Create(ctx context.Context, j *domain.Job, requestHash string, now time.Time) (*domain.Job, bool, error)
	// CreateAll writes new jobs without an idempotency key as Create does
	// each, in as few requests as the store can, answering each one's
	// error in order; a job refused writes nothing (a job with a key is
	// refused: it goes by Create).
	CreateAll(ctx context.Context, jobs []*domain.Job, now time.Time) []error
	// Get answers a job of tenant, domain.ErrNotFound, or
	// domain.ErrUnreadable for a stored job that cannot be decoded.
	Get(ctx context.Context, tenant, id string) (*domain.Job, error)
	// Save writes j if the stored job is still at j.Version and in a state
	// its first new job event may leave; loadedEvents is how many events j
	// had when read. It bumps j.Version on success.
	Save(ctx context.Context, j *domain.Job, loadedEvents int) error
	// List pages through a tenant's jobs, newest first.
	List(ctx context.Context, tenant string, f ListFilter) ([]JobSummary, string, error)
	// Due answers unfinished jobs due at or before now, earliest first, at
	// most limit from each part of the due index (DueJob.Part).
	Due(ctx context.Context, now time.Time, limit int) ([]DueJob, error)
	// RequestCancel marks an unfinished job as asked to be cancelled,
	// without reading it or changing its version: from then on Save
	// refuses (domain.ErrVersionConflict) any job read before the mark,
	// so the next writer reads it (domain.Job.CancelRequested) and
	// cancels the job first. A saved job carries no mark. A finished or
	// missing job is left as it is, without error.
	RequestCancel(ctx context.Context, tenant, id string) error
	// MarkOutcome records rec beside an unfinished job under key, without
	// reading it or changing its version: from then on Save refuses
	// (domain.ErrVersionConflict) any job read before the mark, so the
	// next writer reads it (domain.Job.Marks) and applies it. A saved job
	// carries no mark. A key already marked, a finished job or a missing
	// one is left as it is, without error.
	MarkOutcome(ctx context.Context, tenant, id, key string, rec []byte) error
	// Quarantine takes a job out of the due index, noting why.
	Quarantine(ctx context.Context, tenant, id, reason string, now time.Time) error
	// Defer moves a due job to until if its due time is still k.Due.
	Defer(ctx context.Context, k DueJob, until time.Time) error
	// TenantForKey answers the tenant of an API key, or
	// domain.ErrUnauthorized.
	TenantForKey(ctx context.Context, key string) (string, error)
	// RecordStats adds to a tenant's counters; Stats sums them over 24 h.
	// d.Steps goes to the tenant's cumulative step counters, which
	// StepStats reads; tenant AllTenants keeps the stack's.
	RecordStats(ctx context.Context, tenant string, d StatsDelta, now time.Time) error
	Stats(ctx context.Context, tenant string, now time.Time) (Stats, error)
	StepStats(ctx context.Context, tenant string) (StepCounts, error)
	// RecordSweep notes when the heartbeat last swept; Stats answers it.
	RecordSweep(ctx context.Context, at time.Time) error
	// JobVersion answers a job's version alone, domain.ErrNotFound when
	// there is none: what a waiting long-poll reads to see whether the
	// job changed (a read of one attribute, which may lag a write by
	// moments), before it reads the whole job.
	JobVersion(ctx context.Context, tenant, id string) (int64, error)
	// TakePollSlot holds one of a tenant's bound open long-polls for
	// lease until until, shared by every process that serves the tenant.
	// ok false means bound live slots are held; retryAt is when the first
	// of them runs out. A slot whose until has passed (its holder died)
	// is free again.
	TakePollSlot(ctx context.Context, tenant, lease string, bound int, until, now time.Time) (retryAt time.Time, ok bool, err error)
	// ReleasePollSlot frees lease's slot; one not held is no error.
	ReleasePollSlot(ctx context.Context, tenant, lease string) error
}

// Queue carries dispatches. Delivery is at least once: a taken delivery
// comes back when its visibility runs out unless it is acked or extended.
type Queue interface {
	// Dispatch sends one message per send of j, after its delay, to its
	// destination (Route): a lane of the ready path, or a lane of the
	// tenant's worker queue (made if it is missing, within the bound).
	Dispatch(ctx context.Context, j *domain.Job, sends []Send) error
	// DispatchJobs is Dispatch of several jobs at once (a batch of
	// submissions): their messages go out together, in as few sends as
	// the queue allows (SQS: SendMessageBatch, up to ten a call, grouped
	// by queue). A job whose sends have nowhere to go, or whose send
	// failed, is named in the error; the others are sent all the same.
	DispatchJobs(ctx context.Context, batch []JobSends) error
	// EnsureWorkerQueue makes a tenant's worker queue exist, within the
	// tenant's bound (an *domain.Error, CodeInvalid, past it).
	EnsureWorkerQueue(ctx context.Context, tenant, name string) error
	// EnsureWorkerQueues makes a tenant's worker queues exist, all or
	// none: when those it would make take the tenant past its bound it
	// makes none and answers a *WorkerQueueBoundError naming the first
	// past it. Requests racing for the last places may each pass the
	// count (queues.go, docs/model.md says by how much).
	EnsureWorkerQueues(ctx context.Context, tenant string, names []string) error
	// WorkerQueueDepth answers what each lane of a tenant's worker queue
	// holds, by priority; ErrNoWorkerQueue if it does not exist.
	WorkerQueueDepth(ctx context.Context, tenant, name string) ([]LaneDepth, error)
	// DeleteIdleWorkerQueue deletes a tenant's worker queue, all its
	// lanes, if none holds a message (visible, in flight or delayed);
	// false if one does. A queue that does not exist is deleted already.
	DeleteIdleWorkerQueue(ctx context.Context, tenant, name string) (bool, error)
	// Take waits up to wait for deliveries from a tenant's worker queue and
	// answers at most max, looking at its lanes in the order given (the
	// engine's PriorityOrder) and at no other; ErrNoWorkerQueue if it was
	// never made (EnsureWorkerQueue).
	Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]Delivery, error)
	// Extend keeps a delivery invisible until d from now.
	Extend(ctx context.Context, token string, d time.Duration) error
	// Release makes a delivery visible again now.
	Release(ctx context.Context, token string) error
	// Ack removes a delivery for good.
	Ack(ctx context.Context, token string) error
	// ExtendAll and AckAll settle several deliveries at once (SQS: one
	// request per ten of a queue). Each answers one error per entry, in
	// order: nil where it held, else what Extend or Ack of that entry
	// alone would have answered (a request that failed whole fails each
	// of its entries).
	ExtendAll(ctx context.Context, es []Extension) []error
	AckAll(ctx context.Context, tokens []string) []error
}

// Extension is one delivery to keep invisible until For from now.
type Extension struct {
	Token string
	For   time.Duration
}

// JobSends is one job's sends of a DispatchJobs.
type JobSends struct {
	Job   *domain.Job
	Sends []Send
}

// ErrNoWorkerQueue answers a take from a worker queue never made.
var ErrNoWorkerQueue = errors.New("no such worker queue")

// Message names one runnable step: the body of a dispatch.
type Message struct {
	Tenant string `json:"tenant"`
	Job    string `json:"job"`
	Step   string `json:"step"`
	// Wake: a freed slot of this resource woke the step.
	Wake string `json:"wake,omitempty"`
	// Doc is the job as its first write stores it (Send.Doc).
	Doc json.RawMessage `json:"doc,omitempty"`
}

// Delivery is a message as taken from a queue, with the token that
// extends, releases or acks it (opaque to the engine).
type Delivery struct {
	Message Message
	Token   string
	// SentAt is when the message was sent (SQS's SentTimestamp), zero
	// where unknown; Receives is how many times it was received, this one
	// included (ApproximateReceiveCount), 0 where unknown.
	SentAt   time.Time
	Receives int
}

// Actions run built-in steps.
type Actions interface {
	// Run runs one attempt until it ends or ctx is done, and answers its
	// output or the failure that decides what happens next.
	Run(ctx context.Context, c ActionCall) (json.RawMessage, *domain.Failure)
	// CheckAction answers why a step's action may never reach its target
	// (an http url the network guard refuses, a lambda function outside
	// those the stack may invoke), naming the action's parameter at fault,
	// before the job is written.
	CheckAction(a domain.ActionSpec) (param string, err error)
}

// StateMachines runs the executions of stepfunctions steps: a state
// machine named by its name or ARN (domain.ParseStateMachine), an
// execution by its name (domain.ExecutionName).
type StateMachines interface {
	// Start starts execution name of stateMachine on input; one of that
	// name already started is no error. One that can never start answers
	// a domain error of code invalid (the step fails); any other error
	// is passing (the sweep starts it).
	Start(ctx context.Context, stateMachine, name string, input json.RawMessage) error
	// Describe answers an execution's state; domain.ErrNotFound when
	// there is none of that name.
	Describe(ctx context.Context, stateMachine, name string) (Execution, error)
	// Stop stops a running execution; one ended or never started is no
	// error.
	Stop(ctx context.Context, stateMachine, name, cause string) error
	// Check answers why a step may never run stateMachine (another
	// account's, or a name outside the allowed prefixes), at submit.
	Check(stateMachine string) error
}

// Execution is a Step Functions execution as Describe finds it.
type Execution struct {
	Status string // RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED, PENDING_REDRIVE
	Output json.RawMessage
	Error  string
	Cause  string
	// Transitions are the state transitions Step Functions billed it
	// (Standard), once it ended; 0 where unknown.
	Transitions int
}

// Ended reports whether the execution ended (a PENDING_REDRIVE one
// failed, and waits on a redrive no stepflow step makes).
func (x Execution) Ended() bool { return x.Status != "RUNNING" }

// ActionCall is one attempt of a built-in step.
type ActionCall struct {
	Spec           domain.StepSpec
	Input          json.RawMessage
	IdempotencyKey string // job/step/attempt, passed on so callees can de-duplicate
	Tenant         string // the job's tenant, passed to a lambda function so one shared by tenants can keep their work apart
	// Reported is where an action puts what its target said the attempt
	// spent (a lambda function's answer's stepflow_cost); nil for none.
	Reported *float64
}

// ListFilter selects jobs of one tenant, newest first.
type ListFilter struct {
	State domain.JobState // "" for any
	// States: only jobs in one of these ("" State and none: any). A view's
	// state word may name several canonical states.
	States []domain.JobState
	Queue  string // "" for any
	Limit  int32
	Cursor string // from the previous page

	Schedule string // the runs of this schedule; "" for any job
	// Parent: the child jobs of this job (domain.ActionJob); "" for any.
	Parent string
	// IDFrom and IDBelow bound the listing by job id, IDFrom <= id <
	// IDBelow ("" for no bound). A ULID begins with its time, so an id
	// prefix and a span of creation times are both ranges of ids, which a
	// store reads as a range of its sort key, not by filtering.
	IDFrom, IDBelow string
	// Jobs: answer each job whole (JobSummary.Job), for a listing in a
	// view's words. DynamoDB bills a query by the items it reads, not by
	// the attributes it answers, so this costs no more read units.
	Jobs bool
}

// JobSummary is a job as a listing shows it.
type JobSummary struct {
	ID    string          `json:"id"`
	State domain.JobState `json:"state"`
	Queue string          `json:"queue"`
	// Schedule names the schedule whose tick made the job.
	Schedule string `json:"schedule_id,omitempty"`
	// Job is the whole job, when the filter asked for it (Jobs).
	Job *domain.Job `json:"-"`
}

// DueJob names a job in the due index; Due is its due time as found there.
// Part names the part of the index it was read from: a part that answered
// as many entries as Due was asked for may hold more behind them.
type DueJob struct{ Tenant, ID, Due, Part string }

// MetricsSink receives the step metrics a process counted, at each flush
// of its counters (at most every StatsFlushEvery): shared/metrics writes
// them as CloudWatch Embedded Metric Format records. Best effort.
type MetricsSink interface {
	Emit(ctx context.Context, b MetricsBatch)
}

// MetricsBatch is one flush's metrics, every tenant's together.
type MetricsBatch struct {
	At      time.Time
	Moves   map[StepMove]int64
	Retries int64
	// Durations are the run times of the attempts that ended, in seconds,
	// by how each ended.
	Durations map[domain.AttemptState][]float64
	// InState, set by the heartbeat alone, is steps_by_state: the stack's
	// steps in each state.
	InState map[domain.StepState]int64
	// Readings, set by the heartbeat alone, are its sweep's (operator.go).
	Readings *Readings
	// Requests, set by the HTTP functions alone, are their requests by
	// route key since their last flush.
	Requests map[string]*RouteBatch
}

// Publisher sends the job-level transitions of a saved change as "Job
// State Change" events (shared/eventbus on AWS; shared/memory records
// them). It is called once per change, after the write and after the
// change's dispatches are sent, with the job-level transitions the write
// made that Config.JobStateEvents chooses, in order. Best effort: a
// failed publish is logged and the change stands; the job's event log is
// the record, and a consumer that must miss nothing reads it.
type Publisher interface {
	Publish(ctx context.Context, changes []JobStateChange) error
}

// JobStateEvents chooses which job-level transitions are published
// (template parameter JobStateEvents, STEPFLOW_JOB_STATE_EVENTS). Each
// event is an EventBridge put ($1.00 per million), so the choice is what
// the bus costs (docs/costs.md).
type JobStateEvents string

const (
	// JobStateEventsDisabled publishes nothing.
	JobStateEventsDisabled JobStateEvents = "Disabled"
	// JobStateEventsTerminal publishes only a job's move into COMPLETED,
	// FAILED or CANCELLED: one event per job, and one more for each end a
	// redrive leads to.
	JobStateEventsTerminal JobStateEvents = "Terminal"
	// JobStateEventsAll publishes every job-level transition.
	JobStateEventsAll JobStateEvents = "All"
)

// chosen answers the transitions of states that j publishes.
func (j JobStateEvents) chosen(states []JobStateChange) []JobStateChange {
	switch j {
	case JobStateEventsDisabled:
		return nil
	case JobStateEventsTerminal:
		var ends []JobStateChange
		for _, c := range states {
			if c.To.Terminal() {
				ends = append(ends, c)
			}
		}
		return ends
	}
	return states
}

// JobStateChange is one job-level transition, the detail of a "Job State
// Change" event. Job and Seq identify it: a consumer that sees one twice
// (a publish retried) drops the second.
type JobStateChange struct {
	Tenant string          `json:"tenant"`
	JobID  string          `json:"job_id"`
	From   domain.JobState `json:"from"` // "" for a new job
	To     domain.JobState `json:"to"`
	At     time.Time       `json:"at"`
	// Event is the job event that made the transition (job_created,
	// job_leased, ...), Seq its place in the job's event log: a job's
	// events grow in Seq, which is how a consumer orders them, since
	// neither the publish nor EventBridge keeps their order.
	Event      string `json:"event"`
	Seq        int    `json:"seq"`
	ScheduleID string `json:"schedule_id,omitempty"` // the schedule whose tick made the job
	// Step and Error say, for a transition to FAILED, which step failed
	// the job and why.
	Step  string            `json:"step,omitempty"`
	Error *domain.StepError `json:"error,omitempty"`
}
