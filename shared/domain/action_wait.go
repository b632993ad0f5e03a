package domain

import (
	"fmt"
	"time"
)

// ActionWait holds its job until a signal of its name arrives.
const ActionWait = "wait"

// WaitAction is the wait action type's parameters, and ActionDeadline's.
type WaitAction struct {
	Signal string `json:"signal,omitempty"`
}

func (WaitAction) Name() string           { return ActionWait }
func (WaitAction) Executor() Executor     { return ExecutorNone }
func (WaitAction) SharedParams() []string { return []string{"timeout_seconds"} }

func (WaitAction) Validate(a *ActionSpec, c ActionCheck) error {
	if err := a.validateDeadline(c.Field); err != nil {
		return err
	}
	if !namePattern.MatchString(a.Signal) {
		return Invalid(c.Field+".signal", "is required for action type wait and must match %s", namePattern)
	}
	return nil
}

// start waits for the signal, or takes one kept already.
func (WaitAction) start(j *Job, s *Step, now time.Time) ([]Dispatch, error) {
	a := s.Spec.Action
	if err := j.stepTo(s, StepEvWait, now, "waiting for signal "+a.Signal); err != nil {
		return nil, err
	}
	if k := j.keptSignal(a.Signal); k >= 0 {
		return j.takeSignal(s, k, now)
	}
	ds := j.deadline(s, a.TimeoutSeconds, now)
	j.park(s, now)
	return ds, nil
}

func (WaitAction) timedOut(a ActionSpec) string {
	return fmt.Sprintf("wait timed out: no signal %q within timeout_seconds (%d)", a.Signal, a.TimeoutSeconds)
}
