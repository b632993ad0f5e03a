package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// EnsureWorkerQueues makes tenant's worker queues names exist, all or
// none: under the queue's lock, so the count and the making are one step
// and the bound is never passed.
func (q *Queue) EnsureWorkerQueues(_ context.Context, tenant string, names []string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var fresh []string
	for _, n := range names {
		if _, ok := q.workers[workerKey{tenant, n}]; !ok && !slices.Contains(fresh, n) {
			fresh = append(fresh, n)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if have := q.countLocked(tenant); have+len(fresh) > q.maxWorkerQueues {
		return engine.NewWorkerQueueBoundError(tenant, fresh, have, q.maxWorkerQueues)
	}
	for _, n := range fresh {
		if _, err := q.ensureLocked(tenant, n); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) countLocked(tenant string) int {
	n := 0
	for wk := range q.workers {
		if wk.tenant == tenant {
			n++
		}
	}
	return n
}

// WorkerQueueDepth answers what each lane of a tenant's worker queue
// holds: a message not yet received and not yet visible is delayed, one
// received and hidden is in flight.
func (q *Queue) WorkerQueueDepth(_ context.Context, tenant, name string) ([]engine.LaneDepth, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wk := workerKey{tenant, name}
	f, ok := q.workers[wk]
	if !ok {
		return nil, fmt.Errorf("worker queue %q of tenant %s: %w", name, tenant, engine.ErrNoWorkerQueue)
	}
	now := q.now()
	var out []engine.LaneDepth
	for p := range domain.MaxPriority + 1 {
		lane := f
		if p != domain.DefaultPriority {
			if lane = q.lanes[laneKey{wk, p}]; lane == nil {
				continue
			}
		}
		d := engine.LaneDepth{Priority: p}
		for _, m := range lane.msgs {
			switch {
			case !m.visibleAt.After(now):
				d.Visible++
			case m.receives > 0:
				d.InFlight++
			default:
				d.Delayed++
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// DeleteIdleWorkerQueue deletes a tenant's worker queue and its lanes if
// none holds a message.
func (q *Queue) DeleteIdleWorkerQueue(_ context.Context, tenant, name string) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wk := workerKey{tenant, name}
	f, ok := q.workers[wk]
	if !ok {
		return true, nil
	}
	if len(f.msgs) > 0 {
		return false, nil
	}
	for p := range domain.MaxPriority + 1 {
		if l := q.lanes[laneKey{wk, p}]; l != nil && len(l.msgs) > 0 {
			return false, nil
		}
	}
	delete(q.workers, wk)
	for p := range domain.MaxPriority + 1 {
		delete(q.lanes, laneKey{wk, p})
	}
	q.changes.add()
	return true, nil
}

// queueUses is the in-memory store's record of worker queue uses, kept
// beside the jobs as the DynamoDB store keeps them in its table.
type queueUses struct {
	mu      sync.Mutex
	m       map[jobKey]engine.WorkerQueueUse // tenant, queue name
	changes changes                          // snapshot.go
}

var _ engine.WorkerQueueUses = (*Store)(nil)

// PutWorkerQueueUse records u unless a later use is recorded.
func (s *Store) PutWorkerQueueUse(_ context.Context, u engine.WorkerQueueUse) error {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	if s.uses.m == nil {
		s.uses.m = map[jobKey]engine.WorkerQueueUse{}
	}
	k := jobKey{u.Tenant, u.Name}
	if old, ok := s.uses.m[k]; ok && old.LastUsed.After(u.LastUsed) {
		return nil
	}
	u.LastUsed, u.Due = u.LastUsed.UTC().Truncate(time.Millisecond), u.Due.UTC().Truncate(time.Millisecond)
	s.uses.m[k] = u
	s.uses.changes.add()
	return nil
}

// WorkerQueueUses answers the tenant's recorded queues, by name.
func (s *Store) WorkerQueueUses(_ context.Context, tenant string) ([]engine.WorkerQueueUse, error) {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	var out []engine.WorkerQueueUse
	for k, u := range s.uses.m {
		if k.tenant == tenant {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b engine.WorkerQueueUse) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// IdleWorkerQueues answers the records due at or before now, earliest
// first, at most limit.
func (s *Store) IdleWorkerQueues(_ context.Context, now time.Time, limit int) ([]engine.WorkerQueueUse, error) {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	var out []engine.WorkerQueueUse
	for _, u := range s.uses.m {
		if !u.Due.After(now) {
			out = append(out, engine.WorkerQueueUse{Tenant: u.Tenant, Name: u.Name, Due: u.Due}) // what the due index holds
		}
	}
	slices.SortFunc(out, func(a, b engine.WorkerQueueUse) int { return a.Due.Compare(b.Due) })
	return out[:min(len(out), limit)], nil
}

// ForgetWorkerQueue removes u's record if its due time is still u's.
func (s *Store) ForgetWorkerQueue(_ context.Context, u engine.WorkerQueueUse) (engine.WorkerQueueUse, error) {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	k := jobKey{u.Tenant, u.Name}
	old, ok := s.uses.m[k]
	if !ok || !old.Due.Equal(u.Due) {
		return u, fmt.Errorf("forget worker queue %s: %w", u.Name, domain.ErrVersionConflict)
	}
	delete(s.uses.m, k)
	s.uses.changes.add()
	return old, nil
}
