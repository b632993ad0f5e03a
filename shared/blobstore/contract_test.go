package blobstore_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/blobstore"
	"github.com/stepflow/stepflow/shared/enginetest"
)

// TestBlobsContract runs the engine's blob store contract against S3 on the
// emulator: each check gets the bucket of a stack of its own, and reads
// URLs with a plain HTTP client, as a worker does.
func TestBlobsContract(t *testing.T) {
	t.Parallel()
	enginetest.BlobsContract(t, func(t *testing.T) enginetest.BlobsFixture {
		h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
		bucket := h.Resources.Buckets["DataBucket"]
		require.NotEmpty(t, bucket)
		return enginetest.BlobsFixture{
			Blobs: blobstore.New(h.S3, bucket),
			Fetch: func(t *testing.T, url string) ([]byte, error) {
				res, err := http.Get(url) // no credentials: the URL is presigned
				if err != nil {
					return nil, err
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				if err != nil {
					return nil, err
				}
				if res.StatusCode != http.StatusOK {
					return nil, fmt.Errorf("GET answered %s: %.200s", res.Status, b)
				}
				return b, nil
			},
		}
	})
}
