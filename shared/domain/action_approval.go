package domain

import (
	"fmt"
	"time"
)

// ActionApproval is a gate a person opens: no executor ever runs it.
const ActionApproval = "approval"

// ApprovalAction is the approval action type: its one parameter is
// ActionDeadline's.
type ApprovalAction struct{}

func (ApprovalAction) Name() string           { return ActionApproval }
func (ApprovalAction) Executor() Executor     { return ExecutorNone }
func (ApprovalAction) SharedParams() []string { return []string{"timeout_seconds"} }
func (ApprovalAction) Validate(a *ActionSpec, c ActionCheck) error {
	return a.validateDeadline(c.Field)
}

// ActionDeadline is the deadline of an approval gate or a wait; none waits
// for ever.
type ActionDeadline struct {
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

func (a *ActionSpec) validateDeadline(af string) error {
	if a.TimeoutSeconds < 0 || a.TimeoutSeconds > MaxWaitSeconds {
		return Invalid(af+".timeout_seconds", "must be between 1 and %d (a year), or left out for no deadline", MaxWaitSeconds)
	}
	return nil
}

func (ApprovalAction) start(j *Job, s *Step, now time.Time) ([]Dispatch, error) {
	if err := j.stepTo(s, StepEvNeedsUser, now, "approval gate opened"); err != nil {
		return nil, err
	}
	return j.deadline(s, s.Spec.Action.TimeoutSeconds, now), nil
}

// Decision is a person's answer at an approval gate: how they closed it.
type Decision struct {
	Approved bool      `json:"approved"`
	By       string    `json:"by,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	Key      string    `json:"key,omitempty"` // the id of the API key that decided
	At       time.Time `json:"at"`
}

func (ApprovalAction) timedOut(a ActionSpec) string {
	return fmt.Sprintf("approval gate timed out: nobody decided within timeout_seconds (%d)", a.TimeoutSeconds)
}
