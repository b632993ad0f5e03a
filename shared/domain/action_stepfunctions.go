package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ActionStepFunctions runs an execution of an AWS Step Functions state
// machine of the stack's account and region: users bring the state
// machines they have as steps. As a child job is (action_job.go), the
// execution is named by the write that leases the step, from the job,
// the step and the attempt (ExecutionName), and started after it; Step
// Functions refuses a second execution of that name, so a retried start
// starts none. Its end ends the attempt: its output, or its error and
// cause. The engine starts it, waits for it a moment, and the sweep looks
// at it after that; cancelling the job stops it
// (docs/model.md#step-functions-state-machines).
const ActionStepFunctions = "stepfunctions"

// StepFunctionsAction is the stepfunctions action type's parameters.
// Input, when set, is the execution's input; otherwise the step's input
// is.
type StepFunctionsAction struct {
	StateMachine string          `json:"state_machine,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
}

func (StepFunctionsAction) Name() string       { return ActionStepFunctions }
func (StepFunctionsAction) Executor() Executor { return ExecutorEngine }

// AttemptTimeout: a Standard execution may run a year; timeout_seconds
// bounds each when set, and none does by default.
func (StepFunctionsAction) AttemptTimeout() (def, max int) { return 0, MaxWaitSeconds }

// stateMachinePattern takes a state machine's name, or its ARN
// (arn:aws:states:us-east-1:123456789012:stateMachine:name), as Step
// Functions names them (a name: 1 to 80 letters, digits, '-' and '_').
var stateMachinePattern = regexp.MustCompile(`^(?:arn:(aws[a-zA-Z-]*):states:([a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d):(\d{12}):stateMachine:)?([A-Za-z0-9_-]{1,80})$`)

// StateMachineRef is what a stepfunctions step's state_machine names: the
// ARN's partition, region and account when it names them ("" when not),
// and the state machine's name.
type StateMachineRef struct {
	Partition, Region, Account, Name string
}

// ParseStateMachine reads a stepfunctions step's state_machine; ok is
// false when it is neither a name nor a state machine's ARN.
func ParseStateMachine(s string) (StateMachineRef, bool) {
	m := stateMachinePattern.FindStringSubmatch(s)
	if m == nil {
		return StateMachineRef{}, false
	}
	return StateMachineRef{Partition: m[1], Region: m[2], Account: m[3], Name: m[4]}, true
}

func (StepFunctionsAction) Validate(a *ActionSpec, c ActionCheck) error {
	if a.StateMachine == "" {
		return Invalid(c.Field+".state_machine", "is required for action type stepfunctions: a state machine's name (stepflow-sm-orders) or ARN")
	}
	if _, ok := ParseStateMachine(a.StateMachine); !ok {
		return Invalid(c.Field+".state_machine", "must be a state machine's name (up to 80 letters, digits, '-' and '_') or its ARN, such as arn:aws:states:us-east-1:123456789012:stateMachine:stepflow-sm-orders")
	}
	if len(a.Input) > 0 {
		if err := CheckJSON(c.Field+".input", a.Input); err != nil {
			return err
		}
		if len(a.Input) > MaxExecutionInputBytes {
			return Invalid(c.Field+".input", "is %d bytes; an execution's input is at most %d", len(a.Input), MaxExecutionInputBytes)
		}
	}
	return nil
}

// MaxExecutionInputBytes is Step Functions' bound on an execution's input
// (and output): 256 KB.
const MaxExecutionInputBytes = 256 * 1024

// ExecutionName is the name of the execution attempt n of step of job
// starts: the job's id, a hash of the step's id (which may hold
// characters a name may not) and the attempt, within Step Functions' 80.
func ExecutionName(job, step string, n int) string {
	sum := sha256.Sum256([]byte(step))
	return fmt.Sprintf("%s-%s-%d", job, hex.EncodeToString(sum[:6]), n)
}

// startExecution names the execution the attempt lease starts on step s.
func (j *Job) startExecution(s *Step, lease *Lease, now time.Time) {
	name := ExecutionName(j.ID, s.ID(), lease.Attempt)
	s.Child = &ChildRun{ID: name, CheckAt: now.Add(DispatchGrace)}
	s.Attempts[len(s.Attempts)-1].Child = name
}

// An orphaned execution is kept among a job's orphans as
// "states#<state machine>#<execution name>"; a child job as its id.
const executionOrphan = "states#"

// OrphanedExecution reads an orphan that is a Step Functions execution:
// its state machine and name.
func OrphanedExecution(orphan string) (stateMachine, name string, ok bool) {
	rest, ok := strings.CutPrefix(orphan, executionOrphan)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "#")
}

// orphanOf is how step s's run is kept among the job's orphans.
func orphanOf(s *Step) string {
	if s.Spec.Action.Type == ActionStepFunctions {
		return executionOrphan + s.Spec.Action.StateMachine + "#" + s.Child.ID
	}
	return s.Child.ID
}
