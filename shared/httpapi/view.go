package httpapi

import (
	"encoding/json"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/views"
)

// JobView is a job as GET /v1/jobs/{id} answers it.
type JobView struct {
	ID        string          `json:"id"`
	View      string          `json:"view"` // canonical: ?view= names the others (shared/views)
	State     domain.JobState `json:"state"`
	Queue     string          `json:"queue"`
	Priority  int             `json:"priority"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"` // when retention deletes the finished job
	RunAt     *time.Time      `json:"run_at,omitempty"`
	Steps     []StepView      `json:"steps"`
	// Signals are the signals the job received: those a wait took name it.
	Signals []domain.Signal `json:"signals,omitempty"`
	// ScheduleID names the schedule whose tick made the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// PayloadRef is the payload kept in S3 (payload is then null).
	PayloadRef *domain.DataRef `json:"payload_ref,omitempty"`
	// Error says why a FAILED job failed: its failed step's error, or why
	// no step of it could ever run again.
	Error *domain.StepError `json:"error,omitempty"`
	// Parent is the step whose attempt made this child job; Children are
	// the child jobs this job's steps made, in step and attempt order
	// (GET /v1/jobs?parent= lists them).
	Parent   *ParentView `json:"parent,omitempty"`
	Children []string    `json:"children,omitempty"`
	// Cost is what the job cost so far: the engine's AWS usage priced at
	// list prices, what its steps reported, and their sum
	// (docs/model.md#what-a-job-cost).
	Cost domain.Cost `json:"cost"`
	// Budget is what the job may cost; while Exceeded is set it waits at
	// its budget gate (Message says why) until a person sets a budget
	// above its cost (POST .../budget) or cancels it.
	Budget *BudgetView `json:"budget,omitempty"`
}

// BudgetView is a job's budget.
type BudgetView struct {
	USD      float64                `json:"usd"`
	Exceeded *domain.BudgetExceeded `json:"exceeded,omitempty"`
	Message  string                 `json:"message,omitempty"`
}

// TenantBudgetView is GET /v1/budget's answer: the tenant's daily budget
// (none: absent), what its jobs cost since midnight UTC, and when that
// count starts again.
type TenantBudgetView struct {
	Tenant        string    `json:"tenant"`
	DailyUSD      *float64  `json:"daily_usd,omitempty"`
	SpentTodayUSD float64   `json:"spent_today_usd"`
	ResetsAt      time.Time `json:"resets_at"`
	Exceeded      bool      `json:"exceeded"`
}

// ParentView links a child job to the attempt that made it (its lease
// stays with the engine).
type ParentView struct {
	Job     string `json:"job"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
}

// StepView is one step with its attempts.
type StepView struct {
	ID          string            `json:"id"`
	Action      string            `json:"action"`
	State       domain.StepState  `json:"state"`
	Attempt     int               `json:"attempt"`
	MaxAttempts int               `json:"max_attempts"`
	NextRunAt   *time.Time        `json:"next_run_at,omitempty"`
	Output      json.RawMessage   `json:"output,omitempty"`
	Error       *domain.StepError `json:"error,omitempty"`
	Attempts    []AttemptView     `json:"attempts"`
	Lease       *LeaseView        `json:"lease,omitempty"`
	DependsOn   []string          `json:"depends_on,omitempty"`
	Prompt      string            `json:"prompt,omitempty"`     // what it asks of a person, while NEEDS_USER
	UserInput   json.RawMessage   `json:"user_input,omitempty"` // their answer, once resumed
	Deadline    *time.Time        `json:"deadline,omitempty"`   // when an open approval gate or a wait times out
	Decision    *domain.Decision  `json:"decision,omitempty"`   // how a person closed an approval gate
	Signal      string            `json:"signal,omitempty"`     // what a wait step waits for
	WakeAt      *time.Time        `json:"wake_at,omitempty"`    // when a sleeping step wakes
	Parked      bool              `json:"parked,omitempty"`     // it waits beyond the timer threshold, or for ever
	ReplacedBy  []string          `json:"replaced_by,omitempty"`
	When        string            `json:"when,omitempty"` // its condition
	// Requires is what a resource must have for the step; Avoid the
	// resources (or workers) that failed it with class resource, never
	// chosen for it again; ResourceWait the resources it waits on for a slot.
	Requires     *domain.Requirements `json:"requires,omitempty"`
	Avoid        []string             `json:"avoid,omitempty"`
	ResourceWait *domain.ResourceWait `json:"resource_wait,omitempty"`
	// ResourceWaitSeconds bounds a wait for a slot (a step that requires
	// a resource): its own, or the job's default.
	ResourceWaitSeconds int                 `json:"resource_wait_seconds,omitempty"`
	Retry               *domain.RetryPolicy `json:"retry,omitempty"`
	TimeoutSecs         int                 `json:"timeout_seconds,omitempty"`
	// OutputRef is the output kept in S3 (output is then absent); GET
	// .../steps/{step}/output answers it whole. OutputIsInput: the output
	// is the step's input (a sleep's), which that route composes.
	OutputRef     *domain.DataRef `json:"output_ref,omitempty"`
	OutputIsInput bool            `json:"output_is_input,omitempty"`
	// A map's child names its map and its item's index; a map, how many
	// children it made, and once it succeeded that its output is theirs
	// (GET .../steps/{map}/output answers the list).
	MapOf            string `json:"map_of,omitempty"`
	Index            *int   `json:"index,omitempty"`
	Children         int    `json:"children,omitempty"`
	OutputIsChildren bool   `json:"output_is_children,omitempty"`
	// Child is the child job a job step's running attempt waits on;
	// Execution the Step Functions execution a stepfunctions step's does
	// (its name).
	Child     string `json:"child,omitempty"`
	Execution string `json:"execution,omitempty"`
	// CostUSD is what its attempts reported they spent.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// AttemptView is one attempt; the lease id it ran under stays with its
// holder.
type AttemptView struct {
	N         int                 `json:"n"`
	State     domain.AttemptState `json:"state"`
	Worker    string              `json:"worker,omitempty"`
	Resource  string              `json:"resource,omitempty"`
	StartedAt *time.Time          `json:"started_at,omitempty"`
	EndedAt   *time.Time          `json:"ended_at,omitempty"`
	Error     *domain.StepError   `json:"error,omitempty"`
	Output    json.RawMessage     `json:"output,omitempty"`
	OutputRef *domain.DataRef     `json:"output_ref,omitempty"`
	Child     string              `json:"child,omitempty"`     // the child job it made (a job step's)
	Execution string              `json:"execution,omitempty"` // the execution it started (a stepfunctions step's)
	CostUSD   float64             `json:"cost_usd,omitempty"`  // what it reported it spent
}

// LeaseView shows who holds a step. The lease id is the holder's fencing
// token and stays with the holder; the SQS receipt is internal.
type LeaseView struct {
	Attempt   int        `json:"attempt"`
	Worker    string     `json:"worker,omitempty"`
	Resource  string     `json:"resource,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
	Deadline  *time.Time `json:"deadline,omitempty"` // timeout_seconds after it started
}

