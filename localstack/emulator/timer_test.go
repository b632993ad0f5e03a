package emulator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	ftypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	stypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/emulator"
)

// The timer state machine template.yaml declares, provisioned by bootstrap
// on the moto Start launched, waits until its input's instant and then
// sends the body to the queue: moto runs it (execute_state_machine) and its
// SQS task reaches moto (MOTO_PORT). A second start of the same execution
// starts nothing more.
func TestTimerStateMachineDelivers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sq, sf, stack := timerStack(ctx, t, "timer")
	timer := stack.Env["STEPFLOW_TIMER_STATE_MACHINE"]
	require.Equal(t, stack.StateMachines["TimerStateMachine"], timer)

	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("timer-target")})
	require.NoError(t, err)
	// A whole second, as the engine sends it: moto waits int(at - now)
	// seconds, so it may wake up to a second before a whole-second at.
	at := time.Now().UTC().Truncate(time.Second).Add(3 * time.Second)
	input, err := json.Marshal(map[string]string{
		"at": at.Format(time.RFC3339), "queue_url": aws.ToString(q.QueueUrl), "body": "wake up", "group": "tenant-a",
	})
	require.NoError(t, err)
	start := &sfn.StartExecutionInput{
		StateMachineArn: aws.String(timer),
		Name:            aws.String("t-" + ulid.Make().String()),
		Input:           aws.String(string(input)),
	}
	first, err := sf.StartExecution(ctx, start)
	require.NoError(t, err)

	// While it runs, the same name and input answer the same execution, as
	// on AWS for a STANDARD machine: no error, nothing started.
	again, err := sf.StartExecution(ctx, start)
	require.NoError(t, err)
	require.Equal(t, aws.ToString(first.ExecutionArn), aws.ToString(again.ExecutionArn))

	// Long polls until the message arrives, 30 s at most in all.
	pollCtx, stopPolling := context.WithTimeout(ctx, 30*time.Second)
	defer stopPolling()
	var msg stypes.Message
	for msg.Body == nil {
		require.NoError(t, pollCtx.Err(), "no message from the timer")
		out, err := sq.ReceiveMessage(pollCtx, &sqs.ReceiveMessageInput{
			QueueUrl:                    q.QueueUrl,
			WaitTimeSeconds:             5,
			MessageSystemAttributeNames: []stypes.MessageSystemAttributeName{stypes.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		if len(out.Messages) > 0 {
			msg = out.Messages[0]
		}
	}
	require.Equal(t, "wake up", aws.ToString(msg.Body))
	require.Equal(t, "tenant-a", msg.Attributes["MessageGroupId"])
	sentMillis, err := strconv.ParseInt(msg.Attributes["SentTimestamp"], 10, 64)
	require.NoError(t, err)
	sent := time.UnixMilli(sentMillis)
	require.False(t, sent.Before(at.Add(-time.Second)), "sent at %s, more than a second before %s", sent, at)
	_, err = sq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: msg.ReceiptHandle})
	require.NoError(t, err)

	status := waitFinished(ctx, t, sf, aws.ToString(first.ExecutionArn))
	require.Equal(t, ftypes.ExecutionStatusSucceeded, status)

	// Once it has finished, the same name is refused with
	// ExecutionAlreadyExists (as on AWS), which the engine's adapter counts
	// as success: the caller must not treat it as a failure.
	_, err = sf.StartExecution(ctx, start)
	var exists *ftypes.ExecutionAlreadyExists
	require.ErrorAs(t, err, &exists)

	// The timer sent once, for all three starts.
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: q.QueueUrl,
		AttributeNames: []stypes.QueueAttributeName{
			stypes.QueueAttributeNameApproximateNumberOfMessages,
			stypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			stypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	require.NoError(t, err)
	for k, v := range attrs.Attributes {
		require.Equal(t, "0", v, k)
	}
}

// timerStack starts a moto of the test's own and provisions template.yaml
// on it (the timer state machine among the rest).
func timerStack(ctx context.Context, t *testing.T, name string) (*sqs.Client, *sfn.Client, *bootstrap.Stack) {
	t.Helper()
	emu, err := emulator.Start(ctx, "127.0.0.1:0", nil)
	require.NoError(t, err)
	t.Cleanup(emu.Close)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(emu.URL)}
	sq, sf := sqs.NewFromConfig(cfg), sfn.NewFromConfig(cfg)
	tpl, err := bootstrap.Parse("../../template.yaml")
	require.NoError(t, err)
	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions")) // the state machine exists only then
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	stack, err := bootstrap.Provision(ctx, dynamodb.NewFromConfig(cfg), sq, sf, s3c, eventbridge.NewFromConfig(cfg), tpl, name)
	require.NoError(t, err)
	return sq, sf, stack
}

// waitFinished polls an execution until it is no longer RUNNING: the
// message arrives just before the execution records its end.
func waitFinished(ctx context.Context, t *testing.T, sf *sfn.Client, arn string) ftypes.ExecutionStatus {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := sf.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		require.NoError(t, err)
		if out.Status != ftypes.ExecutionStatusRunning {
			return out.Status
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s still RUNNING: %v", arn, ctx.Err())
		case <-tick.C:
		}
	}
}

// Many timers run at once, as they do in production: each start answers
// while the others wait (moto is patched for it, see motopatch.py), and
// each delivers once.
func TestTimersOverlap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sq, sf, stack := timerStack(ctx, t, "overlap")
	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("overlap-target")})
	require.NoError(t, err)

	const n = 5
	at := time.Now().UTC().Truncate(time.Second).Add(3 * time.Second)
	for i := range n {
		input, err := json.Marshal(map[string]string{"at": at.Format(time.RFC3339), "queue_url": aws.ToString(q.QueueUrl), "body": strconv.Itoa(i), "group": "g"})
		require.NoError(t, err)
		_, err = sf.StartExecution(ctx, &sfn.StartExecutionInput{
			StateMachineArn: aws.String(stack.Env["STEPFLOW_TIMER_STATE_MACHINE"]), Name: aws.String(fmt.Sprintf("overlap-%d", i)), Input: aws.String(string(input)),
		})
		require.NoError(t, err, "start %d while %d run", i, i)
	}
	got := map[string]bool{}
	pollCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	for len(got) < n {
		require.NoError(t, pollCtx.Err(), "delivered %v of %d", got, n)
		out, err := sq.ReceiveMessage(pollCtx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5, MaxNumberOfMessages: 10})
		require.NoError(t, err)
		for _, m := range out.Messages {
			require.False(t, got[aws.ToString(m.Body)], "delivered twice: %s", aws.ToString(m.Body))
			got[aws.ToString(m.Body)] = true
			_, err = sq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
}
