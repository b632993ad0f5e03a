package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var queueChecks = []check[QueueFixture]{
	{"dispatch then take", queueDispatchTake},
	{"worker queues are the tenant's own", queuePerTenant},
	{"take from a queue no job named", queueNoWorkerQueue},
	{"worker queues are bounded per tenant", queueBound},
	{"a delayed message is not visible early", queueDelay},
	{"delays are capped at 900 s", queueDelayCap},
	{"take answers at most max", queueTakeMax},
	{"extend hides a delivery", queueExtend},
	{"release shows a delivery again", queueRelease},
	{"ack removes a delivery", queueAck},
	{"several are settled at once, each entry answered", queueSettleAll},
	{"an unacked delivery comes back", queueRedelivery},
	{"the ready path carries built-in steps", queueReady},
	{"a send goes where its destination says", queueDestination},
	{"a take looks at the lanes given, in their order", queueLaneOrder},
	{"a destination past the lanes is refused", queueNoSuchLane},
	{"several jobs dispatch together", queueDispatchJobs},
}

// p0First is the lane order of most takes: P0, P1, P2 (engine.PriorityOrder).
var p0First = engine.PriorityOrder(1)

func workerJob(t *testing.T, tenant, queue string) *domain.Job {
	t.Helper()
	return newJob(t, tenant, fmt.Sprintf(`{"steps":[{"id":"w","action":{"type":"worker","queue":%q}}]}`, queue), "", time.Now().UTC())
}

func builtinJob(t *testing.T, tenant string, priority int) *domain.Job {
	t.Helper()
	return newJob(t, tenant, fmt.Sprintf(`{"priority":%d,"steps":[{"id":"b","action":{"type":"pass"}}]}`, priority), "", time.Now().UTC())
}

// workerJobAt is workerJob at a priority.
func workerJobAt(t *testing.T, tenant, queue string, priority int) *domain.Job {
	t.Helper()
	return newJob(t, tenant, fmt.Sprintf(`{"priority":%d,"steps":[{"id":"w","action":{"type":"worker","queue":%q}}]}`, priority, queue), "", time.Now().UTC())
}

// dispatch sends j's first step after delay.
func dispatch(t *testing.T, f QueueFixture, j *domain.Job, delay time.Duration) {
	t.Helper()
	require.NoError(t, f.Queue.Dispatch(context.Background(), j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0], Delay: delay}})))
}

func messageOf(j *domain.Job) engine.Message {
	return engine.Message{Tenant: j.Tenant, Job: j.ID, Step: j.Steps[0].ID()}
}

// await requires cond to hold: without time passing on a fixture whose
// time the suite moves (cond may take a few calls, each taking more), within
// f.Wait on one on real time (polled, never slept on).
func (f QueueFixture) await(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(what, args...)
	if !f.RealTime {
		for range 20 {
			if cond() {
				return
			}
		}
		require.Fail(t, "not so, and the clock has not moved: "+msg)
	}
	if cond() {
		return
	}
	require.Eventually(t, cond, f.Wait, 25*time.Millisecond, msg)
}

// take makes one Take from tenant's worker queue name, P0 first.
func take(t *testing.T, f QueueFixture, tenant, name string, max int) []engine.Delivery {
	t.Helper()
	return takeLanes(t, f, tenant, name, p0First, max)
}

// takeLanes makes one Take from the lanes of tenant's worker queue name,
// in the order given.
func takeLanes(t *testing.T, f QueueFixture, tenant, name string, lanes []int, max int) []engine.Delivery {
	t.Helper()
	ds, err := f.Queue.Take(context.Background(), tenant, name, lanes, max, 0)
	require.NoError(t, err)
	require.LessOrEqual(t, len(ds), max)
	return ds
}

