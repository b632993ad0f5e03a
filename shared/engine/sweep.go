package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// SweepLimit bounds the jobs one sweep takes from each due-index shard; a
// backlog larger than that is worked off over the next sweeps.
const SweepLimit = 100

// SweepReport says what a sweep did.
type SweepReport struct {
	Due          int `json:"due"`
	Reclaimed    int `json:"reclaimed"`
	Redispatched int `json:"redispatched"`
	// Quarantined jobs could not be read and were taken out of the due
	// index; Deferred ones could not be moved on and are looked at again
	// after SweepRetryAfter.
	Quarantined int `json:"quarantined"`
	Deferred    int `json:"deferred"`
	Errors      int `json:"errors"`
	// DataDeleted finished jobs had their stored data deleted as they
	// expired.
	DataDeleted int `json:"data_deleted"`
	// SchedulesDue schedules had a tick due: Fired made its job, Skipped
	// made none (the last run unfinished, or its job refused).
	SchedulesDue int `json:"schedules_due"`
	Fired        int `json:"fired"`
	Skipped      int `json:"skipped"`
	// QueuesRemoved worker queues no job had named for the idle time were
	// deleted (queues.go).
	QueuesRemoved int `json:"queues_removed"`
}

// SweepRetryAfter is how long the sweep leaves a job it could not move on
// for a reason other than a failed AWS call (those are retried next sweep).
const SweepRetryAfter = 5 * time.Minute

// Sweep is the heartbeat's pass over the work that is due: leases that
// expired without their message coming back are reclaimed (LEASE_TIMEOUT ->
// PENDING, attempt + 1), runnable steps whose message went missing (the
// process died between the DynamoDB write and the SQS send) are sent again,
// and timers whose message never came (a Step Functions start that failed
// after the write) fire; then the schedules whose tick has come fire
// (FireSchedules). A job waiting on a person or a signal is never
// reclaimed; a parked one with no deadline is never due.
// It reads only the sparse due index, so its cost follows the work due, not
// the jobs stored. Two sweeps at once are safe: each change is conditional,
// and a duplicate message finds nothing to do. One bad job never holds the
// others back: an unreadable one is quarantined, one that cannot be moved
// on is deferred, and the sweep goes on.
func (e *Engine) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	keys, err := e.cfg.Store.Due(ctx, e.now(), SweepLimit)
	if err != nil {
		return rep, fmt.Errorf("sweep: %w", err)
	}
	rep.Due = len(keys)
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		err := e.sweepJob(ctx, k.Tenant, k.ID, &rep)
		switch {
		case err == nil:
		case errors.Is(err, domain.ErrUnreadable):
			e.quarantine(ctx, k.Tenant, k.ID, err)
			rep.Quarantined++
		case !domain.Transient(err) || errors.Is(err, errPanic):
			e.cfg.Log.ErrorContext(ctx, "sweep could not move a job on; deferred", "tenant", k.Tenant, "job", k.ID, "err", err, "retry_after", SweepRetryAfter)
			if derr := e.cfg.Store.Defer(ctx, k, e.now().Add(SweepRetryAfter)); derr != nil {
				e.cfg.Log.WarnContext(ctx, "deferral not written", "job", k.ID, "err", derr)
			}
			rep.Deferred++
		default:
			rep.Errors++
			e.cfg.Log.WarnContext(ctx, "sweep skipped a job", "tenant", k.Tenant, "job", k.ID, "err", err)
		}
	}
	// Schedules after jobs: a failure there never holds recovery back.
	sr, err := e.FireSchedules(ctx)
	if err != nil && ctx.Err() == nil {
		e.cfg.Log.WarnContext(ctx, "sweep could not read the due schedules", "err", err)
		sr.Errors++
	}
	rep.SchedulesDue, rep.Fired, rep.Skipped, rep.Errors = sr.Due, sr.Fired, sr.Skipped, rep.Errors+sr.Errors
	removed, qerrs := e.sweepWorkerQueues(ctx)
	rep.QueuesRemoved, rep.Errors = removed, rep.Errors+qerrs
	e.noteSweep(ctx, e.now())
	return rep, nil
}

