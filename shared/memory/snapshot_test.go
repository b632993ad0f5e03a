package memory_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// adapters are one engine's in-memory adapters.
type adapters struct {
	store     *memory.Store
	queue     *memory.Queue
	schedules *memory.Schedules
	blobs     *memory.Blobs
	eng       *engine.Engine
}

func wire(clock *memory.Clock) adapters {
	a := adapters{store: memory.NewStore(), queue: memory.NewQueue(clock.Now), blobs: memory.NewBlobs(clock.Now)}
	a.schedules = memory.NewSchedules(a.store)
	a.eng = engine.New(engine.Config{
		Store: a.store, Queue: a.queue, Runner: &actions.Runner{}, BuiltinLease: memory.DefaultReadyVisibility, Now: clock.Now,
		Schedules: a.schedules, Blobs: a.blobs, InlineLimit: 64, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	return a
}

// state is what a process keeps in its file: every adapter's snapshot,
// as JSON.
type state struct {
	Store     memory.StoreState       `json:"store"`
	Queue     memory.QueueState       `json:"queue"`
	Schedules []memory.ScheduleRecord `json:"schedules"`
	Blobs     map[string][]byte       `json:"blobs"`
}

func (a adapters) save(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(state{a.store.Snapshot(), a.queue.Snapshot(), a.schedules.Snapshot(), a.blobs.Snapshot()})
	require.NoError(t, err)
	return b
}

func (a adapters) restore(t *testing.T, b []byte) {
	t.Helper()
	var st state
	require.NoError(t, json.Unmarshal(b, &st))
	a.store.Restore(st.Store)
	a.queue.Restore(st.Queue)
	a.schedules.Restore(st.Schedules)
	a.blobs.Restore(st.Blobs)
}

func (a adapters) changes() uint64 {
	return a.store.Changes() + a.queue.Changes() + a.schedules.Changes() + a.blobs.Changes()
}

// runReady plays the ready queues' event source mapping until they are
// empty.
func (a adapters) runReady(t *testing.T) {
	t.Helper()
	for {
		ds := a.queue.TakeReady(memory.MaxReceive)
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			res, err := a.eng.Execute(context.Background(), d)
			require.NoError(t, err)
			if res != engine.Held {
				require.NoError(t, a.queue.Ack(context.Background(), d.Token))
			}
		}
	}
}

// What the adapters hold, written as JSON and restored into new ones, is
// where an engine over them carries on: a lease a worker took before
// completes after, the job then finishes, a message no one took yet is
// still there to claim, an idempotency key answers its job, and the keys,
// resources, schedules, data, counters and the last sweep are as they
// were.
func TestSnapshotRestoresWhereTheEngineLeftOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := memory.NewClock(memory.Epoch)
	a := wire(clock)
	a.store.AddKey("t", "key-t")
	spec := []byte(`{"payload":{"note":"` + strings.Repeat("x", 100) + `"},"steps":[{"id":"p","action":{"type":"pass"}},
		{"id":"w","action":{"type":"worker","queue":"q"},"depends_on":["p"]}]}`)
	j, _, err := a.eng.Submit(ctx, "t", spec, "idem-1")
	require.NoError(t, err)
	a.runReady(t)
	leases, err := a.eng.Claim(ctx, "t", engine.ClaimRequest{Queue: "q", Max: 1, Worker: "w-1"})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	waiting, _, err := a.eng.Submit(ctx, "t", []byte(`{"priority":0,"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`), "")
	require.NoError(t, err)
	_, _, err = a.eng.PutResource(ctx, "t", "gpu-1", []byte(`{"capabilities":["gpu"],"capacity":1}`))
	require.NoError(t, err)
	sched, _, err := a.eng.CreateSchedule(ctx, "t", []byte(`{"id":"nightly","every":"24h","job":{"steps":[{"id":"p","action":{"type":"pass"}}]}}`))
	require.NoError(t, err)
	_, err = a.eng.Sweep(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, a.blobs.Keys(), "the payload is over the inline limit: kept as data")
	stats, err := a.store.Stats(ctx, "t", clock.Now())
	require.NoError(t, err)
	steps, err := a.store.StepStats(ctx, "t")
	require.NoError(t, err)

	saved := a.save(t)
	b := wire(clock)
	before := b.changes()
	b.restore(t, saved)
	require.Greater(t, b.changes(), before, "a restore is a change")
	require.JSONEq(t, string(saved), string(b.save(t)), "restored, the adapters hold what they held")
	require.Equal(t, a.blobs.Keys(), b.blobs.Keys())

	again, created, err := b.eng.Submit(ctx, "t", spec, "idem-1")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, j.ID, again.ID)
	tenant, err := b.store.TenantForKey(ctx, "key-t")
	require.NoError(t, err)
	require.Equal(t, "t", tenant)
	_, err = b.store.GetResource(ctx, "t", "gpu-1")
	require.NoError(t, err)
	_, err = b.schedules.Get(ctx, "t", sched.ID)
	require.NoError(t, err)
	gotStats, err := b.store.Stats(ctx, "t", clock.Now())
	require.NoError(t, err)
	require.Equal(t, stats, gotStats)
	gotSteps, err := b.store.StepStats(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, steps, gotSteps)

	_, err = b.eng.Complete(ctx, "t", leases[0].LeaseID, json.RawMessage(`{"done":true}`))
	require.NoError(t, err, "the lease taken before the restore completes after it")
	b.runReady(t)
	done, err := b.eng.Get(ctx, "t", j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, done.State)
	next, err := b.eng.Claim(ctx, "t", engine.ClaimRequest{Queue: "q", Max: 1, Worker: "w-1"})
	require.NoError(t, err)
	require.Len(t, next, 1, "the message no one had taken is there to claim")
	require.Equal(t, waiting.ID, next[0].JobID)
}

// A token of a message deleted before the snapshot still acks it, as
// any token of a deleted message does, and extends nothing.
func TestRestoredQueueKnowsTheMessagesDeletedBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &memory.Clock{}
	q := memory.NewQueue(clock.Now)
	j := job(t, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	require.NoError(t, q.Dispatch(ctx, j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})))
	ds, err := q.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err)
	require.NoError(t, q.Ack(ctx, ds[0].Token))

	r := memory.NewQueue(clock.Now)
	r.Restore(q.Snapshot())
	require.NoError(t, r.Ack(ctx, ds[0].Token))
	require.ErrorContains(t, r.Extend(ctx, ds[0].Token, time.Minute), "was deleted")
	require.Error(t, r.Ack(ctx, "mem/99/1"), "a token never issued is still refused")
	_, err = r.Take(ctx, "t", "q", p0First, 1, 0)
	require.NoError(t, err, "the worker queue, empty, is still there")
}

// A job whose document is no JSON (Corrupt) is written and restored, and
// stays unreadable.
func TestSnapshotKeepsAnUnreadableJobUnreadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := wire(&memory.Clock{})
	j, _, err := a.eng.Submit(ctx, "t", []byte(`{"steps":[{"id":"p","action":{"type":"pass"}}]}`), "")
	require.NoError(t, err)
	require.NoError(t, a.store.Corrupt("t", j.ID))
	b := wire(&memory.Clock{})
	b.restore(t, a.save(t))
	_, err = b.store.Get(ctx, "t", j.ID)
	require.ErrorIs(t, err, domain.ErrUnreadable)
}
