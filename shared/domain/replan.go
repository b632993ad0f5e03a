package domain

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckReplan checks that steps may take the place of step replaced in j,
// on the job as it will stand once they have (see checkReplan). field
// prefixes the fields errors name.
func (j *Job) CheckReplan(replaced string, steps []StepSpec, field string) error {
	if len(steps) == 0 {
		return nil
	}
	_, at, err := j.Step(replaced)
	if err != nil {
		return err
	}
	return checkReplan(j.specs(), j.Graph, at, steps, field)
}

// specs answers the specs of j's steps, in order.
func (j *Job) specs() []StepSpec {
	out := make([]StepSpec, len(j.Steps))
	for i, s := range j.Steps {
		out[i] = s.Spec
	}
	return out
}

// checkReplan checks that steps may take the place of specs[at] (graph:
// the specs declare their dependencies, else they run in order): new,
// unique ids, dependencies on steps of the job or of the replan (not on
// the replaced step), the job within MaxSteps, and no cycle in the graph
// as it will be once the replaced step's dependents wait on the new steps
// (rewire): a new step that depends on one of them would otherwise close
// a cycle no check sees and the job would wait for ever. A new step that
// is a fail action carrying a replan of its own is checked the same way
// against the job as that first replan leaves it, at any depth. Submit
// (for the fail actions of a spec) and a worker's replan both come here.
func checkReplan(specs []StepSpec, graph bool, at int, steps []StepSpec, field string) error {
	if len(steps) == 0 {
		return nil
	}
	if n := len(specs) + len(steps); n > MaxSteps {
		return Invalid(field, "would give the job %d steps; the limit is %d", n, MaxSteps)
	}
	replaced := specs[at].ID
	index := make(map[string]int, len(specs)+len(steps))
	for i, s := range specs {
		index[s.ID] = i
	}
	for k, st := range steps {
		f := fmt.Sprintf("%s[%d]", field, k)
		if !validID(st.ID) {
			return Invalid(f+".id", "%s", idRule)
		}
		if _, dup := index[st.ID]; dup {
			return Invalid(f+".id", "%q is already the id of a step of this job", st.ID)
		}
		index[st.ID] = len(specs) + k
	}
	for k, st := range steps {
		if err := checkDependsOn(fmt.Sprintf("%s[%d]", field, k), st, index, replaced); err != nil {
			return err
		}
	}
	all := rewire(specs, graph, at, steps)
	if cycle := onCycle(all, index); len(cycle) > 0 {
		return cycleError(all, cycle, len(specs), replaced, field)
	}
	for k := range steps {
		if nested := steps[k].Action.Steps; len(nested) > 0 {
			if err := checkReplan(all, true, len(specs)+k, nested, fmt.Sprintf("%s[%d].action.steps", field, k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// cycleError names the first dependency of a new step (all[first:]) that
// leads back onto the cycle: the one to change.
func cycleError(all []StepSpec, cycle []int, first int, replaced, field string) error {
	on := map[string]bool{}
	var ids []string
	for _, i := range cycle {
		on[all[i].ID] = true
		ids = append(ids, all[i].ID)
	}
	f := field
	for _, i := range cycle {
		if i < first {
			continue
		}
		if d := slices.IndexFunc(all[i].DependsOn, func(id string) bool { return on[id] }); d >= 0 {
			f = fmt.Sprintf("%s[%d].depends_on[%d]", field, i-first, d)
			break
		}
	}
	return Invalid(f, "would close a dependency cycle once the steps after %q wait on this replan: steps %s would wait on each other for ever; depend on steps that do not run after %q",
		replaced, strings.Join(ids, ", "), replaced)
}

// rewire answers the steps of a job (specs; graph: they declare their
// dependencies, else they run in order) as they stand once steps take the
// place of specs[at]: in order they become a chain; those that depended on
// the replaced step depend instead on the new ones that nothing else new
// depends on; the new ones that depend on nothing take over the replaced
// step's dependencies and follow the old ones. The check and the change
// itself (replan) both use it, so what is checked is what is stored.
func rewire(specs []StepSpec, graph bool, at int, steps []StepSpec) []StepSpec {
	all := make([]StepSpec, 0, len(specs)+len(steps))
	for i, s := range specs {
		if !graph && i > 0 {
			s.DependsOn = []string{specs[i-1].ID}
		}
		all = append(all, s)
	}
	depended := map[string]bool{}
	for _, st := range steps {
		for _, d := range st.DependsOn {
			depended[d] = true
		}
	}
	var sinks []string
	for _, st := range steps {
		if !depended[st.ID] {
			sinks = append(sinks, st.ID)
		}
	}
	replaced := specs[at].ID
	for i := range all {
		if k := slices.Index(all[i].DependsOn, replaced); k >= 0 {
			deps := slices.Delete(slices.Clone(all[i].DependsOn), k, k+1)
			named := make(map[string]bool, len(deps)+len(sinks))
			for _, id := range deps {
				named[id] = true
			}
			for _, id := range sinks {
				if !named[id] {
					deps = append(deps, id)
					named[id] = true
				}
			}
			all[i].DependsOn = deps
		}
	}
	for _, st := range steps {
		if len(st.DependsOn) == 0 {
			st.DependsOn = slices.Clone(all[at].DependsOn)
		}
		all = append(all, st)
	}
	return all
}

// Cycle answers the ids of the steps of j that lie on a dependency cycle,
// in order: none for any job the engine stored (a check for tests and for
// the chaos run).
func (j *Job) Cycle() []string {
	if !j.Graph {
		return nil
	}
	specs := j.specs()
	index := make(map[string]int, len(specs))
	for i, s := range specs {
		index[s.ID] = i
	}
	for i := range specs {
		specs[i].DependsOn = slices.DeleteFunc(slices.Clone(specs[i].DependsOn), func(id string) bool { _, ok := index[id]; return !ok })
	}
	var ids []string
	for _, i := range onCycle(specs, index) {
		ids = append(ids, specs[i].ID)
	}
	return ids
}

// onCycle answers the positions of the steps that lie on a dependency
// cycle (or between two), in order; none when the steps can be ordered.
// Kahn's algorithm finds what cannot be ordered (on or behind a cycle);
// peeling off what no such step depends on leaves the cycle itself. The
// peeling is Kahn's algorithm again, on the dependants: one pass, however
// long the chain behind the cycle.
func onCycle(steps []StepSpec, index map[string]int) []int {
	stuck := unordered(steps, index)
	if len(stuck) == 0 {
		return nil
	}
	in := make([]bool, len(steps))
	dependants := make([]int, len(steps)) // how many dependencies of the steps still in name each
	for _, i := range stuck {
		in[i] = true
		for _, d := range steps[i].DependsOn {
			dependants[index[d]]++
		}
	}
	var peel []int
	for _, i := range stuck {
		if dependants[i] == 0 {
			peel = append(peel, i)
		}
	}
	for len(peel) > 0 {
		i := peel[len(peel)-1]
		peel = peel[:len(peel)-1]
		in[i] = false
		for _, d := range steps[i].DependsOn {
			k := index[d]
			if dependants[k]--; dependants[k] == 0 && in[k] {
				peel = append(peel, k)
			}
		}
	}
	var out []int
	for _, i := range stuck {
		if in[i] {
			out = append(out, i)
		}
	}
	return out
}

// unordered answers the positions, in order, of the steps that Kahn's
// algorithm cannot order: those on or behind a cycle.
func unordered(steps []StepSpec, index map[string]int) []int {
	waiting := make([]int, len(steps))
	after := make([][]int, len(steps))
	var ready []int
	for i, st := range steps {
		waiting[i] = len(st.DependsOn)
		for _, dep := range st.DependsOn {
			after[index[dep]] = append(after[index[dep]], i)
		}
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		for _, k := range after[i] {
			if waiting[k]--; waiting[k] == 0 {
				ready = append(ready, k)
			}
		}
	}
	var stuck []int
	for i, n := range waiting {
		if n > 0 {
			stuck = append(stuck, i)
		}
	}
	return stuck
}

// replan puts steps in the place of s, which has just failed with class
// replan: they join the DAG as rewire says and the job goes on. With no
// steps the failure is final.
func (j *Job) replan(s *Step, steps []StepSpec, now time.Time) ([]Dispatch, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	if err := j.CheckReplan(s.ID(), steps, "steps"); err != nil {
		return nil, err
	}
	all := rewire(j.specs(), j.Graph, j.index(s), steps)
	for i, o := range j.Steps {
		o.Spec.DependsOn = all[i].DependsOn
	}
	j.Graph = true
	var ids []string
	for _, st := range steps {
		ids = append(ids, st.ID)
	}
	s.ReplacedBy = ids
	j.log(NoteReplanned, "", 0, fmt.Sprintf("step %s replaced by %s", s.ID(), strings.Join(ids, ", ")), now)
	first := len(j.Steps)
	for _, st := range all[first:] {
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
		ds, err := j.open(i, now)
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
		return nil, refused("job", j.ID, string(j.State), "redrive (only a FAILED job is redriven)", "the job is %s; only a FAILED job can be redriven", j.State)
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
		s.Error, s.Lease, s.Decision, s.Timer, s.Prompt, s.ReadyAt = nil, nil, nil, nil, "", nil
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
		ds, err := j.open(i, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	if why := j.stalled(); why != "" {
		// Run again, it would fail at once for the same reason.
		return nil, &Error{Code: CodeConflict, Message: "a redrive would leave no step that can run: " + why}
	}
	if err := j.settle(now); err != nil {
		return nil, err
	}
	return out, nil
}
