package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Child jobs (domain.ActionJob), as Temporal starts a child workflow: the
// write that leases a job step names its child (the id derived from
// parent, step and attempt), and the child is made after that write
// (relate). The child's write that ends it tells the parent (tellParent),
// which records the attempt's outcome under its lease, as a worker
// would. Each of those effects may be lost with its process; the
// parent's step is due for the sweep meanwhile (domain.ChildRun), which
// makes a child never made and records the end of one that ended
// (sweepKin). An attempt that ends otherwise (its timeout, a cancel)
// orphans its child, which is cancelled after that write and, if that is
// lost, by the sweep.

// childStart is a child job to make after the write that names it.
type childStart struct {
	step string
	// input is the step's input: the child's payload, unless its spec
	// has one.
	input json.RawMessage
}

// childLease is how long a job step's attempt holds its lease: its
// child's run, bounded by timeout_seconds, else a year.
func childLease(s *domain.Step) time.Duration {
	if t := s.Spec.TimeoutSeconds; t > 0 {
		return time.Duration(t) * time.Second
	}
	return domain.MaxWaitSeconds * time.Second
}

// relate makes the kin effects of a saved change: the child jobs it
// started are made, those it orphaned cancelled, and a child job it ended
// tells its parent. from is the job's state before the change.
func (e *Engine) relate(ctx context.Context, j *domain.Job, fx effects, from domain.JobState) {
	for _, c := range fx.start {
		if s := mustStep(j, c.step); s != nil && s.Spec.Action.Type == domain.ActionStepFunctions {
			e.startExecution(ctx, j, c)
			continue
		}
		e.startChild(ctx, j, c)
	}
	for _, id := range fx.cancel {
		e.cancelChild(ctx, j.Tenant, id)
	}
	if j.Parent != nil && j.State.Terminal() && !from.Terminal() {
		e.tellParent(ctx, j)
	}
}

// startChild makes the child job step c.step of j waits on, and reports
// whether it recorded the attempt's end instead (a child that can never
// be made fails it). A child made before (a retried start) is left as it
// is; one not made for a passing cause is left to the sweep.
func (e *Engine) startChild(ctx context.Context, j *domain.Job, c childStart) (ended bool) {
	s := mustStep(j, c.step)
	if s == nil || s.Child == nil || s.Lease == nil {
		return false
	}
	child, err := e.buildChild(ctx, j, s, c.input)
	if err == nil {
		var made creation
		made, err = e.write(ctx, child, nil, false)
		if err == nil {
			e.dispatchNew(ctx, made)
			e.publish(ctx, made.job, made.states)
			if made.job.State.Terminal() {
				e.tellParent(ctx, made.job) // every step skipped: it ended as made
			}
			return false
		}
	}
	switch {
	case errors.Is(err, domain.ErrExists):
		return false
	case domain.Transient(err):
		e.cfg.Log.WarnContext(ctx, "child job not made; the sweep makes it", "job", j.ID, "step", s.ID(), "child", s.Child.ID, "err", err)
		return false
	}
	return e.failStart(ctx, j, s, "child job not made: "+err.Error())
}

// buildChild makes (not writes) the child job step s of j waits on, on
// input unless its spec has a payload, checked as a submission is.
func (e *Engine) buildChild(ctx context.Context, j *domain.Job, s *domain.Step, input json.RawMessage) (*domain.Job, error) {
	spec, given, err := domain.ParseChildSpec(s.Spec.Action.Spec, j.Queue)
	if err != nil {
		return nil, err
	}
	if !given {
		spec.Payload = input
		if len(input) == 0 || string(input) == "null" {
			spec.Payload = json.RawMessage(`{}`)
		}
	}
	if err := e.checkSpec(ctx, j.Tenant, spec, ""); err != nil {
		return nil, err
	}
	child, err := e.newJob(ctx, j.Tenant, s.Child.ID, spec, "")
	if err != nil {
		return nil, err
	}
	p := j.ChildOf(s)
	child.Parent = &p
	return child, nil
}

