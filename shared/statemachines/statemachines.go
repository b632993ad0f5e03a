// Package statemachines runs the executions of stepfunctions steps on AWS
// Step Functions (engine.StateMachines): only state machines of the
// stack's own partition, region and account whose names start with an
// allowed prefix (STEPFLOW_SFN_ALLOW), so a step never reaches what the
// stack does not own.
package statemachines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/smithy-go"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// EnvAllow names the setting that lists the name prefixes of the state
// machines a stepfunctions step may run, comma-separated.
const EnvAllow = "STEPFLOW_SFN_ALLOW"

// DefaultAllow is the prefix allowed when the setting is empty.
const DefaultAllow = "stepflow-sm-"

// Client is the part of Step Functions' API the executions need.
type Client interface {
	StartExecution(context.Context, *sfn.StartExecutionInput, ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
	StopExecution(context.Context, *sfn.StopExecutionInput, ...func(*sfn.Options)) (*sfn.StopExecutionOutput, error)
	GetExecutionHistory(context.Context, *sfn.GetExecutionHistoryInput, ...func(*sfn.Options)) (*sfn.GetExecutionHistoryOutput, error)
}

// Home is the stack's partition, region and account: a state machine's
// ARN must name them, and a name is resolved in them.
type Home = actions.LambdaHome

// Executions runs executions for stepfunctions steps.
type Executions struct {
	client Client
	home   Home
	allow  []string
}

// New answers Executions over client in home, allowing the state machines
// whose names start with one of allow (DefaultAllow when none).
func New(client Client, home Home, allow []string) *Executions {
	if home.Partition == "" {
		home.Partition = "aws"
	}
	if len(allow) == 0 {
		allow = []string{DefaultAllow}
	}
	return &Executions{client: client, home: home, allow: allow}
}

// ParseAllow reads the setting's value: prefixes, comma-separated, as
// STEPFLOW_LAMBDA_ALLOW's.
var ParseAllow = actions.ParseLambdaAllow

var _ engine.StateMachines = (*Executions)(nil)

// Check answers why a step may never run stateMachine: not a state
// machine's name or ARN, another partition's, region's or account's, or
// a name outside the allowed prefixes.
func (x *Executions) Check(stateMachine string) error {
	_, err := x.arn(stateMachine)
	return err
}

// arn answers the state machine's ARN in the stack's home, or why it may
// not be run.
func (x *Executions) arn(stateMachine string) (string, error) {
	ref, ok := domain.ParseStateMachine(stateMachine)
	if !ok {
		return "", fmt.Errorf("%q is not a state machine's name or ARN", stateMachine)
	}
	if err := x.home.Refuse(stateMachine, Home{Partition: ref.Partition, Region: ref.Region, Account: ref.Account}, "a stepfunctions step may run", "state machine"); err != nil {
		return "", err
	}
	allowed := false
	for _, p := range x.allow {
		allowed = allowed || strings.HasPrefix(ref.Name, p)
	}
	if !allowed {
		return "", fmt.Errorf("state machine %s is not one this stack may run: its name must start with one of %s (%s)", ref.Name, strings.Join(x.allow, ", "), EnvAllow)
	}
	if x.home.Region == "" || x.home.Account == "" {
		return "", fmt.Errorf("this stack does not know its own region and account (AWS_REGION, STEPFLOW_AWS_ACCOUNT), so it runs no state machine")
	}
	return fmt.Sprintf("arn:%s:states:%s:%s:stateMachine:%s", x.home.Partition, x.home.Region, x.home.Account, ref.Name), nil
}

// executionARN answers the ARN of execution name of stateMachine.
func (x *Executions) executionARN(stateMachine, name string) (string, error) {
	sm, err := x.arn(stateMachine)
	if err != nil {
		return "", err
	}
	return strings.Replace(sm, ":stateMachine:", ":execution:", 1) + ":" + name, nil
}

// Start starts execution name; one of that name already started is no
// error. A state machine that cannot be run (not allowed, missing, or
// the input refused) answers a domain error of code invalid, which fails
// the step; any other error is passing, and the sweep tries again.
func (x *Executions) Start(ctx context.Context, stateMachine, name string, input json.RawMessage) error {
	sm, err := x.arn(stateMachine)
	if err != nil {
		return domain.Invalid("state_machine", "%s", err.Error())
	}
	_, err = x.client.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm), Name: aws.String(name), Input: aws.String(string(input))})
	switch code := errorCode(err); code {
	case "":
		return nil
	case "ExecutionAlreadyExists":
		return nil // a retried start: the execution of this attempt runs
	case "StateMachineDoesNotExist", "StateMachineDeleting", "InvalidArn", "InvalidName", "InvalidExecutionInput", "AccessDeniedException", "ValidationException":
		return domain.Invalid("state_machine", "%s refused the execution (%s): %v", sm, code, err)
	}
	return fmt.Errorf("start execution %s of %s: %w", name, sm, err)
}

// Describe answers execution name's state (and its transitions, once it
// ended), domain.ErrNotFound when there is none.
func (x *Executions) Describe(ctx context.Context, stateMachine, name string) (engine.Execution, error) {
	return x.describe(ctx, stateMachine, name, true)
}

// describe answers an execution's state, with its transitions read from
// its history when it ended and counted is set.
func (x *Executions) describe(ctx context.Context, stateMachine, name string, counted bool) (engine.Execution, error) {
	arn, err := x.executionARN(stateMachine, name)
	if err != nil {
		return engine.Execution{}, domain.Invalid("state_machine", "%s", err.Error())
	}
	out, err := x.client.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
	if errorCode(err) == "ExecutionDoesNotExist" {
		return engine.Execution{}, fmt.Errorf("execution %s: %w", arn, domain.ErrNotFound)
	}
	if err != nil {
		return engine.Execution{}, fmt.Errorf("describe execution %s: %w", arn, err)
	}
	ex := engine.Execution{Status: string(out.Status), Error: aws.ToString(out.Error), Cause: aws.ToString(out.Cause)}
	if out.Output != nil {
		ex.Output = json.RawMessage(*out.Output)
	}
	if counted && ex.Ended() {
		ex.Transitions = x.transitions(ctx, arn)
	}
	return ex, nil
}

// transitions counts an ended execution's billed state transitions from
// its history, as Standard bills them: each state entered. History
// requests are not billed; one that fails counts none (the job's cost
// then misses them, and says nothing false).
func (x *Executions) transitions(ctx context.Context, arn string) int {
	n := 0
	p := sfn.NewGetExecutionHistoryPaginator(x.client, &sfn.GetExecutionHistoryInput{ExecutionArn: aws.String(arn), MaxResults: 1000})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n
		}
		for _, e := range page.Events {
			if strings.HasSuffix(string(e.Type), "StateEntered") {
				n++
			}
		}
	}
	return n
}

// Stop stops execution name; one never started or ended already is no
// error.
func (x *Executions) Stop(ctx context.Context, stateMachine, name, cause string) error {
	arn, err := x.executionARN(stateMachine, name)
	if err != nil {
		return nil // it could never have been started
	}
	_, err = x.client.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: aws.String(arn), Cause: aws.String(cause)})
	if err == nil || errorCode(err) == "ExecutionDoesNotExist" {
		return nil
	}
	if ex, derr := x.describe(ctx, stateMachine, name, false); derr == nil && ex.Ended() { // ended: nothing to stop, nothing to count
		return nil // it had ended: nothing to stop
	}
	return fmt.Errorf("stop execution %s: %w", arn, err)
}

// errorCode answers an AWS API error's code, "" for none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err != nil {
		return "unknown"
	}
	return ""
}