// takeN takes from tenant's worker queue name until it has n deliveries.
func takeN(t *testing.T, f QueueFixture, tenant, name string, n int) []engine.Delivery {
	t.Helper()
	var got []engine.Delivery
	f.await(t, func() bool {
		got = append(got, take(t, f, tenant, name, min(n-len(got), 10))...)
		return len(got) >= n
	}, "%d deliveries from %s/%s", n, tenant, name)
	return got
}

// readyN takes from the ready path until it has n deliveries.
func readyN(t *testing.T, f QueueFixture, n int) []engine.Delivery {
	t.Helper()
	var got []engine.Delivery
	f.await(t, func() bool {
		got = append(got, f.TakeReady(t, n-len(got))...)
		return len(got) >= n
	}, "%d deliveries from the ready path", n)
	return got
}

func messages(ds []engine.Delivery) []engine.Message {
	var out []engine.Message
	for _, d := range ds {
		out = append(out, d.Message)
	}
	return out
}

func queueDispatchTake(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	j := workerJob(t, tenantA, "q1")
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q1"))
	require.Empty(t, take(t, f, tenantA, "q1", 10), "a new queue is empty")
	dispatch(t, f, j, 0)
	ds := takeN(t, f, tenantA, "q1", 1)
	require.Len(t, ds, 1)
	require.Equal(t, messageOf(j), ds[0].Message)
	require.NotEmpty(t, ds[0].Token)
	require.NoError(t, f.Queue.Ack(ctx, ds[0].Token))

	// A worker step's dispatch makes its queue when no submission did.
	k := workerJob(t, tenantA, "q2")
	dispatch(t, f, k, 0)
	ds = takeN(t, f, tenantA, "q2", 1)
	require.Equal(t, messageOf(k), ds[0].Message)
}

// queuePerTenant: tenant "a" with queue "x-q1" and tenant "a-x" with queue
// "q1" are two queues, although naive names would join them.
func queuePerTenant(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, "a", "x-q1"))
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, "a-x", "q1"))
	ja, jax := workerJob(t, "a", "x-q1"), workerJob(t, "a-x", "q1")
	dispatch(t, f, ja, 0)
	dispatch(t, f, jax, 0)

	got := takeN(t, f, "a", "x-q1", 1)
	require.Equal(t, []engine.Message{messageOf(ja)}, messages(got))
	got = takeN(t, f, "a-x", "q1", 1)
	require.Equal(t, []engine.Message{messageOf(jax)}, messages(got))
	require.Empty(t, take(t, f, "a", "x-q1", 10))
	require.Empty(t, take(t, f, "a-x", "q1", 10))

	_, err := f.Queue.Take(ctx, "b", "x-q1", p0First, 10, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "another tenant's name is no queue of b's")
	_, err = f.Queue.Take(ctx, "a", "q1", p0First, 10, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue)
}

func queueNoWorkerQueue(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	for range 2 { // a take creates nothing
		_, err := f.Queue.Take(ctx, tenantA, "never", p0First, 10, 0)
		require.ErrorIs(t, err, engine.ErrNoWorkerQueue)
	}
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "never"))
	require.Empty(t, take(t, f, tenantA, "never", 10))
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "never"), "ensuring it again is no error")
}

func queueBound(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	for i := range f.MaxWorkerQueues {
		require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, fmt.Sprintf("q%d", i)))
	}
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q0"), "a queue the tenant has is no new one")

	err := f.Queue.EnsureWorkerQueue(ctx, tenantA, "one-more")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.CodeInvalid, de.Code)
	require.NotEmpty(t, de.Message)
	_, err = f.Queue.Take(ctx, tenantA, "one-more", p0First, 1, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "nothing was made")
	over := workerJob(t, tenantA, "one-more")
	require.Error(t, f.Queue.Dispatch(ctx, over, engine.Route(over, []domain.Dispatch{{Step: over.Steps[0]}})),
		"a dispatch cannot make a queue past the bound either")

	// The bound is each tenant's own.
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantB, "one-more"))
}

