package eventbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/eventbus"
)

var seq atomic.Int64

// envelope is an EventBridge event as a rule's SQS target receives it.
type envelope struct {
	Source     string                `json:"source"`
	DetailType string                `json:"detail-type"`
	Time       time.Time             `json:"time"`
	Detail     engine.JobStateChange `json:"detail"`
}

// TestPublisherContract runs the engine's publisher contract against
// EventBridge on the emulator: each check gets a bus of its own with a
// rule that sends stepflow's events to a queue, as a system following
// jobs would set one up, and reads them back from the queue.
func TestPublisherContract(t *testing.T) {
	t.Parallel()
	enginetest.PublisherContract(t, func(t *testing.T) enginetest.PublisherFixture {
		ctx := t.Context()
		cfg, err := devstack.AWSConfig(ctx, stacktest.Endpoint(t), "us-east-1")
		require.NoError(t, err)
		eb, sq := eventbridge.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
		name := fmt.Sprintf("eventbus-contract-%d-%d", time.Now().UnixNano(), seq.Add(1))
		_, err = eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)})
		require.NoError(t, err)
		queueURL, queueARN := followJobs(t, eb, sq, name)
		return enginetest.PublisherFixture{
			Publisher: eventbus.New(eb, name),
			Received: func(t *testing.T, n int) []engine.JobStateChange {
				var got []engine.JobStateChange
				deadline := time.Now().Add(30 * time.Second)
				for len(got) < n {
					require.True(t, time.Now().Before(deadline), "%d of %d events arrived at %s", len(got), n, queueARN)
					out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
					require.NoError(t, err)
					for _, m := range out.Messages {
						var ev envelope
						require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &ev), aws.ToString(m.Body))
						require.Equal(t, eventbus.Source, ev.Source)
						require.Equal(t, eventbus.DetailType, ev.DetailType)
						got = append(got, ev.Detail)
					}
				}
				return got
			},
		}
	})
}

// followJobs makes what a system following jobs makes: a rule on the bus
// matching stepflow's Job State Change events, and a queue as its target.
// It answers the queue's URL and ARN.
func followJobs(t *testing.T, eb *eventbridge.Client, sq *sqs.Client, bus string) (string, string) {
	ctx := t.Context()
	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(bus)})
	require.NoError(t, err)
	attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	arn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	_, err = eb.PutRule(ctx, &eventbridge.PutRuleInput{
		Name: aws.String("follow-jobs"), EventBusName: aws.String(bus),
		EventPattern: aws.String(`{"source":["stepflow"],"detail-type":["Job State Change"]}`),
	})
	require.NoError(t, err)
	_, err = eb.PutTargets(ctx, &eventbridge.PutTargetsInput{
		Rule: aws.String("follow-jobs"), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(arn)}},
	})
	require.NoError(t, err)
	return aws.ToString(q.QueueUrl), arn
}

// A bus that does not exist is an error, not a silent drop.
func TestPublishToMissingBusFails(t *testing.T) {
	t.Parallel()
	cfg, err := devstack.AWSConfig(t.Context(), stacktest.Endpoint(t), "us-east-1")
	require.NoError(t, err)
	bus := eventbus.New(eventbridge.NewFromConfig(cfg), "no-such-bus")
	err = bus.Publish(t.Context(), []engine.JobStateChange{{Tenant: "t", JobID: "j", To: "QUEUED", Event: "job_created", Seq: 1}})
	require.ErrorContains(t, err, "no-such-bus")
}

// refusing answers PutEvents with the first refuse entries of each
// request refused, as EventBridge does when it throttles some of them;
// the emulator never refuses an entry.
type refusing struct {
	refuse int
	calls  [][]string // each request's details
}

func (r *refusing) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out := &eventbridge.PutEventsOutput{}
	var details []string
	for i, e := range in.Entries {
		details = append(details, aws.ToString(e.Detail))
		res := ebtypes.PutEventsResultEntry{EventId: aws.String(fmt.Sprint(i))}
		if i < r.refuse {
			res = ebtypes.PutEventsResultEntry{ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("slow down")}
			out.FailedEntryCount++
		}
		out.Entries = append(out.Entries, res)
	}
	r.calls = append(r.calls, details)
	return out, nil
}

// Entries EventBridge refuses are put once more, alone; still refused,
// they are the error.
func TestRefusedEntriesArePutAgainOnce(t *testing.T) {
	t.Parallel()
	changes := make([]engine.JobStateChange, 12)
	for i := range changes {
		changes[i] = engine.JobStateChange{Tenant: "t", JobID: fmt.Sprintf("j%02d", i), To: "QUEUED", Event: "job_created", Seq: 1}
	}
	api := &refusing{refuse: 1}
	err := eventbus.New(api, "bus").Publish(t.Context(), changes)
	require.ErrorContains(t, err, "ThrottlingException: slow down")
	// The first batch of ten, its refused entry again (refused again), and
	// nothing more: the error stops the publish.
	require.Len(t, api.calls, 2)
	require.Len(t, api.calls[0], 10)
	require.Equal(t, api.calls[0][:1], api.calls[1])

	api = &refusing{refuse: 0}
	require.NoError(t, eventbus.New(api, "bus").Publish(t.Context(), changes))
	require.Len(t, api.calls, 2) // ten, then two
	require.Len(t, api.calls[1], 2)
}
