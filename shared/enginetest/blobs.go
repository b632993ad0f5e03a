package enginetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// BlobsFixture is one check's blob store: empty, and its own.
type BlobsFixture struct {
	Blobs engine.Blobs
	// Fetch reads a URL the store made, as a worker would (no
	// credentials): its body, or an error for anything but success.
	Fetch func(t *testing.T, url string) ([]byte, error)
	// Skip names checks this adapter is known to fail, each with why.
	Skip map[string]string
}

var blobsChecks = []check[BlobsFixture]{
	{"put then get answers the same bytes", blobsPutGet},
	{"a missing key is not found", blobsMissing},
	{"put again replaces", blobsReplace},
	{"a URL reads the data without credentials", blobsURL},
	{"every key the domain names round-trips", blobsKeys},
	{"the largest output round-trips", blobsLarge},
	{"deleting a job's prefix deletes its data only", blobsDeletePrefix},
}

// BlobsChecks answers the names of the blob store contract's checks.
func BlobsChecks() []string { return names(blobsChecks) }

// BlobsContract runs every blob store check, each in parallel on a fixture
// of its own from setup.
func BlobsContract(t *testing.T, setup func(t *testing.T) BlobsFixture) {
	run(t, blobsChecks, func(t *testing.T) (BlobsFixture, map[string]string) {
		f := setup(t)
		require.NotNil(t, f.Fetch, "the fixture must say how a URL is read")
		return f, f.Skip
	})
}

func randomJSON(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return []byte(fmt.Sprintf(`{"data":"%x"}`, b))
}

func blobsPutGet(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	key := domain.OutputKey(tenantA, "01JOB", "render", 1)
	data := randomJSON(t, 1024)
	require.NoError(t, f.Blobs.Put(ctx, key, data))
	got, err := f.Blobs.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.NoError(t, domain.NewDataRef(key, data).Verify(got))
}

func blobsMissing(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	_, err := f.Blobs.Get(ctx, domain.PayloadKey(tenantA, "01NONE"))
	require.ErrorIs(t, err, domain.ErrNotFound)
	// Another tenant's prefix holds nothing of this one's.
	key := domain.PayloadKey(tenantA, "01JOB")
	require.NoError(t, f.Blobs.Put(ctx, key, []byte(`{}`)))
	_, err = f.Blobs.Get(ctx, domain.PayloadKey(tenantB, "01JOB"))
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func blobsReplace(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	key := domain.OutputKey(tenantA, "01JOB", "s", 2)
	require.NoError(t, f.Blobs.Put(ctx, key, []byte(`"first"`)))
	// A retried write of the same attempt writes the same key again.
	require.NoError(t, f.Blobs.Put(ctx, key, []byte(`"second"`)))
	got, err := f.Blobs.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, `"second"`, string(got))
}

func blobsURL(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	key := domain.InputKey(tenantA, "01JOB", "w", 1)
	data := randomJSON(t, 4096)
	require.NoError(t, f.Blobs.Put(ctx, key, data))
	u, err := f.Blobs.URL(ctx, key, time.Hour)
	require.NoError(t, err)
	require.Less(t, len(u), 2048, "a URL is small, whatever the data")
	got, err := f.Fetch(t, u)
	require.NoError(t, err)
	require.Equal(t, data, got)
	// A URL names its own key only.
	other, err := f.Blobs.URL(ctx, domain.InputKey(tenantA, "01JOB", "w", 2), time.Hour)
	require.NoError(t, err)
	_, err = f.Fetch(t, other)
	require.Error(t, err, "nothing is stored under the other key")
}

func blobsKeys(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	// Step ids may hold dots, dashes and underscores, and be "." or "..".
	for i, step := range []string{".", "..", "a.b", "-_-", "payload", "x..y"} {
		key := domain.OutputKey(tenantA, "01JOB", step, i+1)
		data := []byte(fmt.Sprintf(`{"step":%q}`, step))
		require.NoError(t, f.Blobs.Put(ctx, key, data), key)
		got, err := f.Blobs.Get(ctx, key)
		require.NoError(t, err, key)
		require.Equal(t, data, got, key)
		u, err := f.Blobs.URL(ctx, key, time.Hour)
		require.NoError(t, err)
		got, err = f.Fetch(t, u)
		require.NoError(t, err, "%s via %s", key, u)
		require.Equal(t, data, got, key)
	}
	got, err := f.Blobs.Get(ctx, domain.PayloadKey(tenantA, "01JOB"))
	require.ErrorIs(t, err, domain.ErrNotFound, "a step named payload is not the payload: %s", got)
}

func blobsLarge(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	key := domain.OutputKey(tenantA, "01JOB", "big", 1)
	data := randomJSON(t, engine.MaxOutputBytes/2-16)
	require.Greater(t, len(data), 5<<20)
	require.NoError(t, f.Blobs.Put(ctx, key, data))
	got, err := f.Blobs.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "the data read back differs (%d bytes, %d put)", len(got), len(data))
}

func blobsDeletePrefix(t *testing.T, f BlobsFixture) {
	ctx := context.Background()
	mine := []string{domain.PayloadKey(tenantA, "01JOB"), domain.OutputKey(tenantA, "01JOB", "s", 1), domain.InputKey(tenantA, "01JOB", "w", 1)}
	others := []string{domain.PayloadKey(tenantA, "01JOB2"), domain.PayloadKey(tenantB, "01JOB")}
	for _, k := range append(slices.Clone(mine), others...) {
		require.NoError(t, f.Blobs.Put(ctx, k, []byte(`{}`)))
	}
	n, err := f.Blobs.DeletePrefix(ctx, domain.JobDataPrefix(tenantA, "01JOB"))
	require.NoError(t, err)
	require.Equal(t, len(mine), n)
	for _, k := range mine {
		_, err := f.Blobs.Get(ctx, k)
		require.ErrorIs(t, err, domain.ErrNotFound, k)
	}
	for _, k := range others {
		_, err := f.Blobs.Get(ctx, k)
		require.NoError(t, err, "%s is another job's", k)
	}
	n, err = f.Blobs.DeletePrefix(ctx, domain.JobDataPrefix(tenantA, "01JOB"))
	require.NoError(t, err)
	require.Zero(t, n, "again: nothing left")
}
