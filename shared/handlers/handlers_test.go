package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
)

// awsEvents holds a real SQS batch as AWS sends it (from aws-lambda-go's
// events/testdata, Apache License 2.0); projectEvents the project's own
// samples for `sam local invoke` and `make invoke`. Both are in the
// repository: a missing file fails the test.
const (
	awsEvents     = "testdata/aws-events"
	projectEvents = "../../events"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// noRunner builds a stack where nothing polls the queues: the test is the
// event source mapping.
func noRunner(o *devstack.Options) { o.NoRunner = true }

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err, "read fixture %s", path)
	require.NoError(t, json.Unmarshal(raw, v), "decode %s", path)
}

func record(t *testing.T, messageID string, m engine.Message) events.SQSMessage {
	t.Helper()
	body, err := json.Marshal(m)
	require.NoError(t, err)
	return events.SQSMessage{
		MessageId: messageID, ReceiptHandle: "receipt-" + messageID, Body: string(body),
		EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:ready", AWSRegion: "us-east-1",
		Attributes: map[string]string{"ApproximateReceiveCount": "1"},
	}
}

func submit(t *testing.T, h *stacktest.Harness, spec string) *domain.Job {
	t.Helper()
	j, created, err := h.Engine.Submit(context.Background(), stacktest.TenantA, []byte(spec), "")
	require.NoError(t, err)
	require.True(t, created)
	return j
}

func get(t *testing.T, h *stacktest.Harness, id string) *domain.Job {
	t.Helper()
	j, err := h.Engine.Get(context.Background(), stacktest.TenantA, id)
	require.NoError(t, err)
	return j
}

// TestExecuteDropsForeignMessages: the real SQS sample, the project's own
// sample (its job does not exist here) and other bodies that name no
// stepflow step are dropped, not redelivered forever.
func TestExecuteDropsForeignMessages(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, noRunner)
	exec := handlers.Execute(h.Engine, h.ReadyTokens(), quiet)
	ctx := context.Background()

	for _, tc := range []struct{ name, path string }{
		{"aws sample", awsEvents + "/sqs-event.json"},
		{"project sample", projectEvents + "/execute-sqs.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ev events.SQSEvent
			readJSON(t, tc.path, &ev)
			require.NotEmpty(t, ev.Records)
			resp, err := exec(ctx, ev)
			require.NoError(t, err)
			require.Empty(t, resp.BatchItemFailures)
		})
	}

	t.Run("odd bodies", func(t *testing.T) {
		t.Parallel()
		var ev events.SQSEvent
		for i, body := range []string{
			"", "null", "[]", "{}", "{not json", `{"tenant":"tenant-a"}`,
			`{"tenant":"tenant-a","job":"01JEXAMPLE0000000000000000"}`,
			`{"tenant":"tenant-a","job":"01JEXAMPLE0000000000000000","step":"nope"}`,
			`{"tenant":"no-such-tenant","job":"01JEXAMPLE0000000000000000","step":"a"}`,
		} {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: string(rune('a' + i)), Body: body})
		}
		resp, err := exec(ctx, ev)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	})

	t.Run("empty batch", func(t *testing.T) {
		t.Parallel()
		resp, err := exec(ctx, events.SQSEvent{})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	})
}

// TestExecuteRunsSteps: a record naming a runnable step runs it; the same
// record delivered again finds nothing left to do.
func TestExecuteRunsSteps(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, noRunner)
	exec := handlers.Execute(h.Engine, h.ReadyTokens(), quiet)
	ctx := context.Background()

	one := submit(t, h, `{"steps":[{"id":"only","action":{"type":"pass"}}],"payload":{"x":1}}`)
	two := submit(t, h, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobQueued, one.State)

	resp, err := exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record(t, "m1", engine.Message{Tenant: stacktest.TenantA, Job: one.ID, Step: "only"}),
		record(t, "m2", engine.Message{Tenant: stacktest.TenantA, Job: two.ID, Step: "a"}),
	}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)

	j := get(t, h, one.ID)
	require.Equal(t, domain.JobCompleted, j.State)
	require.Equal(t, domain.StepSucceeded, j.Steps[0].State)
	require.JSONEq(t, `{"x":1}`, string(j.Steps[0].Output), "pass hands its input on")
	require.NoError(t, domain.CheckReplay(j))

	j = get(t, h, two.ID)
	require.Equal(t, domain.JobCompleted, j.State, "b ran after a in the same invocation")
	require.NoError(t, domain.CheckReplay(j))

	// A duplicate delivery of a finished step changes nothing.
	events1, events2 := len(get(t, h, one.ID).Events), len(j.Events)
	resp, err = exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record(t, "m1-again", engine.Message{Tenant: stacktest.TenantA, Job: one.ID, Step: "only"}),
		record(t, "m3", engine.Message{Tenant: stacktest.TenantA, Job: two.ID, Step: "b"}),
	}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Len(t, get(t, h, one.ID).Events, events1)
	require.Len(t, get(t, h, two.ID).Events, events2)

	// Another tenant's name on the message finds no job: dropped.
	resp, err = exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record(t, "m4", engine.Message{Tenant: stacktest.TenantB, Job: one.ID, Step: "only"}),
	}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
}

