package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// The fault layer's tests put it into real SDK clients talking to the test
// binary's shared moto emulator (stacktest.Endpoint). Each test has a
// table and queues of its own; what a call did is read back from moto.

var (
	// awsRun tells this binary's tables and queues from another's when
	// STEPFLOW_TEST_ENDPOINT names a long-running emulator.
	awsRun = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	awsSeq atomic.Int64
)

// reached counts, by "Service.Operation", the requests of a client that
// got an HTTP answer from moto: a step of the SDK's own stack, right in
// front of the transport, so a call the fault layer stops never counts
// and one it lets through counts once per attempt (the clients of
// newRealAWS do not retry).
type reached struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *reached) of(call string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[call]
}

func (r *reached) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.n {
		n += v
	}
	return n
}

// count is an APIOptions entry that installs the counting step.
func (r *reached) count(s *middleware.Stack) error {
	return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("ChaosTestReached",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			if _, ok := out.RawResponse.(*smithyhttp.Response); ok {
				r.mu.Lock()
				r.n[awsmiddleware.GetServiceID(ctx)+"."+middleware.GetOperationName(ctx)]++
				r.mu.Unlock()
			}
			return out, md, err
		}), middleware.After)
}

// realAWS is one test's share of moto.
type realAWS struct {
	t   testing.TB
	ctx context.Context

	// DB, Q and SF are the clients the fault layer goes into (a copy of
	// each with its middleware: with); Reached counts their requests.
	// look, lookQ and lookSF set up and read back, uncounted.
	DB      *dynamodb.Client
	Q       *sqs.Client
	SF      *sfn.Client
	Reached *reached
	look    *dynamodb.Client
	lookQ   *sqs.Client
	lookSF  *sfn.Client
	machine string // a state machine of one Pass state, for StartExecution

	name  string // prefix of the table's and the queues' names
	table string
	// Queues: sends go to send, the engine's receives read recv (one
	// message, never hidden), deletes and visibility changes take a
	// message of their own in flight from del and vis. recvTimer holds
	// one message for a timer step of the run's tenant, never hidden, and
	// late takes delayed sends.
	sendURL, recvURL, delURL, visURL string
	recvTimerURL, lateURL            string

	seq atomic.Int64 // fresh keys, bodies and queue names
}

// newRealAWS creates a table and queues on the shared emulator.
func newRealAWS(t testing.TB) *realAWS {
	t.Helper()
	ctx := context.Background()
	cfg, err := devstack.AWSConfig(ctx, stacktest.Endpoint(t), "us-east-1")
	require.NoError(t, err)
	a := &realAWS{t: t, ctx: ctx, Reached: &reached{n: map[string]int64{}}, name: fmt.Sprintf("chaos-%s-%d", awsRun, awsSeq.Add(1))}
	a.DB = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.Retryer = aws.NopRetryer{}
		o.APIOptions = append(o.APIOptions, a.Reached.count)
	})
	a.Q = sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.Retryer = aws.NopRetryer{}
		o.APIOptions = append(o.APIOptions, a.Reached.count)
	})
	a.SF = sfn.NewFromConfig(cfg, func(o *sfn.Options) {
		o.Retryer = aws.NopRetryer{}
		o.APIOptions = append(o.APIOptions, a.Reached.count)
	})
	a.look, a.lookQ, a.lookSF = dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg), sfn.NewFromConfig(cfg)
	sm, err := a.lookSF.CreateStateMachine(ctx, &sfn.CreateStateMachineInput{
		Name:       aws.String(a.name),
		Definition: aws.String(`{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}`),
		RoleArn:    aws.String("arn:aws:iam::123456789012:role/chaos-test"),
	})
	require.NoError(t, err)
	a.machine = aws.ToString(sm.StateMachineArn)

	a.table = a.name
	_, err = a.look.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(a.table),
		AttributeDefinitions: []ddb.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: ddb.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: ddb.ScalarAttributeTypeS},
		},
		KeySchema: []ddb.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: ddb.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: ddb.KeyTypeRange},
		},
		BillingMode: ddb.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	_, err = a.look.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.table), Item: key("seed", "seed")})
	require.NoError(t, err)

	a.sendURL, a.recvURL, a.delURL, a.visURL = a.Queue("send"), a.Queue("recv"), a.Queue("del"), a.Queue("vis")
	a.recvTimerURL, a.lateURL = a.Queue("recv-timer"), a.Queue("late")
	a.Send(a.recvURL, "seed")
	a.Send(a.recvTimerURL, timerBody(Tenant, "nap"))
	return a
}

