package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// SweepLimit bounds the schedules and the idle worker queues one sweep
// takes from each part of their due index; more wait for the next sweeps.
const SweepLimit = 100

// SweepRead is how many entries of each part of the jobs' due index a
// sweep reads. The index holds keys only, so reading far more than one
// run moves on costs little (one query a part, about 15 read units for a
// full one), and one tenant's burst ahead in time order hides no other
// tenant's entries behind it unless it fills a part.
const SweepRead = 1000

// SweepTenantQuota bounds the due jobs one sweep moves on for each tenant.
// They are taken round-robin across tenants, so one tenant's burst neither
// stretches the sweep nor holds back another tenant's job; its excess
// stays due for the next runs.
const SweepTenantQuota = 25

// SweepBudget bounds the time one sweep spends on due jobs: a quarter of
// the heartbeat's period (HealthThresholds.SweepEvery), at most this. The
// heartbeat then records its sweep on time whatever is due, and the
// schedules and worker queues still get their turn.
const SweepBudget = 15 * time.Second

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
	// Left due jobs were found and left for the next runs: past their
	// tenant's SweepTenantQuota, or past the run's time budget. Postponed
	// ones among them were moved later in the due index, spread over the
	// next runs, because their part of the index held more than the sweep
	// read (see postpone).
	Left      int `json:"left,omitempty"`
	Postponed int `json:"postponed,omitempty"`
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
// on is deferred, and the sweep goes on. No tenant slows it: it moves on
// at most SweepTenantQuota jobs of each tenant, round-robin, within its
// time budget, and leaves the rest for the next runs.
func (e *Engine) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	began := time.Now() // its duration is the wall clock's, whatever e.now says
	start := e.now()
	keys, err := e.cfg.Store.Due(ctx, start, SweepRead)
	if err != nil {
		return rep, fmt.Errorf("sweep: %w", err)
	}
	rep.Due = len(keys)
	end := e.sweepEnd(ctx, start)
	take, left := sweepTurns(keys, SweepTenantQuota)
	over := func() bool { return ctx.Err() != nil || !e.now().Before(end) }
	for i := 0; i < len(take); {
		if over() {
			left = append(slices.Clip(take[i:]), left...) // their turns came first
			break
		}
		read, armed := e.armGroup(ctx, take[i:min(i+armGroup, len(take))], end)
		for g := range read {
			if g > 0 && over() {
				break // read, perhaps sent: the next run reads them again
			}
			e.sweepKey(ctx, take[i], read[g], armed[g], &rep)
			i++
		}
	}
	rep.Left = len(left)
	rep.Postponed = e.postpone(ctx, keys, left, end)
	// Schedules after jobs: a failure there never holds recovery back.
	sr, err := e.FireSchedules(ctx)
	if err != nil && ctx.Err() == nil {
		e.cfg.Log.WarnContext(ctx, "sweep could not read the due schedules", "err", err)
		sr.Errors++
	}
	rep.SchedulesDue, rep.Fired, rep.Skipped, rep.Errors = sr.Due, sr.Fired, sr.Skipped, rep.Errors+sr.Errors
	removed, qerrs := e.sweepWorkerQueues(ctx)
	rep.QueuesRemoved, rep.Errors = removed, rep.Errors+qerrs
	e.noteSweep(ctx, e.now(), sweepDone{report: rep, took: time.Since(began), due: keys})
	return rep, nil
}

// sweepEnd is when a sweep that began at start stops taking due jobs: its
// budget, and no later than half the time its invocation has left.
func (e *Engine) sweepEnd(ctx context.Context, start time.Time) time.Time {
	budget := min(e.thresholds().SweepEvery/4, SweepBudget)
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)/2)
	}
	return start.Add(budget)
}

// sweepTurns orders the due jobs a sweep takes: round-robin across tenants
// (each one's earliest, then each one's next), the tenant whose earliest
// entry is earliest first, at most quota of each. The rest are left, in
// the same turns.
func sweepTurns(keys []DueJob, quota int) (take, left []DueJob) {
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b DueJob) int {
		return cmp.Or(strings.Compare(a.Due, b.Due), strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.ID, b.ID))
	})
	var tenants []string
	of := map[string][]DueJob{}
	for _, k := range sorted {
		if _, seen := of[k.Tenant]; !seen {
			tenants = append(tenants, k.Tenant)
		}
		of[k.Tenant] = append(of[k.Tenant], k)
	}
	for turn := 0; len(take)+len(left) < len(sorted); turn++ {
		for _, t := range tenants {
			if turn >= len(of[t]) {
				continue
			}
			if turn < quota {
				take = append(take, of[t][turn])
			} else {
				left = append(left, of[t][turn])
			}
		}
	}
	return take, left
}

// armGroup is how many due jobs a sweep reads before it writes any: the
// long timers that came within reach among them are sent together (one
// SendMessageBatch for up to ten), not one request a job.
const armGroup = 10

