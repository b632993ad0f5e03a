package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/memory"
)

func TestStoreContract(t *testing.T) {
	t.Parallel()
	enginetest.StoreContract(t, func(t *testing.T) enginetest.StoreFixture {
		clock := &memory.Clock{}
		st := memory.NewStore()
		return enginetest.StoreFixture{
			Store:   st,
			AddKey:  func(_ *testing.T, tenant, key string) { st.AddKey(tenant, key) },
			Corrupt: func(t *testing.T, tenant, id string) { require.NoError(t, st.Corrupt(tenant, id)) },
			Now:     clock.Now(),
		}
	})
}

func TestQueueContract(t *testing.T) {
	t.Parallel()
	enginetest.QueueContract(t, func(t *testing.T) enginetest.QueueFixture {
		clock := &memory.Clock{}
		q := memory.NewQueue(clock.Now, memory.WithMaxWorkerQueues(3))
		return enginetest.QueueFixture{
			Queue:           q,
			TakeReady:       func(_ *testing.T, max int) []engine.Delivery { return q.TakeReady(max) },
			Advance:         clock.Advance,
			MaxWorkerQueues: 3,
			Visibility:      memory.DefaultWorkerVisibility,
		}
	})
}

func TestClock(t *testing.T) {
	t.Parallel()
	var zero memory.Clock
	require.Equal(t, memory.Epoch, zero.Now())
	zero.Advance(time.Minute)
	zero.Advance(-time.Hour) // time does not go back
	require.Equal(t, memory.Epoch.Add(time.Minute), zero.Now())

	start := time.Date(2031, 2, 3, 4, 5, 6, 0, time.FixedZone("x", 3600))
	c := memory.NewClock(start)
	require.Equal(t, time.UTC, c.Now().Location())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	require.True(t, c.Now().Equal(start.Add(800*time.Millisecond)))
}

// p0First is the lane order of most takes: P0, P1, P2 (engine.PriorityOrder).
var p0First = engine.PriorityOrder(1)

// A message received as often as its queue's redrive allows and never
// deleted goes to the dead letters on the next receive, as SQS redrives it.
func TestQueueRedrivesAfterMaxReceives(t *testing.T) {
	t.Parallel()
	clock := &memory.Clock{}
	q := memory.NewQueue(clock.Now, memory.WithMaxReceives(2, 3), memory.WithReadyVisibility(time.Minute))
	j := job(t, `{"steps":[{"id":"b","action":{"type":"pass"}}]}`)
	require.NoError(t, q.Dispatch(context.Background(), j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})))
	for range 2 {
		require.Len(t, q.TakeReady(10), 1)
		clock.Advance(time.Minute)
	}
	require.Empty(t, q.TakeReady(10))
	require.Equal(t, []engine.Message{{Tenant: "t", Job: j.ID, Step: "b"}}, q.DeadLetters())
	require.Zero(t, q.Len("", ""))

	w := job(t, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	require.NoError(t, q.Dispatch(context.Background(), w, engine.Route(w, []domain.Dispatch{{Step: w.Steps[0]}})))
	for range 3 {
		ds, err := q.Take(context.Background(), "t", "q", p0First, 10, 0)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		clock.Advance(memory.DefaultWorkerVisibility)
	}
	ds, err := q.Take(context.Background(), "t", "q", p0First, 10, 0)
	require.NoError(t, err)
	require.Empty(t, ds)
	require.Len(t, q.DeadLetters(), 2)
}

// Tokens are handled as moto handles receipt handles: any token of a
// message acks it, and extends it as it is now.
func TestQueueTokensOfEarlierReceives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &memory.Clock{}
	q := memory.NewQueue(clock.Now)
	w := job(t, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	require.NoError(t, q.Dispatch(ctx, w, engine.Route(w, []domain.Dispatch{{Step: w.Steps[0]}})))
	first, err := q.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err)
	clock.Advance(memory.DefaultWorkerVisibility)
	second, err := q.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err)
	require.Len(t, second, 1)

	require.NoError(t, q.Extend(ctx, first[0].Token, time.Hour), "the first receive's token still names the message")
	clock.Advance(memory.DefaultWorkerVisibility)
	ds, err := q.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err)
	require.Empty(t, ds, "hidden for the hour")
	require.NoError(t, q.Ack(ctx, first[0].Token))
	require.Zero(t, q.Len("t", "q"))
	require.NoError(t, q.Ack(ctx, second[0].Token), "gone already: no error")
	require.Error(t, q.Extend(ctx, second[0].Token, 0))

	require.Error(t, q.Ack(ctx, "mem/99/1"), "never issued")
	require.NoError(t, q.Dispatch(ctx, w, engine.Route(w, []domain.Dispatch{{Step: w.Steps[0]}})))
	third, err := q.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err)
	require.Equal(t, "mem/2/1", third[0].Token)
	require.Error(t, q.Ack(ctx, "mem/2/2"), "a receipt not made yet")
	require.Error(t, q.Ack(ctx, "mem/2/x"))
	_, err = q.Take(ctx, "t", "q", p0First, 11, 0)
	require.Error(t, err, "SQS answers at most 10 a receive")
}

