package domain

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// No job rests for ever without a reason a person can read on it
// (docs/model.md#no-job-rests-for-ever). Two things could leave one so:
// a step waiting for a resource slot that never comes, bounded here by
// resource_wait_seconds, and a job none of whose steps can ever run
// again, failed by the write that would leave it so (stalled).

// DefaultResourceWait bounds a resource wait for a step and a stack that
// name none (STEPFLOW_RESOURCE_WAIT_SECONDS): a day, as long as the
// blocked class retries by default.
const DefaultResourceWait = 24 * time.Hour

// ResourceWaitBound answers how long step s may wait for a resource slot:
// its resource_wait_seconds, else the job's bound, else the default (a
// job stored before the bound existed).
func (j *Job) ResourceWaitBound(s *Step) time.Duration {
	return time.Duration(cmp.Or(s.Spec.ResourceWaitSeconds, j.ResourceWaitSeconds, int(DefaultResourceWait/time.Second))) * time.Second
}

// resourceWaitEnds answers when the resource wait of s fails it, if it
// waits for one.
func (j *Job) resourceWaitEnds(s *Step) *time.Time {
	w := s.ResourceWait
	if w == nil || !s.State.leasable() {
		return nil
	}
	if w.Until != nil {
		return w.Until
	}
	end := w.Since.Add(j.ResourceWaitBound(s)) // a wait stored before Until was
	return &end
}

// ExpireResourceWaits fails every step whose resource wait is past its
// bound at now, and answers how many: the sweep's part, for a wait no
// look of its own ended.
func (j *Job) ExpireResourceWaits(now time.Time) (int, error) {
	n := 0
	for _, s := range j.Steps {
		if end := j.resourceWaitEnds(s); end == nil || now.Before(*end) || j.State.Terminal() {
			continue
		}
		if err := j.expireResourceWait(s, now); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// expireResourceWait fails a step whose wait for a resource slot ran past
// its bound: a failure of class resource with nothing to switch to (every
// matching resource was waited on, or none matches), so FAILED_RESOURCE,
// FAILED_FATAL, FAILED, and the job with it, as any resource failure
// with no other resource. No attempt ran, so none is recorded.
func (j *Job) expireResourceWait(s *Step, now time.Time) error {
	msg := resourceWaitMessage(s, j.ResourceWaitBound(s))
	for _, ev := range []StepEvent{StepEvResourceWaitExpired, StepEvFailFatal, StepEvFail} {
		if err := j.stepTo(s, ev, now, msg); err != nil {
			return err
		}
	}
	s.Error = &StepError{Class: ClassResource, Message: Truncate(msg, MaxErrorMessageBytes)}
	s.ResourceWait, s.ReadyAt, s.Redispatches = nil, nil, 0
	return j.settle(now)
}

// resourceWaitMessage says what a step waited for and on what.
func resourceWaitMessage(s *Step, bound time.Duration) string {
	var want []string
	if r := s.Spec.Requires; r != nil {
		if len(r.Capabilities) > 0 {
			want = append(want, "capabilities "+strings.Join(r.Capabilities, ", "))
		}
		if len(r.Labels) > 0 {
			var ls []string
			for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
				ls = append(ls, k+"="+r.Labels[k])
			}
			want = append(want, "labels "+strings.Join(ls, ", "))
		}
	}
	on := "no resource has them"
	if w := s.ResourceWait; w != nil && len(w.On) > 0 {
		on = "every slot of " + strings.Join(w.On, ", ") + " stayed held"
	}
	if len(s.Avoid) > 0 {
		on += " (avoiding " + strings.Join(s.Avoid, ", ") + ")"
	}
	return fmt.Sprintf("no resource slot within resource_wait_seconds (%d) for a resource with %s: %s",
		int(bound/time.Second), strings.Join(want, " and "), on)
}

// stalled answers why no step of the unfinished job can ever run again,
// or "" when one can. A step can run again when it is runnable, leased,
// backing off, or waiting on a person, a signal or a time; a step waiting
// on its dependencies (WAITING_DEPS) runs only once they succeed, and one
// that could succeed is one of those. So when every unfinished step
// waits on dependencies (a cycle stored before replans were checked, or
// a dependency on a step that ended without succeeding), nothing can
// ever release them. A wait for a signal with no deadline is not this: it
// is PARKED, and a person can read that.
func (j *Job) stalled() string {
	if j.State.Terminal() {
		return ""
	}
	// Every write asks: a step that can run is looked for before anything
	// is said about those that cannot.
	for _, s := range j.Steps {
		if s.ReplacedBy == nil && !s.State.Terminal() && s.State != StepWaitingDeps {
			return ""
		}
	}
	var why []string
	for i, s := range j.Steps {
		if s.ReplacedBy != nil || s.State.Terminal() {
			continue
		}
		var on []string
		for _, k := range j.deps(i) {
			if d := j.Steps[k]; !j.doneFor(d) {
				on = append(on, fmt.Sprintf("%s (%s)", d.ID(), d.State))
			}
		}
		if len(on) == 0 {
			why = append(why, s.ID()+" waits on dependencies that succeeded, but nothing released it")
			continue
		}
		why = append(why, fmt.Sprintf("%s waits on %s", s.ID(), strings.Join(on, ", ")))
	}
	if len(why) == 0 {
		return ""
	}
	return "no step can ever run again: " + strings.Join(why, "; ")
}

// FailStalled fails the job, saying why, if no step of it can ever run
// again, and reports whether it did: the sweep asks of every job it
// visits, for one stored stalled before this check was made at every
// write.
func (j *Job) FailStalled(now time.Time) (bool, error) {
	if j.stalled() == "" {
		return false, nil
	}
	if err := j.settle(now); err != nil {
		return false, err
	}
	return true, nil
}

// failedStepError answers the job's error when a step failed it.
func (j *Job) failedStepError() *StepError {
	for _, s := range j.Steps {
		if s.State != StepFailed || s.ReplacedBy != nil {
			continue
		}
		if s.Error == nil {
			return &StepError{Class: ClassFatal, Message: "step " + s.ID() + " failed"}
		}
		return &StepError{Class: s.Error.Class, Message: Truncate("step "+s.ID()+" failed: "+s.Error.Message, MaxErrorMessageBytes)}
	}
	return nil
}
