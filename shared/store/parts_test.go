package store_test

import (
	"context"
	"crypto/sha256"
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

// lineSpec is a job of n pass steps in a line, named lineStep(i).
func lineSpec(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":%q,"action":{"type":"pass"},"retry":{"max_attempts":3}}`, lineStep(i))
	}
	return `{"steps":[` + strings.Join(steps, ",") + `]}`
}

// lineStep names step i of a lineSpec job. The names do not compress to
// nothing, as real jobs' steps (names, outputs, times) do not: documents
// are compressed with a dictionary of such words (compress.go), and
// steps that differ only by a counter would keep a job of hundreds in
// one item.
func lineStep(i int) string {
	h := sha256.Sum256([]byte(strconv.Itoa(i)))
	return fmt.Sprintf("step-%04d-%x", i, h[:6])
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
		z, err := store.InflateAttr(it, "hdoc")
		require.NoError(t, err)
		var hd struct{ Parts []string }
		require.NoError(t, json.Unmarshal(z, &hd))
		require.LessOrEqual(t, len(hd.Parts), 24, "write %d: the names a header carries do not grow with the job", writes)
		largest = max(largest, size)
		writes++
	})
	require.Equal(t, domain.JobCompleted, done.State)
	sealed := len(b.parts(t, long)) - created
	t.Logf("%d steps: %d writes, largest header %d bytes, %d parts sealed on the way", n, writes, largest, sealed)
	// A part every few writes at most, so a transition costs about one
	// write unit plus a fraction of one.
	require.Less(t, sealed, writes/2)
	got, err := store.New(b.db, b.table).Get(context.Background(), tenantA, long.ID) // one that kept no part
	require.NoError(t, err)
	require.NoError(t, domain.CheckReplay(got))
	require.Len(t, got.Events, len(done.Events))
	require.Equal(t, domain.JobCompleted, got.State)
	for i, s := range got.Steps {
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(s.Output), "step %d read through the index parts", i)
	}
}

