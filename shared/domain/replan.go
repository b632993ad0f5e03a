package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckReplan checks that steps may take the place of step replaced in j:
// new, unique ids, dependencies on steps of the job or of the replan (not
// on the replaced step), no cycle, and the job within MaxSteps. field
// prefixes the fields errors name.
func (j *Job) CheckReplan(replaced string, steps []StepSpec, field string) error {
	if len(steps) == 0 {
		return nil
	}
	if n := len(j.Steps) + len(steps); n > MaxSteps {
		return Invalid(field, "would give the job %d steps; the limit is %d", n, MaxSteps)
	}
	all := &JobSpec{}
	index := map[string]int{}
	for _, s := range j.Steps {
		index[s.ID()] = len(all.Steps)
		all.Steps = append(all.Steps, s.Spec)
	}
	for k, st := range steps {
		f := fmt.Sprintf("%s[%d]", field, k)
		if !validID(st.ID) {
			return Invalid(f+".id", "%s", idRule)
		}
		if _, dup := index[st.ID]; dup {
			return Invalid(f+".id", "%q is already the id of a step of this job", st.ID)
		}
		for d, dep := range st.DependsOn {
			if dep == replaced {
				return Invalid(fmt.Sprintf("%s.depends_on[%d]", f, d), "names %q, the step being replanned", dep)
			}
		}
		index[st.ID] = len(all.Steps)
		all.Steps = append(all.Steps, st)
	}
	if err := all.validateDeps(index); err != nil {
		// It names steps by their place in the whole job: name the new ones
		// by their place in the replan.
		var de *Error
		if errors.As(err, &de) {
			var i int
			var rest string
			if n, _ := fmt.Sscanf(de.Field, "steps[%d]%s", &i, &rest); n >= 1 && i >= len(j.Steps) {
				de.Field = fmt.Sprintf("%s[%d]%s", field, i-len(j.Steps), rest)
			}
		}
		return err
	}
	return nil
}

// replan puts steps in the place of s, which has just failed with class
// replan: they join the DAG (those that depend on nothing take over s's
// dependencies), the steps that depended on s depend on the new ones that
// nothing else new depends on, and the job goes on. With no steps the
// failure is final.
func (j *Job) replan(s *Step, steps []StepSpec, now time.Time) ([]Dispatch, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	if err := j.CheckReplan(s.ID(), steps, "steps"); err != nil {
		return nil, err
	}
	if !j.Graph {
		// Steps in order become a chain, so new ones can join it.
		for i := 1; i < len(j.Steps); i++ {
			j.Steps[i].Spec.DependsOn = []string{j.Steps[i-1].ID()}
		}
		j.Graph = true
	}
	depended := map[string]bool{}
	var ids []string
	for _, st := range steps {
		ids = append(ids, st.ID)
		for _, d := range st.DependsOn {
			depended[d] = true
		}
	}
	var sinks []string
	for _, id := range ids {
		if !depended[id] {
			sinks = append(sinks, id)
		}
	}
	for _, o := range j.Steps {
		if k := slices.Index(o.Spec.DependsOn, s.ID()); k >= 0 {
			deps := slices.Delete(slices.Clone(o.Spec.DependsOn), k, k+1)
			for _, id := range sinks {
				if !slices.Contains(deps, id) {
					deps = append(deps, id)
				}
			}
			o.Spec.DependsOn = deps
		}
	}
	s.ReplacedBy = ids
	j.log(NoteReplanned, "", 0, fmt.Sprintf("step %s replaced by %s", s.ID(), strings.Join(ids, ", ")), now)
	first := len(j.Steps)
	for _, st := range steps {
		if len(st.DependsOn) == 0 {
			st.DependsOn = slices.Clone(s.Spec.DependsOn)
		}
		j.Steps = append(j.Steps, &Step{Spec: st, State: StepPending})
	}
	var out []Dispatch
	for i := first; i < len(j.Steps); i++ {
		n := j.Steps[i]
		if !j.depsMet(i) {
			if err := j.stepTo(n, StepEvWaitDeps, now, ""); err != nil {
				return nil, err
			}
			continue
		}
		ds, err := j.ready(n, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// Redrive runs a FAILED job again from its failed and cancelled steps,
// keeping what succeeded (their outputs feed the re-run): job_requeued,
// each such step back to PENDING with a fresh retry budget (attempts
// number on), then each runs once its dependencies are done. A job that
// is not FAILED is an illegal transition.
func (j *Job) Redrive(now time.Time) ([]Dispatch, error) {
	if j.State != JobFailed {
		return nil, &IllegalTransitionError{Kind: "job", ID: j.ID, From: string(j.State), Event: "redrive (only a FAILED job is redriven)"}
	}
	if err := j.jobTo(JobEvRequeued, now, "redrive"); err != nil {
		return nil, err
	}
	j.EndedAt, j.ExpiresAt, j.Error = nil, nil, nil
	var reopened []int
	for i, s := range j.Steps {
		if s.State != StepFailed && s.State != StepCancelled || s.ReplacedBy != nil {
			continue
		}
		if err := j.stepTo(s, StepEvRedrive, now, "redrive"); err != nil {
			return nil, err
		}
		s.AttemptBase = s.Attempt
		s.Error, s.Lease, s.Decision, s.Deadline, s.WakeAt, s.Prompt, s.Parked, s.ReadyAt = nil, nil, nil, nil, nil, "", false, nil
		s.Redispatches, s.ResourceWait = 0, nil
		reopened = append(reopened, i)
	}
	var out []Dispatch
	for _, i := range reopened {
		s := j.Steps[i]
		if !j.depsMet(i) {
			if err := j.stepTo(s, StepEvWaitDeps, now, ""); err != nil {
				return nil, err
			}
			continue
		}
		ds, err := j.ready(s, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	if why := j.stalled(); why != "" {
		// Run again, it would fail at once for the same reason.
		return nil, &Error{Code: CodeConflict, Message: "a redrive would leave no step that can run: " + why}
	}
	j.settle(now)
	return out, nil
}
