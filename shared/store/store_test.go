package store_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/store"
)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// bundle is one test's store over a stack of its own.
type bundle struct {
	h     *stacktest.Harness
	st    *store.Store
	db    *dynamodb.Client
	table string
	now   time.Time
}

func setup(t *testing.T) bundle {
	t.Helper()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	table := h.Resources.Tables["JobsTable"]
	require.NotEmpty(t, table)
	return bundle{h: h, st: store.New(h.DynamoDB, table), db: h.DynamoDB, table: table, now: h.Clock.Now()}
}

// client answers a copy of the bundle's DynamoDB client with opts added to
// its middleware stack (awsfault's faults and counters).
func (b bundle) client(opts ...func(*middleware.Stack) error) *dynamodb.Client {
	return dynamodb.New(b.db.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, opts...) })
}

// simpleSpec is a one-step job on the default queue.
const simpleSpec = `{"steps":[{"id":"only","action":{"type":"pass"}}]}`

// newJob builds an unsaved job from a submission body.
func newJob(t *testing.T, tenant, spec, idemKey string, now time.Time) *domain.Job {
	t.Helper()
	s, err := domain.ParseJobSpec([]byte(spec))
	require.NoError(t, err)
	j, err := domain.NewJob(tenant, ulid.Make().String(), s, idemKey, now)
	require.NoError(t, err)
	return j
}

// create builds a job and stores it without an idempotency key.
func (b bundle) create(t *testing.T, tenant, spec string) *domain.Job {
	t.Helper()
	j := newJob(t, tenant, spec, "", b.now)
	got, created, err := b.st.Create(context.Background(), j, "", b.now)
	require.NoError(t, err)
	require.True(t, created)
	return got
}

// load reads a job and how many events it had, as a caller of Save does.
func (b bundle) load(t *testing.T, tenant, id string) (*domain.Job, int) {
	t.Helper()
	j, err := b.st.Get(context.Background(), tenant, id)
	require.NoError(t, err)
	return j, len(j.Events)
}

// raw reads a job's table item as DynamoDB holds it.
func (b bundle) raw(t *testing.T, pk, sk string) map[string]ddb.AttributeValue {
	t.Helper()
	out, err := b.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(b.table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddb.AttributeValue{
			"pk": &ddb.AttributeValueMemberS{Value: pk},
			"sk": &ddb.AttributeValueMemberS{Value: sk},
		},
	})
	require.NoError(t, err)
	return out.Item
}

func (b bundle) rawJob(t *testing.T, j *domain.Job) map[string]ddb.AttributeValue {
	t.Helper()
	pk, sk := store.ItemKey(j.Tenant, j.ID)
	it := b.raw(t, pk, sk)
	require.NotNil(t, it, "job %s is not stored", j.ID)
	return it
}