// A finished job's parts take its TTL, a redriven one's lose it again
// before it runs, and a job whose parts are gone past its TTL is not
// found (DynamoDB deletes expired items one at a time).
func TestPartsExpireWithTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	n := 200 // enough parts that some are folded into index parts
	last := lineStep(n - 1)
	spec := strings.Replace(lineSpec(n), fmt.Sprintf(`{"id":%q,"action":{"type":"pass"},"retry":{"max_attempts":3}}`, last),
		fmt.Sprintf(`{"id":%q,"action":{"type":"worker"},"retry":{"max_attempts":1}}`, last), 1)
	j := b.create(t, tenantA, spec)
	loaded, events := b.load(t, tenantA, j.ID)
	now := b.now
	for i := range n - 1 { // the pass steps; the worker step fails below
		id := loaded.Steps[i].ID()
		l, err := loaded.Lease(id, domain.LeaseRequest{Nonce: id, Duration: time.Minute}, now)
		require.NoError(t, err, id)
		h := sha256.Sum256([]byte(id))
		_, err = loaded.Complete(id, l.ID, json.RawMessage(fmt.Sprintf(`{"digest":"%x"}`, h)), now)
		require.NoError(t, err, id)
		require.NoError(t, b.st.Save(ctx, loaded, events), id)
		events = len(loaded.Events)
	}
	for _, p := range b.parts(t, loaded) {
		require.NotContains(t, p, "ttl", "a part of a running job lasts")
	}
	require.False(t, loaded.StoresData(), "parts are not data the sweep deletes")

	l, err := loaded.Lease(last, domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "w", Duration: time.Minute}, now)
	require.NoError(t, err)
	_, err = loaded.Fail(last, l.ID, domain.Failure{Class: domain.ClassFatal, Message: "no"}, now, nil)
	require.NoError(t, err)
	require.NoError(t, b.st.Save(ctx, loaded, events))
	require.Equal(t, domain.JobFailed, loaded.State)
	want := &ddb.AttributeValueMemberN{Value: strconv.FormatInt(loaded.ExpiresAt.Unix(), 10)}
	require.Equal(t, want, b.rawJob(t, loaded)["ttl"])
	parts := b.parts(t, loaded)
	require.Greater(t, len(parts), 24, "more parts than a header names")
	for _, p := range parts {
		require.Equal(t, want, p["ttl"], "part %v expires with the job", p["sk"])
	}

	// A redrive: the parts last again.
	again, events := b.load(t, tenantA, j.ID)
	_, err = again.Redrive(now.Add(time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.st.Save(ctx, again, events))
	require.NotContains(t, b.rawJob(t, again), "ttl")
	for _, p := range b.parts(t, again) {
		require.NotContains(t, p, "ttl", "part %v of a redriven job lasts", p["sk"])
	}
	cancelled, events := b.load(t, tenantA, j.ID)
	_, err = cancelled.Cancel(now.Add(2 * time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.st.Save(ctx, cancelled, events))
	expiry := *cancelled.ExpiresAt
	for _, p := range b.parts(t, cancelled) {
		require.Equal(t, &ddb.AttributeValueMemberN{Value: strconv.FormatInt(expiry.Unix(), 10)}, p["ttl"])
	}

	for _, p := range b.parts(t, cancelled) {
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

// A write that loses its race deletes the parts it sealed: only the
// winner's are left, each named by the header.
func TestALostRaceLeavesNoPart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, lineSpec(min(60, domain.MaxSteps)))
	first, n1 := b.load(t, tenantA, j.ID)
	second, n2 := b.load(t, tenantA, j.ID)
	for _, c := range []*domain.Job{first, second} {
		for _, s := range c.Steps[:40] { // enough change to seal
			s.Redispatches++
		}
	}
	require.NoError(t, b.st.Save(ctx, first, n1))
	require.ErrorIs(t, b.st.Save(ctx, second, n2), domain.ErrVersionConflict)
	named := map[string]bool{}
	raw := b.rawJob(t, first)
	z, err := store.InflateAttr(raw, "hdoc")
	require.NoError(t, err)
	var hd struct{ Parts []string }
	require.NoError(t, json.Unmarshal(z, &hd))
	for _, p := range hd.Parts {
		named[p] = true
	}
	parts := b.parts(t, first)
	require.Len(t, parts, len(named))
	for _, p := range parts {
		require.True(t, named[p["sk"].(*ddb.AttributeValueMemberS).Value], "part %v is named by the header", p["sk"])
	}
}

// A write of a job without its layout (the job a first message carries,
// as built, which cannot know how its write stored it) never replaces a
// header: it loses as a race would, and the job is read.
func TestAWholeWriteNeverReplacesAHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, lineSpec(min(60, domain.MaxSteps)))
	require.NotEmpty(t, b.parts(t, j), "stored apart from its first write")
	loaded, n := b.load(t, tenantA, j.ID)
	raw, err := json.Marshal(loaded)
	require.NoError(t, err)
	var carried domain.Job
	require.NoError(t, json.Unmarshal(raw, &carried))
	carried.Steps[0].Redispatches++
	require.ErrorIs(t, b.st.Save(ctx, &carried, n), domain.ErrVersionConflict)
	again, _ := b.load(t, tenantA, j.ID)
	require.Equal(t, loaded.Version, again.Version)
	require.Zero(t, again.Steps[0].Redispatches)
	loaded.Steps[0].Redispatches++
	require.NoError(t, b.st.Save(ctx, loaded, n), "with its layout, it saves")
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

// A job whose own fields fill its header (a payload of some KB kept
// inline) seals a part only when its steps and events have grown by half
// a header, not on every write.
func TestABigPayloadDoesNotSealEveryWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pad := make([]string, 300)
	for i := range pad {
		pad[i] = fmt.Sprintf(`"%x"`, uint64(i)*0x9e3779b97f4a7c15) // little that compresses
	}
	spec := strings.Replace(lineSpec(20), `{"steps":`, `{"payload":{"pad":[`+strings.Join(pad, ",")+`]},"steps":`, 1)
	j := b.create(t, tenantA, spec)
	writes := 0
	done := b.runLine(t, j, func(*domain.Job) { writes++ })
	require.Equal(t, domain.JobCompleted, done.State)
	sealed := len(b.parts(t, done))
	t.Logf("%d writes, %d parts", writes, sealed)
	require.Less(t, sealed, writes/4, "a part every few writes at most")
}