// armGroup reads the jobs of group, the first at least, and the next
// while reading has taken less than half the time left before end (their
// writes take as long), and sends, together, the long timers of each that
// came within reach, before any of their writes (armFirst). It answers
// each job read (nil: not read; sweepJob reads it) and what was sent of
// it.
func (e *Engine) armGroup(ctx context.Context, group []DueJob, end time.Time) ([]*domain.Job, []armedFirst) {
	var read []*domain.Job
	var armed []armedFirst
	now := e.now()
	var batch []JobSends
	toSend := map[int][]domain.Dispatch{} // by place in group
	for g, k := range group {
		if t := e.now(); g > 0 && (ctx.Err() != nil || !t.Add(t.Sub(now)).Before(end)) {
			break
		}
		j, d := e.readToArm(ctx, k, now, armedFirst{})
		read, armed = append(read, j), append(armed, armedFirst{})
		if len(d) > 0 {
			e.touchDispatched(ctx, j, d)
			batch = append(batch, JobSends{Job: j, Sends: Route(j, d)})
			toSend[g] = d
		}
	}
	if len(batch) == 0 {
		return read, armed
	}
	if err := e.cfg.Queue.DispatchJobs(ctx, batch); err != nil {
		// Which went out is not known: each job's write sends its own
		// after it (a duplicate finds nothing to do).
		e.cfg.Log.WarnContext(ctx, "long timers not sent before the sweep's writes; they are sent after them", "jobs", len(batch), "err", err)
		return read, armed
	}
	var sends []Send
	for _, js := range batch {
		sends = append(sends, js.Sends...)
	}
	requests := sendRequests(sends)
	for g, d := range toSend {
		// The job's write after saves its part of the batch's sends.
		read[g].Spend(domain.Usage{SQSRequests: requests * float64(len(d)) / float64(len(sends))})
		for _, x := range d {
			armed[g][x.Step.ID()] = now.Add(x.Delay)
		}
	}
	return read, armed
}

// readToArm reads a due job and answers the long timers to send before
// its write. A job that cannot be read, or whose reading panics (a bug),
// is answered nil: sweepJob reads it again, and sets it aside, saying why.
func (e *Engine) readToArm(ctx context.Context, k DueJob, now time.Time, armed armedFirst) (j *domain.Job, ds []domain.Dispatch) {
	defer func() {
		if recover() != nil {
			j, ds = nil, nil
		}
	}()
	j, err := e.cfg.Store.Get(ctx, k.Tenant, k.ID)
	if err != nil {
		return nil, nil
	}
	return j, toArmFirst(j, now, armed)
}