// with answers copies of a's counted clients with opts added to their
// middleware stacks.
func (a *realAWS) with(opts ...func(*middleware.Stack) error) (*dynamodb.Client, *sqs.Client, *sfn.Client) {
	db := dynamodb.New(a.DB.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, opts...) })
	q := sqs.New(a.Q.Options(), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, opts...) })
	sf := sfn.New(a.SF.Options(), func(o *sfn.Options) { o.APIOptions = append(o.APIOptions, opts...) })
	return db, q, sf
}

// faulted answers a's clients with f's fault layer in them.
func (a *realAWS) faulted(f *Faults) (*dynamodb.Client, *sqs.Client, *sfn.Client) {
	return a.with(f.Middleware)
}

// runner answers an SQS client with f's duplicate deliveries in it, as the
// event source mapping's.
func (a *realAWS) runner(f *Faults) *sqs.Client {
	_, q, _ := a.with(f.Duplicates())
	return q
}

// timerBody is a ready-queue message for a tenant's job's step.
func timerBody(tenant, step string) string {
	return fmt.Sprintf(`{"tenant":%q,"job":"01TIMERJOB","step":%q}`, tenant, step)
}

func key(pk, sk string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk}}
}

// fresh answers a name not used before in this test.
func (a *realAWS) fresh(what string) string { return fmt.Sprintf("%s-%d", what, a.seq.Add(1)) }

// Queue creates a queue of the test's own and answers its URL. A queue
// named "recv..." hides nothing it hands out (VisibilityTimeout 0), so
// every receive gets the same messages back.
func (a *realAWS) Queue(name string) string {
	a.t.Helper()
	in := &sqs.CreateQueueInput{QueueName: aws.String(a.name + "-" + name)}
	if strings.HasPrefix(name, "recv") {
		in.Attributes = map[string]string{string(sqstypes.QueueAttributeNameVisibilityTimeout): "0"}
	}
	out, err := a.lookQ.CreateQueue(a.ctx, in)
	require.NoError(a.t, err)
	return aws.ToString(out.QueueUrl)
}

// Send puts a message on a queue, uncounted.
func (a *realAWS) Send(url, body string) {
	a.t.Helper()
	_, err := a.lookQ.SendMessage(a.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	require.NoError(a.t, err)
}

// Take receives from a queue until the message with body is in hand, and
// answers its receipt handle; everything it receives stays hidden for ten
// minutes. ok is false when the queue has no such visible message.
func (a *realAWS) Take(url, body string) (handle string, ok bool) {
	a.t.Helper()
	for {
		out, err := a.lookQ.ReceiveMessage(a.ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 600,
		})
		require.NoError(a.t, err)
		if len(out.Messages) == 0 {
			return "", false
		}
		for _, m := range out.Messages {
			if aws.ToString(m.Body) == body {
				return aws.ToString(m.ReceiptHandle), true
			}
		}
	}
}

// inQueue answers how many messages a queue holds, visible or in flight.
func (a *realAWS) inQueue(url string) int {
	a.t.Helper()
	out, err := a.lookQ.GetQueueAttributes(a.ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	require.NoError(a.t, err)
	n := 0
	for _, k := range []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(k)])
		require.NoError(a.t, err)
		n += v
	}
	return n
}

