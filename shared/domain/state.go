// Package domain is stepflow's canonical model: job, step and attempt states,
// the transition tables they move by, job specs and their validation, retry
// policies and the event log. It does no I/O and imports no AWS package; the
// store and queue adapters apply what it decides.
package domain

import "strings"

// StepState is the canonical state of one step (the step machine's thirteen
// states, plus CANCELLED, TIMED_OUT, WAITING and SKIPPED;
// docs/model.md#step-states).
type StepState string

const (
	StepPending           StepState = "PENDING"
	StepWaitingDeps       StepState = "WAITING_DEPS"
	StepLeased            StepState = "LEASED"
	StepRunning           StepState = "RUNNING"
	StepSucceeded         StepState = "SUCCEEDED"
	StepFailedRetryable   StepState = "FAILED_RETRYABLE"
	StepRetrying          StepState = "RETRYING"
	StepFailedResource    StepState = "FAILED_RESOURCE"
	StepSwitchingResource StepState = "SWITCHING_RESOURCE"
	StepFailedFatal       StepState = "FAILED_FATAL"
	StepFailed            StepState = "FAILED"
	StepNeedsUser         StepState = "NEEDS_USER"
	StepLeaseTimeout      StepState = "LEASE_TIMEOUT"
	StepCancelled         StepState = "CANCELLED"
	StepTimedOut          StepState = "TIMED_OUT"
	// StepWaiting: a sleep or wait step holds its job until its time comes
	// or its signal arrives; nothing runs it.
	StepWaiting StepState = "WAITING"
	// StepSkipped: the step's condition (when) was false when its
	// dependencies were done, so it ended without running; what depends on
	// it goes on (docs/model.md#conditions).
	StepSkipped StepState = "SKIPPED"
)

// AllStepStates lists every step state, in lifecycle order.
func AllStepStates() []StepState {
	return []StepState{
		StepPending, StepWaitingDeps, StepLeased, StepRunning, StepSucceeded,
		StepFailedRetryable, StepRetrying, StepFailedResource, StepSwitchingResource,
		StepFailedFatal, StepFailed, StepNeedsUser, StepLeaseTimeout, StepCancelled, StepTimedOut, StepWaiting,
		StepSkipped,
	}
}

// Terminal reports whether s ends the step within a run of its job: only a
// redrive of the failed job reopens a FAILED or CANCELLED step.
func (s StepState) Terminal() bool {
	return s == StepSucceeded || s == StepFailed || s == StepCancelled || s == StepSkipped
}

// Done reports whether s lets what depends on the step go on: it
// succeeded, or its condition skipped it.
func (s StepState) Done() bool { return s == StepSucceeded || s == StepSkipped }

// EventType is the event a step transition into s appends: step_<state>.
func (s StepState) EventType() string { return "step_" + strings.ToLower(string(s)) }

// JobState is the canonical state of a job (the formal job machine,
// docs/model.md#formal-job-machine).
type JobState string

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

// AllJobStates lists every job state.
func AllJobStates() []JobState {
	return []JobState{JobQueued, JobRunning, JobWaiting, JobParked, JobRetrying, JobCompleted, JobFailed, JobCancelled}
}

// Terminal reports whether the job is finished.
func (s JobState) Terminal() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// AttemptState is the state of one execution of a step (the quality
// platform's run, docs/model.md#tasks-and-runs-quality-platform).
type AttemptState string

const (
	AttemptQueued    AttemptState = "queued"
	AttemptRunning   AttemptState = "running"
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptTimeout   AttemptState = "timeout"
	AttemptCancelled AttemptState = "cancelled"
)

// AllAttemptStates lists every attempt state.
func AllAttemptStates() []AttemptState {
	return []AttemptState{AttemptQueued, AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimeout, AttemptCancelled}
}

// Terminal reports whether the attempt is over.
func (s AttemptState) Terminal() bool {
	return s != AttemptQueued && s != AttemptRunning
}
