package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"
)

// The fault layer is middleware in real SDK clients talking to moto
// (helpers_test.go): whether a call reached moto is counted in the
// clients' own middleware stack, and whether it took effect is read back
// from moto.

// replay drives a fixed sequence of calls, deliveries, leases and sweeps
// through a fault layer in copies of a's clients, and answers its trace
// and counts.
func replay(t *testing.T, a *realAWS, seed uint64, n int) ([]Decision, map[Kind]int64, []JobPlan) {
	t.Helper()
	p := DefaultProbabilities()
	// Far higher than the defaults, so a short sequence (each call a
	// request to moto) meets every kind.
	p.CrashBefore, p.CrashAfter, p.Throttle, p.ServerError, p.Ambiguous, p.SendLost, p.Duplicate = 0.05, 0.05, 0.05, 0.05, 0.15, 0.3, 0.5
	p.TimerTwice, p.TimerLate, p.SFNStartLost = 0.5, 0.5, 0.3
	f := New(seed, p)
	plan := f.Plan(20)
	db, q, sf := a.faulted(f)
	ops := a.ops(db, q, sf)
	rq := a.runner(f)
	w := &workers{f: f}
	ctx := context.Background()
	for i := range n {
		a.fire(ops[i%len(ops)])
		if i%10 == 0 {
			// The recv queues hide nothing, so every receive hands out its
			// one message (or the middleware's duplicate of it): the same
			// delivery decisions whatever moto's timing.
			for _, url := range []string{a.recvURL, a.recvTimerURL} {
				out, err := rq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
				require.NoError(t, err)
				require.Len(t, out.Messages, 1)
			}
			// A delayed send, through the layer (its call decision, then
			// its entry's).
			func() {
				defer func() { _ = recover() }() // a crash decision
				_, _ = q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.lateURL), Entries: []sqstypes.SendMessageBatchRequestEntry{
					{Id: aws.String("d"), MessageBody: aws.String("delayed"), DelaySeconds: 1},
				}})
			}()
			w.behaviour()
			f.Chance(StreamSweeps, KindDoubleSweep, p.DoubleSweep)
		}
	}
	return f.Trace(), f.Counts(), plan
}

func TestSameSeedMakesTheSameDecisions(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	const n = 12 * 14 // each call of the engine 12 times, 17 rounds of deliveries and delayed sends
	trace1, counts1, plan1 := replay(t, a, 42, n)
	trace2, counts2, plan2 := replay(t, a, 42, n)
	require.NotEmpty(t, trace1)
	require.Equal(t, trace1, trace2, "the same seed must replay the same fault decisions")
	require.Equal(t, counts1, counts2)
	require.Equal(t, plan1, plan2, "the same seed must plan the same jobs, byte for byte")
	for _, k := range Kinds {
		if countedByTheRun[k] {
			require.Zero(t, counts1[k], "kind %s is a racer's, counted by the run", k)
			continue
		}
		require.Positive(t, counts1[k], "kind %s never injected in the replay sequence", k)
	}

	trace3, _, plan3 := replay(t, a, 43, n)
	require.NotEqual(t, trace1, trace3, "another seed makes other decisions")
	require.NotEqual(t, plan1, plan3)
}

func TestStreamsAreIndependent(t *testing.T) {
	t.Parallel()
	// Decisions on one stream do not move another: the n-th call decision
	// is the same however many deliveries were decided in between.
	a, b := New(7, DefaultProbabilities()), New(7, DefaultProbabilities())
	for range 100 {
		intN(b, StreamDeliver)
		intN(b, StreamWorkers)
	}
	for range 100 {
		require.Equal(t, intN(a, StreamCalls), intN(b, StreamCalls))
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
	case KindTimerTwice:
		p.TimerTwice = 1
	case KindTimerLate:
		p.TimerLate = 1
	case KindSFNStartLost:
		p.SFNStartLost = 1
	}
	return p
}

