package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// The worker queue checks run with the queue's and the store's.
func init() {
	queueChecks = append(queueChecks, workerQueueChecks...)
	storeChecks = append(storeChecks, queueUseChecks...)
}

var workerQueueChecks = []check[QueueFixture]{
	{"a request past the bound makes no queue", queueBoundAllOrNone},
	{"depth counts each lane", queueDepth},
	{"only an empty worker queue is deleted", queueDeleteIdle},
	{"the sweep removes worker queues no job named for the idle time", queueSweepIdle},
}

func ensure(t *testing.T, f QueueFixture, tenant string, names ...string) {
	t.Helper()
	require.NoError(t, f.Queue.EnsureWorkerQueues(context.Background(), tenant, names))
}

func queueBoundAllOrNone(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	for i := range f.MaxWorkerQueues - 1 {
		ensure(t, f, tenantA, fmt.Sprintf("q%d", i))
	}
	// One place left; the request names two new queues (and one it has).
	err := f.Queue.EnsureWorkerQueues(ctx, tenantA, []string{"q0", "new1", "new1", "new2"})
	var be *engine.WorkerQueueBoundError
	require.ErrorAs(t, err, &be)
	require.Equal(t, "new2", be.Name, "the first queue past the bound")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.CodeInvalid, de.Code)
	for _, n := range []string{"new1", "new2"} {
		_, err := f.Queue.Take(ctx, tenantA, n, p0First, 1, 0)
		require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "a refused request made nothing: %s", n)
	}
	ensure(t, f, tenantA, "q0", "new1") // what fits is made
	_, err = f.Queue.Take(ctx, tenantA, "new1", p0First, 1, 0)
	require.NoError(t, err)
	require.Error(t, f.Queue.EnsureWorkerQueues(ctx, tenantA, []string{"new2"}), "now full")
	ensure(t, f, tenantA) // nothing named, nothing to check
}

func depthSum(t *testing.T, f QueueFixture, tenant, name string) (d engine.LaneDepth, lanes []int) {
	t.Helper()
	ls, err := f.Queue.WorkerQueueDepth(context.Background(), tenant, name)
	require.NoError(t, err)
	for _, l := range ls {
		d.Visible += l.Visible
		d.InFlight += l.InFlight
		d.Delayed += l.Delayed
		lanes = append(lanes, l.Priority)
	}
	return d, lanes
}

func queueDepth(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	_, err := f.Queue.WorkerQueueDepth(ctx, tenantA, "q")
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue)
	ensure(t, f, tenantA, "q")
	d, lanes := depthSum(t, f, tenantA, "q")
	require.Equal(t, engine.LaneDepth{}, d)
	require.Equal(t, []int{domain.DefaultPriority}, lanes, "one lane until a job of another priority names it")

	dispatch(t, f, workerJob(t, tenantA, "q"), 0)
	dispatch(t, f, workerJob(t, tenantA, "q"), 0)
	dispatch(t, f, workerJob(t, tenantA, "q"), 10*time.Second)
	p0 := newJob(t, tenantA, `{"priority":0,"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`, "", time.Now().UTC())
	dispatch(t, f, p0, 0)
	f.await(t, func() bool {
		d, _ = depthSum(t, f, tenantA, "q")
		return d == engine.LaneDepth{Visible: 3, Delayed: 1}
	}, "3 visible (one on the P0 lane), 1 delayed")
	_, lanes = depthSum(t, f, tenantA, "q")
	require.Equal(t, []int{0, domain.DefaultPriority}, lanes)

	takeN(t, f, tenantA, "q", 2)
	f.await(t, func() bool {
		d, _ = depthSum(t, f, tenantA, "q")
		return d.InFlight == 2 && d.Visible == 1
	}, "2 in flight")

	_, err = f.Queue.WorkerQueueDepth(ctx, tenantB, "q")
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "another tenant's queue is none of b's")
}

func queueDeleteIdle(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	gone, err := f.Queue.DeleteIdleWorkerQueue(ctx, tenantA, "never")
	require.NoError(t, err)
	require.True(t, gone, "a queue never made is deleted already")

	ensure(t, f, tenantA, "q")
	p0 := newJob(t, tenantA, `{"priority":0,"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`, "", time.Now().UTC())
	dispatch(t, f, p0, 0)
	gone, err = f.Queue.DeleteIdleWorkerQueue(ctx, tenantA, "q")
	require.NoError(t, err)
	require.False(t, gone, "a message on a lane keeps the queue")
	ds := takeN(t, f, tenantA, "q", 1)
	gone, err = f.Queue.DeleteIdleWorkerQueue(ctx, tenantA, "q")
	require.NoError(t, err)
	require.False(t, gone, "a message in flight keeps the queue")
	require.NoError(t, f.Queue.Ack(ctx, ds[0].Token))

	f.await(t, func() bool {
		gone, err = f.Queue.DeleteIdleWorkerQueue(ctx, tenantA, "q")
		require.NoError(t, err)
		return gone
	}, "an empty queue is deleted")
	_, err = f.Queue.Take(ctx, tenantA, "q", p0First, 1, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue)

	// Deleted, it counts no more against the bound, and a job naming it
	// again makes it again.
	for i := range f.MaxWorkerQueues - 1 {
		ensure(t, f, tenantA, fmt.Sprintf("other%d", i))
	}
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, 0)
	require.Equal(t, messageOf(j), takeN(t, f, tenantA, "q", 1)[0].Message)
}

