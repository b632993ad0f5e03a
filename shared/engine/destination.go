package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Where messages go, and in what order a worker queue's lanes are taken,
// is the engine's policy; an adapter maps a Destination to a queue of its
// own (an SQS URL, a list) and decides nothing.

// DestinationKind says which queues a message goes to.
type DestinationKind int

const (
	// ToReady is the ready path: a queue per priority lane, drained by the
	// execute function, for built-in steps.
	ToReady DestinationKind = iota
	// ToWorker is a tenant's worker queue, a queue per priority lane, taken
	// from by claims.
	ToWorker
)

// Destination is where one message goes.
type Destination struct {
	Kind  DestinationKind
	Queue string // the worker queue's name; "" for the ready path
	// Lane is the priority lane, 0 (taken first) to domain.MaxPriority.
	Lane int
}

// DestinationOf answers where the messages of j's step s go: a worker
// step to the tenant's worker queue it names, every other step to the
// ready path, both in the lane of the job's priority.
func DestinationOf(j *domain.Job, s *domain.Step) Destination {
	lane := min(max(j.Priority, 0), domain.MaxPriority)
	if s.Spec.Action.Type == domain.ActionWorker {
		return Destination{Kind: ToWorker, Queue: s.Spec.Action.Queue, Lane: lane}
	}
	return Destination{Kind: ToReady, Lane: lane}
}

// Send is one dispatch with where it goes.
type Send struct {
	domain.Dispatch
	To Destination
	// Doc is the job as its first write stores it, carried so that the
	// delivery takes its lease without reading the job (sendFirst); nil
	// for every other message.
	Doc json.RawMessage
}

// Route answers j's dispatches, each with its destination.
func Route(j *domain.Job, ds []domain.Dispatch) []Send {
	out := make([]Send, len(ds))
	for i, d := range ds {
		out[i] = Send{Dispatch: d, To: DestinationOf(j, d.Step)}
	}
	return out
}

// StarvationGuard is how often a worker queue's take serves its lowest
// priority first: every tenth, so a steady stream of P0 work takes at most
// nine claims in ten and P1 and P2 work still moves.
const StarvationGuard = 10

// PriorityOrder answers the order in which the n-th take (from 1) of a
// worker queue looks at its priorities: P0, P1, P2, except every
// StarvationGuard-th take, which goes P2, P1, P0.
func PriorityOrder(n int) []int {
	if n%StarvationGuard == 0 {
		return []int{2, 1, 0}
	}
	return []int{0, 1, 2}
}

// take takes up to max deliveries from a tenant's worker queue, its lanes
// in the PriorityOrder of this process's count of takes from the queue
// (as each process's takes are counted, so is the guard kept: per process).
func (e *Engine) take(ctx context.Context, tenant, queue string, max int, wait time.Duration) ([]Delivery, error) {
	c, _ := e.takes.LoadOrStore(tenant+"\x00"+queue, new(atomic.Int64))
	n := c.(*atomic.Int64)
	ds, err := e.cfg.Queue.Take(ctx, tenant, queue, PriorityOrder(int(n.Add(1))), max, wait)
	if errors.Is(err, ErrNoWorkerQueue) {
		n.Add(-1) // a take from no queue is none of its takes
	}
	return ds, err
}

// forgetTakes drops the count of takes from a worker queue the sweep
// removed: a queue made again starts anew.
func (e *Engine) forgetTakes(tenant, queue string) { e.takes.Delete(tenant + "\x00" + queue) }
