package domain

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
