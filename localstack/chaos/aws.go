package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/stepflow/stepflow/localstack/runner"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// The errors a fault answers, shaped as the SDK's own: an
// *smithy.OperationError around the service's error.

func opError(service, op string, err error) error {
	return &smithy.OperationError{ServiceID: service, OperationName: op, Err: err}
}

func throttleError(op string) error {
	return opError("DynamoDB", op, &ddb.ProvisionedThroughputExceededException{
		Message: aws.String("chaos: the level of configured provisioned throughput for the table was exceeded"),
	})
}

func serverError(service, op string) error {
	return opError(service, op, &smithy.GenericAPIError{
		Code: "InternalServerError", Message: "chaos: internal server error", Fault: smithy.FaultServer,
	})
}

// timeoutError is a response that never arrived: the request may well have
// been applied.
func timeoutError(service, op string) error {
	return opError(service, op, &net.OpError{Op: "read", Net: "tcp", Err: responseLost{}})
}

// responseLost is a read that timed out after the request went out.
type responseLost struct{}

func (responseLost) Error() string {
	return "chaos: response lost after the request was sent: i/o timeout"
}
func (responseLost) Timeout() bool   { return true }
func (responseLost) Temporary() bool { return true }
func (responseLost) Unwrap() error   { return os.ErrDeadlineExceeded }

func sendLostError(op string) error {
	return opError("SQS", op, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("chaos: connection reset before the messages were sent")})
}

// around makes one AWS call under the fault layer.
func around[T any](f *Faults, service, op string, supported func(Kind) bool, call func() (T, error)) (T, error) {
	var zero T
	name := service + "." + op
	kind, n := f.decideCall(name, supported)
	switch kind {
	case KindCrashBefore:
		panic(Crash{Call: name, N: n})
	case KindThrottle:
		return zero, throttleError(op)
	case KindServerError:
		return zero, serverError(service, op)
	case KindSendLost:
		return zero, sendLostError(op)
	}
	out, err := call()
	switch kind {
	case KindCrashAfter:
		panic(Crash{Call: name, After: true, N: n})
	case KindAmbiguous:
		return zero, timeoutError(service, op)
	}
	return out, err
}

func dynamoRead(k Kind) bool {
	return k == KindCrashBefore || k == KindCrashAfter || k == KindThrottle || k == KindServerError
}

func dynamoWrite(k Kind) bool { return dynamoRead(k) || k == KindAmbiguous }

func sqsCall(k Kind) bool { return k == KindCrashBefore || k == KindCrashAfter }

func sqsSend(k Kind) bool { return sqsCall(k) || k == KindSendLost }

// DynamoDB wraps the engine's DynamoDB client.
func (f *Faults) DynamoDB(api store.API) store.API { return &dynamo{api: api, f: f} }

type dynamo struct {
	api store.API
	f   *Faults
}

func (d *dynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return around(d.f, "DynamoDB", "GetItem", dynamoRead, func() (*dynamodb.GetItemOutput, error) { return d.api.GetItem(ctx, in, o...) })
}

func (d *dynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return around(d.f, "DynamoDB", "PutItem", dynamoWrite, func() (*dynamodb.PutItemOutput, error) { return d.api.PutItem(ctx, in, o...) })
}

func (d *dynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return around(d.f, "DynamoDB", "UpdateItem", dynamoWrite, func() (*dynamodb.UpdateItemOutput, error) { return d.api.UpdateItem(ctx, in, o...) })
}

func (d *dynamo) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return around(d.f, "DynamoDB", "Query", dynamoRead, func() (*dynamodb.QueryOutput, error) { return d.api.Query(ctx, in, o...) })
}

func (d *dynamo) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return around(d.f, "DynamoDB", "TransactWriteItems", dynamoWrite, func() (*dynamodb.TransactWriteItemsOutput, error) { return d.api.TransactWriteItems(ctx, in, o...) })
}

