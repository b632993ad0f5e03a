package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Schedules keeps schedules: each change is one conditional write on the
// version it was decided at, as for jobs. (A port of its own, beside
// Store in ports.go.)
type Schedules interface {
	// Create writes a new schedule at version 1, or answers
	// ErrScheduleExists when the tenant has one of its id.
	Create(ctx context.Context, s *domain.Schedule) error
	// Get answers one of tenant's schedules, domain.ErrNotFound, or
	// domain.ErrUnreadable.
	Get(ctx context.Context, tenant, id string) (*domain.Schedule, error)
	// List pages through a tenant's schedules by id; the cursor is empty
	// after the last.
	List(ctx context.Context, tenant, cursor string, limit int32) ([]*domain.Schedule, string, error)
	// Delete removes a schedule, or answers domain.ErrNotFound.
	Delete(ctx context.Context, tenant, id string) error
	// Save writes s if the stored one is still at s.Version, and bumps it;
	// domain.ErrVersionConflict otherwise (a deleted one included).
	Save(ctx context.Context, s *domain.Schedule) error
	// Fire saves s (as Save) and creates run, the job of its tick (at
	// version 1), in one atomic write: both or neither. A schedule that
	// moved on or is gone, or a run whose id is taken, answers
	// domain.ErrVersionConflict and writes nothing.
	Fire(ctx context.Context, s *domain.Schedule, run *domain.Job) error
	// Due answers schedules whose next tick is at or before now, earliest
	// first, at most limit from each part of the due index. A paused
	// schedule is not in it.
	Due(ctx context.Context, now time.Time, limit int) ([]DueSchedule, error)
}

// DueSchedule names a schedule in the due index.
type DueSchedule struct{ Tenant, ID string }

// ErrScheduleExists answers the creation of a schedule whose id the tenant
// has.
var ErrScheduleExists = errors.New("schedule exists")

// errNoSchedules answers the schedule routes of an engine wired without
// a schedule store.
var errNoSchedules = errors.New("schedules are not configured")

// CreateSchedule validates a schedule (its job as a submission would be,
// its fields named under job) and writes it. A schedule of that id made
// from the same body is answered as it is (created false); one made from
// another body is a conflict: delete it first.
func (e *Engine) CreateSchedule(ctx context.Context, tenant string, body []byte) (*domain.Schedule, bool, error) {
	if e.cfg.Schedules == nil {
		return nil, false, errNoSchedules
	}
	hash := requestHash(body)
	s, job, err := domain.ParseSchedule(tenant, body, hash, e.now())
	if err != nil {
		return nil, false, err
	}
	if err := e.checkSpec(ctx, tenant, job, "job."); err != nil {
		return nil, false, err
	}
	err = e.cfg.Schedules.Create(ctx, s)
	if !errors.Is(err, ErrScheduleExists) {
		if err != nil {
			return nil, false, fmt.Errorf("create schedule %s: %w", s.ID, err)
		}
		return s, true, nil
	}
	existing, err := e.cfg.Schedules.Get(ctx, tenant, s.ID)
	if err != nil {
		return nil, false, fmt.Errorf("create schedule %s: %w", s.ID, err)
	}
	if existing.RequestHash != hash {
		return nil, false, &domain.Error{Code: domain.CodeConflict, Field: "id",
			Message: fmt.Sprintf("schedule %s exists with another definition; delete it first to replace it", s.ID)}
	}
	return existing, false, nil
}

// ReplaceSchedule gives schedule id the definition of body (a creation's
// body, its id id), checked as a creation's is, keeping its runs, its last
// run and whether it is paused; its next tick is the new timing's first
// after now. A schedule given its own body again is answered unchanged.
func (e *Engine) ReplaceSchedule(ctx context.Context, tenant, id string, body []byte) (*domain.Schedule, error) {
	if err := e.checkScheduleID(id); err != nil {
		return nil, err
	}
	next, job, err := domain.ParseSchedule(tenant, body, requestHash(body), e.now())
	if err != nil {
		return nil, err
	}
	if next.ID != id {
		return nil, domain.Invalid("id", "is %q; the schedule replaced is %q (its id cannot change: make a new schedule)", next.ID, id)
	}
	if err := e.checkSpec(ctx, tenant, job, "job."); err != nil {
		return nil, err
	}
	return e.changeSchedule(ctx, tenant, id, func(s *domain.Schedule, now time.Time) bool { return s.Replace(next, now) })
}

