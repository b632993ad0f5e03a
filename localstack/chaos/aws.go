package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/engine"
)

// The fault layer is two middlewares in the SDK's own stack of each of the
// engine's clients (Faults.Middleware, for devstack.Options.APIOptions),
// placed by what each fault imitates:
//
//   - "chaos.Call", at the front of the Initialize step: once per call,
//     before the SDK validates, serialises, signs or retries anything, and
//     after it has answered. The invocation crashing before or after an
//     AWS call (KindCrashBefore, KindCrashAfter), a send that never got
//     through (KindSendLost: the engine's SendMessageBatch fails, however
//     many attempts the SDK would have made) and a timer that never
//     started (KindSFNStartLost: StartExecution fails the same way, after
//     the DynamoDB write that set the timer) are about the process and the
//     call as the engine sees it, not about one request, so the SDK's
//     retryer never sees them. A SendMessageBatch that goes through may
//     have delayed entries sent later than asked (KindTimerLate): the
//     layer hands the rest of the stack a copy of the input, the engine's
//     own is left as it was.
//   - "chaos.Attempt", in the Finalize step right after the SDK's "Retry"
//     middleware (before signing): once per attempt, inside the retry loop.
//     A throttle (KindThrottle), a 5xx (KindServerError) and a write applied
//     whose answer was lost (KindAmbiguous) are DynamoDB's answers to one
//     request, so they meet the SDK's retryer as real ones do: the same
//     error types the deserializer and the HTTP client produce, which the
//     standard retryer classifies as throttle, retryable status and
//     connection error, and retries with its backoff and retry quota. An
//     ambiguous write is applied (the attempt goes on through signing and
//     the transport) before its answer is replaced, so the SDK's retry meets
//     the write already there (a conditional write fails its condition),
//     exactly as on AWS.
//
// The errors are the bare service or transport errors a middleware sees;
// the client wraps them in *smithy.OperationError (and, once attempts run
// out, the retryer in *retry.MaxAttemptsError) as it does real ones.

// engineOps are the operations the layer draws for, "Service.Operation",
// true for a DynamoDB write: the engine's own operations, as its clients'
// interfaces (store.API, queue.API, queue.TimerAPI) name them. Others
// pass through unseen.
var engineOps = map[string]bool{
	"DynamoDB.GetItem": false, "DynamoDB.Query": false, "DynamoDB.BatchGetItem": false,
	"DynamoDB.PutItem": true, "DynamoDB.UpdateItem": true, "DynamoDB.TransactWriteItems": true, "DynamoDB.DeleteItem": true,
	"SQS.SendMessageBatch": false, "SQS.ReceiveMessage": false, "SQS.DeleteMessage": false, "SQS.ChangeMessageVisibility": false,
	"SQS.GetQueueUrl": false, "SQS.CreateQueue": false, "SQS.GetQueueAttributes": false, "SQS.ListQueues": false,
	sfnService + ".StartExecution": false,
}

func faulted(service, op string) bool {
	_, ok := engineOps[service+"."+op]
	return ok
}

// sfnService is the Step Functions client's service id (sfn.ServiceID).
const sfnService = "SFN"

// supports answers the faults an operation can suffer: a crash at every
// call, a lost send at SendMessageBatch, a lost start at StartExecution;
// at each attempt of a DynamoDB call its throttle and 5xx, and at a
// write's an answer lost after it was applied.
func supports(service, op string) func(Kind) bool {
	return func(k Kind) bool {
		switch k {
		case KindCrashBefore, KindCrashAfter:
			return true
		case KindSendLost:
			return service == "SQS" && op == "SendMessageBatch"
		case KindSFNStartLost:
			return service == sfnService && op == "StartExecution"
		case KindThrottle, KindServerError:
			return service == "DynamoDB"
		case KindAmbiguous:
			return engineOps[service+"."+op]
		}
		return false
	}
}

// responseError is a service error as the SDK's ResponseErrorWrapper
// leaves it: with the HTTP response (its status code is what the retryer's
// RetryableHTTPStatusCode reads) around the deserialized error.
func responseError(status int, err error) error {
	return &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}}},
			Err:      err,
		},
		RequestID: "chaos",
	}
}

