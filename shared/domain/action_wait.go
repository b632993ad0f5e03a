package domain

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
