package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/queue"
)

// maxWorkerQueues keeps the bound check to a few CreateQueue calls.
const maxWorkerQueues = 3

// TestQueueContract runs the engine's queue contract against the SQS
// adapter on the emulator: each check gets queues of its own. Time is
// real: the suite polls for what it brings.
func TestQueueContract(t *testing.T) {
	t.Parallel()
	enginetest.QueueContract(t, func(t *testing.T) enginetest.QueueFixture {
		q, h, settings := newQueue(t)
		return enginetest.QueueFixture{
			Queue:           q,
			TakeReady:       readyTaker(h, settings.ReadyQueues),
			RealTime:        true,
			MaxWorkerQueues: maxWorkerQueues,
			Visibility:      30 * time.Second, // queue.New's default WorkerQueueVisible
		}
	})
}

// newQueue answers the SQS adapter over a stack of its own (no runner),
// opts added to its SQS client's middleware stack, with the stack and its
// settings.
func newQueue(t *testing.T, opts ...func(*middleware.Stack) error) (*queue.Queue, *stacktest.Harness, config.Settings) {
	t.Helper()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	settings, err := config.FromEnv(func(k string) string { return h.Resources.Env[k] })
	require.NoError(t, err)
	api := sqs.New(h.SQS.Options(), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, opts...) })
	q := queue.New(api, queue.Config{
		ReadyURLs: settings.ReadyQueues, DLQARN: settings.DLQARN,
		WorkerQueuePrefix: settings.WorkerQueuePrefix, MaxWorkerQueues: maxWorkerQueues,
	})
	return q, h, settings
}

// readyTaker receives from the ready queues, P0 first, as the event source
// mapping does for the execute function, and makes tokens as its wiring
// does.
func readyTaker(h *stacktest.Harness, urls [domain.MaxPriority + 1]string) func(t *testing.T, max int) []engine.Delivery {
	return func(t *testing.T, max int) []engine.Delivery {
		var out []engine.Delivery
		for _, url := range urls {
			if len(out) >= max {
				break
			}
			res, err := h.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), MaxNumberOfMessages: int32(min(max-len(out), 10)),
			})
			require.NoError(t, err)
			for _, m := range res.Messages {
				d := engine.Delivery{Token: queue.Token(url, aws.ToString(m.ReceiptHandle))}
				require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &d.Message))
				out = append(out, d)
			}
		}
		return out
	}
}
