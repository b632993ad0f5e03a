package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// Races on resource slots, each made to happen with a store that holds or
// fails one write (fault injection around the real in-memory adapter).

const gpuJob = `{"steps":[{"id":"train","action":{"type":"worker","queue":"ml","lease_seconds":60},"requires":{"capabilities":["gpu"]}}]}`

// raceBundle is an engine over st with one-slot resources named ids.
func raceBundle(t *testing.T, st engine.Store, ids ...string) (*engine.Engine, *memory.Queue, *memory.Clock) {
	t.Helper()
	clock := memory.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	q := memory.NewQueue(clock.Now, memory.WithReadyVisibility(builtinLease))
	e := engine.New(engine.Config{Store: st, Queue: q, Runner: &actions.Runner{}, BuiltinLease: builtinLease, Now: clock.Now})
	for _, id := range ids {
		_, _, err := e.PutResource(context.Background(), tenantA, id, []byte(`{"capabilities":["gpu"],"capacity":1}`))
		require.NoError(t, err)
	}
	return e, q, clock
}

// gatedStore holds the next job write of one job until released.
type gatedStore struct {
	*memory.Store
	mu               sync.Mutex
	armed            string
	blocked, release chan struct{}
}

func (g *gatedStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	g.mu.Lock()
	hold := g.armed == j.ID
	if hold {
		g.armed = ""
	}
	g.mu.Unlock()
	if hold {
		close(g.blocked)
		<-g.release
	}
	return g.Store.Save(ctx, j, loaded)
}

// Two claimers of one attempt (a second wake or a sweep's re-send made a
// second message) each ask for a slot of their own: the one that loses the
// job write never gives back the winner's slot.
func TestClaimersRacingForOneAttemptNeverShareASlot(t *testing.T) {
	t.Parallel()
	st := &gatedStore{Store: memory.NewStore(), blocked: make(chan struct{}), release: make(chan struct{})}
	e, q, clock := raceBundle(t, st, "gpu-1")
	ctx := context.Background()
	j, _, err := e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	require.NoError(t, q.Dispatch(ctx, j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})))

	st.mu.Lock()
	st.armed = j.ID
	st.mu.Unlock()
	xDone := make(chan []engine.ClaimedLease)
	go func() {
		ls, _ := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "x"})
		xDone <- ls
	}()
	<-st.blocked // X took the slot and is about to write its lease
	ys, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "y"})
	require.NoError(t, err)
	close(st.release)
	xs := <-xDone
	require.Len(t, append(xs, ys...), 1, "one of the two leases the step")

	got, err := e.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	r, err := e.GetResource(ctx, tenantA, "gpu-1")
	require.NoError(t, err)
	require.Equal(t, 1, r.Live(clock.Now()))
	require.Contains(t, r.Holders, got.Steps[0].Lease.ID, "the slot is the written lease's")

	_, _, err = e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	zs, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "z"})
	require.NoError(t, err)
	require.Empty(t, zs, "gpu-1 has one slot, held by the lease")
}

// failingExtend fails every slot extension, as a throttled UpdateItem would.
type failingExtend struct{ *memory.Store }

func (f failingExtend) ExtendHolder(context.Context, string, string, string, time.Time) error {
	return context.DeadlineExceeded
}

// A heartbeat extends the slot before the lease: one whose slot cannot be
// extended fails and leaves the lease as it was, so no lease outlives its
// slot.
func TestHeartbeatThatCannotExtendTheSlotLeavesTheLease(t *testing.T) {
	t.Parallel()
	e, _, clock := raceBundle(t, failingExtend{memory.NewStore()}, "gpu-1")
	ctx := context.Background()
	j, _, err := e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	ys, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "y"})
	require.NoError(t, err)
	require.Len(t, ys, 1)
	clock.Advance(50 * time.Second)
	_, err = e.Heartbeat(ctx, tenantA, ys[0].LeaseID, 60*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	got, err := e.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.True(t, ys[0].ExpiresAt.Equal(got.Steps[0].Lease.ExpiresAt), "the lease was not extended")
}

// A slot no longer held (taken over once it expired) answers lease lost.
func TestHeartbeatOnASlotTakenOverIsLeaseLost(t *testing.T) {
	t.Parallel()
	st := memory.NewStore()
	e, _, _ := raceBundle(t, st, "gpu-1")
	ctx := context.Background()
	_, _, err := e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	ys, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "y"})
	require.NoError(t, err)
	require.Len(t, ys, 1)
	r, err := e.GetResource(ctx, tenantA, "gpu-1")
	require.NoError(t, err)
	delete(r.Holders, ys[0].LeaseID) // as a taker of the expired slot prunes it
	require.NoError(t, st.SaveResource(ctx, r))
	_, err = e.Heartbeat(ctx, tenantA, ys[0].LeaseID, 60*time.Second)
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	require.ErrorContains(t, err, "lease lost: its slot of resource gpu-1 is no longer held")
}

