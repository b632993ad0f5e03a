package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// fakeDynamo answers every call with an empty success and counts them.
type fakeDynamo struct{ calls atomic.Int64 }

func (f *fakeDynamo) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.calls.Add(1)
	return &dynamodb.GetItemOutput{}, nil
}

func (f *fakeDynamo) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.calls.Add(1)
	return &dynamodb.PutItemOutput{}, nil
}

func (f *fakeDynamo) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.calls.Add(1)
	return &dynamodb.UpdateItemOutput{}, nil
}

func (f *fakeDynamo) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.calls.Add(1)
	return &dynamodb.QueryOutput{}, nil
}

func (f *fakeDynamo) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.calls.Add(1)
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func (f *fakeDynamo) BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	f.calls.Add(1)
	return &dynamodb.BatchGetItemOutput{}, nil
}

// fakeSQS answers every call with an empty success and counts them; its
// receives hand out one message each, numbered.
type fakeSQS struct {
	calls    atomic.Int64
	received atomic.Int64
}

func (f *fakeSQS) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.calls.Add(1)
	return &sqs.SendMessageBatchOutput{}, nil
}

func (f *fakeSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	f.calls.Add(1)
	n := f.received.Add(1)
	return &sqs.ReceiveMessageOutput{Messages: []sqstypes.Message{{
		MessageId: aws.String(fmt.Sprintf("m%d", n)), ReceiptHandle: aws.String(fmt.Sprintf("r%d", n)), Body: aws.String(`{}`),
	}}}, nil
}

func (f *fakeSQS) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	f.calls.Add(1)
	return &sqs.DeleteMessageOutput{}, nil
}

func (f *fakeSQS) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.calls.Add(1)
	return &sqs.DeleteMessageBatchOutput{}, nil
}

func (f *fakeSQS) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	f.calls.Add(1)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func (f *fakeSQS) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	f.calls.Add(1)
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String("http://q")}, nil
}

func (f *fakeSQS) CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	f.calls.Add(1)
	return &sqs.CreateQueueOutput{QueueUrl: aws.String("http://q")}, nil
}

func (f *fakeSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.calls.Add(1)
	return &sqs.GetQueueAttributesOutput{}, nil
}

var _ queue.API = (*fakeSQS)(nil)
var _ store.API = (*fakeDynamo)(nil)

// outcome is what one wrapped call did.
type outcome struct {
	crash  *Crash
	err    error
	called bool
}

// try makes a call through the fault layer, recovering a crash.
func try(calls *atomic.Int64, call func() error) (o outcome) {
	before := calls.Load()
	defer func() {
		o.called = calls.Load() > before
		if p := recover(); p != nil {
			c := p.(Crash)
			o.crash = &c
		}
	}()
	o.err = call()
	return o
}

// every AWS call of the engine, in turn.
func allCalls(db store.API, q queue.API) []func() error {
	ctx := context.Background()
	return []func() error{
		func() error { _, err := db.GetItem(ctx, &dynamodb.GetItemInput{}); return err },
		func() error { _, err := db.PutItem(ctx, &dynamodb.PutItemInput{}); return err },
		func() error { _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{}); return err },
		func() error { _, err := db.Query(ctx, &dynamodb.QueryInput{}); return err },
		func() error { _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{}); return err },
		func() error { _, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{}); return err },
		func() error { _, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{}); return err },
		func() error { _, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{}); return err },
		func() error { _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{}); return err },
		func() error {
			_, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{})
			return err
		},
		func() error { _, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{}); return err },
		func() error { _, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{}); return err },
		func() error { _, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{}); return err },
	}
}

// replay drives a fixed sequence of calls, deliveries, leases and sweeps
// through a fault layer, and answers its trace and counts.
func replay(seed uint64) ([]Decision, map[Kind]int64, []JobPlan) {
	p := DefaultProbabilities()
	// Higher than the defaults, so a short sequence meets every kind.
	p.CrashBefore, p.CrashAfter, p.Throttle, p.ServerError, p.Ambiguous, p.SendLost, p.Duplicate = 0.05, 0.05, 0.05, 0.05, 0.1, 0.1, 0.2
	f := New(seed, p)
	plan := f.Plan(20)
	db, q := &fakeDynamo{}, &fakeSQS{}
	calls := allCalls(f.DynamoDB(db), f.SQS(q))
	rq := f.RunnerSQS(&fakeSQS{})
	w := &workers{f: f}
	for i := range 2000 {
		try(&db.calls, calls[i%len(calls)])
		if i%10 == 0 {
			_, _ = rq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String("http://ready")})
			w.behaviour()
			f.Chance(StreamSweeps, KindDoubleSweep, p.DoubleSweep)
		}
	}
	return f.Trace(), f.Counts(), plan
}