// throttleError is DynamoDB's 400 ProvisionedThroughputExceededException,
// a throttle to the retryer (its error code).
func throttleError() error {
	return responseError(http.StatusBadRequest, &ddb.ProvisionedThroughputExceededException{
		Message: aws.String("chaos: the level of configured provisioned throughput for the table was exceeded"),
	})
}

// serverError is DynamoDB's 500 InternalServerError, retryable by its status.
func serverError() error {
	return responseError(http.StatusInternalServerError, &ddb.InternalServerError{
		Message: aws.String("chaos: internal server error"),
	})
}

// timeoutError is a response that never arrived, as the SDK's HTTP client
// handler reports a failed round trip: the request may well have been
// applied. The retryer takes it for a connection error and a timeout.
func timeoutError() error {
	return &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: responseLost{}}}
}

// responseLost is a read that timed out after the request went out.
type responseLost struct{}

func (responseLost) Error() string {
	return "chaos: response lost after the request was sent: i/o timeout"
}
func (responseLost) Timeout() bool   { return true }
func (responseLost) Temporary() bool { return true }
func (responseLost) Unwrap() error   { return os.ErrDeadlineExceeded }

// lostError is a request that never got through: a send of messages, or
// a timer execution's start.
func lostError(what string) error {
	return &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("chaos: connection reset before " + what)}}
}

// Middleware is the fault layer's APIOptions entry (see above): it adds
// "chaos.Call" to the front of the Initialize step and "chaos.Attempt"
// right after "Retry" in the Finalize step.
func (f *Faults) Middleware(s *middleware.Stack) error {
	if err := s.Initialize.Add(middleware.InitializeMiddlewareFunc("chaos.Call", f.call), middleware.Before); err != nil {
		return err
	}
	return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("chaos.Attempt", f.attempt), "Retry", middleware.After)
}

// callOf answers the service and operation of the call a middleware at
// the front of the Initialize step is handling. A client whose SDK module
// registers its service metadata inside the Initialize step (the Step
// Functions client: service/sfn v1.41 puts only smithy's service id and
// operation name in the context before its stack runs) has not put the
// AWS ones awsfault.Call reads there yet.
func callOf(ctx context.Context) (service, op string) {
	service, op = awsfault.Call(ctx)
	if service == "" {
		service = middleware.GetServiceID(ctx)
	}
	if op == "" {
		op = middleware.GetOperationName(ctx)
	}
	return service, op
}

func (f *Faults) call(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	service, op := callOf(ctx)
	if !faulted(service, op) {
		return next.HandleInitialize(ctx, in)
	}
	name := service + "." + op
	f.countCall(name)
	kind, n := f.decide(StreamCalls, f.P.callRanges(), name, supports(service, op))
	switch kind {
	case KindCrashBefore:
		panic(Crash{Call: name, N: n})
	case KindSendLost:
		return middleware.InitializeOutput{}, middleware.Metadata{}, lostError("the messages were sent")
	case KindSFNStartLost:
		return middleware.InitializeOutput{}, middleware.Metadata{}, lostError("the timer execution was started")
	}
	if batch, ok := in.Parameters.(*sqs.SendMessageBatchInput); ok {
		in.Parameters = f.late(batch)
	}
	out, md, err := next.HandleInitialize(ctx, in)
	if kind == KindCrashAfter {
		panic(Crash{Call: name, After: true, N: n})
	}
	return out, md, err
}

// MaxLate bounds the seconds KindTimerLate adds to a delayed send.
const MaxLate = 3

// late answers a batch whose delayed entries (DelaySeconds > 0: a sleep's
// wake, a deadline, a backoff, an early timer sent again) are each, by
// chance, 1 to MaxLate seconds later (never past SQS's 900 s). The batch
// is copied when any entry changes; the caller's stays as it was.
func (f *Faults) late(in *sqs.SendMessageBatchInput) *sqs.SendMessageBatchInput {
	var entries []sqstypes.SendMessageBatchRequestEntry
	for i, e := range in.Entries {
		if e.DelaySeconds <= 0 || e.DelaySeconds >= 900 || !f.Chance(StreamTimers, KindTimerLate, f.P.TimerLate) {
			continue
		}
		var extra int32
		f.Draw(StreamTimers, func(r *rand.Rand) { extra = int32(1 + r.IntN(MaxLate)) })
		if entries == nil {
			entries = append([]sqstypes.SendMessageBatchRequestEntry(nil), in.Entries...)
		}
		entries[i].DelaySeconds = min(e.DelaySeconds+extra, 900)
	}
	if entries == nil {
		return in
	}
	out := *in
	out.Entries = entries
	return &out
}

