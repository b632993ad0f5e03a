package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
)

func dynamoFrom(cfg aws.Config) *dynamodb.Client { return dynamodb.NewFromConfig(cfg) }
func sqsFrom(cfg aws.Config) *sqs.Client         { return sqs.NewFromConfig(cfg) }

// inFlight answers the messages visible or in flight on the ready queues.
func inFlight(ctx context.Context, sq *sqs.Client, st *devstack.Stack) (int, error) {
	total := 0
	for _, id := range []string{"ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2"} {
		out, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(st.Resources.QueueURLs[id]), AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		}})
		if err != nil {
			return 0, err
		}
		for _, v := range out.Attributes {
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total, nil
}

// runFloor is a bare loop of a durable leased job on the same emulator:
// one conditional create, one send, a batched receive, one conditional claim,
// one conditional completion, a batched delete. No engine, no HTTP. It is
// the throughput the emulator allows such work; its cost is not the floor
// (costmeter.Floor is).
func runFloor(ctx context.Context, st *devstack.Stack, n, producers int) (result, error) {
	r := result{Name: "floor (bare loop, measured)", Jobs: n, StepsPerJob: 1}
	cfg, err := devstack.AWSConfig(ctx, st.Endpoint, "us-east-1")
	if err != nil {
		return r, err
	}
	m := costmeter.New()
	meter := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, m.Middleware) })
	raw, sq := dynamoFrom(cfg), sqsFrom(cfg)
	table := st.Name + "-floor"
	if _, err := raw.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &table, BillingMode: ddb.BillingModePayPerRequest,
		AttributeDefinitions: []ddb.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddb.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: ddb.ScalarAttributeTypeS}},
		KeySchema:            []ddb.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddb.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: ddb.KeyTypeRange}},
	}); err != nil {
		return r, fmt.Errorf("floor table: %w", err)
	}
	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(st.Name + "-floor"), Attributes: map[string]string{"VisibilityTimeout": "60"}})
	if err != nil {
		return r, fmt.Errorf("floor queue: %w", err)
	}
	before, unitsBefore := st.Emulator.Counts(), m.Units()
	var done atomic.Int64
	var batches atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) { firstErr.CompareAndSwap(nil, err) }
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		for i := range n {
			next <- i
		}
		close(next)
	}()
	for range producers {
		wg.Go(func() {
			for i := range next {
				id := fmt.Sprintf("job-%06d", i)
				_, err := meter.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddb.AttributeValue{
					"pk": &ddb.AttributeValueMemberS{Value: id}, "sk": &ddb.AttributeValueMemberS{Value: "J"}, "state": &ddb.AttributeValueMemberS{Value: "queued"},
				}, ConditionExpression: aws.String("attribute_not_exists(pk)")})
				if err == nil {
					_, err = sq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(id)})
				}
				if err != nil {
					fail(err)
				}
			}
		})
	}
	var consumers sync.WaitGroup
	for range 10 {
		consumers.Go(func() {
			for done.Load() < int64(n) && firstErr.Load() == nil && time.Since(start) < 5*time.Minute {
				out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					fail(err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				batches.Add(1)
				// Each message of a batch is claimed and completed on its own
				// goroutine, as the engine's execute handler does.
				del := make([]sqstypes.DeleteMessageBatchRequestEntry, len(out.Messages))
				var each sync.WaitGroup
				for i, m := range out.Messages {
					each.Go(func() {
						k := map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: aws.ToString(m.Body)}, "sk": &ddb.AttributeValueMemberS{Value: "J"}}
						lease := strconv.Itoa(i) + aws.ToString(m.MessageId)
						_, err := meter.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: k,
							UpdateExpression: aws.String("SET #s = :r, lease = :l"), ConditionExpression: aws.String("#s = :q"),
							ExpressionAttributeNames:            map[string]string{"#s": "state"},
							ExpressionAttributeValues:           map[string]ddb.AttributeValue{":r": &ddb.AttributeValueMemberS{Value: "running"}, ":q": &ddb.AttributeValueMemberS{Value: "queued"}, ":l": &ddb.AttributeValueMemberS{Value: lease}},
							ReturnValuesOnConditionCheckFailure: ddb.ReturnValuesOnConditionCheckFailureAllOld})
						ours, err := appliedBefore(err, "running", lease)
						if err == nil && ours {
							_, err = meter.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: k,
								UpdateExpression: aws.String("SET #s = :d REMOVE lease"), ConditionExpression: aws.String("#s = :r AND lease = :l"),
								ExpressionAttributeNames:            map[string]string{"#s": "state"},
								ExpressionAttributeValues:           map[string]ddb.AttributeValue{":r": &ddb.AttributeValueMemberS{Value: "running"}, ":d": &ddb.AttributeValueMemberS{Value: "done"}, ":l": &ddb.AttributeValueMemberS{Value: lease}},
								ReturnValuesOnConditionCheckFailure: ddb.ReturnValuesOnConditionCheckFailureAllOld})
							ours, err = appliedBefore(err, "done", "")
						}
						if err != nil {
							fail(err)
							return
						}
						if ours {
							done.Add(1)
						}
						del[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
					})
				}
				each.Wait()
				if firstErr.Load() != nil {
					return
				}
				if _, err := sq.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: del}); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	consumers.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return r, err
	}
	if done.Load() != int64(n) {
		return r, fmt.Errorf("floor finished %d of %d jobs", done.Load(), n)
	}
	r.Wall = time.Since(start)
	r.Requests = diff(st.Emulator.Counts(), before)
	delete(r.Requests, "dynamodb.CreateTable")
	u := m.Units()
	r.Units = costmeter.Units{WRU: u.WRU - unitsBefore.WRU, RRU: u.RRU - unitsBefore.RRU}
	// As Lambda functions, the floor would be invoked once per submit and
	// once per non-empty batch.
	r.Lambda = map[string]costmeter.LambdaUse{"enqueue": {Requests: float64(n)}, "execute": {Requests: float64(batches.Load())}}
	r.Attempts = n
	return r, nil
}

// appliedBefore reads a conditional update's answer, as the engine reads
// its own: true when it applied, or when it was refused because the item
// already shows it (an SDK retry of an update whose first answer was
// lost: state, with lease "" for none); false, no error, when another
// consumer's update stands (a message delivered twice).
func appliedBefore(err error, state, lease string) (bool, error) {
	var ccf *ddb.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return err == nil, err
	}
	s, _ := ccf.Item["state"].(*ddb.AttributeValueMemberS)
	l, _ := ccf.Item["lease"].(*ddb.AttributeValueMemberS)
	mine := s != nil && s.Value == state && (lease == "" && l == nil || l != nil && l.Value == lease)
	return mine, nil
}