func TestSameSeedMakesTheSameDecisions(t *testing.T) {
	t.Parallel()
	trace1, counts1, plan1 := replay(42)
	trace2, counts2, plan2 := replay(42)
	require.NotEmpty(t, trace1)
	require.Equal(t, trace1, trace2, "the same seed must replay the same fault decisions")
	require.Equal(t, counts1, counts2)
	require.Equal(t, plan1, plan2, "the same seed must plan the same jobs, byte for byte")
	for _, k := range Kinds {
		require.Positive(t, counts1[k], "kind %s never injected in the replay sequence", k)
	}

	trace3, _, plan3 := replay(43)
	require.NotEqual(t, trace1, trace3, "another seed makes other decisions")
	require.NotEqual(t, plan1, plan3)
}

func TestStreamsAreIndependent(t *testing.T) {
	t.Parallel()
	// Decisions on one stream do not move another: the n-th call decision
	// is the same however many deliveries were decided in between.
	a, b := New(7, DefaultProbabilities()), New(7, DefaultProbabilities())
	for range 100 {
		b.Float64(StreamDeliver)
		b.Float64(StreamWorkers)
	}
	for range 100 {
		require.Equal(t, a.Float64(StreamCalls), b.Float64(StreamCalls))
	}
	require.Equal(t, a.Plan(10), b.Plan(10))
}

// only answers probabilities with one kind certain and the others off.
func only(k Kind) Probabilities {
	var p Probabilities
	switch k {
	case KindCrashBefore:
		p.CrashBefore = 1
	case KindCrashAfter:
		p.CrashAfter = 1
	case KindThrottle:
		p.Throttle = 1
	case KindServerError:
		p.ServerError = 1
	case KindAmbiguous:
		p.Ambiguous = 1
	case KindSendLost:
		p.SendLost = 1
	case KindDuplicate:
		p.Duplicate = 1
	case KindDoubleSweep:
		p.DoubleSweep = 1
	case KindZombie:
		p.Zombie = 1
	case KindSkew:
		p.Skew = 1
	}
	return p
}

func TestCrashBeforeDiesWithoutCalling(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindCrashBefore))
	db, q := &fakeDynamo{}, &fakeSQS{}
	for i, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
		calls := &db.calls
		if i >= 6 {
			calls = &q.calls
		}
		o := try(calls, call)
		require.NotNil(t, o.crash, "call %d", i)
		require.False(t, o.crash.After)
		require.False(t, o.called, "call %d was made before the crash", i)
	}
	require.EqualValues(t, 13, f.Counts()[KindCrashBefore])
}

func TestCrashAfterDiesAfterTheCall(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindCrashAfter))
	db, q := &fakeDynamo{}, &fakeSQS{}
	for i, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
		calls := &db.calls
		if i >= 6 {
			calls = &q.calls
		}
		o := try(calls, call)
		require.NotNil(t, o.crash, "call %d", i)
		require.True(t, o.crash.After)
		require.True(t, o.called, "call %d was not made before the crash", i)
		require.Contains(t, o.crash.Error(), "crashed after")
	}
	require.EqualValues(t, 13, f.Counts()[KindCrashAfter])
}

func TestThrottleAnd5xxFailDynamoDBCallsWithoutCalling(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{KindThrottle, KindServerError} {
		f := New(1, only(kind))
		db, q := &fakeDynamo{}, &fakeSQS{}
		for i, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
			if i >= 6 { // SQS calls: not this kind's
				o := try(&q.calls, call)
				require.NoError(t, o.err)
				require.True(t, o.called)
				continue
			}
			o := try(&db.calls, call)
			require.Nil(t, o.crash)
			require.False(t, o.called, "%s: call %d was made", kind, i)
			var oe *smithy.OperationError
			require.ErrorAs(t, o.err, &oe)
			require.Equal(t, "DynamoDB", oe.ServiceID)
			if kind == KindThrottle {
				var pte *ddb.ProvisionedThroughputExceededException
				require.ErrorAs(t, o.err, &pte)
			} else {
				var ae smithy.APIError
				require.ErrorAs(t, o.err, &ae)
				require.Equal(t, smithy.FaultServer, ae.ErrorFault())
			}
		}
		require.EqualValues(t, 6, f.Counts()[kind])
	}
}

func TestAmbiguousWritesAreAppliedThenTimeOut(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindAmbiguous))
	db, q := &fakeDynamo{}, &fakeSQS{}
	writes := map[int]bool{1: true, 2: true, 4: true} // PutItem, UpdateItem, TransactWriteItems
	for i, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
		calls := &db.calls
		if i >= 6 {
			calls = &q.calls
		}
		o := try(calls, call)
		require.True(t, o.called, "call %d", i)
		if !writes[i] {
			require.NoError(t, o.err, "call %d is no write", i)
			continue
		}
		var ne net.Error
		require.ErrorAs(t, o.err, &ne, "call %d", i)
		require.True(t, ne.Timeout())
	}
	require.EqualValues(t, 3, f.Counts()[KindAmbiguous])
}

