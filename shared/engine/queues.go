package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// DefaultWorkerQueueIdle is how long a worker queue no job names stays
// before the sweep removes it (STEPFLOW_WORKER_QUEUE_IDLE_SECONDS).
const DefaultWorkerQueueIdle = 7 * 24 * time.Hour

// WorkerQueueUses records when jobs last named each tenant's worker
// queues, with a due time in the due index the sweep reads, so the sweep
// visits only queues whose idle time has run out: its cost follows the
// queues removed, not the queues kept. (A port of its own, beside Store;
// both stores implement it.)
type WorkerQueueUses interface {
	// PutWorkerQueueUse records u unless a later use of the queue is
	// recorded already (that one stands; no error).
	PutWorkerQueueUse(ctx context.Context, u WorkerQueueUse) error
	// WorkerQueueUses answers the tenant's recorded queues, by name.
	WorkerQueueUses(ctx context.Context, tenant string) ([]WorkerQueueUse, error)
	// IdleWorkerQueues answers recorded queues due at or before now, at
	// most limit from each part of the due index.
	IdleWorkerQueues(ctx context.Context, now time.Time, limit int) ([]WorkerQueueUse, error)
	// IdleWorkerQueues answers Tenant, Name and Due (the due index holds
	// no more). ForgetWorkerQueue removes u's record if its due time is
	// still u.Due, and answers it whole; domain.ErrVersionConflict if the
	// queue was used (or its record rewritten) since.
	ForgetWorkerQueue(ctx context.Context, u WorkerQueueUse) (WorkerQueueUse, error)
}

// WorkerQueueUse is a worker queue's record: when a job last named it, and
// when the sweep looks at it again (its last use plus the idle time).
type WorkerQueueUse struct {
	Tenant, Name string
	LastUsed     time.Time
	Due          time.Time
}

