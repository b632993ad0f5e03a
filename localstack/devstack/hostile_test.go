package devstack_test

// The hostile-tenant suite: probes a tenant could make against another,
// and the poison it could submit, each kept as a regression test over HTTP
// on the emulator.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
	"github.com/stepflow/stepflow/shared/wire"
)

func withKeys(keys map[string]string) stacktest.Option {
	return func(o *devstack.Options) {
		for k, v := range keys {
			o.APIKeys[k] = v
		}
	}
}

func withEnv(k, v string) stacktest.Option {
	return func(o *devstack.Options) {
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env[k] = v
	}
}

func workerStep(queue string) map[string]any {
	return map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": queue}}}}
}

// workerQueueCount counts the stack's worker queues in SQS.
func workerQueueCount(t *testing.T, h *stacktest.Harness) int {
	t.Helper()
	out, err := h.SQS.ListQueues(context.Background(), &sqs.ListQueuesInput{
		QueueNamePrefix: aws.String(h.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]), MaxResults: aws.Int32(1000),
	})
	require.NoError(t, err)
	return len(out.QueueUrls)
}

// Tenant "a" with queue "x-q1" and tenant "a-x" with queue "q1" once shared
// one SQS queue: a's claims took a-x's messages and deleted them as stale.
func TestTenantsWithCollidingQueueNamesNeverShareAQueue(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withKeys(map[string]string{"key-short": "a", "key-long": "a-x"}))

	victim := h.Submit(t, "key-long", workerStep("q1"))
	// The attacker claims its own queue whose old name was the victim's, many
	// times, and never sees the victim's work.
	for range 5 {
		require.Empty(t, claim(t, h, "key-short", "x-q1", "attacker", 10, 0))
	}
	own := h.Submit(t, "key-short", workerStep("x-q1"))
	require.Equal(t, 2, workerQueueCount(t, h), "one queue per (tenant, queue)")

	// Each claims its own job at once: no message was deleted, nobody waits
	// for the sweep.
	got := claim(t, h, "key-long", "q1", "victim", 10, 0)
	require.Len(t, got, 1)
	require.Equal(t, victim.ID, got[0].JobID)
	got2 := claim(t, h, "key-short", "x-q1", "attacker", 10, 0)
	require.Len(t, got2, 1)
	require.Equal(t, own.ID, got2[0].JobID)

	for _, c := range []struct {
		key string
		l   wire.ClaimedLease
	}{{"key-long", got[0]}, {"key-short", got2[0]}} {
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+c.l.LeaseID+"/complete", c.key, map[string]any{"output": 1}, nil)
	}
	h.AwaitState(t, "key-long", victim.ID, domain.JobCompleted)
	h.AwaitState(t, "key-short", own.ID, domain.JobCompleted)
}

func TestWorkerQueueNamesAreUniquePerTenantAndQueue(t *testing.T) {
	t.Parallel()
	q := queue.New(nil, queue.Config{WorkerQueuePrefix: "s-w-"})
	names := map[string]string{}
	for _, tenant := range []string{"a", "a-x", "a-x-q", "x", "1-a", strings.Repeat("t", 40), strings.Repeat("t", 39)} {
		for _, qn := range []string{"q1", "x-q1", "q", "x", "a-x-q1", strings.Repeat("q", 40), strings.Repeat("q", 39) + "-"} {
			n := q.WorkerQueueName(tenant, qn)
			require.LessOrEqual(t, len(n), 80, n)
			prev, dup := names[n]
			require.False(t, dup, "%s/%s and %s share the name %s", tenant, qn, prev, n)
			names[n] = tenant + "/" + qn
		}
	}
}

func TestClaimsOnUnknownQueuesCreateNoQueue(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	before := workerQueueCount(t, h)
	for i := range 50 {
		require.Empty(t, claim(t, h, keyA, fmt.Sprintf("nope-%d", i), "prober", 1, 0))
	}
	require.Equal(t, before, workerQueueCount(t, h))
}

func TestWorkerQueuesPerTenantAreBounded(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withEnv("STEPFLOW_MAX_WORKER_QUEUES", "2"))
	h.Submit(t, keyA, workerStep("one"))
	h.Submit(t, keyA, workerStep("two"))
	h.Submit(t, keyA, workerStep("one")) // an existing queue is no new one

	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, workerStep("three"))
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"field":"steps[0].action.queue"`)
	require.Contains(t, string(body), "STEPFLOW_MAX_WORKER_QUEUES")
	var list struct{ Jobs []json.RawMessage }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", keyA, nil, &list)
	require.Len(t, list.Jobs, 3, "the refused job was not written")

	// The bound is per tenant.
	h.Submit(t, stacktest.KeyB, workerStep("three"))
}

func TestOnlyListedTenantsMaySubmitP0(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withEnv("STEPFLOW_P0_TENANTS", stacktest.TenantA))
	p0 := map[string]any{"priority": 0, "steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}
	h.Submit(t, keyA, p0)
	status, body := h.Call(t, http.MethodPost, "/v1/jobs", stacktest.KeyB, p0)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"field":"priority"`)
	p0["priority"] = 1
	h.Submit(t, stacktest.KeyB, p0)
}

// dueShardOf is the store's due-index shard of a job id (fnv-32a mod
// store.DueShards), so the test can crowd one shard.
func dueShardOf(id string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32() % store.DueShards
}