func TestSendLostFailsOnlySendsWithoutSending(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindSendLost))
	db, q := &fakeDynamo{}, &fakeSQS{}
	for i, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
		calls := &db.calls
		if i >= 6 {
			calls = &q.calls
		}
		o := try(calls, call)
		if i != 6 {
			require.NoError(t, o.err, "call %d", i)
			require.True(t, o.called)
			continue
		}
		require.Error(t, o.err)
		require.False(t, o.called, "the batch was sent")
	}
	require.EqualValues(t, 1, f.Counts()[KindSendLost])
}

func TestDuplicateHandsTheSameMessageOutAgain(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindDuplicate))
	real := &fakeSQS{}
	rq := f.RunnerSQS(real)
	ctx := context.Background()
	in := &sqs.ReceiveMessageInput{QueueUrl: aws.String("http://ready")}
	first, err := rq.ReceiveMessage(ctx, in)
	require.NoError(t, err)
	again, err := rq.ReceiveMessage(ctx, in)
	require.NoError(t, err)
	require.EqualValues(t, 1, real.received.Load(), "the duplicate comes from the wrapper, not from SQS")
	require.Len(t, again.Messages, 1)
	require.Equal(t, aws.ToString(first.Messages[0].MessageId), aws.ToString(again.Messages[0].MessageId))
	require.Equal(t, aws.ToString(first.Messages[0].ReceiptHandle), aws.ToString(again.Messages[0].ReceiptHandle))
	// Another queue's receive does not get it.
	other, err := rq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String("http://other")})
	require.NoError(t, err)
	require.NotEqual(t, aws.ToString(first.Messages[0].MessageId), aws.ToString(other.Messages[0].MessageId))
	require.EqualValues(t, 2, f.Counts()[KindDuplicate])
}

func TestWorkerAndSweepKindsInject(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindZombie))
	b := (&workers{f: f}).behaviour()
	require.True(t, b.zombie)
	require.Zero(t, b.skew)
	require.Positive(t, b.stall)
	require.EqualValues(t, 1, f.Counts()[KindZombie])

	f = New(1, only(KindSkew))
	for range 50 {
		b = (&workers{f: f}).behaviour()
		require.False(t, b.zombie)
		require.GreaterOrEqual(t, b.skew.Abs(), time.Second)
		require.Less(t, b.skew.Abs(), 4*time.Second)
	}
	require.EqualValues(t, 50, f.Counts()[KindSkew])

	f = New(1, only(KindDoubleSweep))
	require.True(t, f.Chance(StreamSweeps, KindDoubleSweep, f.P.DoubleSweep))
	require.EqualValues(t, 1, f.Counts()[KindDoubleSweep])

	f = New(1, Probabilities{})
	b = (&workers{f: f}).behaviour()
	require.False(t, b.zombie)
	require.Zero(t, b.skew)
	require.Zero(t, f.Total())
}

func TestPausedInjectsNothingAndDrawsNothing(t *testing.T) {
	t.Parallel()
	f := New(1, only(KindCrashBefore))
	f.Pause()
	db, q := &fakeDynamo{}, &fakeSQS{}
	for _, call := range allCalls(f.DynamoDB(db), f.SQS(q)) {
		o := try(&db.calls, call)
		require.Nil(t, o.crash)
		require.NoError(t, o.err)
	}
	require.Zero(t, f.Total())
	require.Zero(t, f.Drawn()[StreamCalls], "a paused layer must not move the stream")
	f.Resume()
	o := try(&db.calls, allCalls(f.DynamoDB(db), f.SQS(q))[0])
	require.NotNil(t, o.crash)
	require.EqualValues(t, 1, o.crash.N, "the first decision after the pause is the stream's first")
}

func TestCallFaultsFollowTheirProbabilities(t *testing.T) {
	t.Parallel()
	p := Probabilities{CrashBefore: 0.1, CrashAfter: 0.1, Throttle: 0.1, ServerError: 0.1, Ambiguous: 0.1, SendLost: 0.1}
	f := New(3, p)
	db := f.DynamoDB(&fakeDynamo{})
	var n atomic.Int64
	const calls = 20000
	for range calls {
		try(&n, func() error { _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{}); return err })
	}
	c := f.Counts()
	for _, k := range []Kind{KindCrashBefore, KindCrashAfter, KindThrottle, KindServerError, KindAmbiguous} {
		require.InDelta(t, 0.1*calls, c[k], 0.02*calls, "kind %s", k)
	}
	require.Zero(t, c[KindSendLost], "PutItem cannot lose a send")
	require.EqualValues(t, calls, f.Calls()["DynamoDB.PutItem"])
}

func TestErrorsAreNotCrashes(t *testing.T) {
	t.Parallel()
	require.False(t, errors.Is(throttleError("GetItem"), context.DeadlineExceeded))
	require.Contains(t, Crash{Call: "DynamoDB.PutItem", N: 3}.String(), "before DynamoDB.PutItem (call #3)")
}