func TestCrashBeforeDiesWithoutCalling(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindCrashBefore))
	for _, o := range a.ops(a.faulted(f)) {
		out := a.try(o)
		require.NotNil(t, out.crash, o.name)
		require.False(t, out.crash.After)
		require.Equal(t, o.name, out.crash.Call)
		require.False(t, out.called, "%s reached moto before the crash", o.name)
		if out.effect {
			require.False(t, out.applied, "%s took effect in moto", o.name)
		}
	}
	require.EqualValues(t, 14, f.Counts()[KindCrashBefore])
	require.Zero(t, a.Reached.total(), "no request may reach moto")
}

func TestCrashAfterDiesAfterTheCall(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindCrashAfter))
	effects := 0
	for _, o := range a.ops(a.faulted(f)) {
		out := a.try(o)
		require.NotNil(t, out.crash, o.name)
		require.True(t, out.crash.After)
		require.Contains(t, out.crash.Error(), "crashed after "+o.name)
		require.True(t, out.called, "%s did not reach moto before the crash", o.name)
		if out.effect {
			effects++
			require.True(t, out.applied, "%s did not take effect in moto", o.name)
		}
	}
	require.Equal(t, 8, effects, "writes, send, delete, visibility change, queue creation and timer start are read back")
	require.EqualValues(t, 14, f.Counts()[KindCrashAfter])
	require.EqualValues(t, 14, a.Reached.total())
}

func TestThrottleAnd5xxFailDynamoDBCallsWithoutCalling(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	for _, kind := range []Kind{KindThrottle, KindServerError} {
		f := New(1, only(kind))
		for _, o := range a.ops(a.faulted(f)) {
			out := a.try(o)
			require.Nil(t, out.crash)
			if !strings.HasPrefix(o.name, "DynamoDB.") { // not this kind's
				require.NoError(t, out.err, "%s: %s", kind, o.name)
				require.True(t, out.called)
				require.True(t, !out.effect || out.applied, "%s: %s did not take effect", kind, o.name)
				continue
			}
			require.False(t, out.called, "%s: %s reached moto", kind, o.name)
			require.False(t, out.applied, "%s: %s took effect in moto", kind, o.name)
			var oe *smithy.OperationError
			require.ErrorAs(t, out.err, &oe)
			require.Equal(t, "DynamoDB", oe.ServiceID)
			if kind == KindThrottle {
				var pte *ddb.ProvisionedThroughputExceededException
				require.ErrorAs(t, out.err, &pte)
			} else {
				var ae smithy.APIError
				require.ErrorAs(t, out.err, &ae)
				require.Equal(t, smithy.FaultServer, ae.ErrorFault())
			}
		}
		require.EqualValues(t, 6, f.Counts()[kind])
	}
	require.Zero(t, a.Reached.of("DynamoDB.PutItem")+a.Reached.of("DynamoDB.GetItem"))
}

func TestAmbiguousWritesAreAppliedThenTimeOut(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindAmbiguous))
	writes := 0
	for _, o := range a.ops(a.faulted(f)) {
		out := a.try(o)
		require.Nil(t, out.crash)
		require.True(t, out.called, o.name)
		require.True(t, !out.effect || out.applied, "%s did not take effect in moto", o.name)
		if !o.write {
			require.NoError(t, out.err, "%s is no write", o.name)
			continue
		}
		writes++
		require.True(t, out.applied, "the ambiguous %s must be applied", o.name)
		var ne net.Error
		require.ErrorAs(t, out.err, &ne, o.name)
		require.True(t, ne.Timeout())
	}
	require.Equal(t, 3, writes) // PutItem, UpdateItem, TransactWriteItems
	require.EqualValues(t, 3, f.Counts()[KindAmbiguous])
}

func TestSendLostFailsOnlySendsWithoutSending(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindSendLost))
	for _, o := range a.ops(a.faulted(f)) {
		out := a.try(o)
		require.Nil(t, out.crash)
		if o.name != "SQS.SendMessageBatch" {
			require.NoError(t, out.err, o.name)
			require.True(t, out.called, o.name)
			require.True(t, !out.effect || out.applied, "%s did not take effect in moto", o.name)
			continue
		}
		require.Error(t, out.err)
		require.False(t, out.called, "the batch reached moto")
		require.False(t, out.applied, "the message is in the queue")
	}
	require.Zero(t, a.inQueue(a.sendURL))
	require.EqualValues(t, 1, f.Counts()[KindSendLost])
}

