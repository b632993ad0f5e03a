package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// The resource checks run with the store's: both adapters keep resources
// beside jobs.
func init() { storeChecks = append(storeChecks, resourceChecks...) }

func resources(t *testing.T, f StoreFixture) engine.Resources {
	t.Helper()
	r, ok := f.Store.(engine.Resources)
	require.True(t, ok, "the store keeps resources too")
	return r
}

var resourceChecks = []check[StoreFixture]{
	{"ResourceSaveIsConditionalOnItsVersion", func(t *testing.T, f StoreFixture) {
		ctx, rs := context.Background(), resources(t, f)
		r := &domain.Resource{Tenant: "ta", ID: "gpu-1", Capabilities: []string{"gpu"}, Labels: map[string]string{"zone": "a"}, Capacity: 1, CreatedAt: f.Now, UpdatedAt: f.Now}
		require.NoError(t, rs.SaveResource(ctx, r))
		require.Equal(t, int64(1), r.Version)
		dup := &domain.Resource{Tenant: "ta", ID: "gpu-1", Capacity: 3}
		require.ErrorIs(t, rs.SaveResource(ctx, dup), domain.ErrVersionConflict, "a second create of one id loses")

		a, err := rs.GetResource(ctx, "ta", "gpu-1")
		require.NoError(t, err)
		b, err := rs.GetResource(ctx, "ta", "gpu-1")
		require.NoError(t, err)
		exp := f.Now.Add(time.Minute)
		require.NoError(t, a.Acquire("j/s/1", domain.Holder{Lease: "j/s/1", Job: "j", Step: "s", Since: f.Now, ExpiresAt: exp}, f.Now))
		require.NoError(t, rs.SaveResource(ctx, a))
		require.NoError(t, b.Acquire("k/s/1", domain.Holder{Lease: "k/s/1", Job: "k", Step: "s", Since: f.Now, ExpiresAt: exp}, f.Now))
		require.ErrorIs(t, rs.SaveResource(ctx, b), domain.ErrVersionConflict, "of two takers of the last slot one wins")

		got, err := rs.GetResource(ctx, "ta", "gpu-1")
		require.NoError(t, err)
		require.Equal(t, []string{"gpu"}, got.Capabilities)
		require.Equal(t, map[string]string{"zone": "a"}, got.Labels)
		require.Len(t, got.Holders, 1)
		require.True(t, exp.Equal(got.Holders["j/s/1"].ExpiresAt))
		_, err = rs.GetResource(ctx, "tb", "gpu-1")
		require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's resource")
	}},
	{"ResourceHolderExtendsAndListing", func(t *testing.T, f StoreFixture) {
		ctx, rs := context.Background(), resources(t, f)
		for _, id := range []string{"b", "a"} {
			require.NoError(t, rs.SaveResource(ctx, &domain.Resource{Tenant: "ta", ID: id, Capacity: 2}))
		}
		require.NoError(t, rs.SaveResource(ctx, &domain.Resource{Tenant: "tb", ID: "c", Capacity: 2}))
		list, err := rs.ListResources(ctx, "ta")
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, "a", list[0].ID, "by id")

		r := list[0]
		require.NoError(t, r.Acquire("j/s/1", domain.Holder{Lease: "j/s/1", ExpiresAt: f.Now.Add(time.Minute)}, f.Now))
		require.NoError(t, rs.SaveResource(ctx, r))
		stale := *r
		later := f.Now.Add(time.Hour)
		require.NoError(t, rs.ExtendHolder(ctx, "ta", "a", "j/s/1", later))
		require.ErrorIs(t, rs.ExtendHolder(ctx, "ta", "a", "gone/s/1", later), domain.ErrLeaseLost, "a slot no longer held is not made again")
		got, err := rs.GetResource(ctx, "ta", "a")
		require.NoError(t, err)
		require.True(t, later.Equal(got.Holders["j/s/1"].ExpiresAt))
		require.NotContains(t, got.Holders, "gone/s/1")
		require.ErrorIs(t, rs.SaveResource(ctx, &stale), domain.ErrVersionConflict, "an extension bumps the version: no racing write puts back the old expiry")

		require.ErrorIs(t, rs.DeleteResource(ctx, "ta", "a", got.Version-1), domain.ErrVersionConflict)
		require.NoError(t, rs.DeleteResource(ctx, "ta", "a", got.Version))
		_, err = rs.GetResource(ctx, "ta", "a")
		require.ErrorIs(t, err, domain.ErrNotFound)
	}},
}