func queueDelay(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, 1500*time.Millisecond) // rounded up to 2 s, as DelaySeconds
	require.Empty(t, take(t, f, tenantA, "q", 10), "not visible before its delay")
	f.Advance(time.Second)
	require.Empty(t, take(t, f, tenantA, "q", 10), "a delay is rounded up to whole seconds")
	f.Advance(time.Second)
	got := takeN(t, f, tenantA, "q", 1)
	require.Equal(t, messageOf(j), got[0].Message)

	// A negative delay is none.
	k := workerJob(t, tenantA, "q")
	dispatch(t, f, k, -time.Hour)
	got = takeN(t, f, tenantA, "q", 1)
	require.Equal(t, messageOf(k), got[0].Message)
}

func queueDelayCap(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, time.Hour) // SQS refuses a DelaySeconds over 900: the adapter caps it
	require.Empty(t, take(t, f, tenantA, "q", 10))
	b := builtinJob(t, tenantA, 1)
	dispatch(t, f, b, 2*time.Hour)
	require.Empty(t, f.TakeReady(t, 10))
	if f.RealTime {
		t.Log("not waiting 900 s for the capped delays to run out on real time")
		return
	}
	f.Advance(900*time.Second - time.Second)
	require.Empty(t, take(t, f, tenantA, "q", 10))
	f.Advance(time.Second)
	require.Equal(t, []engine.Message{messageOf(j)}, messages(take(t, f, tenantA, "q", 10)), "visible after 900 s, not an hour")
	require.Equal(t, []engine.Message{messageOf(b)}, messages(f.TakeReady(t, 10)))
}

func queueTakeMax(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	var want []engine.Message
	for range 5 {
		j := workerJob(t, tenantA, "q")
		dispatch(t, f, j, 0)
		want = append(want, messageOf(j))
	}
	var got []engine.Message
	f.await(t, func() bool {
		ds := take(t, f, tenantA, "q", 2)
		require.LessOrEqual(t, len(ds), 2)
		got = append(got, messages(ds)...)
		return len(got) >= len(want)
	}, "every message, two at a time")
	require.ElementsMatch(t, want, got, "each once: a taken message is hidden")
	require.Empty(t, take(t, f, tenantA, "q", 10))
}

func queueExtend(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, 0)
	d := takeN(t, f, tenantA, "q", 1)[0]
	require.NoError(t, f.Queue.Extend(ctx, d.Token, time.Hour))
	f.Advance(f.Visibility + time.Second)
	require.Empty(t, take(t, f, tenantA, "q", 10), "hidden past the visibility timeout")
	f.Advance(30 * time.Minute)
	require.Empty(t, take(t, f, tenantA, "q", 10))
	// It was this delivery that was hidden: releasing it shows it.
	require.NoError(t, f.Queue.Release(ctx, d.Token))
	got := takeN(t, f, tenantA, "q", 1)
	require.Equal(t, messageOf(j), got[0].Message)
}

func queueRelease(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, 0)
	d := takeN(t, f, tenantA, "q", 1)[0]
	require.Empty(t, take(t, f, tenantA, "q", 10), "a taken message is hidden")
	require.NoError(t, f.Queue.Release(ctx, d.Token))
	again := takeN(t, f, tenantA, "q", 1)[0]
	require.Equal(t, d.Message, again.Message)
	require.NotEqual(t, d.Token, again.Token, "each receive has a token of its own")
	require.NoError(t, f.Queue.Ack(ctx, again.Token))
}

func queueAck(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j, k := workerJob(t, tenantA, "q"), workerJob(t, tenantA, "q")
	dispatch(t, f, j, 0)
	dispatch(t, f, k, 0)
	ds := takeN(t, f, tenantA, "q", 2)
	acked := ds[0]
	require.NoError(t, f.Queue.Ack(ctx, acked.Token))
	require.NoError(t, f.Queue.Ack(ctx, acked.Token), "acking again is no error")
	require.Error(t, f.Queue.Extend(ctx, acked.Token, time.Minute), "an acked delivery is gone")
	require.Error(t, f.Queue.Release(ctx, acked.Token))
	require.Error(t, f.Queue.Ack(ctx, "not a token"))

	// The other comes back when released; the acked one never does.
	require.NoError(t, f.Queue.Release(ctx, ds[1].Token))
	got := takeN(t, f, tenantA, "q", 1)
	require.Equal(t, ds[1].Message, got[0].Message)
	require.NoError(t, f.Queue.Ack(ctx, got[0].Token))
	f.Advance(2 * f.Visibility)
	require.Empty(t, take(t, f, tenantA, "q", 10))
}

