package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/shared/queue"
)

// A worker step whose message SQS dead-lettered waits for ever; dlq lists
// the message without taking it, and redrive sends it back to its worker
// queue, where a claim finds it. A message that names no job stays.
func TestDLQListAndRedrive(t *testing.T) {
	t.Parallel()
	b := setupOnEmulator(t)
	state := b.localState(t)
	ctx := b.ctx
	j := b.submitJSON(t, "--action", "worker", "--param", "queue=w")

	// Dead-letter the step's message as SQS does after maxReceiveCount.
	q := queue.New(b.h.SQS, queue.Config{WorkerQueuePrefix: b.h.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]})
	wq, err := q.WorkerQueueURL(ctx, stacktest.TenantA, "w")
	require.NoError(t, err)
	dlq := b.h.Resources.QueueURLs["DeadLetterQueue"]
	require.NotEmpty(t, dlq)
	var got *sqs.ReceiveMessageOutput
	require.Eventually(t, func() bool {
		got, err = b.h.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &wq, WaitTimeSeconds: 1})
		require.NoError(t, err)
		return len(got.Messages) == 1
	}, 30*time.Second, 10*time.Millisecond)
	m := got.Messages[0]
	_, err = b.h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &dlq, MessageBody: m.Body})
	require.NoError(t, err)
	_, err = b.h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &wq, ReceiptHandle: m.ReceiptHandle})
	require.NoError(t, err)
	_, err = b.h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &dlq, MessageBody: aws.String("not ours")})
	require.NoError(t, err)

	for range 2 { // a listing leaves the messages where they are
		r := b.run(t, "dlq", "list", "--local-state", state, "-o", "json")
		require.Equal(t, 0, r.code, r.stderr)
		var msgs []dlqMessage
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &msgs))
		require.Len(t, msgs, 2)
		jobs := map[string]string{}
		for _, m := range msgs {
			jobs[m.Job] = m.Step
		}
		require.Equal(t, map[string]string{j.ID: "worker", "": ""}, jobs)
	}

	r := b.run(t, "dlq", "redrive", "--local-state", state)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "sent back 1 message(s)")
	require.Contains(t, r.stdout, "not a stepflow message")

	leases, err := b.c.Claim(ctx, client.ClaimRequest{Queue: "w", WaitSeconds: 10})
	require.NoError(t, err)
	require.Len(t, leases, 1, "the redriven message reached its worker queue")
	require.Equal(t, j.ID, leases[0].JobID)
	_, err = b.c.Complete(ctx, leases[0].LeaseID, "ok")
	require.NoError(t, err)

	r = b.run(t, "dlq", "list", "--local-state", state, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var left []dlqMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &left))
	require.Len(t, left, 1, "what could not be placed stays")
	require.Equal(t, "not ours", left[0].Body)
}
