package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// The long-poll checks run with the store's: a waiting poll's small read,
// and the slots that bound a tenant's open polls across processes.
func init() { storeChecks = append(storeChecks, longPollChecks...) }

var longPollChecks = []check[StoreFixture]{
	{"JobVersionIsTheStoredVersionAlone", func(t *testing.T, f StoreFixture) {
		ctx := context.Background()
		_, err := f.Store.JobVersion(ctx, tenantA, "01J00000000000000000000000")
		require.ErrorIs(t, err, domain.ErrNotFound)
		j := create(t, f, tenantA, passSpec, f.Now)
		v, err := f.Store.JobVersion(ctx, tenantA, j.ID)
		require.NoError(t, err)
		require.Equal(t, j.Version, v)
		_, err = f.Store.JobVersion(ctx, tenantB, j.ID)
		require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's job is not found")

		loaded, n := load(t, f, tenantA, j.ID)
		_, err = loaded.Cancel(f.Now)
		require.NoError(t, err)
		require.NoError(t, f.Store.Save(ctx, loaded, n))
		// The read may lag a write by moments (eventually consistent).
		require.Eventually(t, func() bool {
			v, err := f.Store.JobVersion(ctx, tenantA, j.ID)
			return err == nil && v == loaded.Version
		}, 5*time.Second, 10*time.Millisecond, "the version moves with a save")
	}},
	{"PollSlotsBoundATenant", func(t *testing.T, f StoreFixture) {
		ctx := context.Background()
		now := f.Now
		if now.IsZero() {
			now = time.Now().UTC()
		}
		until := now.Add(30 * time.Second)
		for i := range 3 {
			_, ok, err := f.Store.TakePollSlot(ctx, tenantA, fmt.Sprintf("a%d", i), 3, until.Add(time.Duration(i)*time.Second), now)
			require.NoError(t, err)
			require.True(t, ok, "slot %d of 3", i)
		}
		retryAt, ok, err := f.Store.TakePollSlot(ctx, tenantA, "a3", 3, until, now)
		require.NoError(t, err)
		require.False(t, ok, "past the bound")
		require.WithinDuration(t, until, retryAt, time.Millisecond, "the first slot to run out")

		_, ok, err = f.Store.TakePollSlot(ctx, tenantB, "b0", 3, until, now)
		require.NoError(t, err)
		require.True(t, ok, "another tenant's slots are its own")

		require.NoError(t, f.Store.ReleasePollSlot(ctx, tenantA, "a1"))
		require.NoError(t, f.Store.ReleasePollSlot(ctx, tenantA, "a1"), "a slot given back twice is no error")
		require.NoError(t, f.Store.ReleasePollSlot(ctx, "tenant-c", "c0"), "nor one never taken")
		_, ok, err = f.Store.TakePollSlot(ctx, tenantA, "a3", 3, until, now)
		require.NoError(t, err)
		require.True(t, ok, "a slot given back is free")
		_, ok, err = f.Store.TakePollSlot(ctx, tenantA, "a4", 3, until, now)
		require.NoError(t, err)
		require.False(t, ok)
	}},
	{"PollSlotsOfDeadHoldersFreeThemselves", func(t *testing.T, f StoreFixture) {
		ctx := context.Background()
		now := f.Now
		if now.IsZero() {
			now = time.Now().UTC()
		}
		for i := range 2 {
			_, ok, err := f.Store.TakePollSlot(ctx, tenantA, fmt.Sprintf("dead%d", i), 2, now.Add(time.Second), now)
			require.NoError(t, err)
			require.True(t, ok)
		}
		_, ok, err := f.Store.TakePollSlot(ctx, tenantA, "late", 2, now.Add(time.Minute), now)
		require.NoError(t, err)
		require.False(t, ok)
		// Their holders never gave them back; past their until they are free.
		later := now.Add(2 * time.Second)
		for i := range 2 {
			_, ok, err := f.Store.TakePollSlot(ctx, tenantA, fmt.Sprintf("next%d", i), 2, later.Add(time.Minute), later)
			require.NoError(t, err)
			require.True(t, ok, "slot %d freed itself", i)
		}
		_, ok, err = f.Store.TakePollSlot(ctx, tenantA, "next2", 2, later.Add(time.Minute), later)
		require.NoError(t, err)
		require.False(t, ok, "and the bound still holds")
	}},
}
