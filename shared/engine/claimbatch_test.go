package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
)

// settleCounter counts the queue's settling calls and the entries of the
// batched ones.
type settleCounter struct {
	engine.Queue
	mu                        sync.Mutex
	extends, acks             int
	extendAlls, ackAlls       int
	extendEntries, ackEntries int
	takes                     int
}

func (q *settleCounter) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	q.mu.Lock()
	q.takes++
	q.mu.Unlock()
	return q.Queue.Take(ctx, tenant, name, lanes, max, wait)
}

func (q *settleCounter) Extend(ctx context.Context, token string, d time.Duration) error {
	q.mu.Lock()
	q.extends++
	q.mu.Unlock()
	return q.Queue.Extend(ctx, token, d)
}

func (q *settleCounter) Ack(ctx context.Context, token string) error {
	q.mu.Lock()
	q.acks++
	q.mu.Unlock()
	return q.Queue.Ack(ctx, token)
}

func (q *settleCounter) ExtendAll(ctx context.Context, es []engine.Extension) []error {
	q.mu.Lock()
	q.extendAlls++
	q.extendEntries += len(es)
	q.mu.Unlock()
	return q.Queue.ExtendAll(ctx, es)
}

func (q *settleCounter) AckAll(ctx context.Context, tokens []string) []error {
	q.mu.Lock()
	q.ackAlls++
	q.ackEntries += len(tokens)
	q.mu.Unlock()
	return q.Queue.AckAll(ctx, tokens)
}

// A claim of several deliveries settles them in one batch of each kind:
// the leased ones' visibility in one ExtendAll, the one to drop (its job
// cancelled) in one AckAll, and no single Extend or Ack.
func TestClaimSettlesInBatches(t *testing.T) {
	b := setup(t)
	counter := &settleCounter{Queue: b.lossy}
	b.e.Configure(func(c *engine.Config) { c.Queue = counter })
	var ids []string
	for range 4 {
		ids = append(ids, b.submit(t, tenantA, workerJob).ID)
	}
	_, err := b.e.Cancel(b.ctx, tenantA, ids[0])
	require.NoError(t, err)

	ls, err := b.e.Claim(b.ctx, tenantA, engine.ClaimRequest{Queue: "gpu", Max: 10, Worker: "box-1"})
	require.NoError(t, err)
	require.Len(t, ls, 3)
	require.Equal(t, 1, counter.takes, "a short take with leases in hand ends the claim: no second, empty receive")
	require.Equal(t, 0, counter.extends)
	require.Equal(t, 0, counter.acks)
	require.Equal(t, 1, counter.extendAlls)
	require.Equal(t, 3, counter.extendEntries)
	require.Equal(t, 1, counter.ackAlls)
	require.Equal(t, 1, counter.ackEntries)

	// Each leased message stays hidden for its lease, the dropped one is
	// gone: nothing comes back before the leases run out.
	b.clock.Advance(59 * time.Second)
	require.Empty(t, b.claim(t, tenantA, "gpu"))
	b.clock.Advance(2 * time.Second)
	require.Len(t, b.claim(t, tenantA, "gpu"), 3, "the expired leases' steps are claimed again")
}
