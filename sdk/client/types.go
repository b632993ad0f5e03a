package client

import (
	"encoding/json"
	"time"
)

// JobState is a job's state.
type JobState string

// Job states.
const (
	JobQueued    JobState = "QUEUED"
	JobRunning   JobState = "RUNNING"
	JobWaiting   JobState = "WAITING"
	JobParked    JobState = "PARKED"
	JobRetrying  JobState = "RETRYING"
	JobCompleted JobState = "COMPLETED"
	JobFailed    JobState = "FAILED"
	JobCancelled JobState = "CANCELLED"
)

// Finished reports a state a job ends in (a FAILED job may be redriven).
func (s JobState) Finished() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// Failure classes a worker may name (Fail), and the API records.
const (
	ClassRetryable = "retryable"
	ClassNetwork   = "network"
	ClassTimeout   = "timeout"
	ClassBlocked   = "blocked"
	ClassResource  = "resource"
	ClassFatal     = "fatal"
	ClassNeedsUser = "needs_user"
	ClassReplan    = "replan"
)

// JobRequest is a submission (POST /v1/jobs).
type JobRequest struct {
	Steps    []StepSpec `json:"steps"`
	Payload  any        `json:"payload,omitempty"`
	Queue    string     `json:"queue,omitempty"`
	Priority *int       `json:"priority,omitempty"` // 0 (first) to 2; default 1
	RunAt    *time.Time `json:"run_at,omitempty"`   // start no earlier
	// Budget holds the job to a cost: past Budget.USD no further step
	// starts until the budget is raised (SetBudget). Only USD is sent.
	Budget *Budget `json:"budget,omitempty"`
}

// StepSpec is one step of a submission.
type StepSpec struct {
	ID             string        `json:"id"`
	Action         Action        `json:"action"`
	DependsOn      []string      `json:"depends_on,omitempty"`
	Retry          *RetryPolicy  `json:"retry,omitempty"`
	TimeoutSeconds int           `json:"timeout_seconds,omitempty"`
	Requires       *Requirements `json:"requires,omitempty"`
	// ResourceWaitSeconds bounds the wait for a slot of a required
	// resource (the stack's default when zero); past it the step fails
	// with class resource.
	ResourceWaitSeconds int `json:"resource_wait_seconds,omitempty"`
	// When is a condition in CEL over payload and the steps this one
	// depends on (steps.<id>.output, steps.<id>.state): false skips the
	// step (state SKIPPED) and what depends on it goes on.
	When string `json:"when,omitempty"`
	// Input is a CEL expression (over payload and steps, as When reads
	// them) whose value the step runs on; Output one over output, the
	// attempt's result, whose value the step keeps. Executed actions only.
	Input  string `json:"input,omitempty"`
	Output string `json:"output,omitempty"`
}

// Action is a step's action: "type" and that type's own parameters (see
// the constructors).
type Action map[string]any

// Pass answers its input as its output.
func Pass() Action { return Action{"type": "pass"} }

// Sleep waits durably for seconds.
func Sleep(seconds float64) Action { return Action{"type": "sleep", "seconds": seconds} }

// HTTP POSTs the input to url.
func HTTP(url string) Action { return Action{"type": "http", "url": url} }

// Fail fails with a class and message.
func Fail(class, message string) Action {
	return Action{"type": "fail", "class": class, "message": message}
}

// Worker waits for an external worker claiming from queue; leaseSeconds 0
// keeps the default (60).
func Worker(queue string, leaseSeconds int) Action {
	a := Action{"type": "worker", "queue": queue}
	if leaseSeconds > 0 {
		a["lease_seconds"] = leaseSeconds
	}
	return a
}

// Lambda invokes a Lambda function with the input.
func Lambda(function string) Action { return Action{"type": "lambda", "function": function} }

// Approval is a gate a person approves or rejects; timeoutSeconds 0: none.
func Approval(timeoutSeconds int) Action {
	a := Action{"type": "approval"}
	if timeoutSeconds > 0 {
		a["timeout_seconds"] = timeoutSeconds
	}
	return a
}

// Wait waits for a signal of that name; timeoutSeconds 0: none.
func Wait(signal string, timeoutSeconds int) Action {
	a := Action{"type": "wait", "signal": signal}
	if timeoutSeconds > 0 {
		a["timeout_seconds"] = timeoutSeconds
	}
	return a
}