// tellParent records the end of a child job as the outcome of the
// attempt that made it: its result, or its failure. A parent that moved
// on (the attempt timed out, the job was cancelled) refuses it.
func (e *Engine) tellParent(ctx context.Context, child *domain.Job) {
	o, err := e.childOutcome(ctx, child)
	if err == nil {
		_, err = e.finish(ctx, child.Tenant, o, nil, nil)
	}
	if err != nil && !isStale(err) {
		e.cfg.Log.WarnContext(ctx, "a child job's end was not recorded on its parent; the parent's sweep looks again", "job", child.ID, "parent", child.Parent.Job, "err", err)
	}
}

// childOutcome is what a finished child job's parent step ends with.
func (e *Engine) childOutcome(ctx context.Context, child *domain.Job) (attemptOutcome, error) {
	o := attemptOutcome{leaseID: child.Parent.Lease, child: child.ID, children: child.Cost().USD}
	if child.State != domain.JobCompleted {
		f := domain.ChildFailure(child)
		o.failure = &f
		return o, nil
	}
	out, err := e.compose(ctx, &dataCache{}, child.ResultData())
	if bad := (*dataError)(nil); errors.As(err, &bad) {
		o.failure = &domain.Failure{Class: domain.ClassFatal, Message: "child job " + child.ID + " completed, but its result cannot be read: " + bad.msg}
		return o, nil
	}
	o.output = out
	return o, err
}

// cancelChild cancels an orphaned child job, and reports whether it has
// ended (or was never made, or expired).
func (e *Engine) cancelChild(ctx context.Context, tenant, id string) bool {
	if sm, name, ok := domain.OrphanedExecution(id); ok {
		return e.stopExecution(ctx, sm, name)
	}
	_, err := e.Cancel(ctx, tenant, id)
	var ite *domain.IllegalTransitionError
	if err == nil || errors.Is(err, domain.ErrNotFound) || errors.As(err, &ite) {
		return true
	}
	e.cfg.Log.WarnContext(ctx, "an orphaned child job was not cancelled; the sweep tries again", "tenant", tenant, "child", id, "err", err)
	return false
}

// kin is what a sweep did for a job's children before its decision:
// steps whose running child it looked at (or made), orphans it found
// ended.
type kin struct {
	looked []string
	gone   []string
}

// sweepKin looks after the children of j, as read by the sweep: a child
// due a look is made if it never was, or its end recorded if it ended;
// orphans are cancelled. moved reports a write of j made meanwhile (an
// end recorded), after which the sweep reads it again.
func (e *Engine) sweepKin(ctx context.Context, j *domain.Job) (k kin, moved bool) {
	now := e.now()
	for i, s := range j.Steps {
		if !s.ChildDue(now) {
			continue
		}
		look := e.sweepChild
		if s.Spec.Action.Type == domain.ActionStepFunctions {
			look = e.sweepExecution
		}
		switch looked, ended := look(ctx, j, i); {
		case ended:
			moved = true
		case looked:
			k.looked = append(k.looked, s.ID())
		}
	}
	for _, id := range j.Orphans {
		if e.cancelChild(ctx, j.Tenant, id) {
			k.gone = append(k.gone, id)
		}
	}
	return k, moved
}

// sweepChild is the sweep's look at step i's child job: one never made
// is made; one that ended has its end recorded (ended); looked says the
// step waits on, to be looked at later.
func (e *Engine) sweepChild(ctx context.Context, j *domain.Job, i int) (looked, ended bool) {
	s := j.Steps[i]
	child, err := e.cfg.Store.Get(ctx, j.Tenant, s.Child.ID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return e.restart(ctx, j, i, e.startChild)
	case err != nil:
		e.cfg.Log.WarnContext(ctx, "a child job was not read; the sweep tries again", "job", j.ID, "child", s.Child.ID, "err", err)
		return false, false
	case child.State.Terminal():
		e.tellParent(ctx, child)
		return false, true
	}
	return true, false
}

