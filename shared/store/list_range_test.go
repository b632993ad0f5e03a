package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/store"
)

// A range of ids (an id prefix, a span of creation times) is a key
// condition: DynamoDB reads the jobs in it and no other, where a filter
// expression would read every job of the partitions and drop most. The
// store contract checks which jobs are listed; this checks what is read.
func TestListReadsOnlyTheJobsOfItsIDRange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	spec, err := domain.ParseJobSpec([]byte(simpleSpec))
	require.NoError(t, err)
	var inRange []string
	for n := range 12 {
		at := b.now.Add(time.Duration(n-12) * time.Hour)
		j, err := domain.NewJob(tenantA, ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String(), spec, "", b.now)
		require.NoError(t, err)
		_, _, err = b.st.Create(ctx, j, "", b.now)
		require.NoError(t, err)
		if n >= 4 && n < 7 {
			inRange = append(inRange, j.ID)
		}
	}
	timeID := func(at time.Time) string { return ulid.MustNew(ulid.Timestamp(at), nil).String()[:10] }
	f := engine.ListFilter{IDFrom: timeID(b.now.Add(-8 * time.Hour)), IDBelow: timeID(b.now.Add(-5 * time.Hour)), Limit: 50}

	var queries, scanned atomic.Int64
	counted := store.New(b.client(awsfault.Around("DynamoDB", "Query", func(_ context.Context, _ any, call func() (any, error)) (any, error) {
		out, err := call()
		queries.Add(1)
		if q, ok := out.(*dynamodb.QueryOutput); ok {
			scanned.Add(int64(q.ScannedCount))
		}
		return out, err
	})), b.table)
	page, cur, err := counted.List(ctx, tenantA, f)
	require.NoError(t, err)
	require.Empty(t, cur)
	require.Len(t, page, len(inRange))
	require.EqualValues(t, store.ListShards, queries.Load(), "one query of each partition")
	require.EqualValues(t, len(inRange), scanned.Load(), "items read")

	// A range no id is in reads nothing at all.
	queries.Store(0)
	f.IDFrom, f.IDBelow = f.IDBelow, f.IDFrom
	page, cur, err = counted.List(ctx, tenantA, f)
	require.NoError(t, err)
	require.Empty(t, page)
	require.Empty(t, cur)
	require.Zero(t, queries.Load())
}
