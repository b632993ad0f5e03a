package domain

import "regexp"

// ActionLambda invokes an AWS Lambda function with the step's input
// (shared/actions runs it).
const ActionLambda = "lambda"

// LambdaAction is the lambda action type's parameters.
type LambdaAction struct {
	Function  string `json:"function,omitempty"`  // name, name:alias or ARN
	Qualifier string `json:"qualifier,omitempty"` // version or alias
}

func (LambdaAction) Name() string       { return ActionLambda }
func (LambdaAction) Executor() Executor { return ExecutorBuiltIn }

// Limits Lambda's Invoke API documents for FunctionName and Qualifier.
const (
	maxLambdaRefLen       = 170 // a full ARN
	maxLambdaNameLen      = 64  // the name alone
	maxLambdaQualifierLen = 128
)

// LambdaFunction is what a lambda step's function names: the ARN's
// partition, region and account when it names them ("" when not), the
// function's name and its qualifier ("" when none).
type LambdaFunction struct {
	Partition, Region, Account string
	Name, Qualifier            string
}

// lambdaRefPattern takes the three forms Lambda's Invoke API documents for
// FunctionName, each with an optional version or alias: a name
// (my-function), a partial ARN (123456789012:function:my-function) and a
// full ARN (arn:aws:lambda:us-west-2:123456789012:function:my-function).
// The API's own pattern lets each part be left out on its own
// ("function:f", "us-east-1:f"); those are no documented form, so a step
// may not name them.
var lambdaRefPattern = regexp.MustCompile(`^(?:arn:(?P<partition>aws[a-zA-Z-]*):lambda:(?P<region>[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d):(?P<account>\d{12}):function:|(?P<partialAccount>\d{12}):function:)?(?P<name>[a-zA-Z0-9_.-]+)(?::(?P<qualifier>\$LATEST|[a-zA-Z0-9_-]+))?$`)

// lambdaQualifierPattern is the Invoke API's Qualifier: a version or an
// alias.
var lambdaQualifierPattern = regexp.MustCompile(`^[a-zA-Z0-9$_-]+$`)

// ParseLambdaFunction reads a lambda step's function in whichever of
// Lambda's documented forms it takes; ok is false when it takes none.
func ParseLambdaFunction(ref string) (f LambdaFunction, ok bool) {
	if len(ref) > maxLambdaRefLen {
		return f, false
	}
	m := lambdaRefPattern.FindStringSubmatch(ref)
	if m == nil {
		return f, false
	}
	group := func(name string) string { return m[lambdaRefPattern.SubexpIndex(name)] }
	f = LambdaFunction{Partition: group("partition"), Region: group("region"), Account: group("account"),
		Name: group("name"), Qualifier: group("qualifier")}
	if f.Account == "" {
		f.Account = group("partialAccount")
	}
	if len(f.Name) > maxLambdaNameLen {
		return LambdaFunction{}, false
	}
	return f, true
}

func (LambdaAction) Validate(a *ActionSpec, c ActionCheck) error {
	af := c.Field
	if a.Function == "" {
		return Invalid(af+".function", "is required for action type lambda: a function name, name:alias, or its (partial) ARN")
	}
	f, ok := ParseLambdaFunction(a.Function)
	if !ok {
		return Invalid(af+".function", "must be a Lambda function name (up to %d letters, digits, '-', '_'), name:alias, a partial ARN such as 123456789012:function:name, or an ARN such as arn:aws:lambda:us-east-1:123456789012:function:name (up to %d characters)", maxLambdaNameLen, maxLambdaRefLen)
	}
	if a.Qualifier == "" {
		return nil
	}
	if len(a.Qualifier) > maxLambdaQualifierLen || !lambdaQualifierPattern.MatchString(a.Qualifier) {
		return Invalid(af+".qualifier", "must be a version or alias name: up to %d letters, digits, '$', '-', '_'", maxLambdaQualifierLen)
	}
	if f.Qualifier != "" {
		// Lambda refuses two qualifiers that differ; name it in one place.
		return Invalid(af+".qualifier", "does not apply: function already names the qualifier %q", f.Qualifier)
	}
	return nil
}