// sweepKey moves on one due job (from: as armGroup read it, or nil), or
// sets it aside.
func (e *Engine) sweepKey(ctx context.Context, k DueJob, from *domain.Job, armed armedFirst, rep *SweepReport) {
	err := e.sweepJob(ctx, k.Tenant, k.ID, from, armed, rep)
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

// postpone moves later in the due index the jobs left in a part of it
// that answered all SweepRead entries asked (more may wait behind them,
// unread): each tenant's spread over the next runs, a quota a run, so the
// next run reads what they hid, and the tenant's excess comes back no
// faster than its quota takes it. It is a write a job (Store.Defer, no
// read), within the run's budget; the jobs are not changed, and a job
// that changed meanwhile keeps its own due time.
func (e *Engine) postpone(ctx context.Context, keys, left []DueJob, end time.Time) int {
	read := map[string]int{}
	for _, k := range keys {
		read[k.Part]++
	}
	every := e.thresholds().SweepEvery
	rank := map[string]int{}
	n := 0
	for _, k := range left {
		if read[k.Part] < SweepRead {
			continue // its part was read to the end: it hides nothing
		}
		if ctx.Err() != nil || !e.now().Before(end) {
			break
		}
		r := rank[k.Tenant]
		rank[k.Tenant]++
		// Due by the next run for the first quota, the run after for the
		// next, and so on.
		until := e.now().Add(every/2 + time.Duration(r/SweepTenantQuota)*every)
		if err := e.cfg.Store.Defer(ctx, k, until); err != nil {
			e.cfg.Log.WarnContext(ctx, "postponement not written; the job stays due", "tenant", k.Tenant, "job", k.ID, "err", err)
			continue
		}
		n++
	}
	return n
}

var errPanic = errors.New("panic")

func (e *Engine) sweepJob(ctx context.Context, tenant, id string, from *domain.Job, armed armedFirst, rep *SweepReport) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sweep job %s: %w: %v", id, errPanic, p)
		}
	}()
	reclaimed, redispatched := 0, 0
	deleted := false
	if armed == nil {
		armed = armedFirst{}
	}
	var k kin
	if from != nil {
		var moved bool
		if k, moved = e.sweepKin(ctx, from); moved {
			from = nil // written meanwhile: read again
		}
	}
	_, err = e.commit(ctx, tenant, id, from, change{
		prepare: func(ctx context.Context, j *domain.Job, now time.Time) error {
			if err := e.deleteDueData(ctx, j, now); err != nil {
				return err
			}
			e.armFirst(ctx, j, now, armed)
			return nil
		},
		decide: func(j *domain.Job, now time.Time, fx *effects) error {
			var err error
			reclaimed, redispatched, deleted, err = sweepDecide(j, now, fx, armed, k)
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

// armedFirst is what a sweep's change sent of a job's long timers before
// its write: each step's message, by the instant it is for.
type armedFirst map[string]time.Time

func (a armedFirst) has(d domain.Dispatch, now time.Time) bool {
	at, ok := a[d.Step.ID()]
	if !ok {
		return false
	}
	if d.Delay <= 0 {
		return !at.After(now) // sent late, for at once
	}
	return at.Equal(now.Add(d.Delay))
}

// armFirst sends the long timers of j that came within reach before the
// sweep's write, which then takes the job out of the due index when
// nothing else of it needs the sweep (domain.Job.SentBeforeWrite): one
// index entry removed rather than moved (one write unit, not two). A
// failed send leaves them to be sent after the write, as any other. A
// change decided again after a lost race sends none twice.
func (e *Engine) armFirst(ctx context.Context, j *domain.Job, now time.Time, armed armedFirst) {
	ds := toArmFirst(j, now, armed)
	if len(ds) == 0 {
		return
	}
	e.touchDispatched(ctx, j, ds)
	if err := e.cfg.Queue.Dispatch(ctx, j, Route(j, ds)); err != nil {
		e.cfg.Log.WarnContext(ctx, "long timers not sent before the sweep's write; they are sent after it", "job", j.ID, "err", err)
		return
	}
	for _, d := range ds {
		armed[d.Step.ID()] = now.Add(d.Delay)
	}
}

// toArmFirst answers the long timers of j a sweep sends before its write:
// those within reach at now, not sent already, for the ready queues.
func toArmFirst(j *domain.Job, now time.Time, armed armedFirst) []domain.Dispatch {
	var ds []domain.Dispatch
	for _, d := range j.ToArm(now) {
		// One whose instant has come is sent too, for at once: its message
		// fires it as the message sent in time would have (the decision
		// leaves it to the message), and the job leaves the due index
		// rather than moving in it. Sent late, the timers of a tenant's
		// burst cost what timers sent in time do.
		if !armed.has(d, now) && DestinationOf(j, d.Step).Kind == ToReady {
			ds = append(ds, d)
		}
	}
	return ds
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
// never came fired, messages too far off to send before sent within reach
// (domain.Job.Arm), expired leases reclaimed (their slots given back once
// saved), steps whose message was lost sent again, a stalled job failed.
// errNoChange when nothing is due (the index was behind the item).
func sweepDecide(j *domain.Job, now time.Time, fx *effects, armed armedFirst, k kin) (reclaimed, redispatched int, deleted bool, err error) {
	related, err := k.apply(j, now) // children looked at, orphans gone
	if err != nil {
		return 0, 0, false, err
	}
	if j.State.Terminal() {
		switch {
		case j.DataDue(now):
			j.DataDeleted(now)
			return 0, 0, true, nil
		case !j.Resweep() && !related:
			return 0, 0, false, errNoChange
		}
		return 0, 0, false, nil
	}
	// Timers whose message never came fire first (a sleep's end, a gate's
	// or a wait's deadline): one that fails the job leaves nothing else of
	// it for the sweep.
	fired, expired, err := j.FireDue(now, func(s *domain.Step) bool { _, ok := armed[s.ID()]; return ok })
	if err != nil {
		return 0, 0, false, err
	}
	fx.dispatch = append(fx.dispatch, fired...)
	// Messages too far off for an SQS delay when they were decided are
	// sent now that they are within reach: the job moves on in the due
	// index to their instants, so the next sweep sends none again.
	var sent []domain.Dispatch // sent before the write (armFirst)
	for _, d := range j.Arm(now) {
		if armed.has(d, now) {
			sent = append(sent, d)
		} else {
			fx.dispatch = append(fx.dispatch, d)
		}
	}
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
	// A job read out of the due index was left out on purpose (its
	// messages in flight run it): a sweep that met it by an entry a
	// concurrent write just removed does not put it back.
	moved := j.DueAt != nil && j.Resweep()
	if len(sent) > 0 && j.DueAt != nil && j.SentBeforeWrite(sent) {
		moved = true // out of the due index: the armed messages run the job
	}
	if len(sent) == 0 && len(fx.dispatch) == 0 && reclaimed == 0 && expired == 0 && !moved && !stalled && !related {
		return 0, 0, false, errNoChange
	}
	return reclaimed, redispatched, false, nil
}