func TestCreateThenGetRoundtripsTheWholeJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	spec := `{
		"queue": "billing", "priority": 0,
		"payload": {"order": 42, "items": ["a", "b"], "nested": {"ok": true, "none": null}},
		"steps": [
			{"id": "charge", "action": {"type": "worker", "queue": "cards", "lease_seconds": 90}, "timeout_seconds": 600,
			 "retry": {"max_attempts": 5, "backoff": "linear", "initial_delay_ms": 250, "max_delay_ms": 4000, "jitter": true}},
			{"id": "nap", "action": {"type": "sleep", "seconds": 1.5}},
			{"id": "notify", "action": {"type": "http", "url": "https://example.com/hook"},
			 "retry": {"max_attempts": 1, "initial_delay_ms": 0}},
			{"id": "boom", "action": {"type": "fail", "class": "needs_user", "message": "ask a person"}}
		]}`
	j := newJob(t, tenantA, spec, "", b.now)
	want := *j

	got, created, err := b.st.Create(ctx, j, "", b.now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int64(1), got.Version)

	loaded, err := b.st.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	want.Version = 1
	// The store keeps JSON compact; the payload's meaning is what must
	// survive (checked with JSONEq below).
	want.Payload = loaded.Payload
	// What the create and the read cost, and the store's notes of the
	// item: a KB write, the due index entry's put, a 4 KB read.
	require.Equal(t, domain.Usage{WriteUnits: 2}, loaded.Usage)
	require.Equal(t, domain.Usage{ReadUnits: 1}, loaded.Spent)
	want.Usage, want.Spent, want.ItemBytes, want.ItemDue = loaded.Usage, loaded.Spent, loaded.ItemBytes, loaded.ItemDue
	require.Equal(t, &want, loaded)

	// Spot checks of what the whole-job comparison covers.
	require.Equal(t, domain.JobQueued, loaded.State)
	require.Equal(t, "billing", loaded.Queue)
	require.Equal(t, 0, loaded.Priority)
	require.JSONEq(t, `{"order": 42, "items": ["a", "b"], "nested": {"ok": true, "none": null}}`, string(loaded.Payload))
	require.True(t, loaded.CreatedAt.Equal(b.now), "created_at %s, want %s", loaded.CreatedAt, b.now)
	require.Len(t, loaded.Steps, 4)
	charge := loaded.Steps[0]
	require.Equal(t, domain.StepPending, charge.State)
	require.NotNil(t, charge.ReadyAt)
	require.Equal(t, "cards", charge.Spec.Action.Queue)
	require.Equal(t, 90, charge.Spec.Action.LeaseSeconds)
	require.Equal(t, 600, charge.Spec.TimeoutSeconds)
	require.Equal(t, 5, charge.Spec.Retry.MaxAttempts)
	require.Equal(t, domain.BackoffLinear, charge.Spec.Retry.Backoff)
	require.Equal(t, int64(250), *charge.Spec.Retry.InitialDelayMS)
	require.Equal(t, int64(4000), *charge.Spec.Retry.MaxDelayMS)
	require.True(t, charge.Spec.Retry.Jitter)
	require.NotNil(t, loaded.Steps[2].Spec.Retry.InitialDelayMS, "an explicit 0 delay survives")
	require.Zero(t, *loaded.Steps[2].Spec.Retry.InitialDelayMS)
	require.Equal(t, 1.5, *loaded.Steps[1].Spec.Action.Seconds)
	require.Equal(t, domain.StepWaitingDeps, loaded.Steps[3].State)
	require.Equal(t, []string{"job_created", "step_waiting_deps", "step_waiting_deps", "step_waiting_deps"}, eventTypes(loaded))
	require.NotNil(t, loaded.DueAt)
	require.True(t, loaded.DueAt.Equal(b.now.Add(domain.DispatchGrace)))

	// A saved change roundtrips too: a lease, an attempt, a running job.
	_, err = loaded.Lease("charge", domain.LeaseRequest{Worker: "w-1", ViaWorker: true, Nonce: "n1", Duration: time.Minute, Token: "rh-1"}, b.now)
	require.NoError(t, err)
	n := len(want.Events)
	require.NoError(t, b.st.Save(ctx, loaded, n))
	require.Equal(t, int64(2), loaded.Version)
	again, err := b.st.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	// The save cost a KB put, the read of it before and the create's
	// (its due entry did not move), and the next save will count this read.
	require.Equal(t, domain.Usage{WriteUnits: 3, ReadUnits: 1}, again.Usage)
	require.Equal(t, domain.Usage{ReadUnits: 1}, again.Spent)
	again.Spent = domain.Usage{}
	require.Equal(t, loaded, again)
	require.Equal(t, domain.JobRunning, again.State)
	require.Equal(t, "rh-1", again.Steps[0].Lease.Token)
	require.Len(t, again.Steps[0].Attempts, 1)
}

func eventTypes(j *domain.Job) []string {
	var out []string
	for _, e := range j.Events {
		out = append(out, e.Type)
	}
	return out
}

func TestCreateWithAnExpiredIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := "old-" + ulid.Make().String()

	// Recorded more than a day ago: TTL may not have deleted it yet, but it
	// no longer holds.
	then := b.now.Add(-25 * time.Hour)
	old := newJob(t, tenantA, simpleSpec, key, then)
	_, created, err := b.st.Create(ctx, old, "hash-1", then)
	require.NoError(t, err)
	require.True(t, created)

	fresh := newJob(t, tenantA, simpleSpec, key, b.now)
	got, created, err := b.st.Create(ctx, fresh, "hash-2", b.now)
	require.NoError(t, err)
	require.True(t, created, "an expired key is free")
	require.Equal(t, fresh.ID, got.ID)

	// From now on the key names the new job.
	again := newJob(t, tenantA, simpleSpec, key, b.now)
	got, created, err = b.st.Create(ctx, again, "hash-2", b.now)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, fresh.ID, got.ID)
}