// Jobs whose stored data cannot be read once made every sweep fail on them
// and, filling the first page of their due shard, kept everyone else's lost
// dispatches from ever being sent again.
func TestSweepQuarantinesUnreadableJobsAndServesEveryoneElse(t *testing.T) {
	t.Parallel()
	faults := &stacktest.FaultSQS{}
	h := stacktest.New(t, stacktest.WithFaultSQS(faults))
	ctx := context.Background()

	// Tenant b's job is written but its dispatch is lost: the send before
	// its write fails (so it is written in the due index), and the one
	// after it.
	faults.FailNextSends(2, "a")
	good := h.Submit(t, stacktest.KeyB, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})

	// More unreadable jobs of tenant a than a sweep takes of a tenant, in
	// the good job's shard and due before it.
	table := h.Resources.Env["STEPFLOW_TABLE"]
	shard := dueShardOf(good.ID)
	early := h.Clock.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04:05.000Z")
	bad := 0
	for bad < engine.SweepTenantQuota+10 {
		id := ulid.Make().String()
		if dueShardOf(id) != shard {
			continue
		}
		pk, sk := store.ItemKey(tenantA, id)
		_, err := h.DynamoDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk},
			"state": &ddb.AttributeValueMemberS{Value: "RUNNING"}, "version": &ddb.AttributeValueMemberN{Value: "3"},
			"doc":    &ddb.AttributeValueMemberB{Value: []byte("not a compressed job")},
			"gsi2pk": &ddb.AttributeValueMemberS{Value: fmt.Sprintf("D#%d", shard)}, "gsi2sk": &ddb.AttributeValueMemberS{Value: early},
		}})
		require.NoError(t, err)
		bad++
	}

	h.Clock.Advance(domain.DispatchGrace + time.Second)
	first := h.Sweep(t)
	require.Equal(t, engine.SweepTenantQuota, first.Quarantined, "%+v", first)
	require.Equal(t, 1, first.Redispatched, "tenant b's lost dispatch is sent again, in its turn")
	second := h.Sweep(t)
	require.Equal(t, 10, second.Quarantined, "%+v", second)
	h.AwaitState(t, stacktest.KeyB, good.ID, domain.JobCompleted)

	third := h.Sweep(t)
	require.Zero(t, third.Quarantined, "a quarantined job is not met again")
	require.Zero(t, third.Errors)
}

// The built-in executor dies mid-step (kill -9): its message stays
// invisible for the ready queue's visibility timeout (six times the
// function's timeout), but the step's lease is its own time bound plus a
// margin, after which the sweep reclaims it and sends a new message.
func TestBuiltinStepOfADeadExecutorIsReclaimedAfterItsOwnBound(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	ctx := context.Background()
	j, _, err := h.Engine.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"s","action":{"type":"pass"},"timeout_seconds":20}]}`), "")
	require.NoError(t, err)
	readyURL := h.Resources.QueueURLs["ReadyQueueP1"]
	recv := func(wait int32) []sqstypes.Message {
		out, err := h.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &readyURL, MaxNumberOfMessages: 10, WaitTimeSeconds: wait})
		require.NoError(t, err)
		return out.Messages
	}

	// The executor takes the message and the lease, then dies.
	msgs := recv(5)
	require.Len(t, msgs, 1)
	var m engine.Message
	require.NoError(t, json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &m))
	dead, err := h.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	n := len(dead.Events)
	lease, err := dead.Lease("s", domain.LeaseRequest{Nonce: "dead", Duration: 20*time.Second + engine.LeaseMargin}, h.Clock.Now())
	require.NoError(t, err)
	require.NoError(t, h.Store.Save(ctx, dead, n))

	// Not before the lease ends...
	h.Clock.Advance(20*time.Second + engine.LeaseMargin - time.Second)
	require.Zero(t, h.Sweep(t).Reclaimed)
	// ...and at once after it, with no grace on top.
	h.Clock.Advance(time.Second)
	rep := h.Sweep(t)
	require.Equal(t, 1, rep.Reclaimed, "%+v", rep)

	// The new message is there while the dead one is still invisible.
	fresh := recv(5)
	require.Len(t, fresh, 1)
	require.NotEqual(t, aws.ToString(msgs[0].MessageId), aws.ToString(fresh[0].MessageId))
	resp, err := handlers.Execute(h.Engine, h.ReadyTokens(), h.Engine.Log())(ctx, events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: aws.ToString(fresh[0].MessageId), ReceiptHandle: aws.ToString(fresh[0].ReceiptHandle), Body: aws.ToString(fresh[0].Body),
	}}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	done, err := h.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, done.State)
	require.Equal(t, []domain.AttemptState{domain.AttemptTimeout, domain.AttemptSucceeded},
		[]domain.AttemptState{done.Steps[0].Attempts[0].State, done.Steps[0].Attempts[1].State})
	require.Equal(t, lease.ID, done.Steps[0].Attempts[0].Lease)

	// The dead executor's message, when it comes back, finds a finished job
	// and is dropped.
	res, err := h.Engine.Execute(ctx, engine.Delivery{Message: m, Token: queue.Token(readyURL, aws.ToString(msgs[0].ReceiptHandle))})
	require.NoError(t, err)
	require.Equal(t, engine.Stale, res)
	require.NoError(t, domain.CheckReplay(done))
}
