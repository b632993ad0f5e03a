package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// twoBranches is a fan-out of two worker branches and their fan-in.
const twoBranches = `{"steps":[
	{"id":"left","action":{"type":"worker","queue":"gpu","lease_seconds":60}},
	{"id":"right","action":{"type":"worker","queue":"gpu","lease_seconds":60}},
	{"id":"join","depends_on":["left","right"],"action":{"type":"pass"}}]}`

// twoBranches submits a twoBranches job and claims both its leases.
func (b *bundle) twoBranches(t *testing.T) (j *domain.Job, left, right engine.ClaimedLease) {
	j = b.submit(t, tenantA, twoBranches)
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 2)
	left, right = ls[0], ls[1]
	if left.StepID != "left" {
		left, right = right, left
	}
	return j, left, right
}

func TestAnOutcomeThatLosesARaceIsMarkedAndApplied(t *testing.T) {
	t.Parallel()
	var busy *busyStore
	b := setup(t, withStore(&busy, func(m *memory.Store) *busyStore {
		return &busyStore{Store: m, aside: func(*domain.Job) bool { return true }}
	}))
	j := b.submit(t, tenantA, workerJob)
	l := b.claim(t, tenantA, "gpu")[0]
	// From now on another writer wins every race until the job carries a
	// mark, as a writer of the engine would (it reads the mark and
	// applies it: here it stands aside).
	busy.aside, busy.writes = func(j *domain.Job) bool { return len(j.Marks) > 0 || j.State.Terminal() }, 0

	res, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{"ok":1}`))
	require.NoError(t, err, "without the mark every race is lost: 503 contended")
	require.Equal(t, domain.JobCompleted, res.JobState)
	require.Equal(t, 1, busy.writes, "the other writer won once, then met the mark")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"ok":1}`, string(got.Steps[0].Output))
	require.Empty(t, got.Marks, "the write that applied the mark cleared it")
	require.Zero(t, b.queue.Len(tenantA, "gpu"), "the lease's message was deleted by the write that applied it")
	b.checkEveryJob(t)
}

func TestAMarkIsAppliedByTheNextWriterOfItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, left, right := b.twoBranches(t)
	require.NoError(t, b.store.MarkOutcome(b.ctx, tenantA, j.ID, left.LeaseID, engine.SuccessMark(left.LeaseID, json.RawMessage(`{"side":"l"}`), b.clock.Now())))

	_, err := b.e.Complete(b.ctx, tenantA, right.LeaseID, json.RawMessage(`{"side":"r"}`))
	require.NoError(t, err)
	b.drain(t)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State, "the right branch's write applied the left's mark: the fan-in ran")
	require.JSONEq(t, `{"side":"l"}`, string(got.Steps[0].Output))
	require.JSONEq(t, `{"side":"r"}`, string(got.Steps[1].Output))
	require.Equal(t, domain.StepSucceeded, got.Steps[2].State)
	require.Empty(t, got.Marks)
	version := got.Version

	// The mark's maker, deciding again, finds its outcome recorded.
	res, err := b.e.Complete(b.ctx, tenantA, left.LeaseID, json.RawMessage(`{"side":"l"}`))
	require.NoError(t, err)
	require.Equal(t, domain.StepSucceeded, res.StepState)
	require.Equal(t, version, b.job(t, tenantA, j.ID).Version, "and writes nothing")
	require.Zero(t, b.queue.Len(tenantA, "gpu"))
	b.checkEveryJob(t)
}

func TestAMarkWhoseLeaseRanOutIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, left, right := b.twoBranches(t)
	require.NoError(t, b.store.MarkOutcome(b.ctx, tenantA, j.ID, left.LeaseID, engine.SuccessMark(left.LeaseID, json.RawMessage(`{}`), b.clock.Now())))
	_, err := b.e.Heartbeat(b.ctx, tenantA, right.LeaseID, 0)
	require.NoError(t, err, "a heartbeat is a write of the job: it applies the mark")
	require.Equal(t, domain.StepSucceeded, b.job(t, tenantA, j.ID).Steps[0].State)

	// A mark applied after its lease ran out records nothing; its maker hears 409.
	j2, left, right := b.twoBranches(t)
	require.NoError(t, b.store.MarkOutcome(b.ctx, tenantA, j2.ID, left.LeaseID, engine.SuccessMark(left.LeaseID, json.RawMessage(`{}`), b.clock.Now())))
	b.clock.Advance(61 * 1e9)
	_, err = b.e.Complete(b.ctx, tenantA, right.LeaseID, json.RawMessage(`{}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost, "the right lease ran out too")
	_, err = b.e.Complete(b.ctx, tenantA, left.LeaseID, json.RawMessage(`{}`))
	require.ErrorIs(t, err, domain.ErrLeaseLost)
	got := b.job(t, tenantA, j2.ID)
	require.NotEqual(t, domain.StepSucceeded, got.Steps[0].State)
	b.checkEveryJob(t)
}

func TestManyBranchesEndingTogetherAllRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const width = 24
	steps := []map[string]any{}
	deps := []string{}
	for i := range width {
		id := fmt.Sprintf("b%d", i)
		steps = append(steps, map[string]any{"id": id, "action": map[string]any{"type": "worker", "queue": "gpu", "lease_seconds": 60}})
		deps = append(deps, id)
	}
	steps = append(steps, map[string]any{"id": "join", "depends_on": deps, "action": map[string]any{"type": "pass"}})
	spec, err := json.Marshal(map[string]any{"steps": steps})
	require.NoError(t, err)
	j := b.submit(t, tenantA, string(spec))
	var ls []engine.ClaimedLease
	for len(ls) < width {
		ls = append(ls, b.claim(t, tenantA, "gpu")...)
	}
	var wg sync.WaitGroup
	errs := make([]error, width)
	for i, l := range ls {
		wg.Go(func() { _, errs[i] = b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`)) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "branch %s", ls[i].StepID)
	}
	b.drain(t)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	b.checkEveryJob(t)
}

// savesStore counts the job writes it passes on.
type savesStore struct {
	*memory.Store
	saves int
}

func (s *savesStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	s.saves++
	return s.Store.Save(ctx, j, loaded)
}

func TestAClaimLeasesTheBranchesOfOneJobInOneWrite(t *testing.T) {
	t.Parallel()
	var counted *savesStore
	b := setup(t, withStore(&counted, func(m *memory.Store) *savesStore { return &savesStore{Store: m} }))
	j := b.submit(t, tenantA, twoBranches)
	counted.saves = 0
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 2)
	require.Equal(t, 1, counted.saves, "both leases in one write")
	require.NotEqual(t, ls[0].StepID, ls[1].StepID)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepRunning, got.Steps[0].State)
	require.Equal(t, domain.StepRunning, got.Steps[1].State)
	for _, l := range ls {
		_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`))
		require.NoError(t, err)
	}
	b.drain(t)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	b.checkEveryJob(t)
}