func queueRedelivery(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	j := workerJob(t, tenantA, "q")
	dispatch(t, f, j, 0)
	d := takeN(t, f, tenantA, "q", 1)[0]
	// Neither acked nor extended for long: it comes back (a second).
	require.NoError(t, f.Queue.Extend(ctx, d.Token, time.Second))
	f.Advance(time.Second)
	again := takeN(t, f, tenantA, "q", 1)[0]
	require.Equal(t, d.Message, again.Message)
	require.NotEqual(t, d.Token, again.Token)
	require.NoError(t, f.Queue.Ack(ctx, again.Token))
	f.Advance(2 * f.Visibility)
	require.Empty(t, take(t, f, tenantA, "q", 10))

	if f.RealTime {
		t.Logf("not waiting the visibility timeout (%s) itself out on real time", f.Visibility)
		return
	}
	// Left alone, a delivery comes back at the visibility timeout.
	k := workerJob(t, tenantA, "q")
	dispatch(t, f, k, 0)
	require.Len(t, take(t, f, tenantA, "q", 10), 1)
	f.Advance(f.Visibility - time.Second)
	require.Empty(t, take(t, f, tenantA, "q", 10))
	f.Advance(time.Second)
	require.Equal(t, []engine.Message{messageOf(k)}, messages(take(t, f, tenantA, "q", 10)))
}

func queueReady(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	low, high := builtinJob(t, tenantA, 2), builtinJob(t, tenantB, 0)
	w := workerJob(t, tenantA, "q")
	dispatch(t, f, low, 0)
	dispatch(t, f, w, 0)
	dispatch(t, f, high, 0)

	got := readyN(t, f, 2)
	require.Equal(t, []engine.Message{messageOf(high), messageOf(low)}, messages(got), "P0 first; worker steps never on the ready path")
	require.Empty(t, f.TakeReady(t, 10), "taken messages are hidden")
	require.Equal(t, []engine.Message{messageOf(w)}, messages(takeN(t, f, tenantA, "q", 1)), "a worker step goes to its worker queue")

	// Tokens of the ready path work as the worker queues' do (the execute
	// function extends a held message, and acks a done one).
	require.NoError(t, f.Queue.Ack(ctx, got[0].Token))
	require.NoError(t, f.Queue.Extend(ctx, got[1].Token, time.Second))
	f.Advance(time.Second)
	again := readyN(t, f, 1)
	require.Equal(t, messageOf(low), again[0].Message)
	require.NoError(t, f.Queue.Ack(ctx, again[0].Token))
	f.Advance(time.Hour)
	require.Empty(t, f.TakeReady(t, 10))

	// A retry is a delayed message on the ready path too.
	r := builtinJob(t, tenantA, 1)
	dispatch(t, f, r, 2*time.Second)
	require.Empty(t, f.TakeReady(t, 10))
	f.Advance(2 * time.Second)
	require.Equal(t, []engine.Message{messageOf(r)}, messages(readyN(t, f, 1)))
}