// NextVisible names the next time a message of any queue shows up: a
// delay, a worker lane, a receive's visibility; never one visible already.
func TestQueueNextVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &memory.Clock{}
	q := memory.NewQueue(clock.Now, memory.WithReadyVisibility(time.Hour))
	_, ok := q.NextVisible(clock.Now())
	require.False(t, ok, "no message")

	b := job(t, `{"steps":[{"id":"b","action":{"type":"pass"}}]}`)
	w := job(t, `{"priority":0,"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	require.NoError(t, q.Dispatch(ctx, b, engine.Route(b, []domain.Dispatch{{Step: b.Steps[0], Delay: 90 * time.Second}})))
	require.NoError(t, q.Dispatch(ctx, w, engine.Route(w, []domain.Dispatch{{Step: w.Steps[0], Delay: 1500 * time.Millisecond}})))
	next, ok := q.NextVisible(clock.Now())
	require.True(t, ok)
	require.Equal(t, memory.Epoch.Add(2*time.Second), next, "the P0 lane's message, its delay in whole seconds")

	clock.Advance(2 * time.Second)
	next, _ = q.NextVisible(clock.Now())
	require.Equal(t, memory.Epoch.Add(90*time.Second), next, "one visible now is not next")

	clock.Advance(88 * time.Second)
	require.Len(t, q.TakeReady(10), 1)
	next, _ = q.NextVisible(clock.Now())
	require.Equal(t, clock.Now().Add(time.Hour), next, "a received message comes back after its visibility")
}

// The store bounds a job as DynamoDB bounds its item; the bound can be set.
func TestStoreMaxItemBytesOption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memory.NewStore(memory.WithMaxItemBytes(2048))
	big := job(t, `{"payload":{"pad":"`+randomish(4096)+`"},"steps":[{"id":"b","action":{"type":"pass"}}]}`)
	_, _, err := st.Create(ctx, big, "", memory.Epoch)
	require.Equal(t, domain.CodeTooLarge, domain.CodeOf(err))
	_, err = st.Get(ctx, "t", big.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)

	unbounded := memory.NewStore(memory.WithMaxItemBytes(0))
	_, created, err := unbounded.Create(ctx, big, "", memory.Epoch)
	require.NoError(t, err)
	require.True(t, created)

	// Quarantine is noted, and a later save rewrites the whole record, as
	// PutItem does.
	require.NoError(t, unbounded.Quarantine(ctx, "t", big.ID, "why", memory.Epoch))
	why, ok := unbounded.Quarantined("t", big.ID)
	require.True(t, ok)
	require.Equal(t, "why", why)
	loaded, err := unbounded.Get(ctx, "t", big.ID)
	require.NoError(t, err)
	n := len(loaded.Events)
	_, err = loaded.Cancel(memory.Epoch)
	require.NoError(t, err)
	require.NoError(t, unbounded.Save(ctx, loaded, n))
	_, ok = unbounded.Quarantined("t", big.ID)
	require.False(t, ok)
}

func randomish(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[x%62]
	}
	return string(b)
}

func job(t *testing.T, spec string) *domain.Job {
	t.Helper()
	s, err := domain.ParseJobSpec([]byte(spec))
	require.NoError(t, err)
	j, err := domain.NewJob("t", ulid.Make().String(), s, "", memory.Epoch)
	require.NoError(t, err)
	return j
}

func TestBlobsContract(t *testing.T) {
	t.Parallel()
	enginetest.BlobsContract(t, func(t *testing.T) enginetest.BlobsFixture {
		b := memory.NewBlobs((&memory.Clock{}).Now)
		return enginetest.BlobsFixture{
			Blobs: b,
			Fetch: func(_ *testing.T, url string) ([]byte, error) { return b.Open(url) },
		}
	})
}

func TestBlobURLsExpire(t *testing.T) {
	t.Parallel()
	clock := &memory.Clock{}
	b := memory.NewBlobs(clock.Now)
	require.NoError(t, b.Put(context.Background(), "t/j/s/1", []byte(`1`)))
	u, err := b.URL(context.Background(), "t/j/s/1", time.Minute)
	require.NoError(t, err)
	got, err := b.Open(u)
	require.NoError(t, err)
	require.Equal(t, `1`, string(got))
	clock.Advance(time.Minute)
	_, err = b.Open(u)
	require.ErrorContains(t, err, "expired")
	_, err = b.Open("https://example.com/t/j/s/1")
	require.Error(t, err)
}

func TestPublisherContract(t *testing.T) {
	t.Parallel()
	enginetest.PublisherContract(t, func(t *testing.T) enginetest.PublisherFixture {
		bus := memory.NewBus()
		return enginetest.PublisherFixture{
			Publisher: bus,
			Received: func(t *testing.T, n int) []engine.JobStateChange {
				got := bus.Changes()
				require.Len(t, got, n)
				return got
			},
		}
	})
}