// queueSweepIdle drives the engine's sweep over the queue (its records in
// the in-memory store; the store's side is queueUseChecks).
func queueSweepIdle(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	clock := memory.NewClock(time.Now())
	e := engine.New(engine.Config{Store: memory.NewStore(), Queue: f.Queue, BuiltinLease: time.Minute, Now: clock.Now, WorkerQueueIdle: time.Hour})
	submit := func(queue string) error {
		_, _, err := e.Submit(ctx, tenantA, fmt.Appendf(nil, `{"steps":[{"id":"w","action":{"type":"worker","queue":%q}}]}`, queue), "")
		return err
	}
	for i := range f.MaxWorkerQueues {
		require.NoError(t, submit(fmt.Sprintf("q%d", i)))
	}
	err := submit("one-more")
	require.Equal(t, domain.CodeInvalid, domain.CodeOf(err), "the bound holds: %v", err)

	// q0's job is claimed and done: its queue is empty. The others hold
	// their jobs' messages.
	var ls []engine.ClaimedLease
	f.await(t, func() bool {
		ls, err = e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "q0", Max: 1})
		require.NoError(t, err)
		return len(ls) == 1
	}, "a lease from q0")
	_, err = e.Complete(ctx, tenantA, ls[0].LeaseID, nil)
	require.NoError(t, err)

	clock.Advance(59 * time.Minute)
	rep, err := e.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.QueuesRemoved, "not idle long enough")

	clock.Advance(2 * time.Minute)
	f.await(t, func() bool {
		rep, err = e.Sweep(ctx)
		require.NoError(t, err)
		return rep.QueuesRemoved == 1
	}, "the idle, empty queue is removed")
	_, err = f.Queue.Take(ctx, tenantA, "q0", p0First, 1, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue)
	qs, err := e.ListWorkerQueues(ctx, tenantA)
	require.NoError(t, err)
	require.Len(t, qs, f.MaxWorkerQueues-1, "the queues holding messages are kept")

	require.NoError(t, submit("one-more"), "the removed queue no longer counts against the bound")
	rep, err = e.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.QueuesRemoved, "a kept queue is looked at again only after another idle time")
}

var queueUseChecks = []check[StoreFixture]{
	{"worker queue uses are recorded per tenant and come due when idle", storeQueueUses},
}

func storeQueueUses(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	us, ok := f.Store.(engine.WorkerQueueUses)
	require.True(t, ok, "the store keeps worker queue uses too")
	tenant := "qu-" + fmt.Sprint(f.Now.UnixNano()) // the due index is shared by every check
	at := f.Now
	put := func(name string, last time.Time) {
		require.NoError(t, us.PutWorkerQueueUse(ctx, engine.WorkerQueueUse{Tenant: tenant, Name: name, LastUsed: last, Due: last.Add(time.Hour)}))
	}
	put("a", at)
	put("b", at.Add(time.Minute))
	put("a", at.Add(-time.Minute)) // older: the later use stands
	require.NoError(t, us.PutWorkerQueueUse(ctx, engine.WorkerQueueUse{Tenant: tenant + "x", Name: "a", LastUsed: at, Due: at.Add(time.Hour)}))

	got, err := us.WorkerQueueUses(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, got, 2, "the tenant's own, not another's")
	require.Equal(t, "a", got[0].Name)
	require.True(t, got[0].LastUsed.Equal(at), "a later use stands: %v", got[0].LastUsed)
	require.True(t, got[0].Due.Equal(at.Add(time.Hour)))
	require.Equal(t, "b", got[1].Name)

	mine := func(now time.Time) []engine.WorkerQueueUse {
		all, err := us.IdleWorkerQueues(ctx, now, 1000)
		require.NoError(t, err)
		var out []engine.WorkerQueueUse
		for _, u := range all {
			if u.Tenant == tenant {
				out = append(out, u)
			}
		}
		return out
	}
	require.Empty(t, mine(at.Add(59*time.Minute)))
	idle := mine(at.Add(time.Hour))
	require.Len(t, idle, 1)
	require.Equal(t, "a", idle[0].Name)

	put("a", at.Add(time.Minute)) // used again since the sweep read it
	_, err = us.ForgetWorkerQueue(ctx, idle[0])
	require.ErrorIs(t, err, domain.ErrVersionConflict, "a queue used since keeps its record")

	idle = mine(at.Add(2 * time.Hour))
	require.Len(t, idle, 2)
	old, err := us.ForgetWorkerQueue(ctx, idle[0])
	require.NoError(t, err)
	require.True(t, old.LastUsed.Equal(at.Add(time.Minute)), "the record as it was: %v", old.LastUsed)
	require.Len(t, mine(at.Add(2*time.Hour)), 1)
	got, err = us.WorkerQueueUses(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, got, 1)
}