// GetSchedule answers one of tenant's schedules.
func (e *Engine) GetSchedule(ctx context.Context, tenant, id string) (*domain.Schedule, error) {
	if err := e.checkScheduleID(id); err != nil {
		return nil, err
	}
	return e.cfg.Schedules.Get(ctx, tenant, id)
}

// ListSchedules pages through tenant's schedules by id.
func (e *Engine) ListSchedules(ctx context.Context, tenant, cursor string, limit int32) ([]*domain.Schedule, string, error) {
	if e.cfg.Schedules == nil {
		return nil, "", errNoSchedules
	}
	return e.cfg.Schedules.List(ctx, tenant, cursor, limit)
}

// DeleteSchedule removes a schedule and answers it as it was. No tick
// makes a job after it: a sweep firing one at that moment finds the
// schedule gone when it writes, and writes nothing.
func (e *Engine) DeleteSchedule(ctx context.Context, tenant, id string) (*domain.Schedule, error) {
	s, err := e.GetSchedule(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	// Gone by now, though just read: this delete's own write, retried
	// after an answer was lost (the SDK retries), or a concurrent one.
	// Either way the schedule is deleted, as the caller asked.
	if err := e.cfg.Schedules.Delete(ctx, tenant, id); err != nil && !errors.Is(err, domain.ErrNotFound) {
		return nil, fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return s, nil
}

// PauseSchedule stops a schedule's ticks; pausing a paused one changes
// nothing.
func (e *Engine) PauseSchedule(ctx context.Context, tenant, id string) (*domain.Schedule, error) {
	return e.changeSchedule(ctx, tenant, id, (*domain.Schedule).Pause)
}

// ResumeSchedule starts a paused schedule's ticks again from the first one
// after now (none missed while paused is made up); resuming a running one
// changes nothing.
func (e *Engine) ResumeSchedule(ctx context.Context, tenant, id string) (*domain.Schedule, error) {
	return e.changeSchedule(ctx, tenant, id, (*domain.Schedule).Resume)
}

// changeSchedule loads a schedule, lets change decide and saves it
// conditionally, deciding again on a lost race (with a sweep firing it).
func (e *Engine) changeSchedule(ctx context.Context, tenant, id string, change func(*domain.Schedule, time.Time) bool) (*domain.Schedule, error) {
	if err := e.checkScheduleID(id); err != nil {
		return nil, err
	}
	for race := range maxRaces {
		if race > 0 && !lostRace(ctx, race-1) {
			return nil, ctx.Err()
		}
		s, err := e.cfg.Schedules.Get(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if !change(s, e.now()) {
			return s, nil
		}
		err = e.cfg.Schedules.Save(ctx, s)
		if errors.Is(err, domain.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", id, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("schedule %s: gave up after %d lost races: %w: %w", id, maxRaces, domain.ErrContended, domain.ErrVersionConflict)
}

// checkScheduleID answers not found for anything that cannot be a
// schedule id, before it reaches the table.
func (e *Engine) checkScheduleID(id string) error {
	if e.cfg.Schedules == nil {
		return errNoSchedules
	}
	if !domain.ValidScheduleID(id) {
		return fmt.Errorf("schedule %.70q: %w", id, domain.ErrNotFound)
	}
	return nil
}

// ScheduleReport says what one pass over the due schedules did. Lost
// counts writes that found their schedule moved on (another sweep fired
// the tick, or a pause or delete landed) and were decided again.
type ScheduleReport struct {
	Due, Fired, Skipped, Errors, Lost int
}

// FireSchedules is the sweep's pass over the schedules whose tick has
// come: each makes its run, or skips the tick while its last run is
// unfinished (overlap skip). It reads only the due index's schedule
// entries, so its cost follows the ticks due, never the schedules stored.
// Two passes at once make one job per tick: a run's id is drawn from its
// schedule and tick, and the run is created in the same atomic write that
// moves its schedule on, so the second writer finds the schedule moved
// and writes nothing.
func (e *Engine) FireSchedules(ctx context.Context) (ScheduleReport, error) {
	var rep ScheduleReport
	if e.cfg.Schedules == nil {
		return rep, nil
	}
	keys, err := e.cfg.Schedules.Due(ctx, e.now(), SweepLimit)
	if err != nil {
		return rep, fmt.Errorf("due schedules: %w", err)
	}
	rep.Due = len(keys)
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		if err := e.fireSchedule(ctx, k, &rep); err != nil {
			// Left due: the next sweep tries the tick again.
			rep.Errors++
			e.cfg.Log.WarnContext(ctx, "schedule not fired", "tenant", k.Tenant, "schedule", k.ID, "err", err)
		}
	}
	return rep, nil
}

// fireSchedule fires the tick due of one schedule, if it still has one.
func (e *Engine) fireSchedule(ctx context.Context, k DueSchedule, rep *ScheduleReport) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("fire schedule %s: %w: %v", k.ID, errPanic, p)
		}
	}()
	for race := range maxRaces {
		if race > 0 && !lostRace(ctx, race-1) {
			return ctx.Err()
		}
		s, err := e.cfg.Schedules.Get(ctx, k.Tenant, k.ID)
		if errors.Is(err, domain.ErrNotFound) {
			return nil // deleted since the index was read
		}
		if err != nil {
			return err
		}
		now := e.now()
		tick, due := s.Due(now)
		if !due {
			return nil // fired by another sweep, or paused, since the index was read
		}
		busy, err := e.lastRunBusy(ctx, s)
		if err != nil {
			return err
		}
		now = e.now() // read after the last run: a run made now is made after it ended
		if busy {
			s.Skip("", now)
			if err := e.cfg.Schedules.Save(ctx, s); errors.Is(err, domain.ErrVersionConflict) {
				rep.Lost++
				continue
			} else if err != nil {
				return fmt.Errorf("skip a tick of schedule %s: %w", s.ID, err)
			}
			rep.Skipped++
			return nil
		}
		run, err := e.newRun(ctx, s, tick, now)
		if err != nil && domain.Transient(err) {
			return err // a failed AWS call: the tick stays due
		}
		if err != nil {
			// The job cannot be made as it stands (its worker queue past
			// the tenant's bound, its priority no longer allowed...): the
			// tick is skipped, and the schedule says why.
			s.Skip(err.Error(), now)
			if err := e.cfg.Schedules.Save(ctx, s); errors.Is(err, domain.ErrVersionConflict) {
				rep.Lost++
				continue
			} else if err != nil {
				return fmt.Errorf("skip a tick of schedule %s: %w", s.ID, err)
			}
			rep.Skipped++
			return nil
		}
		s.Ran(tick, run.ID, now)
		err = e.cfg.Schedules.Fire(ctx, s, run)
		if errors.Is(err, domain.ErrVersionConflict) {
			rep.Lost++
			continue // another sweep fired it, or it was paused or deleted: look again
		}
		if err != nil {
			return fmt.Errorf("fire schedule %s: %w", s.ID, err)
		}
		rep.Fired++
		states := e.observeCreated(ctx, run)
		e.dispatch(ctx, run, run.Outstanding(now))
		e.publish(ctx, run, states)
		return nil
	}
	return fmt.Errorf("schedule %s: gave up after %d lost races: %w: %w", k.ID, maxRaces, domain.ErrContended, domain.ErrVersionConflict)
}

// lastRunBusy reports whether an overlap-skip schedule's last run is still
// unfinished (one read of that job). A run retention has deleted is
// finished.
func (e *Engine) lastRunBusy(ctx context.Context, s *domain.Schedule) (bool, error) {
	if s.Overlap != domain.OverlapSkip || s.LastJobID == "" {
		return false, nil
	}
	last, err := e.cfg.Store.Get(ctx, s.Tenant, s.LastJobID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return false, nil
	case errors.Is(err, domain.ErrUnreadable):
		return false, nil // quarantined by the sweep; it never finishes
	case err != nil:
		return false, fmt.Errorf("last run of schedule %s: %w", s.ID, err)
	}
	return !last.State.Terminal(), nil
}

// newRun builds the job a tick makes, checked as a submission is.
func (e *Engine) newRun(ctx context.Context, s *domain.Schedule, tick, now time.Time) (*domain.Job, error) {
	spec, err := s.RunSpec()
	if err != nil {
		return nil, err
	}
	if err := e.checkSpec(ctx, s.Tenant, spec, "job."); err != nil {
		return nil, err
	}
	spec.ParkAfter, spec.ResourceWait = e.cfg.TimerThreshold, e.cfg.ResourceWait
	j, err := domain.NewJob(s.Tenant, s.RunID(tick), spec, "", now)
	if err != nil {
		return nil, err
	}
	e.armAtOnce(j, now) // Outstanding sends them
	return j, nil
}