// queueDestination: the adapter sends where the engine's destination
// says, whatever the step's action (it decides nothing itself).
func queueDestination(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	b := builtinJob(t, tenantA, 1)
	toWorker := engine.Send{Dispatch: domain.Dispatch{Step: b.Steps[0]}, To: engine.Destination{Kind: engine.ToWorker, Queue: "q", Lane: 0}}
	require.NoError(t, f.Queue.Dispatch(ctx, b, []engine.Send{toWorker}), "a destination's worker queue is made if missing")
	w := workerJob(t, tenantA, "q")
	toReady := engine.Send{Dispatch: domain.Dispatch{Step: w.Steps[0]}, To: engine.Destination{Kind: engine.ToReady, Lane: 2}}
	require.NoError(t, f.Queue.Dispatch(ctx, w, []engine.Send{toReady}))

	require.Equal(t, []engine.Message{messageOf(w)}, messages(readyN(t, f, 1)), "the worker step went to the ready path")
	var got []engine.Delivery
	f.await(t, func() bool {
		got = append(got, takeLanes(t, f, tenantA, "q", []int{0}, 10)...)
		return len(got) >= 1
	}, "the built-in step from lane 0 of the worker queue")
	require.Equal(t, []engine.Message{messageOf(b)}, messages(got))
	require.Empty(t, takeLanes(t, f, tenantA, "q", []int{1, 2}, 10), "nothing on the other lanes")
}

// queueLaneOrder: a job's priority is its lane (Route); a take answers
// from the lanes it is given, in their order, and from no other.
func queueLaneOrder(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	jobs := map[int]*domain.Job{}
	for _, p := range []int{2, 1, 0} {
		jobs[p] = workerJobAt(t, tenantA, "q", p)
		dispatch(t, f, jobs[p], 0)
	}
	takeOne := func(lanes []int, want *domain.Job, what string) {
		t.Helper()
		var got []engine.Delivery
		f.await(t, func() bool {
			got = append(got, takeLanes(t, f, tenantA, "q", lanes, 1)...)
			return len(got) >= 1
		}, "%s", what)
		require.Equal(t, []engine.Message{messageOf(want)}, messages(got), what)
		require.NoError(t, f.Queue.Ack(ctx, got[0].Token))
	}
	takeOne([]int{0, 1, 2}, jobs[0], "P0 first")
	require.Empty(t, takeLanes(t, f, tenantA, "q", []int{0}, 10), "a lane not given is not looked at")
	takeOne([]int{2, 1, 0}, jobs[2], "P2 first when asked so")
	takeOne([]int{2, 1, 0}, jobs[1], "then P1")
	require.Empty(t, take(t, f, tenantA, "q", 10))

	// One take gathers from several lanes, in their order.
	low, high := workerJobAt(t, tenantA, "q", 2), workerJobAt(t, tenantA, "q", 0)
	dispatch(t, f, low, 0)
	dispatch(t, f, high, 0)
	var got []engine.Delivery
	f.await(t, func() bool {
		got = append(got, takeLanes(t, f, tenantA, "q", []int{2, 1, 0}, 2-len(got))...)
		return len(got) >= 2
	}, "both, from two lanes")
	require.Equal(t, []engine.Message{messageOf(low), messageOf(high)}, messages(got))
}

// queueNoSuchLane: a lane past the priorities names no queue; nothing is
// made or sent.
func queueNoSuchLane(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	j := workerJob(t, tenantA, "q")
	for _, to := range []engine.Destination{
		{Kind: engine.ToReady, Lane: -1}, {Kind: engine.ToReady, Lane: domain.MaxPriority + 1},
		{Kind: engine.ToWorker, Queue: "q", Lane: domain.MaxPriority + 1},
	} {
		require.Error(t, f.Queue.Dispatch(ctx, j, []engine.Send{{Dispatch: domain.Dispatch{Step: j.Steps[0]}, To: to}}), "lane %d", to.Lane)
	}
	_, err := f.Queue.Take(ctx, tenantA, "q", p0First, 1, 0)
	require.ErrorIs(t, err, engine.ErrNoWorkerQueue, "nothing was made")
	require.Empty(t, f.TakeReady(t, 10))
}