// restart starts step i's run again with start (it was never started: its
// process died after the lease's write), on the step's input: one that
// can never be read is given as none, and the run's own steps fail on it.
func (e *Engine) restart(ctx context.Context, j *domain.Job, i int, start func(context.Context, *domain.Job, childStart) bool) (looked, ended bool) {
	s := j.Steps[i]
	in, err := e.compose(ctx, &dataCache{}, j.InputData(i))
	if bad := (*dataError)(nil); errors.As(err, &bad) {
		in, err = nil, nil
	}
	if err != nil {
		e.cfg.Log.WarnContext(ctx, "a step's input was not read to start its run; the sweep tries again", "job", j.ID, "step", s.ID(), "err", err)
		return false, false
	}
	if start(ctx, j, childStart{step: s.ID(), input: in}) {
		return false, true
	}
	return true, false
}

// failStart fails the attempt of step s whose run can never start (its
// child job's spec or its state machine refused), saying why, and reports
// whether that was recorded.
func (e *Engine) failStart(ctx context.Context, j *domain.Job, s *domain.Step, why string) bool {
	f := &domain.Failure{Class: domain.ClassFatal, Message: domain.Truncate(why, domain.MaxErrorMessageBytes)}
	if _, err := e.finish(ctx, j.Tenant, attemptOutcome{leaseID: s.Lease.ID, failure: f, child: s.Child.ID}, nil, nil); err != nil && !isStale(err) {
		e.cfg.Log.WarnContext(ctx, "a run that cannot start did not fail its step; the sweep tries again", "job", j.ID, "step", s.ID(), "err", err)
		return false
	}
	return true
}

// apply notes what the sweep did for the job's children; it reports
// whether that changed the job.
func (k kin) apply(j *domain.Job, now time.Time) (bool, error) {
	changed := false
	for _, id := range k.looked {
		if s, _, err := j.Step(id); err != nil || !s.ChildDue(now) {
			continue
		}
		if err := j.ChildLooked(id, now); err != nil {
			return false, err
		}
		changed = true
	}
	if slices.ContainsFunc(j.Orphans, func(id string) bool { return slices.Contains(k.gone, id) }) {
		j.OrphansGone(k.gone)
		changed = true
	}
	return changed, nil
}

// listChildren answers the child jobs of f.Parent, last first (the
// reverse of domain.Job.Children), as List pages jobs: one read of the parent, and one of each child it answers
// (at most a page's worth more when a filter drops some).
func (e *Engine) listChildren(ctx context.Context, tenant string, f ListFilter) ([]JobSummary, string, error) {
	parent, err := e.Get(ctx, tenant, f.Parent)
	if err != nil {
		return nil, "", err
	}
	after, err := DecodeCursor(f.Cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	ids := parent.Children()
	slices.Reverse(ids)
	if after != "" {
		// The page after the child the cursor names.
		k := slices.Index(ids, after)
		if k < 0 {
			return nil, "", domain.Invalid("cursor", "is not a cursor this listing returned")
		}
		ids = ids[k+1:]
	}
	limit := int(max(f.Limit, 1))
	var out []JobSummary
	reads, last := 0, ""
	for _, id := range ids {
		if len(out) == limit || reads == 2*limit {
			return out, EncodeCursor(tenant, last), nil
		}
		reads, last = reads+1, id
		c, err := e.cfg.Store.Get(ctx, tenant, id)
		if errors.Is(err, domain.ErrNotFound) {
			continue // not made yet, or expired
		}
		if err != nil {
			return nil, "", err
		}
		if !f.matches(c) {
			continue
		}
		js := JobSummary{ID: c.ID, State: c.State, Queue: c.Queue, Schedule: c.ScheduleID}
		if f.Jobs {
			js.Job = c
		}
		out = append(out, js)
	}
	return out, "", nil
}

// matches reports whether j passes the filter's state and queue.
func (f ListFilter) matches(j *domain.Job) bool {
	switch {
	case f.State != "" && j.State != f.State,
		len(f.States) > 0 && !slices.Contains(f.States, j.State),
		f.Queue != "" && j.Queue != f.Queue,
		f.Schedule != "" && j.ScheduleID != f.Schedule:
		return false
	}
	return true
}