// hasItem answers whether the table holds an item, read consistently.
func (a *realAWS) hasItem(pk, sk string) bool {
	a.t.Helper()
	out, err := a.look.GetItem(a.ctx, &dynamodb.GetItemInput{TableName: aws.String(a.table), Key: key(pk, sk), ConsistentRead: aws.Bool(true)})
	require.NoError(a.t, err)
	return out.Item != nil
}

// items answers how many items the table holds.
func (a *realAWS) items() int {
	a.t.Helper()
	n := 0
	p := dynamodb.NewScanPaginator(a.look, &dynamodb.ScanInput{TableName: aws.String(a.table), Select: ddb.SelectCount})
	for p.HasMorePages() {
		out, err := p.NextPage(a.ctx)
		require.NoError(a.t, err)
		n += int(out.Count)
	}
	return n
}

// hasQueue answers whether a queue of that name exists.
func (a *realAWS) hasQueue(name string) bool {
	a.t.Helper()
	_, err := a.lookQ.GetQueueUrl(a.ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *sqstypes.QueueDoesNotExist
	if err != nil {
		require.ErrorAs(a.t, err, &missing)
		return false
	}
	return true
}

// op is one AWS call the engine makes.
type op struct {
	name  string // "DynamoDB.PutItem", as the fault layer names it
	write bool   // a DynamoDB write: one an ambiguous fault may hit
	// arm readies one call with fresh inputs (a new key, a new message in
	// flight) outside the fault layer, and answers the call and, for a
	// call whose effect moto can show, a check that it took effect.
	arm func() (call func() error, applied func() bool)
}

// hasExecution answers whether the test's state machine ran an execution
// of that name.
func (a *realAWS) hasExecution(name string) bool {
	a.t.Helper()
	out, err := a.lookSF.ListExecutions(a.ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String(a.machine), MaxResults: 1000})
	require.NoError(a.t, err)
	for _, e := range out.Executions {
		if aws.ToString(e.Name) == name {
			return true
		}
	}
	return false
}