func (d *dynamo) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return around(d.f, "DynamoDB", "BatchGetItem", dynamoRead, func() (*dynamodb.BatchGetItemOutput, error) { return d.api.BatchGetItem(ctx, in, o...) })
}

// SQS wraps the engine's SQS client.
func (f *Faults) SQS(api queue.API) queue.API { return &sqsAPI{api: api, f: f} }

type sqsAPI struct {
	api queue.API
	f   *Faults
}

func (s *sqsAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return around(s.f, "SQS", "SendMessageBatch", sqsSend, func() (*sqs.SendMessageBatchOutput, error) { return s.api.SendMessageBatch(ctx, in, o...) })
}

func (s *sqsAPI) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return around(s.f, "SQS", "ReceiveMessage", sqsCall, func() (*sqs.ReceiveMessageOutput, error) { return s.api.ReceiveMessage(ctx, in, o...) })
}

func (s *sqsAPI) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return around(s.f, "SQS", "DeleteMessage", sqsCall, func() (*sqs.DeleteMessageOutput, error) { return s.api.DeleteMessage(ctx, in, o...) })
}

func (s *sqsAPI) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return around(s.f, "SQS", "ChangeMessageVisibility", sqsCall, func() (*sqs.ChangeMessageVisibilityOutput, error) {
		return s.api.ChangeMessageVisibility(ctx, in, o...)
	})
}

func (s *sqsAPI) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, o ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return around(s.f, "SQS", "GetQueueUrl", sqsCall, func() (*sqs.GetQueueUrlOutput, error) { return s.api.GetQueueUrl(ctx, in, o...) })
}

func (s *sqsAPI) CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, o ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	return around(s.f, "SQS", "CreateQueue", sqsCall, func() (*sqs.CreateQueueOutput, error) { return s.api.CreateQueue(ctx, in, o...) })
}

func (s *sqsAPI) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, o ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return around(s.f, "SQS", "GetQueueAttributes", sqsCall, func() (*sqs.GetQueueAttributesOutput, error) { return s.api.GetQueueAttributes(ctx, in, o...) })
}

func (s *sqsAPI) ListQueues(ctx context.Context, in *sqs.ListQueuesInput, o ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	return around(s.f, "SQS", "ListQueues", sqsCall, func() (*sqs.ListQueuesOutput, error) { return s.api.ListQueues(ctx, in, o...) })
}

// RunnerSQS wraps the client the local event source mapping polls with: a
// message it receives is, by chance, handed out again by the next receive
// on the same queue (the same message id and receipt handle) while the
// first delivery is still being handled, as SQS's at-least-once delivery
// may. It never crashes: the mapping is AWS's, not a function.
func (f *Faults) RunnerSQS(api runner.SQSAPI) runner.SQSAPI {
	return &runnerSQS{api: api, f: f, pending: map[string][]sqstypes.Message{}}
}

type runnerSQS struct {
	api     runner.SQSAPI
	f       *Faults
	mu      sync.Mutex
	pending map[string][]sqstypes.Message // queue url -> messages to hand out again
}

func (r *runnerSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	url := aws.ToString(in.QueueUrl)
	r.mu.Lock()
	dups := r.pending[url]
	delete(r.pending, url)
	r.mu.Unlock()
	if len(dups) > 0 {
		// Decided (and counted) when the original was received.
		return &sqs.ReceiveMessageOutput{Messages: dups}, nil
	}
	out, err := r.api.ReceiveMessage(ctx, in, o...)
	if err != nil || out == nil {
		return out, err
	}
	for _, m := range out.Messages {
		if r.f.Chance(StreamDeliver, KindDuplicate, r.f.P.Duplicate) {
			r.mu.Lock()
			r.pending[url] = append(r.pending[url], m)
			r.mu.Unlock()
		}
	}
	return out, nil
}

func (r *runnerSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return r.api.DeleteMessageBatch(ctx, in, o...)
}
