// Package wire holds the worker protocol's JSON bodies as they cross HTTP:
// what a worker sends to claim, heartbeat, complete and fail, and what the
// API answers, and the body of a decision at an approval gate. The API
// decodes into these and encodes from them; HTTP clients (the chaos
// workers, the devstack tests, cmd) use the same shapes. The engine has
// plain Go types of its own, so its API does not depend on JSON.
package wire

import (
	"encoding/json"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// ClaimRequest is the body of POST /v1/claim. Zero Max means 1, an empty
// Queue the default queue.
type ClaimRequest struct {
	Queue       string `json:"queue"`
	Max         int    `json:"max"`
	WaitSeconds int    `json:"wait_seconds"`
	Worker      string `json:"worker"`
}

// Claimed answers POST /v1/claim: the leases taken, none when the wait ran
// out first (an empty list, never null).
type Claimed struct {
	Leases []ClaimedLease `json:"leases"`
}

// ClaimedLease is one lease handed to a worker.
type ClaimedLease struct {
	LeaseID        string          `json:"lease_id"`
	JobID          string          `json:"job_id"`
	StepID         string          `json:"step_id"`
	Attempt        int             `json:"attempt"`
	MaxAttempts    int             `json:"max_attempts"`
	Input          json.RawMessage `json:"input"`
	ExpiresAt      time.Time       `json:"expires_at"`
	LeaseSeconds   int             `json:"lease_seconds"`
	IdempotencyKey string          `json:"idempotency_key"`
	// Deadline is when the attempt has run for the step's timeout_seconds:
	// a heartbeat after it hears 409 and the attempt is timed out.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Resource is the resource whose slot the attempt holds.
	Resource *ClaimedResource `json:"resource,omitempty"`
	// A large input is not inline (input is null): InputURL GETs it for the
	// lease's length, and InputRef says its size and SHA-256.
	InputRef *domain.DataRef `json:"input_ref,omitempty"`
	InputURL string          `json:"input_url,omitempty"`
}

// ClaimedResource is the resource a claimed lease holds a slot of.
type ClaimedResource struct {
	ID           string            `json:"id"`
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// HeartbeatResult answers POST /v1/leases/{lease}/heartbeat.
type HeartbeatResult struct {
	LeaseID         string     `json:"lease_id"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"` // absent once a cancel ended the lease
	CancelRequested bool       `json:"cancel_requested"`
}

// Outcome is the body of POST /v1/leases/{lease}/complete (Output only)
// or /fail (the rest).
type Outcome struct {
	Output            json.RawMessage `json:"output,omitempty"`
	Class             string          `json:"class,omitempty"`
	Message           string          `json:"message,omitempty"`
	RetryAfterSeconds int             `json:"retry_after_seconds,omitempty"`
	// Prompt is what a needs_user failure asks of a person (shown on the
	// step until someone resumes it).
	Prompt string `json:"prompt,omitempty"`
	// Steps are what a replan failure puts in the step's place.
	Steps []domain.StepSpec `json:"steps,omitempty"`
	// Cost is what the attempt spent itself (an LLM call's tokens, say),
	// which the job adds to what the engine's work cost.
	Cost *Reported `json:"cost,omitempty"`
}

// Reported is a cost a step reports.
type Reported struct {
	USD float64 `json:"usd"`
}

// Dollars answers the dollars reported, 0 for none.
func (r *Reported) Dollars() float64 {
	if r == nil {
		return 0
	}
	return r.USD
}

// LeaseOutcome is one item of POST /v1/leases/batch: the lease it
// reports under, and the body /complete (output) or /fail (class and the
// rest) would take.
type LeaseOutcome struct {
	LeaseID string `json:"lease_id"`
	Outcome
}

// OutcomeResult answers an outcome: where the step and job went.
type OutcomeResult struct {
	JobID     string           `json:"job_id"`
	StepID    string           `json:"step_id"`
	StepState domain.StepState `json:"step_state"`
	JobState  domain.JobState  `json:"job_state"`
}

// Decision is the body of POST /v1/jobs/{id}/steps/{step}/approve or
// /reject: who decided, and why.
type Decision struct {
	By      string `json:"by"`
	Comment string `json:"comment"`
}
