package domain

import (
	"encoding/json"
	"fmt"
)

// ActionFail fails with the class its spec names.
const ActionFail = "fail"

// FailAction is the fail action type's parameters.
type FailAction struct {
	Class   string `json:"class,omitempty"`
	Message string `json:"message,omitempty"`
	Prompt  string `json:"prompt,omitempty"` // with class needs_user
	// Steps are what a fail with class replan puts in the step's place.
	Steps []StepSpec `json:"steps,omitempty"`
}

func (FailAction) Name() string       { return ActionFail }
func (FailAction) Executor() Executor { return ExecutorBuiltIn }

func (FailAction) Validate(a *ActionSpec, c ActionCheck) error {
	af := c.Field
	class, err := ParseFailureClass(af+".class", a.Class)
	if err != nil {
		return err
	}
	a.Class = string(class)
	if a.Prompt != "" && class != ClassNeedsUser {
		return Invalid(af+".prompt", "applies only with class needs_user")
	}
	if a.Steps != nil && class != ClassReplan {
		return Invalid(af+".steps", "applies only with class replan")
	}
	for k := range a.Steps {
		// What each step is; its id and dependencies are checked against
		// the job it joins (checkReplan).
		if err := a.Steps[k].validate(fmt.Sprintf("%s.steps[%d]", af, k), c.JobQueue); err != nil {
			return err
		}
	}
	return nil
}

// Run fails as the spec asks.
func (FailAction) Run(a ActionSpec, _ json.RawMessage) (json.RawMessage, *Failure) {
	msg := a.Message
	if msg == "" {
		msg = "step failed as its spec asked (action fail, class " + a.Class + ")"
	}
	return nil, &Failure{Class: FailureClass(a.Class), Message: msg, Prompt: a.Prompt, Steps: a.Steps}
}
