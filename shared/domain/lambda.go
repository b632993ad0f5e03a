package domain

import "regexp"

// Limits Lambda's Invoke API documents for FunctionName and Qualifier.
const (
	maxLambdaRefLen       = 170 // a full ARN
	maxLambdaNameLen      = 64  // the name alone
	maxLambdaQualifierLen = 128
)

// lambdaRefPattern is the pattern Lambda's Invoke API documents for
// FunctionName (a name, name:alias, a partial or a full ARN), anchored and
// with the name and qualifier captured.
var lambdaRefPattern = regexp.MustCompile(`^(?:arn:(?:aws[a-zA-Z-]*)?:lambda:)?(?:[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d:)?(?:\d{12}:)?(?:function:)?(?P<name>[a-zA-Z0-9_.-]+)(?::(?P<qualifier>\$LATEST|[a-zA-Z0-9_-]+))?$`)

// lambdaQualifierPattern is the Invoke API's Qualifier: a version or an
// alias.
var lambdaQualifierPattern = regexp.MustCompile(`^[a-zA-Z0-9$_-]+$`)

// ParseLambdaFunction answers the function name and the qualifier (""
// when none) a lambda step's function names, whichever of Lambda's forms
// it takes; ok is false when it takes none.
func ParseLambdaFunction(ref string) (name, qualifier string, ok bool) {
	if len(ref) > maxLambdaRefLen {
		return "", "", false
	}
	m := lambdaRefPattern.FindStringSubmatch(ref)
	if m == nil {
		return "", "", false
	}
	name, qualifier = m[lambdaRefPattern.SubexpIndex("name")], m[lambdaRefPattern.SubexpIndex("qualifier")]
	if len(name) > maxLambdaNameLen {
		return "", "", false
	}
	return name, qualifier, true
}

func (a *ActionSpec) validateLambda(af string) error {
	if a.Function == "" {
		return Invalid(af+".function", "is required for action type lambda: a function name, name:alias, or its (partial) ARN")
	}
	_, qualifier, ok := ParseLambdaFunction(a.Function)
	if !ok {
		return Invalid(af+".function", "must be a Lambda function name (up to %d letters, digits, '-', '_'), name:alias, or an ARN such as arn:aws:lambda:us-east-1:123456789012:function:name (up to %d characters)", maxLambdaNameLen, maxLambdaRefLen)
	}
	if a.Qualifier == "" {
		return nil
	}
	if len(a.Qualifier) > maxLambdaQualifierLen || !lambdaQualifierPattern.MatchString(a.Qualifier) {
		return Invalid(af+".qualifier", "must be a version or alias name: up to %d letters, digits, '$', '-', '_'", maxLambdaQualifierLen)
	}
	if qualifier != "" {
		// Lambda refuses two qualifiers that differ; name it in one place.
		return Invalid(af+".qualifier", "does not apply: function already names the qualifier %q", qualifier)
	}
	return nil
}