func jobView(j *domain.Job) JobView {
	v := JobView{
		ID: j.ID, View: views.Canonical, State: j.State, Queue: j.Queue, Priority: j.Priority, Payload: j.Payload,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EndedAt: j.EndedAt, ExpiresAt: j.ExpiresAt, RunAt: j.RunAt, Steps: make([]StepView, 0, len(j.Steps)),
		Signals: j.Signals, ScheduleID: j.ScheduleID, PayloadRef: j.PayloadRef, Error: j.Error,
		Children: j.Children(), Cost: j.Cost(),
	}
	if p := j.Parent; p != nil {
		v.Parent = &ParentView{Job: p.Job, Step: p.Step, Attempt: p.Attempt}
	}
	if b := j.Budget; b != nil {
		v.Budget = &BudgetView{USD: b.USD, Exceeded: b.Exceeded, Message: b.Message()}
	}
	for _, s := range j.Steps {
		sv := StepView{
			ID: s.ID(), Action: s.Spec.Action.Type, State: s.State, Attempt: s.Attempt, MaxAttempts: s.Spec.Retry.MaxAttempts,
			Output: s.Output, Error: s.Error, Attempts: make([]AttemptView, 0, len(s.Attempts)),
			DependsOn: s.Spec.DependsOn, Prompt: s.Prompt, UserInput: s.UserInput, Decision: s.Decision,
			Signal: s.Spec.Action.Signal, ReplacedBy: s.ReplacedBy, When: s.Spec.When,
			Requires: s.Spec.Requires, Avoid: s.Avoid, ResourceWait: s.ResourceWait, TimeoutSecs: s.Spec.TimeoutSeconds,
			OutputRef: s.OutputRef, OutputIsInput: s.OutputIsInput,
			MapOf: s.MapOf, Children: s.Children, OutputIsChildren: s.OutputIsChildren, CostUSD: s.ReportedUSD(),
		}
		if s.MapOf != "" {
			sv.Index = &s.Index
		}
		if t := s.Timer; t != nil {
			sv.Deadline, sv.WakeAt, sv.Parked = t.Deadline, t.WakeAt, t.Parked
		}
		if domain.Executed(s.Spec.Action.Type) {
			sv.Retry = s.Spec.Retry
		}
		if s.Spec.Requires != nil {
			sv.ResourceWaitSeconds = int(j.ResourceWaitBound(s) / time.Second)
		}
		sfn := s.Spec.Action.Type == domain.ActionStepFunctions
		for _, a := range s.Attempts {
			av := AttemptView{N: a.N, State: a.State, Worker: a.Worker, Resource: a.Resource, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Error: a.Error, Output: a.Output, OutputRef: a.OutputRef, Child: a.Child, CostUSD: a.CostUSD}
			if sfn {
				av.Child, av.Execution = "", a.Child
			}
			sv.Attempts = append(sv.Attempts, av)
		}
		if s.State == domain.StepRetrying || s.State == domain.StepPending && j.RunAt != nil {
			sv.NextRunAt = s.ReadyAt // after the backoff, or at run_at
		}
		switch {
		case s.Child != nil && sfn:
			sv.Execution = s.Child.ID
		case s.Child != nil:
			sv.Child = s.Child.ID
		}
		if s.Lease != nil {
			sv.Lease = &LeaseView{Attempt: s.Lease.Attempt, Worker: s.Lease.Worker, Resource: s.Lease.Resource, ExpiresAt: s.Lease.ExpiresAt, Deadline: s.Lease.Deadline}
		}
		v.Steps = append(v.Steps, sv)
	}
	return v
}
