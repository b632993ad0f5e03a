package actions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// EnvLambdaAllow names the setting that lists the functions a lambda step
// may call: comma-separated function-name prefixes (a name is a prefix of
// itself); empty allows any function of the stack's own account and
// region that the execute function's role may invoke.
const EnvLambdaAllow = "STEPFLOW_LAMBDA_ALLOW"

// EnvAccount and EnvPartition name the settings that tell the functions
// the stack's own AWS account and partition (template.yaml sets them from
// AWS::AccountId and AWS::Partition); its region is the AWS config's
// (AWS_REGION, which Lambda sets).
const (
	EnvAccount   = "STEPFLOW_AWS_ACCOUNT"
	EnvPartition = "STEPFLOW_AWS_PARTITION"
)

// LambdaHome is where the stack's own functions (and state machines)
// live. A lambda step that
// names a partition, region or account (an ARN, or a partial one) must
// name these: the allow list is of names, and a name in another account
// is another function. A part left "" is unknown, and a step naming it is
// refused.
type LambdaHome struct{ Partition, Region, Account string }

// LambdaInvoker is what the lambda action needs of Lambda: one
// synchronous invoke (package lambdaclient is the adapter over the SDK's
// client; only the execute function links it, as only it runs steps).
// Its error is the SDK's, which classifyLambdaErr reads.
type LambdaInvoker interface {
	Invoke(ctx context.Context, r LambdaRequest) (LambdaResponse, error)
}

// LambdaRequest is one invoke: RequestResponse, with one request only (an
// SDK retry after a lost answer would run the function again unseen; the
// step's retry policy is the only retry loop).
type LambdaRequest struct {
	Function, Qualifier string
	Payload             []byte
	// ClientContext is the base64 client context (clientContext).
	ClientContext *string
}

// LambdaResponse is a function's answer: its payload, and its function
// error ("Unhandled", "Handled"; "" for none).
type LambdaResponse struct {
	Payload       []byte
	FunctionError string
}

// ParseLambdaAllow reads STEPFLOW_LAMBDA_ALLOW: the prefixes, blanks
// dropped; nil allows every function.
func ParseLambdaAllow(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CheckFunction answers why a lambda step's function may never be called
// (another account's, region's or partition's, or a name outside
// LambdaAllow), so the job is refused at submit. A nil Runner allows every
// function.
func (r *Runner) CheckFunction(function string) error {
	if r == nil {
		return nil
	}
	f, ok := domain.ParseLambdaFunction(function)
	if !ok {
		return fmt.Errorf("%q is not a Lambda function name or ARN", function)
	}
	if err := r.LambdaHome.Refuse(function, LambdaHome{f.Partition, f.Region, f.Account}, "a lambda step may call", "function"); err != nil {
		return err
	}
	if len(r.LambdaAllow) == 0 {
		return nil
	}
	for _, p := range r.LambdaAllow {
		if strings.HasPrefix(f.Name, p) {
			return nil
		}
	}
	return fmt.Errorf("function %s is not one this stack may invoke: its name must start with one of %s (%s)", f.Name, strings.Join(r.LambdaAllow, ", "), EnvLambdaAllow)
}

// checkLambda is the lambda action's check at submit.
func (r *Runner) checkLambda(a domain.ActionSpec) (string, error) {
	if err := r.CheckFunction(a.Function); err != nil {
		return "function", err
	}
	return "", nil
}

// Refuse answers why target, whose ARN names the partition, region and
// account in named ("" for each it names none), is not the stack's own:
// what a step may reach (step: "a lambda step may call"; thing:
// "function"). The stepfunctions action's state machines are checked so
// too (shared/statemachines).
func (h LambdaHome) Refuse(target string, named LambdaHome, step, thing string) error {
	for _, part := range []struct{ what, named, own, setting string }{
		{"partition", named.Partition, h.Partition, EnvPartition},
		{"region", named.Region, h.Region, "AWS_REGION"},
		{"account", named.Account, h.Account, EnvAccount},
	} {
		switch {
		case part.named == "" || part.named == part.own:
		case part.own == "":
			return fmt.Errorf("%s names %s %s, and this stack does not know its own (%s): name the %s by its name alone", target, part.what, part.named, part.setting, thing)
		default:
			return fmt.Errorf("%s names %s %s: %s only this stack's own %ss (%s %s); name the %s by its name alone, or by its ARN in %s %s", target, part.what, part.named, step, thing, part.what, part.own, thing, part.what, part.own)
		}
	}
	return nil
}

// invokeLambda invokes the step's function synchronously with the input as
// its event: its answer is the output; a function error, a throttle and
// Lambda's own 5xx are retryable; an unknown function, a refused request
// and other 4xx are fatal (classifyLambdaErr).
func (r *Runner) invokeLambda(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	a := c.Spec.Action
	target := "lambda " + a.Function
	if a.Qualifier != "" {
		target += " (qualifier " + a.Qualifier + ")"
	}
	target = clip(target)
	if r.Lambda == nil {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: target + ": this executor has no Lambda client: set Runner.Lambda (shared/config wires one from the AWS config; STEPFLOW_LAMBDA_ENDPOINT points it at another endpoint)"}
	}
	if err := r.CheckFunction(a.Function); err != nil {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: target + " refused: " + err.Error()}
	}
	out, err := r.Lambda.Invoke(ctx, LambdaRequest{Function: a.Function, Qualifier: a.Qualifier, Payload: c.Input, ClientContext: clientContext(c.IdempotencyKey, c.Tenant)})
	if err != nil {
		return nil, classifyLambdaErr(target, err)
	}
	if out.FunctionError != "" {
		return nil, &domain.Failure{Class: domain.ClassRetryable, Message: fmt.Sprintf("%s: function error (%s): %s", target, out.FunctionError, functionErrorText(out.Payload))}
	}
	switch body := out.Payload; {
	case len(body) > MaxOutputBytes:
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("%s answered %d bytes; the limit is %d", target, len(body), MaxOutputBytes)}
	case len(bytes.TrimSpace(body)) == 0:
		return json.RawMessage(`null`), nil
	case json.Valid(body):
		return reportedCost(body, c.Reported), nil
	default:
		s, _ := json.Marshal(string(body)) // a text answer becomes a JSON string, as the http action's does
		return s, nil
	}
}