func (f *Faults) attempt(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	service, op := awsfault.Call(ctx)
	if !faulted(service, op) || service != "DynamoDB" {
		return next.HandleFinalize(ctx, in)
	}
	kind, _ := f.decide(StreamAttempts, f.P.attemptRanges(), service+"."+op, supports(service, op))
	switch kind {
	case KindThrottle:
		return middleware.FinalizeOutput{}, middleware.Metadata{}, throttleError()
	case KindServerError:
		return middleware.FinalizeOutput{}, middleware.Metadata{}, serverError()
	}
	out, md, err := next.HandleFinalize(ctx, in)
	if kind == KindAmbiguous {
		return middleware.FinalizeOutput{}, md, timeoutError()
	}
	return out, md, err
}

// Duplicates answers the APIOptions entry for the SQS client the local
// event source mapping polls with (devstack.Options.RunnerAPIOptions): a
// message it receives (KindDuplicate), or, with a chance of its own, a
// message for one of the run's timer steps (KindTimerTwice), is handed out
// again by the next receive on the same queue (the same message id and
// receipt handle) while the first delivery is still being handled, as
// SQS's at-least-once delivery may. It is one middleware at the front of
// the Initialize step, so it works on whole calls and typed outputs: a
// receive with a duplicate due answers it without a request to SQS (the
// SDK short-circuited, as a middleware may, with the earlier output's
// message), and a receive that went to SQS decides, per message, whether
// it comes again. It never crashes: the mapping is AWS's, not a function.
// Each entry has its own pending duplicates; install one per client.
func (f *Faults) Duplicates() func(*middleware.Stack) error {
	d := &duplicates{f: f, pending: map[string][]sqstypes.Message{}}
	mw := middleware.InitializeMiddlewareFunc("chaos.Duplicates", d.handle)
	return func(s *middleware.Stack) error { return s.Initialize.Add(mw, middleware.Before) }
}

type duplicates struct {
	f       *Faults
	mu      sync.Mutex
	pending map[string][]sqstypes.Message // queue url -> messages to hand out again
}

func (d *duplicates) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	recv, ok := in.Parameters.(*sqs.ReceiveMessageInput)
	if service, _ := awsfault.Call(ctx); service != "SQS" || !ok {
		return next.HandleInitialize(ctx, in)
	}
	url := aws.ToString(recv.QueueUrl)
	d.mu.Lock()
	dups := d.pending[url]
	delete(d.pending, url)
	d.mu.Unlock()
	if len(dups) > 0 {
		// Decided (and counted) when the original was received.
		return middleware.InitializeOutput{Result: &sqs.ReceiveMessageOutput{Messages: dups}}, middleware.Metadata{}, nil
	}
	out, md, err := next.HandleInitialize(ctx, in)
	res, _ := out.Result.(*sqs.ReceiveMessageOutput)
	if err != nil || res == nil {
		return out, md, err
	}
	for _, m := range res.Messages {
		if d.f.Chance(StreamDeliver, KindDuplicate, d.f.P.Duplicate) ||
			timerMessage(aws.ToString(m.Body)) && d.f.Chance(StreamTimers, KindTimerTwice, d.f.P.TimerTwice) {
			d.mu.Lock()
			d.pending[url] = append(d.pending[url], m)
			d.mu.Unlock()
		}
	}
	return out, md, nil
}

// timerMessage reports whether a ready-queue message is for one of the
// run's timer steps (TimerSteps): a sleep's wake, or a gate's or a wait's
// deadline. Such a step is never executed, so every message for it is a
// timer.
func timerMessage(body string) bool {
	var m engine.Message
	if json.Unmarshal([]byte(body), &m) != nil || m.Tenant != Tenant {
		return false
	}
	return TimerSteps[m.Step]
}
