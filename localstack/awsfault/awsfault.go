// Package awsfault puts layers into the AWS SDK's own middleware stack
// (aws.Config.APIOptions, or a client's Options.APIOptions) instead of
// around a client's methods: the fault layer of the chaos suite, the cost
// meter of the bench, and the faults and counters tests install in a
// stack's engine (devstack.Options.APIOptions).
//
// A middleware learns which call it is handling from the context
// (Call: the service id and operation name the client put there), and the
// typed input from the Initialize step, the only step that holds it (past
// it the input is an HTTP request): Around hands it over, and CaptureInput
// keeps it in the context for the steps below, which run once per attempt.
//
// Where a layer sits decides what it imitates. Around sits at the front of
// the Initialize step, once per call and outside the SDK's retry loop: a
// failure it answers is what the caller sees, as if the process died
// before its call or every attempt failed, and the SDK retries nothing.
// A layer that imitates the service's answer to one request belongs in the
// Finalize step right after the SDK's "Retry" middleware, once per attempt,
// so the retryer meets it as it would a real answer (see chaos).
package awsfault

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Call answers the service id ("DynamoDB", "SQS") and operation name
// ("PutItem") of the call a middleware is handling.
func Call(ctx context.Context) (service, operation string) {
	return awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
}

// captureID names the CaptureInput middleware; one per stack.
const captureID = "awsfault.CaptureInput"

type inputKey struct{}

// CaptureInput is an APIOptions entry that keeps each call's typed input
// (*dynamodb.PutItemInput, ...) in the context, from the front of the
// Initialize step, for the steps below it to read with Input. Installed
// twice in one stack it is there once.
func CaptureInput(s *middleware.Stack) error {
	if _, ok := s.Initialize.Get(captureID); ok {
		return nil
	}
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc(captureID,
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(middleware.WithStackValue(ctx, inputKey{}, in.Parameters), in)
		}), middleware.Before)
}

// Input answers the call's typed input where CaptureInput kept it, or nil.
func Input(ctx context.Context) any { return middleware.GetStackValue(ctx, inputKey{}) }

var seq atomic.Int64

// Around answers an APIOptions entry that passes every call of service's
// operation op (op "" for all of the service's operations) through fn, at
// the front of the Initialize step: once per call, outside the SDK's
// retries, before the input is validated or serialised. fn gets the typed
// input and call, which makes the call through the rest of the stack
// (retries included) and answers its typed output. What fn answers is what
// the caller gets: an output of the operation's own type, or an error,
// which the client wraps in a *smithy.OperationError as it does its own.
func Around(service, op string, fn func(ctx context.Context, in any, call func() (any, error)) (any, error)) func(*middleware.Stack) error {
	id := fmt.Sprintf("awsfault.Around.%s.%s.%d", service, op, seq.Add(1))
	mw := middleware.InitializeMiddlewareFunc(id,
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if s, o := Call(ctx); s != service || op != "" && o != op {
				return next.HandleInitialize(ctx, in)
			}
			var md middleware.Metadata
			out, err := fn(ctx, in.Parameters, func() (any, error) {
				res, m, err := next.HandleInitialize(ctx, in)
				md = m
				return res.Result, err
			})
			return middleware.InitializeOutput{Result: out}, md, err
		})
	return func(s *middleware.Stack) error { return s.Initialize.Add(mw, middleware.Before) }
}

// Fault fails calls of one operation before they are made (Around): the
// caller gets Err, no request is sent and the SDK retries nothing, as when
// a process dies before its call or gives up on it.
type Fault struct {
	service, op string
	match       func(in any) bool
	err         error

	mu     sync.Mutex
	left   int // matching calls still to fail; < 0: every one
	failed atomic.Int64
	option func(*middleware.Stack) error
}

// FailOperation answers a fault that fails the next n calls of service's
// operation op whose typed input match accepts (nil accepts every call)
// with err; n < 0 fails every matching call. Install it with Install.
func FailOperation(service, op string, n int, match func(in any) bool, err error) *Fault {
	f := &Fault{service: service, op: op, match: match, err: err, left: n}
	f.option = Around(service, op, func(_ context.Context, in any, call func() (any, error)) (any, error) {
		if f.take(in) {
			return nil, f.err
		}
		return call()
	})
	return f
}

func (f *Fault) take(in any) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == 0 || f.match != nil && !f.match(in) {
		return false
	}
	if f.left > 0 {
		f.left--
	}
	f.failed.Add(1)
	return true
}

// Arm fails the next n matching calls from now on (n < 0: every one, 0:
// none).
func (f *Fault) Arm(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = n
}

// Failed answers how many calls the fault failed.
func (f *Fault) Failed() int64 { return f.failed.Load() }

// Install is the fault's APIOptions entry.
func (f *Fault) Install(s *middleware.Stack) error { return f.option(s) }
