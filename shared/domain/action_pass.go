package domain

import "encoding/json"

// ActionPass succeeds with its input.
const ActionPass = "pass"

// PassAction is the pass action type: it takes no parameters.
type PassAction struct{}

func (PassAction) Name() string                            { return ActionPass }
func (PassAction) Executor() Executor                      { return ExecutorBuiltIn }
func (PassAction) Validate(*ActionSpec, ActionCheck) error { return nil }

// Run answers the input: the engine bounds it as it composes it.
func (PassAction) Run(_ ActionSpec, input json.RawMessage) (json.RawMessage, *Failure) {
	return input, nil
}
