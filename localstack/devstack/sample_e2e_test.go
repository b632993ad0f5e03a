package devstack_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// The sample events act on the sample job make dev keeps: the SQS sample
// names its step, and the execute handler runs it to the end.
func TestSampleEventsActOnTheSampleJob(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../events/execute-sqs.json")
	require.NoError(t, err)
	var ev events.SQSEvent
	require.NoError(t, json.Unmarshal(raw, &ev))
	var m engine.Message
	require.NoError(t, json.Unmarshal([]byte(ev.Records[0].Body), &m))
	require.Equal(t, engine.Message{Tenant: devstack.SampleTenant, Job: devstack.SampleJobID, Step: devstack.SampleStep}, m)

	raw, err = os.ReadFile("../../events/enqueue-get.json")
	require.NoError(t, err)
	var get events.APIGatewayV2HTTPRequest
	require.NoError(t, json.Unmarshal(raw, &get))
	require.Equal(t, devstack.SampleJobID, get.PathParameters["id"])

	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true; o.SampleJob = true })
	ctx := context.Background()
	j, err := h.Engine.Get(ctx, devstack.SampleTenant, devstack.SampleJobID)
	require.NoError(t, err)
	require.Equal(t, domain.JobQueued, j.State)
	created, err := h.SeedSampleJob(ctx)
	require.NoError(t, err)
	require.False(t, created, "made once")

	res, err := h.Handlers.SQS["ExecuteFunction"](ctx, ev)
	require.NoError(t, err)
	require.Empty(t, res.BatchItemFailures)
	j, err = h.Engine.Get(ctx, devstack.SampleTenant, devstack.SampleJobID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, j.State)
	require.JSONEq(t, `{"hello":"world"}`, string(j.Steps[0].Output))
	require.NoError(t, domain.CheckReplay(j))

	// Sent again (a redelivery): the step is done, nothing changes.
	res, err = h.Handlers.SQS["ExecuteFunction"](ctx, ev)
	require.NoError(t, err)
	require.Empty(t, res.BatchItemFailures)
	again, err := h.Engine.Get(ctx, devstack.SampleTenant, devstack.SampleJobID)
	require.NoError(t, err)
	require.Equal(t, j.Version, again.Version)
}
