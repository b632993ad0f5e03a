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

func TestDestinationOfAStep(t *testing.T) {
	t.Parallel()
	worker := &domain.Step{Spec: domain.StepSpec{ID: "w", Action: domain.ActionSpec{Type: domain.ActionWorker, WorkerAction: domain.WorkerAction{Queue: "qa"}}}}
	pass := &domain.Step{Spec: domain.StepSpec{ID: "p", Action: domain.ActionSpec{Type: domain.ActionPass}}}
	for _, tc := range []struct {
		priority int
		lane     int
	}{{0, 0}, {1, 1}, {2, 2}, {-1, 0}, {7, domain.MaxPriority}} {
		j := &domain.Job{Tenant: tenantA, ID: "j", Priority: tc.priority}
		require.Equal(t, engine.Destination{Kind: engine.ToWorker, Queue: "qa", Lane: tc.lane}, engine.DestinationOf(j, worker), "priority %d", tc.priority)
		require.Equal(t, engine.Destination{Kind: engine.ToReady, Lane: tc.lane}, engine.DestinationOf(j, pass), "priority %d", tc.priority)
	}
	j := &domain.Job{Tenant: tenantA, ID: "j", Priority: 2}
	sends := engine.Route(j, []domain.Dispatch{{Step: pass, Delay: time.Second}, {Step: worker, Wake: "r"}})
	require.Equal(t, []engine.Send{
		{Dispatch: domain.Dispatch{Step: pass, Delay: time.Second}, To: engine.Destination{Kind: engine.ToReady, Lane: 2}},
		{Dispatch: domain.Dispatch{Step: worker, Wake: "r"}, To: engine.Destination{Kind: engine.ToWorker, Queue: "qa", Lane: 2}},
	}, sends)
}

// laneSpy records the lanes each take of a worker queue is given.
type laneSpy struct {
	*memory.Queue
	mu    sync.Mutex
	takes map[string][][]int
}

func (q *laneSpy) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	q.mu.Lock()
	q.takes[name] = append(q.takes[name], lanes)
	q.mu.Unlock()
	return q.Queue.Take(ctx, tenant, name, lanes, max, wait)
}

// The engine orders a take's lanes: P0 first, except every tenth take of
// a queue, counted per queue; a take from a queue not made yet is not one
// of its takes.
func TestEveryTenthTakeOfAQueueServesTheLowestFirst(t *testing.T) {
	t.Parallel()
	clock := memory.NewClock(memory.Epoch)
	q := &laneSpy{Queue: memory.NewQueue(clock.Now), takes: map[string][][]int{}}
	e := engine.New(engine.Config{Store: memory.NewStore(), Queue: q, Runner: &actions.Runner{}, BuiltinLease: builtinLease, Now: clock.Now})
	ctx := context.Background()
	claim := func(name string) {
		t.Helper()
		_, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: name, Max: 1, Worker: "w"})
		require.NoError(t, err)
	}
	claim("qa") // no such queue yet: not counted
	require.NoError(t, q.EnsureWorkerQueue(ctx, tenantA, "qa"))
	require.NoError(t, q.EnsureWorkerQueue(ctx, tenantA, "qb"))
	for range 2 * engine.StarvationGuard {
		claim("qa")
	}
	for range engine.StarvationGuard {
		claim("qb")
	}

	lowFirst := []int{2, 1, 0}
	require.Len(t, q.takes["qa"], 1+2*engine.StarvationGuard, "one take a claim of an empty queue")
	for i, lanes := range q.takes["qa"][1:] {
		want := p0First
		if (i+1)%engine.StarvationGuard == 0 {
			want = lowFirst
		}
		require.Equal(t, want, lanes, "take %d of qa", i+1)
	}
	require.Len(t, q.takes["qb"], engine.StarvationGuard)
	for i, lanes := range q.takes["qb"] {
		want := p0First
		if i+1 == engine.StarvationGuard {
			want = lowFirst
		}
		require.Equal(t, want, lanes, "take %d of qb: each queue counts its own", i+1)
	}
}