func TestDuplicateHandsTheSameMessageOutAgain(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	ready, other := a.Queue("ready"), a.Queue("other")
	a.Send(ready, "job-1")
	a.Send(other, "job-2")
	f := New(1, only(KindDuplicate))
	rq := a.runner(f)
	ctx := context.Background()
	receive := func(url string) []sqstypes.Message {
		out, err := rq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		require.NoError(t, err)
		return out.Messages
	}

	first := receive(ready)
	require.Len(t, first, 1)
	require.Equal(t, "job-1", aws.ToString(first[0].Body))
	again := receive(ready)
	require.EqualValues(t, 1, a.Reached.of("SQS.ReceiveMessage"), "the duplicate comes from the middleware, not from SQS")
	require.Len(t, again, 1)
	require.Equal(t, aws.ToString(first[0].MessageId), aws.ToString(again[0].MessageId))
	require.Equal(t, aws.ToString(first[0].ReceiptHandle), aws.ToString(again[0].ReceiptHandle))
	require.Equal(t, "job-1", aws.ToString(again[0].Body))

	// Another queue's receive does not get it.
	o := receive(other)
	require.Len(t, o, 1)
	require.NotEqual(t, aws.ToString(first[0].MessageId), aws.ToString(o[0].MessageId))
	require.Equal(t, "job-2", aws.ToString(o[0].Body))
	require.EqualValues(t, 2, f.Counts()[KindDuplicate])

	// It is handed out twice, not more: the next receive asks SQS, where
	// the message is in flight.
	require.Empty(t, receive(ready))
	require.EqualValues(t, 3, a.Reached.of("SQS.ReceiveMessage"))

	// Both deliveries hold the one receipt handle: the mapping's delete
	// goes through to SQS and removes the message.
	del, err := rq.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(ready), Entries: []sqstypes.DeleteMessageBatchRequestEntry{
		{Id: aws.String("1"), ReceiptHandle: again[0].ReceiptHandle},
	}})
	require.NoError(t, err)
	require.Empty(t, del.Failed)
	require.Zero(t, a.inQueue(ready))
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
	require.Zero(t, total(f))
}

func TestPausedInjectsNothingAndDrawsNothing(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindCrashBefore))
	f.Pause()
	ops := a.ops(a.faulted(f))
	for _, o := range ops {
		out := a.try(o)
		require.Nil(t, out.crash)
		require.NoError(t, out.err, o.name)
		require.True(t, out.called, o.name)
		require.True(t, !out.effect || out.applied, "%s did not take effect in moto", o.name)
	}
	require.Zero(t, total(f))
	require.Zero(t, drawn(f, StreamCalls), "a paused layer must not move the stream")
	require.Zero(t, drawn(f, StreamAttempts), "a paused layer must not move the stream")
	f.paused.Store(false)
	out := a.try(ops[1])
	require.NotNil(t, out.crash)
	require.EqualValues(t, 1, out.crash.N, "the first decision after the pause is the stream's first")
	require.False(t, out.called)
	require.False(t, out.applied)
}

func TestCallFaultsFollowTheirProbabilities(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	p := Probabilities{CrashBefore: 0.1, CrashAfter: 0.1, Throttle: 0.1, ServerError: 0.1, Ambiguous: 0.1, SendLost: 0.1}
	f := New(3, p)
	put := a.ops(a.faulted(f))[1]
	require.Equal(t, "DynamoDB.PutItem", put.name)
	// Every call is a PutItem, so the faults drawn do not depend on which
	// goroutine meets which decision.
	const calls, goroutines = 1000, 8
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls / goroutines {
				a.fire(put)
			}
		})
	}
	wg.Wait()
	c := f.Counts()
	// Crashes are drawn once per call; throttles, 5xx and ambiguous writes
	// once per attempt, and a call that crashed before makes none (these
	// clients do not retry: one attempt each).
	attempts := calls - c[KindCrashBefore]
	require.Equal(t, map[Stream]int64{StreamCalls: calls, StreamAttempts: attempts}, map[Stream]int64{StreamCalls: drawn(f, StreamCalls), StreamAttempts: drawn(f, StreamAttempts)})
	for _, k := range []Kind{KindCrashBefore, KindCrashAfter} {
		require.InDelta(t, 0.1*calls, c[k], 0.02*calls, "kind %s", k)
	}
	for _, k := range []Kind{KindThrottle, KindServerError, KindAmbiguous} {
		require.InDelta(t, 0.1*float64(attempts), c[k], 0.02*calls, "kind %s", k)
	}
	require.Zero(t, c[KindSendLost], "PutItem cannot lose a send")
	require.EqualValues(t, calls, f.Calls()["DynamoDB.PutItem"])
	// What was not stopped in front of moto was written, including the
	// calls that crashed after it or were reported as timeouts.
	through := calls - c[KindCrashBefore] - c[KindThrottle] - c[KindServerError]
	require.Equal(t, through, a.Reached.of("DynamoDB.PutItem"))
	require.EqualValues(t, through+1, a.items(), "one item per PutItem that reached moto, and the seed")
}

