package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

// lineSpec is a job of n pass steps in a line.
func lineSpec(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"step-%04d","action":{"type":"pass"},"retry":{"max_attempts":3}}`, i)
	}
	return `{"steps":[` + strings.Join(steps, ",") + `]}`
}

// parts answers the items of a job's parts partition.
func (b bundle) parts(t *testing.T, j *domain.Job) []map[string]ddb.AttributeValue {
	t.Helper()
	out, err := b.db.Query(context.Background(), &dynamodb.QueryInput{
		TableName: aws.String(b.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]ddb.AttributeValue{":pk": &ddb.AttributeValueMemberS{Value: "JP#" + j.Tenant + "#" + j.ID}},
	})
	require.NoError(t, err)
	return out.Items
}

// runLine leases and completes each step of a line job in turn, saving
// after each change, and calls after with the job as saved.
func (b bundle) runLine(t *testing.T, j *domain.Job, after func(*domain.Job)) *domain.Job {
	t.Helper()
	ctx := context.Background()
	loaded, events := b.load(t, j.Tenant, j.ID)
	now := b.now
	for i := range loaded.Steps {
		id := loaded.Steps[i].ID()
		now = now.Add(time.Second)
		l, err := loaded.Lease(id, domain.LeaseRequest{Nonce: id, Duration: time.Minute}, now)
		require.NoError(t, err, id)
		require.NoError(t, b.st.Save(ctx, loaded, events), id)
		after(loaded)
		events = len(loaded.Events)
		_, err = loaded.Complete(id, l.ID, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), now)
		require.NoError(t, err, id)
		require.NoError(t, b.st.Save(ctx, loaded, events), id)
		after(loaded)
		events = len(loaded.Events)
	}
	return loaded
}

// A long job's every write is one item of at most 1 KB (one write unit)
// plus, now and then, a part: the cost of a transition does not grow
// with the job. A job of a few steps stays one item, as before.
func TestLongJobWritesStaySmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	short := b.create(t, tenantA, lineSpec(3))
	b.runLine(t, short, func(j *domain.Job) {
		it := b.rawJob(t, j)
		require.Contains(t, it, "doc", "a short job is one item")
		require.Equal(t, &ddb.AttributeValueMemberN{Value: "3"}, it["dv"])
	})
	require.Empty(t, b.parts(t, short))

	n := min(100, domain.MaxSteps)
	long := b.create(t, tenantA, lineSpec(n))
	created := len(b.parts(t, long))
	require.Positive(t, created, "a long job is created with its parts")
	writes, largest := 0, 0
	done := b.runLine(t, long, func(j *domain.Job) {
		it := b.rawJob(t, j)
		require.NotContains(t, it, "doc", "a build that cannot read parts finds no document to misread")
		require.Contains(t, it, "hdoc")
		require.Equal(t, &ddb.AttributeValueMemberN{Value: "4"}, it["dv"])
		size := store.ItemSize(it)
		require.LessOrEqual(t, size, 1024, "write %d: the header is one write unit", writes)
		largest = max(largest, size)
		writes++
	})
	require.Equal(t, domain.JobCompleted, done.State)
	sealed := len(b.parts(t, long)) - created
	t.Logf("%d steps: %d writes, largest header %d bytes, %d parts sealed on the way", n, writes, largest, sealed)
	// A part every few writes at most, so a transition costs about one
	// write unit plus a fraction of one.
	require.Less(t, sealed, writes/2)
	got, err := b.st.Get(context.Background(), tenantA, long.ID)
	require.NoError(t, err)
	require.NoError(t, domain.CheckReplay(got))
	require.Len(t, got.Events, len(done.Events))
}

// When a finished job's data is deleted, every item of its parts
// partition, one no header names among them, takes the job's TTL; and a
// job whose parts are gone past its TTL is not found.
func TestDeletedDataExpiresTheParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, lineSpec(min(60, domain.MaxSteps)))
	done := b.runLine(t, j, func(*domain.Job) {})
	// A part a lost race left.
	_, err := b.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.table), Item: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "JP#" + j.Tenant + "#" + j.ID}, "sk": &ddb.AttributeValueMemberS{Value: "orphan"},
		"doc": &ddb.AttributeValueMemberB{Value: []byte("x")},
	}})
	require.NoError(t, err)
	require.True(t, done.StoresData(), "a job kept in parts has data to delete at expiry")
	require.Equal(t, done.ExpiresAt.Add(domain.DataGrace), *done.TTLAt(), "its item outlives the expiry until the parts are expired")
	for _, p := range b.parts(t, done) {
		require.NotContains(t, p, "ttl", "a part of a job not yet expired lasts")
	}

	loaded, n := b.load(t, tenantA, j.ID)
	expiry := *loaded.ExpiresAt
	require.True(t, loaded.DataDue(expiry))
	loaded.DataDeleted(expiry)
	require.NoError(t, b.st.Save(ctx, loaded, n))
	want := strconv.FormatInt(expiry.Unix(), 10)
	require.Equal(t, &ddb.AttributeValueMemberN{Value: want}, b.rawJob(t, loaded)["ttl"])
	parts := b.parts(t, loaded)
	require.Greater(t, len(parts), 1)
	for _, p := range parts {
		require.Equal(t, &ddb.AttributeValueMemberN{Value: want}, p["ttl"], "part %v", p["sk"])
	}

	// DynamoDB deletes expired items one at a time: the parts gone first,
	// the job is not found (not unreadable).
	for _, p := range parts {
		_, err := b.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(b.table), Key: map[string]ddb.AttributeValue{"pk": p["pk"], "sk": p["sk"]}})
		require.NoError(t, err)
	}
	fresh := store.New(b.db, b.table) // one that kept no part
	_, err = fresh.Get(ctx, tenantA, j.ID)
	require.ErrorIs(t, err, domain.ErrUnreadable, "before its TTL, a job without its parts is damaged")
	fresh.Now = func() time.Time { return expiry.Add(time.Second) }
	_, err = fresh.Get(ctx, tenantA, j.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "past its TTL, it is gone")
}

// A part a header names that is missing from the table, on a job not
// expired, is damage: the job answers ErrUnreadable.
func TestAMissingPartIsUnreadable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, lineSpec(min(60, domain.MaxSteps)))
	for _, p := range b.parts(t, j) {
		_, err := b.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(b.table), Key: map[string]ddb.AttributeValue{"pk": p["pk"], "sk": p["sk"]}})
		require.NoError(t, err)
	}
	_, err := store.New(b.db, b.table).Get(ctx, tenantA, j.ID)
	require.ErrorIs(t, err, domain.ErrUnreadable)
	require.ErrorContains(t, err, "missing")
}
