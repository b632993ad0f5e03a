package queue_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/queue"
)

// The sweep's reading of the queues: each of the stack's own queues by
// state, and the worker queue lanes, listed once and read up to the bound,
// first by name. One request a queue read and one listing.
func TestQueueDepthsReadsEachQueueOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	settings, err := config.FromEnv(func(k string) string { return h.Resources.Env[k] })
	require.NoError(t, err)
	var attrs, lists atomic.Int32
	count := func(n *atomic.Int32) func(context.Context, any, func() (any, error)) (any, error) {
		return func(_ context.Context, _ any, call func() (any, error)) (any, error) {
			n.Add(1)
			return call()
		}
	}
	api := sqs.New(h.SQS.Options(), func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, awsfault.Around("SQS", "GetQueueAttributes", count(&attrs)), awsfault.Around("SQS", "ListQueues", count(&lists)))
	})
	q := queue.New(api, queue.Config{ReadyURLs: settings.ReadyQueues, DLQARN: settings.DLQARN, DLQURL: settings.DLQURL, WorkerQueuePrefix: settings.WorkerQueuePrefix})

	send := func(url string, delay int32) {
		_, err := h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("{}"), DelaySeconds: delay})
		require.NoError(t, err)
	}
	send(settings.ReadyQueues[0], 0)
	got, err := h.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(settings.ReadyQueues[0]), VisibilityTimeout: 600})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1, "P0's message is in flight")
	send(settings.ReadyQueues[1], 0)
	send(settings.ReadyQueues[2], 600)
	send(settings.DLQURL, 0)
	send(settings.DLQURL, 0)
	require.NoError(t, q.EnsureWorkerQueues(ctx, "t1", []string{"c", "a", "b"}))
	a, err := q.WorkerQueueURL(ctx, "t1", "a")
	require.NoError(t, err)
	send(a, 0)
	attrs.Store(0)
	lists.Store(0)

	r, err := q.QueueDepths(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []engine.QueueDepth{
		{Queue: "P0", InFlight: 1}, {Queue: "P1", Visible: 1}, {Queue: "P2", Delayed: 1}, {Queue: "DLQ", Visible: 2},
	}, r.Stack)
	require.Equal(t, 3, r.WorkerLanes)
	require.Equal(t, []engine.QueueDepth{
		{Queue: q.WorkerQueueName("t1", "a"), Visible: 1}, {Queue: q.WorkerQueueName("t1", "b")},
	}, r.Workers, "the first two lanes by name")
	require.Equal(t, int32(4+2), attrs.Load(), "a GetQueueAttributes a queue read")
	require.Equal(t, int32(1), lists.Load(), "one listing of the worker queues")

	none, err := q.QueueDepths(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, none.Workers)
	require.Equal(t, int32(1), lists.Load(), "no bound: no listing")
}