// CostKey is the key of a lambda function's answer that reports what the
// attempt spent itself, {"stepflow_cost": {"usd": 0.0021}}: it is taken
// out of the output and added to the job's reported cost.
const CostKey = "stepflow_cost"

// reportedCost takes a function's report of its cost out of its answer,
// into *into; any other answer is answered as it is.
func reportedCost(body json.RawMessage, into *float64) json.RawMessage {
	if !bytes.Contains(body, []byte(`"`+CostKey+`"`)) {
		return body
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	raw, ok := obj[CostKey]
	if !ok {
		return body
	}
	var c struct {
		USD float64 `json:"usd"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return body // not a report: the function's own field
	}
	delete(obj, CostKey)
	out, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	if into != nil {
		*into = c.USD
	}
	return out
}

// clientContext passes the attempt's idempotency key and the calling
// tenant to the function as Lambda passes a client context: the handler
// reads them as lambdacontext.FromContext(ctx).ClientContext.Custom
// ["idempotency_key"] and ["tenant"], so a function that several tenants'
// jobs call can keep each tenant's work apart.
func clientContext(key, tenant string) *string {
	custom := map[string]string{}
	if key != "" {
		custom["idempotency_key"] = key
	}
	if tenant != "" {
		custom["tenant"] = tenant
	}
	if len(custom) == 0 {
		return nil
	}
	raw, _ := json.Marshal(map[string]map[string]string{"custom": custom})
	s := base64.StdEncoding.EncodeToString(raw)
	return &s
}

// functionErrorText quotes a function error's payload: Lambda's
// {"errorType", "errorMessage"} as "type: message", anything else as is.
func functionErrorText(payload []byte) string {
	var e struct {
		Type    string `json:"errorType"`
		Message string `json:"errorMessage"`
	}
	if json.Unmarshal(payload, &e) != nil || (e.Type == "" && e.Message == "") {
		return clip(string(payload))
	}
	if e.Type == "" {
		return clip(e.Message)
	}
	return clip(e.Type + ": " + e.Message)
}

// retryableLambdaCodes are Lambda's errors that pass, whatever status they
// come with: throttles, and its own or its network's (EC2, ENI) faults.
var retryableLambdaCodes = map[string]bool{
	"TooManyRequestsException": true, "ServiceException": true, "ResourceNotReadyException": true,
	"EC2ThrottledException": true, "EC2UnexpectedException": true, "ENILimitReachedException": true,
	"SubnetIPAddressLimitReachedException": true,
}

// classifyLambdaErr decides what an Invoke that got no function answer
// means for the step: a throttle (429) or a Lambda fault (5xx, or a code in
// retryableLambdaCodes) is retryable; any other answer (404
// ResourceNotFoundException, 400 InvalidRequestContentException, 413
// RequestTooLargeException, 403 AccessDenied...) is fatal, since the same
// request would be refused again; no answer at all (connection, DNS) is
// class network. The one place that decides it.
func classifyLambdaErr(target string, err error) *domain.Failure {
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) && status == 0 {
		return &domain.Failure{Class: domain.ClassNetwork, Message: fmt.Sprintf("%s: no answer: %s", target, clip(err.Error()))}
	}
	if ae == nil && status < 300 {
		// The function answered but its answer was lost on the way (a
		// connection closed mid-body): it ran, so only the retry policy may
		// run it again.
		return &domain.Failure{Class: domain.ClassNetwork, Message: fmt.Sprintf("%s: answer lost (HTTP %d): %s", target, status, clip(err.Error()))}
	}
	what := fmt.Sprintf("HTTP %d", status)
	if ae != nil {
		what = fmt.Sprintf("%s (HTTP %d): %s", ae.ErrorCode(), status, clip(ae.ErrorMessage()))
	}
	f := &domain.Failure{Class: domain.ClassFatal, Message: target + ": " + what}
	if status == http.StatusTooManyRequests || status >= 500 || (ae != nil && retryableLambdaCodes[ae.ErrorCode()]) {
		f.Class = domain.ClassRetryable
		if re != nil && re.Response != nil {
			f.RetryAfter = retryAfter(re.Response.Header.Get("Retry-After"), time.Now())
		}
	}
	return f
}