// TestAttemptFaultsMeetTheSDKRetry: throttles, 5xx and ambiguous writes
// sit inside the SDK's retry loop, so the standard retryer retries them as
// it would real ones: a throttled or failed attempt is sent again and
// reaches moto; an ambiguous write's retry meets the write already applied
// and fails its condition, as on AWS. Crashes and lost sends are per call:
// the retryer never sees them.
func TestAttemptFaultsMeetTheSDKRetry(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	retrying := func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	}
	ctx := context.Background()
	put := func(db *dynamodb.Client) (string, error) {
		sk := a.fresh("retry")
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.table), Item: key("retry", sk), ConditionExpression: aws.String("attribute_not_exists(pk)")})
		return sk, err
	}

	for _, kind := range []Kind{KindThrottle, KindServerError} {
		// Certain on the first attempt and on nothing after: the retry
		// goes through.
		f := New(1, only(kind))
		first := true
		next := f.Middleware
		db := dynamodb.New(a.DB.Options(), retrying, func(o *dynamodb.Options) {
			o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
				if err := next(s); err != nil {
					return err
				}
				// After the first attempt, nothing more is injected.
				return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("test.PauseAfterFirst",
					func(ctx context.Context, in middleware.FinalizeInput, h middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
						if first {
							first = false
						} else {
							f.Pause()
						}
						return h.HandleFinalize(ctx, in)
					}), "Retry", middleware.After)
			})
		})
		before := a.Reached.of("DynamoDB.PutItem")
		sk, err := put(db)
		require.NoError(t, err, "%s: the SDK retried the injected error", kind)
		require.True(t, a.hasItem("retry", sk))
		require.EqualValues(t, 1, f.Counts()[kind])
		require.Equal(t, before+1, a.Reached.of("DynamoDB.PutItem"), "%s: only the retry reached moto", kind)
	}

	// Every attempt throttled: the retryer gives up after its attempts,
	// with the throttle as the cause.
	f := New(1, only(KindThrottle))
	db := dynamodb.New(a.DB.Options(), retrying, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, f.Middleware) })
	_, err := put(db)
	var pte *ddb.ProvisionedThroughputExceededException
	require.ErrorAs(t, err, &pte)
	var maxed *retry.MaxAttemptsError
	require.ErrorAs(t, err, &maxed)
	require.EqualValues(t, retry.DefaultMaxAttempts, f.Counts()[KindThrottle], "one throttle per attempt")
	require.EqualValues(t, 1, f.Calls()["DynamoDB.PutItem"])

	// An ambiguous conditional write: applied, the answer lost, the retry
	// fails its condition (and is ambiguous again, and again).
	f = New(1, only(KindAmbiguous))
	db = dynamodb.New(a.DB.Options(), retrying, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, f.Middleware) })
	before := a.Reached.of("DynamoDB.PutItem")
	sk, err := put(db)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.True(t, a.hasItem("retry", sk), "the first attempt was applied")
	require.EqualValues(t, retry.DefaultMaxAttempts, f.Counts()[KindAmbiguous])
	require.Equal(t, before+int64(retry.DefaultMaxAttempts), a.Reached.of("DynamoDB.PutItem"), "every attempt reached moto")

	// A lost send is the call's, not an attempt's: not retried.
	f = New(1, only(KindSendLost))
	_, q, _ := a.faulted(f)
	q = sqs.New(q.Options(), func(o *sqs.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	})
	_, err = q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.sendURL), Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("m"), MessageBody: aws.String(a.fresh("lost"))},
	}})
	require.Error(t, err)
	require.False(t, errors.As(err, &maxed), "the retryer never saw it")
	require.Zero(t, a.Reached.of("SQS.SendMessageBatch"))
	require.EqualValues(t, 1, f.Counts()[KindSendLost])
}