// conflictOnce answers the first lease write a version conflict after the
// clock moved on: the change is decided again, later.
type conflictOnce struct {
	*memory.Store
	clock *memory.Clock
	done  bool
}

func (c *conflictOnce) Save(ctx context.Context, j *domain.Job, loaded int) error {
	if !c.done && len(j.Steps) > 0 && j.Steps[0].Lease != nil {
		c.done = true
		c.clock.Advance(50 * time.Second)
		return domain.ErrVersionConflict
	}
	return c.Store.Save(ctx, j, loaded)
}

// A change decided again keeps the slot it took, with the new lease's expiry.
func TestRedecidedLeaseKeepsItsSlotUntilItsOwnExpiry(t *testing.T) {
	t.Parallel()
	st := &conflictOnce{Store: memory.NewStore()}
	e, _, clock := raceBundle(t, st, "gpu-1")
	st.clock = clock
	ctx := context.Background()
	_, _, err := e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	st.done = false
	ys, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "y"})
	require.NoError(t, err)
	require.Len(t, ys, 1)
	r, err := e.GetResource(ctx, tenantA, "gpu-1")
	require.NoError(t, err)
	require.Len(t, r.Holders, 1)
	require.True(t, ys[0].ExpiresAt.Equal(r.Holders[ys[0].LeaseID].ExpiresAt), "the slot expires with the lease written")

	clock.Advance(20 * time.Second) // past the first decision's expiry, within the lease
	_, _, err = e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	zs, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "z"})
	require.NoError(t, err)
	require.Empty(t, zs, "gpu-1 has one slot, held by the live lease")
}

// orderedGate holds the next job writes, each until released in turn.
type orderedGate struct {
	*memory.Store
	mu      sync.Mutex
	holds   []chan struct{}
	blocked chan int
}

func (g *orderedGate) Save(ctx context.Context, j *domain.Job, loaded int) error {
	g.mu.Lock()
	var hold chan struct{}
	if len(g.holds) > 0 {
		hold, g.holds = g.holds[0], g.holds[1:]
	}
	g.mu.Unlock()
	if hold != nil {
		g.blocked <- 1
		<-hold
	}
	return g.Store.Save(ctx, j, loaded)
}

// A claimer that took a slot, then lost its race to a resource failure of
// the same step, does not keep a slot of the resource that failed it.
func TestRedecidedLeaseHonoursTheAvoidList(t *testing.T) {
	t.Parallel()
	st := &orderedGate{Store: memory.NewStore(), blocked: make(chan int, 2)}
	e, q, clock := raceBundle(t, st, "gpu-1", "gpu-2")
	ctx := context.Background()
	j, _, err := e.Submit(ctx, tenantA, []byte(gpuJob), "")
	require.NoError(t, err)
	ws, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "w"})
	require.NoError(t, err)
	require.Len(t, ws, 1)
	failed := ws[0].Resource.ID
	require.NoError(t, q.Dispatch(ctx, j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})))

	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	st.mu.Lock()
	st.holds = append(st.holds, release...)
	st.mu.Unlock()
	clock.Advance(59 * time.Second)
	recorded := make(chan error)
	go func() { // the worker reports a resource failure just in time
		_, err := e.Fail(ctx, tenantA, ws[0].LeaseID, engine.Outcome{Class: "resource", Message: "GPU faulted"})
		recorded <- err
	}()
	<-st.blocked
	clock.Advance(2 * time.Second) // expired, for a claimer that reads the job now
	claimed := make(chan []engine.ClaimedLease)
	go func() {
		ls, _ := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "ml", Max: 1, Worker: "x"})
		claimed <- ls
	}()
	<-st.blocked // X reclaimed the expired lease and took a slot, before the failure was written
	close(release[0])
	require.NoError(t, <-recorded)
	close(release[1]) // X loses its race and decides again, with the avoid list
	for _, l := range <-claimed {
		require.NotEqual(t, failed, l.Resource.ID, "attempt %d runs again on the resource that failed it", l.Attempt)
	}
	r, err := e.GetResource(ctx, tenantA, failed)
	require.NoError(t, err)
	require.Zero(t, r.Live(clock.Now()), "the slot X took of %s was given back", failed)
}