// LaneDepth is what one priority lane of a worker queue holds, as SQS
// counts it (approximately).
type LaneDepth struct {
	Priority int   `json:"priority"`
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"in_flight"`
	Delayed  int64 `json:"delayed"`
}

// WorkerQueueBoundError answers EnsureWorkerQueues when the queues it
// would make take the tenant past its bound: Name is the first of them
// past it. Nothing was made. It unwraps to an *domain.Error (CodeInvalid).
type WorkerQueueBoundError struct {
	Name string
	Err  *domain.Error
}

func (e *WorkerQueueBoundError) Error() string { return e.Err.Error() }
func (e *WorkerQueueBoundError) Unwrap() error { return e.Err }

// NewWorkerQueueBoundError is what an adapter answers when a request
// naming fresh new queues finds the tenant with have of max.
func NewWorkerQueueBoundError(tenant string, fresh []string, have, limit int) *WorkerQueueBoundError {
	return &WorkerQueueBoundError{Name: fresh[min(max(limit-have, 0), len(fresh)-1)], Err: &domain.Error{Code: domain.CodeInvalid, Message: fmt.Sprintf(
		"tenant %s has %d worker queues and this request names %d new ones; the limit is %d: use queues the tenant has, wait for idle ones to be removed, or raise STEPFLOW_MAX_WORKER_QUEUES",
		tenant, have, len(fresh), limit)}}
}

// WorkerQueue is a tenant's worker queue as GET /v1/queues shows it.
type WorkerQueue struct {
	Name     string      `json:"name"`
	LastUsed time.Time   `json:"last_used"`
	Visible  int64       `json:"visible"`
	InFlight int64       `json:"in_flight"`
	Delayed  int64       `json:"delayed"`
	Lanes    []LaneDepth `json:"lanes"`
}

// workerQueueIdle answers the configured idle time.
func (e *Engine) workerQueueIdle() time.Duration {
	if e.cfg.WorkerQueueIdle > 0 {
		return e.cfg.WorkerQueueIdle
	}
	return DefaultWorkerQueueIdle
}

// touchWorkerQueues records that a job names the tenant's queues now.
// A queue is rewritten only when this process last recorded it more than
// a quarter of the idle time ago, so a busy queue costs no write per job
// (its due time is then at least three quarters of the idle time away).
// Best effort: a queue whose use went unrecorded is only kept longer.
func (e *Engine) touchWorkerQueues(ctx context.Context, tenant string, names []string) {
	if e.cfg.WorkerQueueUses == nil {
		return
	}
	now, idle := e.now(), e.workerQueueIdle()
	for _, n := range names {
		k := tenant + "\x00" + n
		if at, ok := e.touched.Load(k); ok && now.Sub(at.(time.Time)) < idle/4 {
			continue
		}
		if err := e.cfg.WorkerQueueUses.PutWorkerQueueUse(ctx, WorkerQueueUse{Tenant: tenant, Name: n, LastUsed: now, Due: now.Add(idle)}); err != nil {
			e.cfg.Log.WarnContext(ctx, "worker queue use not recorded; the queue is kept until a later use is", "tenant", tenant, "queue", n, "err", err)
			continue
		}
		e.touched.Store(k, now)
	}
}

// touchDispatched records the worker queues a dispatch sends to.
func (e *Engine) touchDispatched(ctx context.Context, j *domain.Job, ds []domain.Dispatch) {
	var names []string
	for _, d := range ds {
		if d.Step.Spec.Action.Type == domain.ActionWorker {
			names = append(names, d.Step.Spec.Action.Queue)
		}
	}
	if len(names) > 0 {
		e.touchWorkerQueues(ctx, j.Tenant, names)
	}
}

// ensureWorkerQueues makes the worker queues steps name (with those a
// replan of them would add) before anything is written, so a tenant over
// its bound is refused with nothing written, and a claim never has to
// create a queue. The queues are counted first and made only if all fit:
// a refused request makes none (the field named is the first step whose
// queue is past the bound).
func (e *Engine) ensureWorkerQueues(ctx context.Context, tenant string, steps []domain.StepSpec, field, queue string) error {
	var names []string
	fieldOf := map[string]string{}
	_ = domain.WalkJobSteps(steps, field, queue, func(f string, st *domain.StepSpec) error {
		q := st.Action.Queue
		if st.Action.Type != domain.ActionWorker {
			return nil
		}
		if _, seen := fieldOf[q]; !seen {
			fieldOf[q] = f + ".action.queue"
			names = append(names, q)
		}
		return nil
	})
	if len(names) == 0 {
		return nil
	}
	if err := e.cfg.Queue.EnsureWorkerQueues(ctx, tenant, names); err != nil {
		if be := (*WorkerQueueBoundError)(nil); errors.As(err, &be) {
			return domain.Invalid(fieldOf[be.Name], "%s", be.Err.Message)
		}
		if de := (*domain.Error)(nil); errors.As(err, &de) && de.Code == domain.CodeInvalid {
			return domain.Invalid(fieldOf[names[0]], "%s", de.Message)
		}
		return fmt.Errorf("worker queues: %w", err)
	}
	e.touchWorkerQueues(ctx, tenant, names)
	return nil
}

// ListWorkerQueues answers the tenant's worker queues with their depth and
// last use, by name: one read of the tenant's records, and a depth read
// per queue and lane.
func (e *Engine) ListWorkerQueues(ctx context.Context, tenant string) ([]WorkerQueue, error) {
	if e.cfg.WorkerQueueUses == nil {
		return []WorkerQueue{}, nil
	}
	uses, err := e.cfg.WorkerQueueUses.WorkerQueueUses(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerQueue, 0, len(uses))
	for _, u := range uses {
		lanes, err := e.cfg.Queue.WorkerQueueDepth(ctx, tenant, u.Name)
		if errors.Is(err, ErrNoWorkerQueue) {
			continue // removed, its record not yet
		}
		if err != nil {
			return nil, err
		}
		q := WorkerQueue{Name: u.Name, LastUsed: u.LastUsed, Lanes: lanes}
		for _, l := range lanes {
			q.Visible += l.Visible
			q.InFlight += l.InFlight
			q.Delayed += l.Delayed
		}
		out = append(out, q)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// sweepWorkerQueues removes the worker queues no job has named for the
// idle time, visiting only those whose record came due. A queue still
// holding a message (visible, in flight or delayed) is kept for another
// idle time. Its record goes first, on the due time the sweep read, so a
// queue named meanwhile keeps it; should a job name it between that and
// the deletion, its dispatch fails and the job's sweep sends it again,
// which makes the queue again (so does any later use of a removed queue).
func (e *Engine) sweepWorkerQueues(ctx context.Context) (removed, errs int) {
	if e.cfg.WorkerQueueUses == nil {
		return 0, 0
	}
	now := e.now()
	uses, err := e.cfg.WorkerQueueUses.IdleWorkerQueues(ctx, now, SweepLimit)
	if err != nil {
		e.cfg.Log.WarnContext(ctx, "sweep could not read the idle worker queues", "err", err)
		return 0, 1
	}
	for _, u := range uses {
		if ctx.Err() != nil {
			break
		}
		u, err := e.cfg.WorkerQueueUses.ForgetWorkerQueue(ctx, u)
		if err != nil {
			if !errors.Is(err, domain.ErrVersionConflict) {
				e.cfg.Log.WarnContext(ctx, "idle worker queue's record not removed", "tenant", u.Tenant, "queue", u.Name, "err", err)
				errs++
			}
			continue
		}
		e.forgetTouch(u.Tenant, u.Name)
		gone, err := e.cfg.Queue.DeleteIdleWorkerQueue(ctx, u.Tenant, u.Name)
		if err == nil && gone {
			e.forgetTakes(u.Tenant, u.Name)
			removed++
			continue
		}
		if err != nil {
			e.cfg.Log.WarnContext(ctx, "idle worker queue not removed; looked at again later", "tenant", u.Tenant, "queue", u.Name, "err", err)
			errs++
		}
		// Not empty (or not deleted): keep it another idle time.
		u.Due = now.Add(e.workerQueueIdle())
		if err := e.cfg.WorkerQueueUses.PutWorkerQueueUse(ctx, u); err != nil {
			e.cfg.Log.WarnContext(ctx, "kept worker queue's record not written back", "tenant", u.Tenant, "queue", u.Name, "err", err)
		}
	}
	return removed, errs
}

func (e *Engine) forgetTouch(tenant, name string) { e.touched.Delete(tenant + "\x00" + name) }