// On DynamoDB itself two requests racing with one idempotency key can
// overlap, and the loser's transaction is cancelled for TransactionConflict.
// That is the race idempotency keys exist for (a client retrying a request
// still in flight), so the loser must still get the first job.
func TestCreateWithIdempotencyKeySurvivesATransactionConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := "overlap-" + ulid.Make().String()

	first := newJob(t, tenantA, simpleSpec, key, b.now)
	_, created, err := b.st.Create(ctx, first, "hash", b.now)
	require.NoError(t, err)
	require.True(t, created)

	// The first TransactWriteItems is answered as DynamoDB answers a
	// transaction that overlapped another one on the same item: cancelled,
	// with reason TransactionConflict (not ConditionalCheckFailed). The SDK
	// does not retry it.
	conflictOnce := awsfault.FailOperation("DynamoDB", "TransactWriteItems", 1, nil, &ddb.TransactionCanceledException{
		Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict]"),
		CancellationReasons: []ddb.CancellationReason{
			{Code: aws.String("None")},
			{Code: aws.String("TransactionConflict"), Message: aws.String("Transaction is ongoing for the item")},
		},
	})
	racing := store.New(b.client(conflictOnce.Install), b.table)
	got, created, err := racing.Create(ctx, newJob(t, tenantA, simpleSpec, key, b.now), "hash", b.now)
	require.NoError(t, err, "a transaction conflict is a lost race, not a failure")
	require.False(t, created)
	require.Equal(t, first.ID, got.ID)
	require.EqualValues(t, 1, conflictOnce.Failed())
}

func TestDueListsOnlyUnfinishedJobsPastTheirTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, simpleSpec)
	require.NotNil(t, j.DueAt)
	require.True(t, j.DueAt.After(b.now))
	key := dueKey(tenantA, j)

	due, err := b.st.Due(ctx, b.now, 100)
	require.NoError(t, err)
	require.NotContains(t, due, key)

	due, err = b.st.Due(ctx, j.DueAt.Add(-time.Millisecond), 100)
	require.NoError(t, err)
	require.NotContains(t, due, key)

	due, err = b.st.Due(ctx, *j.DueAt, 100)
	require.NoError(t, err)
	require.Contains(t, due, key, "due at its due time")

	later := b.now.Add(2 * domain.DispatchGrace)
	due, err = b.st.Due(ctx, later, 100)
	require.NoError(t, err)
	require.Equal(t, []engine.DueJob{key}, due)

	loaded, n := b.load(t, tenantA, j.ID)
	_, err = loaded.Cancel(b.now)
	require.NoError(t, err)
	require.NoError(t, b.st.Save(ctx, loaded, n))

	due, err = b.st.Due(ctx, later, 100)
	require.NoError(t, err)
	require.Empty(t, due)
	it := b.rawJob(t, loaded)
	require.NotContains(t, it, "gsi2pk", "a finished job leaves the sparse due index")
	require.NotContains(t, it, "gsi2sk")
}

// dueKey is how Due lists a job: with the due time it found, and the
// shard it read it from.
func dueKey(tenant string, j *domain.Job) engine.DueJob {
	return engine.DueJob{Tenant: tenant, ID: j.ID, Due: j.DueAt.UTC().Format("2006-01-02T15:04:05.000Z"), Part: dueShardOf(j.ID)}
}

func dueShardOf(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("D#%d", h.Sum32()%store.DueShards)
}

// The in-memory store parts its due index as this one shards it, a job
// in the same part, so a sweep meets the same bounds on both.
func TestMemoryDuePartsAreTheShards(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.DueShards, memory.DueParts)
	ctx := context.Background()
	mem := memory.NewStore()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	spec, err := domain.ParseJobSpec([]byte(simpleSpec))
	require.NoError(t, err)
	want := map[engine.DueJob]bool{}
	for range 4 * store.DueShards {
		j, err := domain.NewJob(tenantA, ulid.Make().String(), spec, "", now)
		require.NoError(t, err)
		_, _, err = mem.Create(ctx, j, "", now)
		require.NoError(t, err)
		want[dueKey(tenantA, j)] = true
	}
	due, err := mem.Due(ctx, now.Add(time.Hour), 100)
	require.NoError(t, err)
	got := map[engine.DueJob]bool{}
	for _, k := range due {
		got[k] = true
	}
	require.Equal(t, want, got)
}

func TestDueSpansShards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	want := map[engine.DueJob]bool{}
	for range 3 * store.DueShards {
		j := b.create(t, tenantA, simpleSpec)
		want[dueKey(tenantA, j)] = true
	}
	j := b.create(t, tenantB, simpleSpec)
	want[dueKey(tenantB, j)] = true

	due, err := b.st.Due(ctx, b.now.Add(2*domain.DispatchGrace), 100)
	require.NoError(t, err)
	got := map[engine.DueJob]bool{}
	for _, k := range due {
		require.False(t, got[k], "%v listed twice", k)
		got[k] = true
	}
	require.Equal(t, want, got)
}

func TestFinishedJobGetsATTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, simpleSpec)
	require.NotContains(t, b.rawJob(t, j), "ttl", "an unfinished job does not expire")

	loaded, n := b.load(t, tenantA, j.ID)
	_, err := loaded.Cancel(b.now)
	require.NoError(t, err)
	require.NoError(t, b.st.Save(ctx, loaded, n))

	it := b.rawJob(t, loaded)
	ttl, ok := it["ttl"].(*ddb.AttributeValueMemberN)
	require.True(t, ok, "ttl is a number attribute: %#v", it["ttl"])
	secs, err := strconv.ParseInt(ttl.Value, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, b.now.Add(7*24*time.Hour).Unix(), secs, 60)
}

// TestSaveAppliesEachKindOfChange saves the changes the engine makes, one
// save each, so every shape of Save's condition meets the table: one source
// state, several, the initial pseudo-state among them, and no job event.
func TestSaveAppliesEachKindOfChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	lease := func(j *domain.Job) (string, error) {
		l, err := j.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Minute}, b.now)
		if err != nil {
			return "", err
		}
		return l.ID, nil
	}
	type change func(j *domain.Job, leaseID string) error
	for name, tc := range map[string]struct {
		steps []change
		want  domain.JobState
	}{
		"lease (job_leased from QUEUED or RETRYING)": {want: domain.JobRunning},
		"heartbeat (no event at all)": {want: domain.JobRunning, steps: []change{func(j *domain.Job, id string) error {
			_, err := j.Heartbeat("s", id, 5*time.Minute, b.now)
			return err
		}}},
		"complete (job_completed)": {want: domain.JobCompleted, steps: []change{func(j *domain.Job, id string) error {
			_, err := j.Complete("s", id, []byte(`{"done":true}`), b.now)
			return err
		}}},
		"fail needs_user (job_waiting from RUNNING only)": {want: domain.JobWaiting, steps: []change{func(j *domain.Job, id string) error {
			_, err := j.Fail("s", id, domain.Failure{Class: domain.ClassNeedsUser, Message: "ask"}, b.now, nil)
			return err
		}}},
		"fail retryable (job_retrying from RUNNING only)": {want: domain.JobRetrying, steps: []change{func(j *domain.Job, id string) error {
			_, err := j.Fail("s", id, domain.Failure{Class: domain.ClassRetryable, Message: "again"}, b.now, nil)
			return err
		}}},
		"fail fatal (job_failed)": {want: domain.JobFailed, steps: []change{func(j *domain.Job, id string) error {
			_, err := j.Fail("s", id, domain.Failure{Class: domain.ClassFatal, Message: "no"}, b.now, nil)
			return err
		}}},
		"reclaim (job_requeued, whose sources include the initial state)": {want: domain.JobQueued, steps: []change{func(j *domain.Job, _ string) error {
			_, err := j.Reclaim("s", b.now.Add(2*time.Minute))
			return err
		}}},
		"cancel while running (job_cancelled)": {want: domain.JobCancelled, steps: []change{func(j *domain.Job, _ string) error {
			_, err := j.Cancel(b.now)
			return err
		}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := b.create(t, tenantA, `{"steps":[{"id":"s","action":{"type":"worker"},"retry":{"max_attempts":2}}]}`)
			loaded, n := b.load(t, tenantA, j.ID)
			id, err := lease(loaded)
			require.NoError(t, err)
			require.NoError(t, b.st.Save(ctx, loaded, n))
			for _, step := range tc.steps {
				before, n := b.load(t, tenantA, j.ID)
				stale, _ := b.load(t, tenantA, j.ID)
				require.NoError(t, step(before, id))
				require.NoError(t, b.st.Save(ctx, before, n), "events %v", eventTypes(before)[n:])
				// The same change decided on the copy read before it is refused.
				require.NoError(t, step(stale, id))
				require.ErrorIs(t, b.st.Save(ctx, stale, n), domain.ErrVersionConflict)
			}
			stored, err := b.st.Get(ctx, tenantA, j.ID)
			require.NoError(t, err)
			require.Equal(t, tc.want, stored.State)
			require.Equal(t, int64(2+len(tc.steps)), stored.Version)
		})
	}
}