var errPanic = errors.New("panic")

func (e *Engine) sweepJob(ctx context.Context, tenant, id string, rep *SweepReport) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sweep job %s: %w: %v", id, errPanic, p)
		}
	}()
	reclaimed, redispatched := 0, 0
	deleted := false
	_, err = e.commit(ctx, tenant, id, nil, change{
		prepare: func(ctx context.Context, j *domain.Job, now time.Time) error {
			return e.deleteDueData(ctx, j, now)
		},
		decide: func(j *domain.Job, now time.Time, fx *effects) error {
			var err error
			reclaimed, redispatched, deleted, err = sweepDecide(j, now, fx)
			return err
		},
	})
	if err != nil {
		if isStale(err) {
			return nil
		}
		return err
	}
	rep.Reclaimed += reclaimed
	rep.Redispatched += redispatched
	if deleted {
		rep.DataDeleted++
	}
	return nil
}

// deleteDueData deletes a finished job's stored data once it is due to
// expire: the data goes first, then the record of it (the sweep's
// decision), so a lost race deletes nothing more the second time. The
// item's TTL follows.
func (e *Engine) deleteDueData(ctx context.Context, j *domain.Job, now time.Time) error {
	if !j.State.Terminal() || !j.DataDue(now) {
		return nil
	}
	if e.cfg.Blobs == nil {
		e.cfg.Log.WarnContext(ctx, "a finished job's stored data cannot be deleted: no blob store is configured (STEPFLOW_DATA_BUCKET); the bucket's lifecycle rule expires it", "job", j.ID)
		return nil
	}
	if _, err := e.cfg.Blobs.DeletePrefix(ctx, domain.JobDataPrefix(j.Tenant, j.ID)); err != nil {
		return fmt.Errorf("delete the data of job %s: %w", j.ID, err)
	}
	return nil
}

// sweepDecide is the sweep's decision on one job: a finished job's data
// marked deleted when due (deleteDueData deleted it), timers whose message
// never came fired, expired leases reclaimed (their slots given back once
// saved), steps whose message was lost sent again, a stalled job failed.
// errNoChange when nothing is due (the index was behind the item).
func sweepDecide(j *domain.Job, now time.Time, fx *effects) (reclaimed, redispatched int, deleted bool, err error) {
	if j.State.Terminal() {
		switch {
		case j.DataDue(now):
			j.DataDeleted(now)
			return 0, 0, true, nil
		case !j.Resweep():
			return 0, 0, false, errNoChange
		}
		return 0, 0, false, nil
	}
	// Timers whose message never came fire first (a sleep's end, a gate's
	// or a wait's deadline): one that fails the job leaves nothing else of
	// it for the sweep.
	fired, expired, err := j.FireDue(now)
	if err != nil {
		return 0, 0, false, err
	}
	fx.dispatch = append(fx.dispatch, fired...)
	for _, s := range j.Steps {
		redispatch, reclaim := j.NeedsSweep(s, now)
		switch {
		case reclaim:
			if s.Lease != nil && s.Lease.Resource != "" {
				// The dead holder's slot wakes the next in line.
				fx.release = append(fx.release, slot{s.Lease.Resource, s.Lease.ID})
			}
			more, err := j.Reclaim(s.ID(), now)
			if err != nil {
				return 0, 0, false, err
			}
			fx.dispatch = append(fx.dispatch, more...)
			reclaimed++
		case redispatch:
			if err := j.Redispatched(s, now); err != nil {
				return 0, 0, false, err
			}
			delay := time.Duration(0)
			if s.ReadyAt != nil && s.ReadyAt.After(now) {
				delay = s.ReadyAt.Sub(now)
			}
			fx.dispatch = append(fx.dispatch, domain.Dispatch{Step: s, Delay: delay})
			redispatched++
		}
	}
	stalled, err := j.FailStalled(now) // one stored stalled before every write checked
	if err != nil {
		return 0, 0, false, err
	}
	moved := j.Resweep()
	if len(fx.dispatch) == 0 && reclaimed == 0 && expired == 0 && !moved && !stalled {
		return 0, 0, false, errNoChange
	}
	return reclaimed, redispatched, false, nil
}