func TestErrorsAreNotCrashes(t *testing.T) {
	t.Parallel()
	require.False(t, errors.Is(throttleError(), context.DeadlineExceeded))
	require.Contains(t, Crash{Call: "DynamoDB.PutItem", N: 3}.Error(), "before DynamoDB.PutItem (call #3)")
}

func TestSFNStartLostFailsOnlyTimerStartsWithoutStarting(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindSFNStartLost))
	for _, o := range a.ops(a.faulted(f)) {
		out := a.try(o)
		require.Nil(t, out.crash)
		if o.name != "SFN.StartExecution" {
			require.NoError(t, out.err, o.name)
			require.True(t, out.called, o.name)
			require.True(t, !out.effect || out.applied, "%s did not take effect in moto", o.name)
			continue
		}
		var oe *smithy.OperationError
		require.ErrorAs(t, out.err, &oe)
		require.Equal(t, "SFN", oe.ServiceID)
		require.False(t, out.called, "the start reached moto")
		require.True(t, out.effect)
		require.False(t, out.applied, "the execution ran")
	}
	require.EqualValues(t, 1, f.Counts()[KindSFNStartLost])
	require.EqualValues(t, 1, f.Calls()["SFN.StartExecution"], "the layer sees the Step Functions client's calls")
	require.Zero(t, f.Counts()[KindSendLost])

	// The engine's timer starts crash like its other calls.
	f = New(1, only(KindCrashBefore))
	_, _, sf := a.faulted(f)
	var start op
	for _, o := range a.ops(nil, nil, sf) {
		if o.name == "SFN.StartExecution" {
			start = o
		}
	}
	out := a.try(start)
	require.NotNil(t, out.crash)
	require.Equal(t, "SFN.StartExecution", out.crash.Call)
	require.False(t, out.applied)
}

// capture is an APIOptions entry that keeps, at the end of the Initialize
// step (behind the fault layer), each SendMessageBatch input the rest of
// the stack is handed.
type capture struct {
	mu      sync.Mutex
	batches []*sqs.SendMessageBatchInput
}

func (c *capture) add(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("ChaosTestCapture",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if b, ok := in.Parameters.(*sqs.SendMessageBatchInput); ok {
				c.mu.Lock()
				c.batches = append(c.batches, b)
				c.mu.Unlock()
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

func TestTimerLateDelaysOnlyDelayedEntries(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	f := New(1, only(KindTimerLate))
	c := &capture{}
	_, q, _ := a.with(f.Middleware, c.add)
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.lateURL), Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("now"), MessageBody: aws.String("now")},
		{Id: aws.String("two"), MessageBody: aws.String("two"), DelaySeconds: 2},
		{Id: aws.String("near-max"), MessageBody: aws.String("near-max"), DelaySeconds: 899},
		{Id: aws.String("max"), MessageBody: aws.String("max"), DelaySeconds: 900},
	}}
	out, err := q.SendMessageBatch(context.Background(), in)
	require.NoError(t, err)
	require.Len(t, out.Successful, 4, "every entry sent, late or not")
	require.Empty(t, out.Failed)
	require.Len(t, c.batches, 1)
	sent := c.batches[0].Entries
	require.Zero(t, sent[0].DelaySeconds, "an undelayed message is no timer")
	require.GreaterOrEqual(t, sent[1].DelaySeconds, int32(2+1))
	require.LessOrEqual(t, sent[1].DelaySeconds, int32(2+MaxLate))
	require.EqualValues(t, 900, sent[2].DelaySeconds, "never past SQS's limit")
	require.EqualValues(t, 900, sent[3].DelaySeconds)
	require.EqualValues(t, 2, f.Counts()[KindTimerLate], "the two entries that could be later")
	require.Equal(t, []int32{0, 2, 899, 900}, []int32{in.Entries[0].DelaySeconds, in.Entries[1].DelaySeconds, in.Entries[2].DelaySeconds, in.Entries[3].DelaySeconds},
		"the caller's input is left as it was")
	require.EqualValues(t, 1, a.Reached.of("SQS.SendMessageBatch"))

	// A send the layer lost has no entry made late: nothing was sent.
	p := only(KindSendLost)
	p.TimerLate = 1
	f = New(1, p)
	c = &capture{}
	_, q, _ = a.with(f.Middleware, c.add)
	_, err = q.SendMessageBatch(context.Background(), in)
	require.Error(t, err)
	require.Empty(t, c.batches)
	require.Zero(t, f.Counts()[KindTimerLate])

	// Paused, nothing is late and nothing is drawn.
	f = New(1, only(KindTimerLate))
	f.Pause()
	c = &capture{}
	_, q, _ = a.with(f.Middleware, c.add)
	_, err = q.SendMessageBatch(context.Background(), in)
	require.NoError(t, err)
	require.Same(t, in, c.batches[0])
	require.Zero(t, drawn(f, StreamTimers))
}

