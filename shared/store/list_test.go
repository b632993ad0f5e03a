package store_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/store"
)

// countingClient answers a copy of b's DynamoDB client that counts in
// queries the Query calls a store makes (middleware in its stack).
func countingClient(b bundle, queries *atomic.Int64) *dynamodb.Client {
	return b.client(awsfault.Around("DynamoDB", "Query", func(_ context.Context, _ any, call func() (any, error)) (any, error) {
		queries.Add(1)
		return call()
	}))
}

// listAll pages through a listing with f until its cursor runs out,
// requiring every page to keep to the limit.
func listAll(t *testing.T, st *store.Store, tenant string, f engine.ListFilter) (ids []string, pages int) {
	t.Helper()
	for {
		page, cur, err := st.List(context.Background(), tenant, f)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), int(f.Limit))
		pages++
		for _, s := range page {
			if f.State != "" {
				require.Equal(t, f.State, s.State, "job %s", s.ID)
			}
			if f.Queue != "" {
				require.Equal(t, f.Queue, s.Queue, "job %s", s.ID)
			}
			ids = append(ids, s.ID)
		}
		if cur == "" {
			return ids, pages
		}
		require.Less(t, pages, 100, "the listing does not end")
		f.Cursor = cur
	}
}

func newestFirst(jobs []*domain.Job) []string {
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func TestListPagesThroughTheTenantsJobsNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mine []*domain.Job
	for i := range 7 {
		mine = append(mine, b.create(t, tenantA, simpleSpec))
		if i%3 == 0 {
			b.create(t, tenantB, simpleSpec)
		}
	}
	want := newestFirst(mine)

	page, cur, err := b.st.List(ctx, tenantA, engine.ListFilter{Limit: 3})
	require.NoError(t, err)
	require.Len(t, page, 3)
	require.NotEmpty(t, cur)
	require.Equal(t, want[:3], []string{page[0].ID, page[1].ID, page[2].ID})
	require.Equal(t, engine.JobSummary{ID: want[0], State: domain.JobQueued, Queue: domain.DefaultQueue}, page[0])

	ids, pages := listAll(t, b.st, tenantA, engine.ListFilter{Limit: 3})
	require.Equal(t, want, ids)
	require.GreaterOrEqual(t, pages, 3)

	ids, _ = listAll(t, b.st, tenantA, engine.ListFilter{Limit: 100})
	require.Equal(t, want, ids, "one page holds them all")

	ids, _ = listAll(t, b.st, "tenant-none", engine.ListFilter{Limit: 10})
	require.Empty(t, ids)
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	st := store.New(b.db, b.table)

	var alpha, beta, cancelled []*domain.Job
	for i := range 16 {
		spec := `{"queue":"alpha","steps":[{"id":"s","action":{"type":"pass"}}]}`
		if i == 2 || i == 11 {
			spec = `{"queue":"beta","steps":[{"id":"s","action":{"type":"pass"}}]}`
		}
		j := b.create(t, tenantA, spec)
		if i == 0 || i == 9 {
			loaded, n := b.load(t, tenantA, j.ID)
			_, err := loaded.Cancel(b.now)
			require.NoError(t, err)
			require.NoError(t, b.st.Save(ctx, loaded, n))
			cancelled = append(cancelled, loaded)
		}
		if j.Queue == "beta" {
			beta = append(beta, j)
		} else {
			alpha = append(alpha, j)
		}
	}
	// Another tenant's jobs match the same filters and are never listed.
	b.create(t, tenantB, `{"queue":"beta","steps":[{"id":"s","action":{"type":"pass"}}]}`)

	t.Run("queue", func(t *testing.T) {
		t.Parallel()
		ids, _ := listAll(t, st, tenantA, engine.ListFilter{Queue: "beta", Limit: 2})
		require.Equal(t, newestFirst(beta), ids)
		ids, _ = listAll(t, st, tenantA, engine.ListFilter{Queue: "alpha", Limit: 5})
		require.Equal(t, newestFirst(alpha), ids)
		ids, _ = listAll(t, st, tenantA, engine.ListFilter{Queue: "gamma", Limit: 5})
		require.Empty(t, ids)
	})

	t.Run("state", func(t *testing.T) {
		t.Parallel()
		ids, _ := listAll(t, st, tenantA, engine.ListFilter{State: domain.JobCancelled, Limit: 2})
		require.Equal(t, newestFirst(cancelled), ids)
		ids, _ = listAll(t, st, tenantA, engine.ListFilter{State: domain.JobQueued, Limit: 4})
		require.Len(t, ids, 14)
	})

	t.Run("state and queue", func(t *testing.T) {
		t.Parallel()
		ids, _ := listAll(t, st, tenantA, engine.ListFilter{State: domain.JobQueued, Queue: "beta", Limit: 1})
		require.Equal(t, newestFirst(beta), ids)
		ids, _ = listAll(t, st, tenantA, engine.ListFilter{State: domain.JobCancelled, Queue: "beta", Limit: 1})
		require.Empty(t, ids)
	})

	t.Run("a filter that skips most jobs reads several pages", func(t *testing.T) {
		t.Parallel()
		// Two of seventeen jobs match; a limit of one job means the listing
		// reads the index a page of one item at a time.
		f := engine.ListFilter{State: domain.JobCancelled, Queue: "alpha", Limit: 1}
		var queries atomic.Int64
		local := countingClient(b, &queries)
		ids, _ := listAll(t, store.New(local, b.table), tenantA, f)
		require.Equal(t, newestFirst(cancelled), ids)
		require.GreaterOrEqual(t, queries.Load(), int64(store.ListShards), "queries made")

		// One call reads a bounded number of pages from each partition:
		// with nothing matching, it reads them all and says there is no more.
		queries.Store(0)
		page, cur, err := store.New(local, b.table).List(ctx, tenantA, engine.ListFilter{State: domain.JobCancelled, Queue: "beta", Limit: 1})
		require.NoError(t, err)
		require.Empty(t, page)
		require.Empty(t, cur, "every partition was read to its end")
		require.GreaterOrEqual(t, queries.Load(), int64(store.ListShards))
		require.LessOrEqual(t, queries.Load(), int64(3*store.ListShards))
	})
}

func TestStatsNeverAnswersAPartialCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Every BatchGetItem is answered with all its keys left unprocessed, as
	// a throttled table may, after the real call.
	var calls atomic.Int64
	throttled := b.client(awsfault.Around("DynamoDB", "BatchGetItem", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		calls.Add(1)
		if _, err := call(); err != nil {
			return nil, err
		}
		return &dynamodb.BatchGetItemOutput{UnprocessedKeys: in.(*dynamodb.BatchGetItemInput).RequestItems}, nil
	}))
	st := store.New(throttled, b.table)
	_, err := st.Stats(context.Background(), tenantA, b.now)
	require.ErrorContains(t, err, "unprocessed")
	require.EqualValues(t, 5, calls.Load(), "it tried, with backoff, and gave up")
}