// RetryPolicy is a step's retry policy.
type RetryPolicy struct {
	MaxAttempts    int                     `json:"max_attempts,omitempty"`
	Backoff        string                  `json:"backoff,omitempty"` // exponential, linear, fixed
	InitialDelayMS *int64                  `json:"initial_delay_ms,omitempty"`
	MaxDelayMS     *int64                  `json:"max_delay_ms,omitempty"`
	Jitter         bool                    `json:"jitter,omitempty"`
	Classes        map[string]*RetryPolicy `json:"classes,omitempty"`
}

// Requirements are what a resource must have for a step to run on it.
type Requirements struct {
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// DataRef names data kept in the stack's S3 bucket: its key, size and
// SHA-256 (hex).
type DataRef struct {
	Key    string `json:"key"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// Job is a job as the API answers it.
type Job struct {
	ID         string          `json:"id"`
	State      JobState        `json:"state"`
	Queue      string          `json:"queue"`
	Priority   int             `json:"priority"`
	Payload    json.RawMessage `json:"payload"`
	PayloadRef *DataRef        `json:"payload_ref,omitempty"` // the payload is in S3 (payload is null)
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	EndedAt    *time.Time      `json:"ended_at,omitempty"`
	ExpiresAt  *time.Time      `json:"expires_at,omitempty"`
	RunAt      *time.Time      `json:"run_at,omitempty"`
	Steps      []Step          `json:"steps"`
	Signals    []Signal        `json:"signals,omitempty"`
	ScheduleID string          `json:"schedule_id,omitempty"`
	// Error says why a FAILED job failed: its failed step's error, or why
	// no step of it could ever run again.
	Error *StepError `json:"error,omitempty"`
	// Parent is the step whose attempt made this child job; Children the
	// child jobs this job's steps made, in step and attempt order.
	Parent   *ParentRef `json:"parent,omitempty"`
	Children []string   `json:"children,omitempty"`
	// Cost is what the job cost so far; Budget what it may cost, when it
	// has one.
	Cost   Cost    `json:"cost"`
	Budget *Budget `json:"budget,omitempty"`
	// SignalOutcome is set in the answer to Signal only: what became of
	// the signal sent.
	SignalOutcome *SignalOutcome `json:"signal,omitempty"`
	// Replayed: Submit's Idempotency-Key named a job submitted before,
	// which this is (200, not 201).
	Replayed bool `json:"-"`
}

// Cost is what a job cost so far, in US dollars: the engine's AWS usage
// for it at list prices, what its steps reported they spent themselves,
// and what its child jobs cost.
type Cost struct {
	USD         float64   `json:"usd"`
	EngineUSD   float64   `json:"engine_usd"`
	ReportedUSD float64   `json:"reported_usd"`
	ChildrenUSD float64   `json:"children_usd,omitempty"`
	Units       CostUnits `json:"units"`
}

// CostUnits are the AWS usage a job's engine cost is priced from, each in
// the unit AWS bills; shared requests count as shares.
type CostUnits struct {
	DynamoDBWriteUnits float64 `json:"dynamodb_write_units,omitempty"`
	DynamoDBReadUnits  float64 `json:"dynamodb_read_units,omitempty"`
	SQSRequests        float64 `json:"sqs_requests,omitempty"`
	LambdaRequests     float64 `json:"lambda_requests,omitempty"`
	LambdaGBSeconds    float64 `json:"lambda_gb_seconds,omitempty"`
	APIRequests        float64 `json:"api_requests,omitempty"`
	S3WriteRequests    float64 `json:"s3_write_requests,omitempty"`
	S3ReadRequests     float64 `json:"s3_read_requests,omitempty"`
	Events             float64 `json:"events,omitempty"`
	SFNTransitions     float64 `json:"sfn_transitions,omitempty"`
	TableGBMonths      float64 `json:"table_gb_months,omitempty"`
	S3GBMonths         float64 `json:"s3_gb_months,omitempty"`
}

// Budget is what a job may cost. While Exceeded is set the job waits
// (WAITING) at its budget gate: no further step starts until the budget
// is raised above its cost.
type Budget struct {
	USD      float64         `json:"usd"`
	Exceeded *BudgetExceeded `json:"exceeded,omitempty"`
	// Message says why the job waits, e.g. "budget exceeded: $0.51 of $0.5".
	Message string `json:"message,omitempty"`
}

// BudgetExceeded is when a job's cost went past its budget, and how much
// it had cost then.
type BudgetExceeded struct {
	At      time.Time `json:"at"`
	CostUSD float64   `json:"cost_usd"`
}

// TenantBudget is GET /v1/budget: the tenant's daily budget and what its
// jobs spent today. A submit past the daily budget answers 402
// (IsBudgetExceeded).
type TenantBudget struct {
	Tenant        string    `json:"tenant"`
	DailyUSD      *float64  `json:"daily_usd,omitempty"` // nil: no daily budget
	SpentTodayUSD float64   `json:"spent_today_usd"`
	ResetsAt      time.Time `json:"resets_at"`
	// Exceeded: today's spending reached the daily budget; submits are
	// refused until ResetsAt.
	Exceeded bool `json:"exceeded"`
}

// ParentRef links a child job to the attempt of a job step that made it.
type ParentRef struct {
	Job     string `json:"job"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
}

// Step finds a step by id.
func (j *Job) Step(id string) (*Step, bool) {
	for i := range j.Steps {
		if j.Steps[i].ID == id {
			return &j.Steps[i], true
		}
	}
	return nil, false
}

// Step is one step of a job with its attempts.
type Step struct {
	ID            string          `json:"id"`
	Action        string          `json:"action"`
	State         string          `json:"state"`
	Attempt       int             `json:"attempt"`
	MaxAttempts   int             `json:"max_attempts"`
	NextRunAt     *time.Time      `json:"next_run_at,omitempty"`
	Output        json.RawMessage `json:"output,omitempty"`
	OutputRef     *DataRef        `json:"output_ref,omitempty"` // the output is in S3: StepOutput answers it
	OutputIsInput bool            `json:"output_is_input,omitempty"`
	Error         *StepError      `json:"error,omitempty"`
	Attempts      []Attempt       `json:"attempts"`
	Lease         *LeaseInfo      `json:"lease,omitempty"`
	DependsOn     []string        `json:"depends_on,omitempty"`
	Prompt        string          `json:"prompt,omitempty"`
	UserInput     json.RawMessage `json:"user_input,omitempty"`
	Deadline      *time.Time      `json:"deadline,omitempty"`
	Decision      *Decision       `json:"decision,omitempty"`
	Signal        string          `json:"signal,omitempty"`
	WakeAt        *time.Time      `json:"wake_at,omitempty"`
	Parked        bool            `json:"parked,omitempty"`
	ReplacedBy    []string        `json:"replaced_by,omitempty"`
	When          string          `json:"when,omitempty"` // its condition; SKIPPED when it was false
	// A map's child names its map and its item's index; a map, how many
	// children it made, and once it succeeded that its output is theirs.
	MapOf            string        `json:"map_of,omitempty"`
	Index            *int          `json:"index,omitempty"`
	Children         int           `json:"children,omitempty"`
	OutputIsChildren bool          `json:"output_is_children,omitempty"`
	Child            string        `json:"child,omitempty"`     // a job step: the child job its running attempt waits on
	Execution        string        `json:"execution,omitempty"` // a stepfunctions step: the execution its running attempt waits on
	Requires         *Requirements `json:"requires,omitempty"`
	Avoid            []string      `json:"avoid,omitempty"`
	ResourceWait     *ResourceWait `json:"resource_wait,omitempty"`
	// ResourceWaitSeconds is the bound in force on a wait for a slot.
	ResourceWaitSeconds int          `json:"resource_wait_seconds,omitempty"`
	Retry               *RetryPolicy `json:"retry,omitempty"`
	TimeoutSecs         int          `json:"timeout_seconds,omitempty"`
	// CostUSD is what its attempts reported they spent themselves.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// StepError is why an attempt or step failed.
type StepError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// Attempt is one execution of a step.
type Attempt struct {
	N         int             `json:"n"`
	State     string          `json:"state"` // queued, running, succeeded, failed, timeout, cancelled
	Worker    string          `json:"worker,omitempty"`
	Resource  string          `json:"resource,omitempty"`
	StartedAt *time.Time      `json:"started_at,omitempty"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
	Error     *StepError      `json:"error,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	OutputRef *DataRef        `json:"output_ref,omitempty"`
	Child     string          `json:"child,omitempty"`     // the child job it made (a job step's)
	Execution string          `json:"execution,omitempty"` // the execution it started (a stepfunctions step's)
	CostUSD   float64         `json:"cost_usd,omitempty"`  // what it reported it spent
}

// LeaseInfo shows who holds a step.
type LeaseInfo struct {
	Attempt   int        `json:"attempt"`
	Worker    string     `json:"worker,omitempty"`
	Resource  string     `json:"resource,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
	Deadline  *time.Time `json:"deadline,omitempty"`
}

// Decision is how a person closed an approval gate.
type Decision struct {
	Approved bool      `json:"approved"`
	By       string    `json:"by,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	Key      string    `json:"key,omitempty"`
	At       time.Time `json:"at"`
}

// Signal is a signal a job received.
type Signal struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	At      time.Time       `json:"at"`
	Step    string          `json:"step,omitempty"`
}

// ResourceWait says which resources a step waits on for a slot.
type ResourceWait struct {
	Since time.Time `json:"since"`
	On    []string  `json:"on"`
	// Until is when the wait fails the step with class resource.
	Until *time.Time `json:"until,omitempty"`
}

// JobSummary is one job of a listing.
type JobSummary struct {
	ID         string   `json:"id"`
	State      JobState `json:"state"`
	Queue      string   `json:"queue"`
	ScheduleID string   `json:"schedule_id,omitempty"`
}

// JobPage is one page of GET /v1/jobs.
type JobPage struct {
	Jobs       []JobSummary `json:"jobs"`
	NextCursor string       `json:"next_cursor"`
}

// Event is one entry of a job's event log.
type Event struct {
	Seq     int       `json:"seq"`
	Type    string    `json:"type"`
	At      time.Time `json:"at"`
	Step    string    `json:"step,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// EventList is GET /v1/jobs/{id}/events.
type EventList struct {
	JobID  string  `json:"job_id"`
	Events []Event `json:"events"`
	// State is the job's state when the log was read, and LastSeq its last
	// event's seq: ask again after it. More: the job has events after
	// these (a page holds at most 1,000), and LastSeq is the last of them.
	State   JobState `json:"state"`
	LastSeq int      `json:"last_seq"`
	More    bool     `json:"more,omitempty"`
}

// DecisionRequest is an approve's or a reject's body.
type DecisionRequest struct {
	By      string `json:"by,omitempty"`
	Comment string `json:"comment,omitempty"`
}

// What became of a signal (SignalOutcome.Outcome).
const (
	SignalDelivered = "delivered" // a wait took it
	SignalKept      = "kept"      // kept for a wait of its name not reached yet
	SignalDropped   = "dropped"   // no wait of the job can take it: nothing written
)

// SignalOutcome says what became of a signal, and why.
type SignalOutcome struct {
	Outcome string `json:"outcome"`
	Step    string `json:"step,omitempty"` // the wait that took it
	Reason  string `json:"reason"`
	// Repeat: a signal of the same id came before; the outcome is its.
	Repeat bool `json:"repeat,omitempty"`
}

// SignalRequest is POST /v1/jobs/{id}/signal. ID makes it idempotent;
// Signal fills it when empty, so its own retries are delivered once.
type SignalRequest struct {
	Name    string `json:"name"`
	Payload any    `json:"payload,omitempty"`
	ID      string `json:"id,omitempty"`
}

// Health is GET /v1/health.
type Health struct {
	Tenant  string   `json:"tenant"` // the tenant the client's key names
	Status  string   `json:"status"` // ok, degraded, unhealthy
	Reasons []string `json:"reasons,omitempty"`
	// Notes say what was not graded, and why (a success rate of too few
	// finished jobs).
	Notes       []string `json:"notes,omitempty"`
	SuccessRate *float64 `json:"success_rate,omitempty"`
	Backlog     int      `json:"backlog"`
	Blocked     int64    `json:"blocked"`
	Completed   int64    `json:"completed_24h"`
	Failed      int64    `json:"failed_24h"`
	Cancelled   int64    `json:"cancelled_24h"`
	// AvgDuration is the average run time, in seconds, of the jobs that
	// completed or failed in 24 h; nil with none.
	AvgDuration *float64 `json:"avg_duration_seconds,omitempty"`
	// LastHeartbeat is when the heartbeat last swept; nil before its first.
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
}

// ResourceRequest is PUT /v1/resources/{id}.
type ResourceRequest struct {
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Capacity     int               `json:"capacity,omitempty"` // default 1
}

// Resource is a resource with its slots in use.
type Resource struct {
	ID           string            `json:"id"`
	Capabilities []string          `json:"capabilities"`
	Labels       map[string]string `json:"labels"`
	Capacity     int               `json:"capacity"`
	InUse        int               `json:"in_use"`
	Free         int               `json:"free"`
	Holders      []Holder          `json:"holders"`
	Waiting      []Waiter          `json:"waiting,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// Holder is a slot in use.
type Holder struct {
	Job       string    `json:"job_id"`
	Step      string    `json:"step_id"`
	Attempt   string    `json:"attempt"`
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Waiter is a step in line for a slot.
type Waiter struct {
	Job   string    `json:"job"`
	Step  string    `json:"step"`
	Since time.Time `json:"since"`
}

// ScheduleRequest is POST /v1/schedules: Cron (with TimeZone) or Every.
type ScheduleRequest struct {
	ID       string `json:"id"`
	Cron     string `json:"cron,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	Every    string `json:"every,omitempty"`   // a duration, e.g. "5m"
	Overlap  string `json:"overlap,omitempty"` // skip (default) or allow
	Job      any    `json:"job"`               // a JobRequest, or its JSON
}

// Schedule is a schedule as the API answers it.
type Schedule struct {
	ID        string          `json:"id"`
	Cron      string          `json:"cron,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
	Every     string          `json:"every,omitempty"`
	Overlap   string          `json:"overlap"`
	Paused    bool            `json:"paused"`
	NextAt    *time.Time      `json:"next_at,omitempty"`
	LastRunAt *time.Time      `json:"last_run_at,omitempty"`
	LastJobID string          `json:"last_job_id,omitempty"`
	LastError string          `json:"last_error,omitempty"`
	Runs      int64           `json:"runs"`
	Skipped   int64           `json:"skipped"`
	Job       json.RawMessage `json:"job"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	// Created: the create made it (201), rather than finding it made from
	// the same body (200).
	Created bool `json:"-"`
}

// SchedulePage is one page of GET /v1/schedules.
type SchedulePage struct {
	Schedules  []Schedule `json:"schedules"`
	NextCursor string     `json:"next_cursor"`
}

// ClaimRequest is POST /v1/claim.
type ClaimRequest struct {
	Queue       string `json:"queue"`
	Max         int    `json:"max,omitempty"`          // 1-10, default 1
	WaitSeconds int    `json:"wait_seconds,omitempty"` // 0-20: long-poll for the first lease
	Worker      string `json:"worker,omitempty"`       // shown on the attempt
}

// Lease is a claimed step: run it, heartbeat it, then complete or fail it.
type Lease struct {
	LeaseID        string          `json:"lease_id"`
	JobID          string          `json:"job_id"`
	StepID         string          `json:"step_id"`
	Attempt        int             `json:"attempt"`
	MaxAttempts    int             `json:"max_attempts"`
	Input          json.RawMessage `json:"input"`
	ExpiresAt      time.Time       `json:"expires_at"`
	LeaseSeconds   int             `json:"lease_seconds"`
	IdempotencyKey string          `json:"idempotency_key"`
	Deadline       *time.Time      `json:"deadline,omitempty"`
	Resource       *LeaseResource  `json:"resource,omitempty"`
	// A large input is not inline (Input is null): InputURL GETs it while
	// the lease runs (presigned: send no key), InputRef checks it.
	// FetchInput does both.
	InputRef *DataRef `json:"input_ref,omitempty"`
	InputURL string   `json:"input_url,omitempty"`
}

// LeaseResource is the resource whose slot a lease holds.
type LeaseResource struct {
	ID           string            `json:"id"`
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// HeartbeatResult answers a heartbeat.
type HeartbeatResult struct {
	LeaseID         string     `json:"lease_id"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
	CancelRequested bool       `json:"cancel_requested"`
}

// Failure is POST /v1/leases/{lease}/fail.
type Failure struct {
	Class             string     `json:"class"`
	Message           string     `json:"message,omitempty"`
	RetryAfterSeconds int        `json:"retry_after_seconds,omitempty"`
	Prompt            string     `json:"prompt,omitempty"` // needs_user
	Steps             []StepSpec `json:"steps,omitempty"`  // replan
	// Cost is what the failed attempt spent itself, added to its job's.
	Cost *ReportedCost `json:"cost,omitempty"`
}

// ReportedCost is what an attempt spent itself (an LLM call's tokens,
// say), which its job adds to what the engine's work for it cost.
type ReportedCost struct {
	USD float64 `json:"usd"`
}

// OutcomeResult answers a complete or fail: where the step and job went.
type OutcomeResult struct {
	JobID     string   `json:"job_id"`
	StepID    string   `json:"step_id"`
	StepState string   `json:"step_state"`
	JobState  JobState `json:"job_state"`
}
