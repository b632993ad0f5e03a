package domain

import "time"

// ActionSleep waits durably: no function runs while it sleeps.
const ActionSleep = "sleep"

// SleepAction is the sleep action type's parameters.
type SleepAction struct {
	Seconds *float64 `json:"seconds,omitempty"`
}

func (SleepAction) Name() string       { return ActionSleep }
func (SleepAction) Executor() Executor { return ExecutorNone }

func (SleepAction) Validate(a *ActionSpec, c ActionCheck) error {
	if a.Seconds == nil {
		return Invalid(c.Field+".seconds", "is required for action type sleep")
	}
	if *a.Seconds < 0 || *a.Seconds > MaxWaitSeconds {
		return Invalid(c.Field+".seconds", "must be between 0 and %d (a year)", MaxWaitSeconds)
	}
	return nil
}

// start sleeps until the step's wake time (waking at once after 0 s).
func (SleepAction) start(j *Job, s *Step, now time.Time) ([]Dispatch, error) {
	d := time.Duration(*s.Spec.Action.Seconds * float64(time.Second)).Truncate(time.Millisecond)
	wake := now.Add(d)
	if err := j.stepTo(s, StepEvWait, now, "sleeping until "+wake.Format(time.RFC3339)); err != nil {
		return nil, err
	}
	if d <= 0 {
		return j.wake(s, j.InputData(j.index(s)), "slept 0 s", now)
	}
	s.Timer = &Timer{WakeAt: &wake}
	j.park(s, now)
	return j.sendAt(s, wake, now), nil
}

// timedOut: a sleep has no deadline; its timer wakes it.
func (SleepAction) timedOut(ActionSpec) string { return "sleep timed out" }