// countCalls counts the DynamoDB calls that answered, by operation, and
// the writes refused by their condition.
type countCalls struct {
	mu      sync.Mutex
	ops     map[string]int
	refused atomic.Int64
}

func (c *countCalls) middleware(st *middleware.Stack) error {
	return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("countCalls", func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleDeserialize(ctx, in)
		var ccf *ddb.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			c.refused.Add(1)
		}
		if service, op := awsfault.Call(ctx); service == "DynamoDB" && err == nil {
			c.mu.Lock()
			c.ops[op]++
			c.mu.Unlock()
		}
		return out, md, err
	}), middleware.Before)
}

func (c *countCalls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = map[string]int{}
	return ops
}

// counted is a stack nothing polls, its DynamoDB calls counted, and the
// execute function's handler over it.
func counted(t *testing.T) (*stacktest.Harness, *countCalls, func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) {
	t.Helper()
	calls := &countCalls{ops: map[string]int{}}
	h := stacktest.New(t, noRunner, stacktest.WithAPIOptions(calls.middleware))
	return h, calls, handlers.Execute(h.Engine, h.ReadyTokens(), quiet)
}

// fanOut submits a job of n pass branches and their fan-in, and answers
// a record of each branch's message, received receives times.
func fanOut(t *testing.T, h *stacktest.Harness, n, receives int) (*domain.Job, []events.SQSMessage) {
	t.Helper()
	var steps, ids []string
	for i := range n {
		ids = append(ids, `"b`+strconv.Itoa(i)+`"`)
		steps = append(steps, `{"id":"b`+strconv.Itoa(i)+`","action":{"type":"pass"}}`)
	}
	steps = append(steps, `{"id":"join","depends_on":[`+strings.Join(ids, ",")+`],"action":{"type":"pass"}}`)
	j := submit(t, h, `{"steps":[`+strings.Join(steps, ",")+`]}`)
	var recs []events.SQSMessage
	for i := range n {
		r := record(t, j.ID+"-m"+strconv.Itoa(i), engine.Message{Tenant: stacktest.TenantA, Job: j.ID, Step: "b" + strconv.Itoa(i)})
		r.Attributes["ApproximateReceiveCount"] = strconv.Itoa(receives)
		recs = append(recs, r)
	}
	return j, recs
}

// A batch holding the first deliveries of one job's branches (a
// fan-out's, sent together) leases and records them in one write, where
// each alone is one; the fan-in they make runnable is sent.
func TestExecuteRunsABatchOfOneJobsBranchesInOneWrite(t *testing.T) {
	t.Parallel()
	h, calls, exec := counted(t)
	j, recs := fanOut(t, h, 10, 1)
	calls.take()
	resp, err := exec(context.Background(), events.SQSEvent{Records: recs})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	ops := calls.take()
	require.Equal(t, 1, ops["PutItem"]+ops["TransactWriteItems"], "one write for the ten branches: %v", ops)
	require.Equal(t, 1, ops["GetItem"], "one read: %v", ops)
	got := get(t, h, j.ID)
	for _, s := range got.Steps[:10] {
		require.Equal(t, domain.StepSucceeded, s.State)
	}
	require.Equal(t, domain.StepPending, got.Steps[10].State, "the fan-in is sent, not run here")

	resp, err = exec(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		record(t, "join", engine.Message{Tenant: stacktest.TenantA, Job: j.ID, Step: "join"}),
	}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	got = get(t, h, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.NoError(t, domain.CheckReplay(got))
}

// Deliveries of one job that are not taken together (here each came
// back, so each may be a dead chain's) run at once, but their changes of
// the job take turns: none loses a write to another, and the last one's
// change runs the fan-in.
func TestExecuteBatchOfOneJobsBranchesTakesTurns(t *testing.T) {
	t.Parallel()
	h, calls, exec := counted(t)
	j, recs := fanOut(t, h, 10, 2)
	before := calls.refused.Load()
	resp, err := exec(context.Background(), events.SQSEvent{Records: recs})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Equal(t, before, calls.refused.Load(), "no change of the job lost a write to another")
	got := get(t, h, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.NoError(t, domain.CheckReplay(got))
}

// TestExecuteKeepsARecordEarlyForItsJob: a job's first message may come
// before its write (it is sent first); its record is kept (a batch item
// failure, hidden a moment) while the job may still be written, and
// dropped once it may not, by SQS's SentTimestamp.
func TestExecuteKeepsARecordEarlyForItsJob(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, noRunner)
	exec := handlers.Execute(h.Engine, h.ReadyTokens(), quiet)
	ctx := context.Background()
	m := engine.Message{Tenant: stacktest.TenantA, Job: "01KB0000000000000000000000", Step: "only"}
	p1 := h.Resources.Env["STEPFLOW_QUEUE_P1"]
	fromP1 := func(id string) events.SQSMessage {
		r := record(t, id, m)
		r.EventSourceARN = "arn:aws:sqs:us-east-1:000000000000:" + p1[strings.LastIndex(p1, "/")+1:]
		return r
	}
	sent := func(id string, ago time.Duration) events.SQSMessage {
		r := fromP1(id)
		r.Attributes["SentTimestamp"] = strconv.FormatInt(h.Clock.Now().Add(-ago).UnixMilli(), 10)
		return r
	}
	resp, err := exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		sent("just-sent", time.Second), sent("long-gone", 2*time.Minute), fromP1("no-timestamp"),
	}})
	require.NoError(t, err)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "just-sent"}}, resp.BatchItemFailures)
}

