package costmeter_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

func TestPricesComeFromTheCostsTable(t *testing.T) {
	t.Parallel()
	p, err := costmeter.LoadPrices(filepath.Join("..", "..", "docs", "costs.md"))
	require.NoError(t, err)
	require.InDelta(t, 0.625e-6, p["dynamodb_wru"], 1e-12)
	require.InDelta(t, 0.40e-6, p["sqs_request"], 1e-12)
	require.InDelta(t, 25e-6, p["sfn_standard_transition"], 1e-12)
}

// TestUnitsFollowTheItems meters a job's writes on the real table: one unit
// per KB of item, plus the due index's own writes when its entry appears,
// and nothing more when a change leaves the index alone.
func TestUnitsFollowTheItems(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	m := costmeter.Wrap(h.DynamoDB)
	st := store.New(m, h.Resources.Tables["JobsTable"])
	ctx := context.Background()
	now := time.Now().UTC()

	spec, err := domain.ParseJobSpec([]byte(`{"steps":[{"id":"a","action":"pass"}]}`))
	require.NoError(t, err)
	j, err := domain.NewJob(stacktest.TenantA, ulid.Make().String(), spec, "", now)
	require.NoError(t, err)
	_, _, err = st.Create(ctx, j, "", now)
	require.NoError(t, err)
	require.Equal(t, costmeter.Units{WRU: 2}, m.Units(), "a small item (1) and its due index entry (1)")

	j, err = st.Get(ctx, stacktest.TenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, costmeter.Units{WRU: 2, RRU: 1}, m.Units(), "a consistent read of under 4 KB")

	// A lease leaves the due time where it is: one write, no index write.
	n := len(j.Events)
	_, err = j.Lease("a", domain.LeaseRequest{Nonce: "n", Duration: time.Hour}, now)
	require.NoError(t, err)
	require.NoError(t, st.Save(ctx, j, n))
	require.Equal(t, costmeter.Units{WRU: 3, RRU: 1}, m.Units())
}