// queueDispatchJobs: one DispatchJobs sends every job's messages, more
// than one send's worth (SQS takes ten a call) and to several queues; a
// job whose send has nowhere to go is named and sends nothing, and the
// others go all the same.
func queueDispatchJobs(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	var batch []engine.JobSends
	var ready, workers []engine.Message
	for i := range 23 {
		j := builtinJob(t, tenantA, i%2)
		if i%4 == 0 {
			j = workerJob(t, tenantA, "q")
			workers = append(workers, messageOf(j))
		} else {
			ready = append(ready, messageOf(j))
		}
		batch = append(batch, engine.JobSends{Job: j, Sends: engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})})
	}
	bad := builtinJob(t, tenantA, 1)
	batch = append(batch[:5:5], append([]engine.JobSends{{Job: bad, Sends: []engine.Send{
		{Dispatch: domain.Dispatch{Step: bad.Steps[0]}, To: engine.Destination{Kind: engine.ToReady, Lane: domain.MaxPriority + 1}},
	}}}, batch[5:]...)...)
	err := f.Queue.DispatchJobs(ctx, batch)
	require.Error(t, err)
	require.Contains(t, err.Error(), bad.ID, "the job not sent is named")

	require.ElementsMatch(t, ready, messages(readyN(t, f, len(ready))))
	require.ElementsMatch(t, workers, messages(takeN(t, f, tenantA, "q", len(workers))))
	require.Empty(t, f.TakeReady(t, 10), "nothing of the refused job went")
	require.NoError(t, f.Queue.DispatchJobs(ctx, nil), "an empty batch sends nothing")
}

// queueSettleAll: ExtendAll and AckAll settle as Extend and Ack each
// would, more than a batch of ten at once, and an entry refused (one
// acked already, not a token) fails alone.
func queueSettleAll(t *testing.T, f QueueFixture) {
	ctx := context.Background()
	require.NoError(t, f.Queue.EnsureWorkerQueue(ctx, tenantA, "q"))
	const n = 12
	for range n {
		dispatch(t, f, workerJob(t, tenantA, "q"), 0)
	}
	ds := takeN(t, f, tenantA, "q", n)
	gone := ds[0]
	require.NoError(t, f.Queue.Ack(ctx, gone.Token))

	var es []engine.Extension
	for _, d := range ds {
		es = append(es, engine.Extension{Token: d.Token, For: time.Hour})
	}
	es = append(es, engine.Extension{Token: "not a token", For: time.Hour})
	errs := f.Queue.ExtendAll(ctx, es)
	require.Len(t, errs, n+1)
	require.Error(t, errs[0], "an acked delivery is gone, as for Extend")
	require.Error(t, errs[n], "not a token")
	for i := 1; i < n; i++ {
		require.NoError(t, errs[i], "entry %d", i)
	}
	f.Advance(f.Visibility + time.Second)
	require.Empty(t, take(t, f, tenantA, "q", 10), "each extended past the visibility timeout")

	// Three shown again now, the rest acked (with one refused among them).
	shown := []engine.Extension{{Token: ds[1].Token}, {Token: ds[2].Token}, {Token: ds[3].Token}}
	require.Equal(t, []error{nil, nil, nil}, f.Queue.ExtendAll(ctx, shown))
	var tokens []string
	for _, d := range ds[4:] {
		tokens = append(tokens, d.Token)
	}
	tokens = append(tokens, "not a token")
	errs = f.Queue.AckAll(ctx, tokens)
	require.Len(t, errs, len(tokens))
	require.Error(t, errs[len(tokens)-1])
	for _, err := range errs[:len(tokens)-1] {
		require.NoError(t, err)
	}
	again := takeN(t, f, tenantA, "q", 3)
	require.ElementsMatch(t, messages(ds[1:4]), messages(again))
	require.Empty(t, f.Queue.AckAll(ctx, nil))
	for _, err := range f.Queue.AckAll(ctx, []string{again[0].Token, again[1].Token, again[2].Token}) {
		require.NoError(t, err)
	}
	f.Advance(2 * f.Visibility)
	require.Empty(t, take(t, f, tenantA, "q", 10))
}