// failGetOf answers a fault in the engine's DynamoDB client that fails
// every GetItem of the job *failPK names, before the request is made.
func failGetOf(failPK *atomic.Pointer[string]) *awsfault.Fault {
	return awsfault.FailOperation("DynamoDB", "GetItem", -1, func(in any) bool {
		pk, ok := in.(*dynamodb.GetItemInput).Key["sk"].(*ddb.AttributeValueMemberS) // the job id
		bad := failPK.Load()
		return ok && bad != nil && pk.Value == *bad
	}, errors.New("injected fault: GetItem throttled"))
}

// TestExecuteReportsFailedRecords: a record whose job cannot be read is a
// batch item failure, so SQS redelivers it; the healthy records of the
// same batch are not.
func TestExecuteReportsFailedRecords(t *testing.T) {
	t.Parallel()
	var failPK atomic.Pointer[string]
	fault := failGetOf(&failPK)
	h := stacktest.New(t, noRunner, stacktest.WithAPIOptions(fault.Install))
	exec := handlers.Execute(h.Engine, h.ReadyTokens(), quiet)
	ctx := context.Background()

	good := submit(t, h, `{"steps":[{"id":"s","action":{"type":"pass"}}]}`)
	bad := submit(t, h, `{"steps":[{"id":"s","action":{"type":"pass"}}]}`)
	pk := bad.ID
	failPK.Store(&pk)

	resp, err := exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record(t, "good-msg", engine.Message{Tenant: stacktest.TenantA, Job: good.ID, Step: "s"}),
		record(t, "bad-msg", engine.Message{Tenant: stacktest.TenantA, Job: bad.ID, Step: "s"}),
		{MessageId: "foreign-msg", Body: "Message Body"},
	}})
	require.NoError(t, err)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "bad-msg"}}, resp.BatchItemFailures)
	require.Positive(t, fault.Failed())
	require.Equal(t, domain.JobCompleted, get(t, h, good.ID).State)

	// Once the store answers again, the redelivered record runs.
	failPK.Store(nil)
	require.Equal(t, domain.JobQueued, get(t, h, bad.ID).State, "a failed read changed nothing")
	resp, err = exec(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record(t, "bad-msg", engine.Message{Tenant: stacktest.TenantA, Job: bad.ID, Step: "s"}),
	}})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	j := get(t, h, bad.ID)
	require.Equal(t, domain.JobCompleted, j.State)
	require.NoError(t, domain.CheckReplay(j))
}

// TestHeartbeatSample: the heartbeat handler takes the schedule's payload
// and answers what its sweep did.
func TestHeartbeatSample(t *testing.T) {
	t.Parallel()
	var ev events.EventBridgeEvent
	readJSON(t, projectEvents+"/heartbeat-schedule.json", &ev)
	require.Equal(t, "Scheduled Event", ev.DetailType)
	h := stacktest.New(t, noRunner)
	beat := handlers.Heartbeat(h.Engine)
	ctx := context.Background()

	rep, err := beat(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, engine.SweepReport{}, rep, "a fresh stack has nothing due")

	// A step whose message nobody took for longer than the grace is sent
	// again (a worker's: a built-in first step's message goes out before
	// its job's write, which leaves it out of the due index).
	j := submit(t, h, `{"steps":[{"id":"s","action":{"type":"worker","queue":"q"}}]}`)
	h.Clock.Advance(domain.DispatchGrace + time.Second)
	rep, err = beat(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, engine.SweepReport{Due: 1, Redispatched: 1}, rep)
	got := get(t, h, j.ID)
	require.Equal(t, 1, got.Steps[0].Redispatches)
	require.NoError(t, domain.CheckReplay(got))

	// Right after, it is not due again.
	rep, err = beat(ctx, ev)
	require.NoError(t, err)
	require.Zero(t, rep.Redispatched)
	require.Zero(t, rep.Errors)
}