// ops answers each AWS call of the engine once, in a fixed order, made
// through db, q and sf (a's clients with the fault layer in them).
func (a *realAWS) ops(db *dynamodb.Client, q *sqs.Client, sf *sfn.Client) []op {
	ctx, table := a.ctx, aws.String(a.table)
	return []op{
		{name: "DynamoDB.GetItem", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key("seed", "seed")})
				return err
			}, nil
		}},
		{name: "DynamoDB.PutItem", write: true, arm: func() (func() error, func() bool) {
			sk := a.fresh("put")
			return func() error {
					_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: key("put", sk), ConditionExpression: aws.String("attribute_not_exists(pk)")})
					return err
				},
				func() bool { return a.hasItem("put", sk) }
		}},
		{name: "DynamoDB.UpdateItem", write: true, arm: func() (func() error, func() bool) {
			sk := a.fresh("update")
			return func() error {
					_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
						TableName: table, Key: key("update", sk), UpdateExpression: aws.String("SET v = :v"),
						ExpressionAttributeValues: map[string]ddb.AttributeValue{":v": &ddb.AttributeValueMemberN{Value: "1"}},
					})
					return err
				},
				func() bool { return a.hasItem("update", sk) }
		}},
		{name: "DynamoDB.Query", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := db.Query(ctx, &dynamodb.QueryInput{
					TableName: table, KeyConditionExpression: aws.String("pk = :pk"),
					ExpressionAttributeValues: map[string]ddb.AttributeValue{":pk": &ddb.AttributeValueMemberS{Value: "seed"}},
				})
				return err
			}, nil
		}},
		{name: "DynamoDB.TransactWriteItems", write: true, arm: func() (func() error, func() bool) {
			sk := a.fresh("txn")
			return func() error {
					_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddb.TransactWriteItem{
						{Put: &ddb.Put{TableName: table, Item: key("txn", sk)}},
						{ConditionCheck: &ddb.ConditionCheck{TableName: table, Key: key("seed", "seed"), ConditionExpression: aws.String("attribute_exists(pk)")}},
					}})
					return err
				},
				func() bool { return a.hasItem("txn", sk) }
		}},
		{name: "DynamoDB.BatchGetItem", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddb.KeysAndAttributes{
					a.table: {Keys: []map[string]ddb.AttributeValue{key("seed", "seed")}},
				}})
				return err
			}, nil
		}},
		{name: "SQS.SendMessageBatch", arm: func() (func() error, func() bool) {
			body := a.fresh("sent")
			return func() error {
					_, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(a.sendURL), Entries: []sqstypes.SendMessageBatchRequestEntry{
						{Id: aws.String("m"), MessageBody: aws.String(body)},
					}})
					return err
				},
				func() bool { _, ok := a.Take(a.sendURL, body); return ok }
		}},
		{name: "SQS.ReceiveMessage", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(a.recvURL)})
				return err
			}, nil
		}},
		{name: "SQS.DeleteMessage", arm: func() (func() error, func() bool) {
			body := a.fresh("del")
			a.Send(a.delURL, body)
			handle, ok := a.Take(a.delURL, body)
			require.True(a.t, ok)
			held := a.inQueue(a.delURL)
			return func() error {
					_, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(a.delURL), ReceiptHandle: aws.String(handle)})
					return err
				},
				func() bool { return a.inQueue(a.delURL) == held-1 }
		}},
		{name: "SQS.ChangeMessageVisibility", arm: func() (func() error, func() bool) {
			body := a.fresh("vis")
			a.Send(a.visURL, body)
			handle, ok := a.Take(a.visURL, body)
			require.True(a.t, ok)
			return func() error {
					// Hand the message back at once: receivable again.
					_, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(a.visURL), ReceiptHandle: aws.String(handle), VisibilityTimeout: 0})
					return err
				},
				func() bool { _, ok := a.Take(a.visURL, body); return ok }
		}},
		{name: "SQS.GetQueueUrl", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(a.name + "-recv")})
				return err
			}, nil
		}},
		{name: "SQS.CreateQueue", arm: func() (func() error, func() bool) {
			name := a.name + "-" + a.fresh("new")
			return func() error {
					_, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
					return err
				},
				func() bool { return a.hasQueue(name) }
		}},
		{name: "SQS.GetQueueAttributes", arm: func() (func() error, func() bool) {
			return func() error {
				_, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(a.recvURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
				return err
			}, nil
		}},
		{name: "SFN.StartExecution", arm: func() (func() error, func() bool) {
			name := a.fresh("timer")
			return func() error {
					_, err := sf.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(a.machine), Name: aws.String(name), Input: aws.String(`{}`)})
					return err
				},
				func() bool { return a.hasExecution(name) }
		}},
	}
}

// outcome is what one call through the fault layer did.
type outcome struct {
	crash   *Crash
	err     error
	called  bool // the request reached moto
	applied bool // moto shows the call's effect (calls that have one)
	effect  bool // the call has an effect moto can show
}

// try arms an op, makes the call through the fault layer, recovers a
// crash, and reads back from moto what the call did.
func (a *realAWS) try(o op) outcome { return a.make(o, true) }

// fire makes the call as try does, without reading anything back.
func (a *realAWS) fire(o op) outcome { return a.make(o, false) }

func (a *realAWS) make(o op, check bool) (out outcome) {
	a.t.Helper()
	call, applied := o.arm()
	before := a.Reached.of(o.name)
	func() {
		defer func() {
			if p := recover(); p != nil {
				c, ok := p.(Crash)
				if !ok {
					panic(p)
				}
				out.crash = &c
			}
		}()
		out.err = call()
	}()
	out.called = a.Reached.of(o.name) > before
	if check && applied != nil {
		out.effect, out.applied = true, applied()
	}
	return out
}
