package devstack_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// followJobs sets up what a system following jobs sets up: a rule on the
// stack's bus matching pattern, sending to a queue of its own. It answers
// the queue's URL.
func followJobs(t *testing.T, h *stacktest.Harness, rule, pattern string) string {
	t.Helper()
	ctx := t.Context()
	bus := h.Resources.EventBuses["StepflowBus"]
	require.NotEmpty(t, bus, "the stack has its bus")
	q, err := h.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(bus + "-" + rule)})
	require.NoError(t, err)
	attrs, err := h.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	_, err = h.EventBridge.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(rule), EventBusName: aws.String(bus), EventPattern: aws.String(pattern)})
	require.NoError(t, err)
	_, err = h.EventBridge.PutTargets(ctx, &eventbridge.PutTargetsInput{
		Rule: aws.String(rule), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}},
	})
	require.NoError(t, err)
	return aws.ToString(q.QueueUrl)
}

// receiveChanges reads Job State Change events from a rule's queue until
// n have come (failing after a while), then once more briefly, and
// answers all it read.
func receiveChanges(t *testing.T, h *stacktest.Harness, url string, n int) []engine.JobStateChange {
	t.Helper()
	var got []engine.JobStateChange
	deadline := time.Now().Add(time.Minute)
	for done := false; !done; {
		done = len(got) >= n // one receive past n: nothing more may come
		require.True(t, time.Now().Before(deadline), "%d of %d events came", len(got), n)
		out, err := h.SQS.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			var ev struct {
				Source     string                `json:"source"`
				DetailType string                `json:"detail-type"`
				Detail     engine.JobStateChange `json:"detail"`
			}
			require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &ev))
			require.Equal(t, "stepflow", ev.Source)
			require.Equal(t, "Job State Change", ev.DetailType)
			got = append(got, ev.Detail)
		}
	}
	return got
}

// A job's state changes reach the stack's bus, one event each, as the
// functions make them with JobStateEvents All (the template's default,
// Disabled, sends none): a rule on the bus is how another system follows
// jobs (the quality platform's outside sync). Each event matches the
// job's event log, and a FAILED one says which step failed and why.
func TestJobStateChangesReachTheBus(t *testing.T) {
	t.Parallel()
	meter := costmeter.New()
	h := stacktest.New(t, func(o *devstack.Options) {
		o.APIOptions = append(o.APIOptions, meter.Middleware)
		o.Env = map[string]string{"STEPFLOW_JOB_STATE_EVENTS": "All"}
	})
	every := followJobs(t, h, "all", `{"source":["stepflow"],"detail-type":["Job State Change"]}`)
	failed := followJobs(t, h, "failed", `{"source":["stepflow"],"detail":{"to":["FAILED"]}}`)

	ok := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hello", "action": map[string]any{"type": "pass"}}}})
	bad := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "boom", "action": map[string]any{"type": "fail", "class": "fatal", "message": "bad input"}},
		map[string]any{"id": "never", "action": map[string]any{"type": "pass"}},
	}})
	h.AwaitState(t, keyA, ok.ID, domain.JobCompleted)
	h.AwaitState(t, keyA, bad.ID, domain.JobFailed)

	byJob := map[string][]string{}
	for _, c := range receiveChanges(t, h, every, 6) {
		require.Equal(t, tenantA, c.Tenant)
		byJob[c.JobID] = append(byJob[c.JobID], fmt.Sprintf("%d:%s>%s", c.Seq, c.From, c.To))
		// The event is the job's log entry of that seq.
		ev := h.Events(t, keyA, c.JobID)[c.Seq-1]
		require.Equal(t, ev.Type, c.Event)
		require.True(t, ev.At.Equal(c.At), "%s vs %s", ev.At, c.At)
	}
	require.ElementsMatch(t, []string{"1:>QUEUED", "4:QUEUED>RUNNING", "6:RUNNING>COMPLETED"}, byJob[ok.ID])
	require.Len(t, byJob[bad.ID], 3)

	fails := receiveChanges(t, h, failed, 1)
	require.Len(t, fails, 1, "the FAILED rule sees the failure alone")
	require.Equal(t, bad.ID, fails[0].JobID)
	require.Equal(t, domain.JobRunning, fails[0].From)
	require.Equal(t, "boom", fails[0].Step)
	require.Equal(t, &domain.StepError{Class: domain.ClassFatal, Message: "bad input"}, fails[0].Error)

	// One event per job-level transition, and so what the bus costs: three
	// for a simple job.
	require.Equal(t, 6.0, meter.Units().Events)
}
