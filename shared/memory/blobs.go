package memory

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Blobs = (*Blobs)(nil)

// Blobs is the in-memory blob store. Its URLs are
// memory://blobs/<key>?expires=<unix ms>, read back with Open on the
// store's clock: short, as S3's presigned URLs are (so a test sees a large
// input handed over by reference, not inline), and refused once expired.
type Blobs struct {
	mu      sync.Mutex
	now     func() time.Time
	data    map[string][]byte
	changes changes // snapshot.go
}

// NewBlobs answers an empty store on clock now.
func NewBlobs(now func() time.Time) *Blobs {
	return &Blobs{now: now, data: map[string][]byte{}}
}

// Put writes a copy of data under key.
func (b *Blobs) Put(_ context.Context, key string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data[key] = slices.Clone(data)
	b.changes.add()
	return nil
}

// Get answers a copy of the data under key, or domain.ErrNotFound.
func (b *Blobs) Get(_ context.Context, key string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.data[key]
	if !ok {
		return nil, fmt.Errorf("data %s: %w", key, domain.ErrNotFound)
	}
	return slices.Clone(d), nil
}

// URL answers a memory:// URL of key that Open reads until ttl from now.
func (b *Blobs) URL(_ context.Context, key string, ttl time.Duration) (string, error) {
	u := url.URL{Scheme: "memory", Host: "blobs", Path: "/" + key,
		RawQuery: "expires=" + strconv.FormatInt(b.now().Add(ttl).UnixMilli(), 10)}
	return u.String(), nil
}

// Open reads what a URL of this store names, as a worker would fetch it:
// an error once the URL has expired or when nothing is under its key.
func (b *Blobs) Open(raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "memory" || u.Host != "blobs" {
		return nil, fmt.Errorf("%q is no URL of the memory blob store", raw)
	}
	exp, err := strconv.ParseInt(u.Query().Get("expires"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%q has no expiry", raw)
	}
	if !b.now().Before(time.UnixMilli(exp)) {
		return nil, fmt.Errorf("%q expired at %s", raw, time.UnixMilli(exp).UTC().Format(time.RFC3339))
	}
	return b.Get(context.Background(), u.Path[1:])
}

// Keys answers the keys stored, sorted.
func (b *Blobs) Keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.data))
	for k := range b.data {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Delete removes key, as the bucket's lifecycle rule would expire it.
func (b *Blobs) Delete(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.data, key)
	b.changes.add()
}

// DeletePrefix deletes every key under prefix.
func (b *Blobs) DeletePrefix(_ context.Context, prefix string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k := range b.data {
		if strings.HasPrefix(k, prefix) {
			delete(b.data, k)
			n++
		}
	}
	if n > 0 {
		b.changes.add()
	}
	return n, nil
}