func TestTimerTwiceHandsOnlyTimerMessagesOutAgain(t *testing.T) {
	t.Parallel()
	a := newRealAWS(t)
	timer, work, foreign, other := a.Queue("timer"), a.Queue("work"), a.Queue("foreign"), a.Queue("other")
	a.Send(timer, timerBody(Tenant, "gate"))
	a.Send(work, timerBody(Tenant, "only")) // a pass step's: executed, no timer
	a.Send(foreign, timerBody("another-tenant", "nap"))
	a.Send(other, "not json")
	f := New(1, only(KindTimerTwice))
	rq := a.runner(f)
	ctx := context.Background()
	receive := func(url string) []sqstypes.Message {
		out, err := rq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		require.NoError(t, err)
		return out.Messages
	}
	first := receive(timer)
	require.Len(t, first, 1)
	again := receive(timer)
	require.Len(t, again, 1, "the timer step's message comes again")
	require.Equal(t, aws.ToString(first[0].MessageId), aws.ToString(again[0].MessageId))
	require.Equal(t, aws.ToString(first[0].ReceiptHandle), aws.ToString(again[0].ReceiptHandle))
	require.Empty(t, receive(timer), "twice, not more")
	for _, url := range []string{work, foreign, other} {
		require.Len(t, receive(url), 1)
		require.Empty(t, receive(url), "no other message comes again")
	}
	require.EqualValues(t, map[Kind]int64{KindTimerTwice: 1}, nonZero(f.Counts()))
	require.EqualValues(t, 4, drawn(f, StreamDeliver), "every message meets the duplicate's draw first")
	require.EqualValues(t, 1, drawn(f, StreamTimers), "only the timer meets timer_twice's")

	// A timer message a duplicate takes already comes twice, not three
	// times, and counts as the duplicate.
	a.Send(timer, timerBody(Tenant, "nap"))
	p := only(KindDuplicate)
	p.TimerTwice = 1
	f = New(1, p)
	rq = a.runner(f)
	require.Len(t, receive(timer), 1)
	require.Len(t, receive(timer), 1)
	require.Empty(t, receive(timer))
	require.EqualValues(t, map[Kind]int64{KindDuplicate: 1}, nonZero(f.Counts()))
}

func nonZero(c map[Kind]int64) map[Kind]int64 {
	out := map[Kind]int64{}
	for k, v := range c {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// countedByTheRun are the kinds counted once per racer that ran, or as a
// resource job carries them out, not drawn by the layer.
var countedByTheRun = map[Kind]bool{KindApprovalRace: true, KindSignalRace: true, KindRedriveRace: true,
	KindSlotHolderKilled: true, KindResourceFailed: true, KindSlotRace: true}

func total(f *Faults) (n int64) {
	for _, v := range f.Counts() {
		n += v
	}
	return n
}

func drawn(f *Faults, s Stream) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drawn[s]
}

func intN(f *Faults, s Stream) (n int) {
	f.Draw(s, func(r *rand.Rand) { n = r.IntN(1 << 30) })
	return n
}
