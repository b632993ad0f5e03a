package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/store"
)

// What is DynamoDB's own about schedules: the item and its due entry, and
// what a sweep costs. What every schedule store must do is in the
// contract (schedule_contract_test.go).

func (b bundle) rawItem(t *testing.T, pk, sk string) map[string]ddb.AttributeValue {
	t.Helper()
	out, err := b.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(b.table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk}}})
	require.NoError(t, err)
	return out.Item
}

func str(it map[string]ddb.AttributeValue, name string) string {
	if v, ok := it[name].(*ddb.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func TestScheduleIsOneItemInItsTenantsPartitionWithADueEntryWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sc := store.NewSchedules(b.db, b.table)
	s, _, err := domain.ParseSchedule(tenantA, []byte(`{"id":"nightly","every":"1m","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`), "h", b.now)
	require.NoError(t, err)
	require.NoError(t, sc.Create(ctx, s))

	it := b.rawItem(t, "C#"+tenantA, "nightly")
	require.NotNil(t, it)
	require.Regexp(t, `^DS#[0-3]$`, str(it, "gsi2pk"), "its own due partitions, apart from the jobs' D#")
	require.Equal(t, s.NextAt.UTC().Format("2006-01-02T15:04:05.000Z"), str(it, "gsi2sk"))
	require.IsType(t, &ddb.AttributeValueMemberB{}, it["doc"], "a compressed document")

	tick := *s.NextAt
	spec, err := s.RunSpec()
	require.NoError(t, err)
	run, err := domain.NewJob(tenantA, s.RunID(tick), spec, "", tick)
	require.NoError(t, err)
	s.Ran(tick, run.ID, tick)
	require.NoError(t, sc.Fire(ctx, s, run))
	pk, sk := store.ItemKey(tenantA, run.ID)
	require.Equal(t, "nightly", str(b.rawItem(t, pk, sk), "schedule"), "the attribute GET /v1/jobs?schedule= filters on")

	require.True(t, s.Pause(tick))
	require.NoError(t, sc.Save(ctx, s))
	it = b.rawItem(t, "C#"+tenantA, "nightly")
	require.NotContains(t, it, "gsi2pk", "a paused schedule has no due entry")
	require.NotContains(t, it, "gsi2sk")
}

// counter counts the DynamoDB calls made through a client, by operation.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) count(ctx context.Context, _ any, call func() (any, error)) (any, error) {
	_, op := awsfault.Call(ctx)
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return call()
}

func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// A sweep's schedule pass costs one query per due shard whatever the
// schedules stored, and per tick due one read and one transaction.
func TestFiringSchedulesCostsWhatIsDueNotWhatIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	calls := &counter{n: map[string]int{}}
	db := b.client(awsfault.Around("DynamoDB", "", calls.count))
	clock := memory.NewClock(b.now)
	e := engine.New(engine.Config{Store: store.New(db, b.table), Queue: memory.NewQueue(clock.Now), BuiltinLease: time.Hour,
		Now: clock.Now, Schedules: store.NewSchedules(db, b.table)})
	for _, id := range []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"} {
		_, _, err := e.CreateSchedule(ctx, tenantA, []byte(`{"id":"`+id+`","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`))
		require.NoError(t, err)
	}
	_, _, err := e.CreateSchedule(ctx, tenantA, []byte(`{"id":"m","every":"1m","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`))
	require.NoError(t, err)
	calls.take()

	rep, err := e.FireSchedules(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Due)
	require.Equal(t, map[string]int{"Query": store.ScheduleDueShards}, calls.take(), "nine schedules stored, none due: the due shards' queries only")

	clock.Advance(time.Minute)
	rep, err = e.FireSchedules(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Fired)
	// The run's creation also writes the counters, as the first change a
	// process saves does (then at most every StatsFlushEvery): 3 updates.
	require.Equal(t, map[string]int{"Query": store.ScheduleDueShards, "GetItem": 1, "TransactWriteItems": 1, "UpdateItem": 3}, calls.take(),
		"one tick due: its schedule read, and one transaction for its run and its move")

	clock.Advance(time.Minute)
	rep, err = e.FireSchedules(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Skipped, "nothing runs the first run here: it is unfinished")
	require.Equal(t, map[string]int{"Query": store.ScheduleDueShards, "GetItem": 2, "PutItem": 1}, calls.take(),
		"overlap skip reads its last run too, and a skipped tick is one write")
}

// DynamoDB cancels a transaction that meets another on the same item
// (TransactionConflict): a lost race, read again, not a failure.
func TestFireMeetingAnotherTransactionIsAVersionConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s, _, err := domain.ParseSchedule(tenantA, []byte(`{"id":"s","every":"1m","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`), "h", b.now)
	require.NoError(t, err)
	require.NoError(t, store.NewSchedules(b.db, b.table).Create(ctx, s))
	conflict := awsfault.FailOperation("DynamoDB", "TransactWriteItems", 1, nil, &ddb.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict, None]"),
		CancellationReasons: []ddb.CancellationReason{{Code: aws.String("TransactionConflict")}, {Code: aws.String("None")}},
	})
	sc := store.NewSchedules(b.client(conflict.Install), b.table)
	tick := *s.NextAt
	spec, err := s.RunSpec()
	require.NoError(t, err)
	run, err := domain.NewJob(tenantA, s.RunID(tick), spec, "", tick)
	require.NoError(t, err)
	s.Ran(tick, run.ID, tick)
	require.ErrorIs(t, sc.Fire(ctx, s, run), domain.ErrVersionConflict)
	require.EqualValues(t, 1, s.Version, "left as it was")
	require.NoError(t, sc.Fire(ctx, s, run), "the next try goes through")
}
