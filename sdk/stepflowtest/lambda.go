package stepflowtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
)

// Function is a Lambda function's handler as a lambda step calls it: the
// step's input as its event, its answer the step's output. ctx carries
// the attempt's idempotency key as Lambda passes it
// (lambdacontext.FromContext(ctx).ClientContext.Custom["idempotency_key"]),
// so a handler written for lambda.Start runs here unchanged.
type Function func(ctx context.Context, event json.RawMessage) (any, error)

// HandleFunction serves the Lambda function name (as a lambda step's
// action.function names it, or its ARN does) with fn: an error fails the
// attempt as a function error does (retryable). A lambda step naming a
// function no one registered fails fatal, as Lambda's
// ResourceNotFoundException does.
func (e *Env) HandleFunction(name string, fn Function) {
	e.t.Helper()
	f, ok := domain.ParseLambdaFunction(name)
	if !ok || fn == nil {
		e.t.Fatalf("stepflowtest: HandleFunction(%q): not a Lambda function name, or fn is nil", name)
	}
	e.functions.fns[f.Name] = fn
}

// functions plays Lambda's Invoke API for the lambda action, on the Go
// functions registered with HandleFunction.
type functions struct{ fns map[string]Function }

func (f *functions) Invoke(ctx context.Context, in actions.LambdaRequest) (actions.LambdaResponse, error) {
	ref, _ := domain.ParseLambdaFunction(in.Function)
	name := ref.Name
	fn := f.fns[name]
	if fn == nil {
		return actions.LambdaResponse{}, &lambdatypes.ResourceNotFoundException{Message: aws.String("Function not found: " + name + " (stepflowtest: register it with env.HandleFunction)")}
	}
	lc := &lambdacontext.LambdaContext{InvokedFunctionArn: in.Function}
	if raw, err := base64.StdEncoding.DecodeString(aws.ToString(in.ClientContext)); err == nil && len(raw) > 0 {
		_ = json.Unmarshal(raw, &lc.ClientContext)
	}
	out, err := fn(lambdacontext.NewContext(ctx, lc), in.Payload)
	if err != nil {
		// As aws-lambda-go reports a returned error.
		payload, _ := json.Marshal(map[string]string{"errorType": errorType(err), "errorMessage": err.Error()})
		return actions.LambdaResponse{FunctionError: "Unhandled", Payload: payload}, nil
	}
	payload, err := json.Marshal(out)
	if err != nil {
		payload, _ = json.Marshal(map[string]string{"errorType": "MarshalError", "errorMessage": err.Error()})
		return actions.LambdaResponse{FunctionError: "Unhandled", Payload: payload}, nil
	}
	return actions.LambdaResponse{Payload: payload}, nil
}

// errorType names an error's type as aws-lambda-go does: without the
// pointer or the package.
func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
