package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// ActionJob runs a child job: a job of its own under the same tenant,
// made when an attempt of the step starts, linked both ways (the child's
// parent, the parent's children), whose end ends the attempt: the step
// succeeds with the child's result (ResultData) or fails with its error.
// The engine makes the child (ExecutorEngine), after the write that
// leases the step names it: the child's id comes from the parent, the
// step and the attempt (ChildJobID), so a retried start never makes a
// second one (docs/model.md#child-jobs).
const ActionJob = "job"

// JobAction is the job action type's parameters: the child's spec, as a
// submission's body. Without a payload of its own, the child runs on the
// step's input.
type JobAction struct {
	Spec json.RawMessage `json:"spec,omitempty"`
}

func (JobAction) Name() string       { return ActionJob }
func (JobAction) Executor() Executor { return ExecutorEngine }

// AttemptTimeout: a child job may run as long as a job may wait (a
// person's approval, a sleep); timeout_seconds bounds each child's run
// when set, and none does by default.
func (JobAction) AttemptTimeout() (def, max int) { return 0, MaxWaitSeconds }

func (JobAction) Validate(a *ActionSpec, c ActionCheck) error {
	if len(bytes.TrimSpace(a.Spec)) == 0 || string(a.Spec) == "null" {
		return Invalid(c.Field+".spec", `is required for action type job: the child job's spec, such as {"steps": [{"id": "a", "action": {"type": "pass"}}]}`)
	}
	if _, _, err := ParseChildSpec(a.Spec, c.JobQueue); err != nil {
		return nestedError(c.Field+".spec", err)
	}
	return nil
}

// ParseChildSpec decodes and validates a job step's child spec, the
// parent's queue its queue when it names none; given reports whether it
// has a payload of its own.
func ParseChildSpec(raw json.RawMessage, parentQueue string) (spec *JobSpec, given bool, err error) {
	if len(raw) > MaxJobSpecBytes {
		return nil, false, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("spec is %d bytes; the limit is %d", len(raw), MaxJobSpecBytes)}
	}
	var s JobSpec
	if err := DecodeStrict(raw, &s); err != nil {
		return nil, false, err
	}
	given = len(s.Payload) > 0 && string(s.Payload) != "null"
	if s.Queue == "" {
		s.Queue = parentQueue
	}
	if err := s.Validate(); err != nil {
		return nil, false, err
	}
	return &s, given, nil
}

// nestedError names err's field inside field (a child spec's steps[0].id
// is steps[2].action.spec.steps[0].id).
func nestedError(field string, err error) error {
	var de *Error
	if !errors.As(err, &de) {
		return err
	}
	out := *de
	switch de.Field {
	case "", "body":
		out.Field = field
	default:
		out.Field = field + "." + de.Field
	}
	if out.Code == CodeTooLarge {
		out.Field, out.Code = field, CodeInvalid
		out.Message = "is too large: " + de.Message
	}
	return &out
}

// ChildRun is the run a job step's attempt waits on (its child job), or a
// stepfunctions step's (its execution, by name).
type ChildRun struct {
	ID string `json:"id"`
	// CheckAt is when the sweep looks at the child, should its end not be
	// heard (the process that ended it died before telling the parent) or
	// it not be made (the process that leased the step died first): each
	// look doubles the wait, to about an hour.
	CheckAt time.Time `json:"check_at"`
	Checks  int       `json:"checks,omitempty"`
}

// ParentRef is a child job's link to the step that made it, and the lease
// of the attempt its end is recorded under.
type ParentRef struct {
	Job     string `json:"job"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Lease   string `json:"lease"`
}

// ChildJobID is the id of the child job attempt n of step of job parent
// makes, leased at: a ULID of that instant whose random part is derived
// from the three, so every try at making it names the same job.
func ChildJobID(parent, step string, n int, at time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", parent, step, n))
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(at))
	copy(id[6:], sum[:10])
	return id.String()
}

// startChild names the child job the attempt lease starts on step s.
func (j *Job) startChild(s *Step, lease *Lease, now time.Time) {
	id := ChildJobID(j.ID, s.ID(), lease.Attempt, now)
	s.Child = &ChildRun{ID: id, CheckAt: now.Add(DispatchGrace)}
	s.Attempts[len(s.Attempts)-1].Child = id
}

// ChildOf answers the link a child job made for step s's live attempt
// carries.
func (j *Job) ChildOf(s *Step) ParentRef {
	return ParentRef{Job: j.ID, Step: s.ID(), Attempt: s.Lease.Attempt, Lease: s.Lease.ID}
}

// ChildEnded notes, before its outcome is recorded, that the child job
// step stepID waits on has ended: the attempt ends by it, so it is not
// cancelled (orphaned).
func (j *Job) ChildEnded(stepID, child string) {
	if s, _, err := j.Step(stepID); err == nil && s.Child != nil && s.Child.ID == child {
		s.Child = nil
	}
}

// orphan notes that s's attempt ended otherwise than by its child job (a
// timeout, a cancel, an outcome reported by hand): the child is cancelled
// after the write (TakeOrphaned), and by the sweep if that is lost.
func (j *Job) orphan(s *Step) {
	if s.Child == nil {
		return
	}
	j.Orphans = append(j.Orphans, orphanOf(s))
	j.orphaned = append(j.orphaned, orphanOf(s))
	s.Child = nil
}

// TakeOrphaned answers the child jobs the change orphaned, to cancel,
// and forgets them.
func (j *Job) TakeOrphaned() []string {
	out := j.orphaned
	j.orphaned = nil
	return out
}

// ChildDue reports whether the sweep should look at step s's child now.
func (s *Step) ChildDue(now time.Time) bool {
	return s.Child != nil && s.State.leased() && !now.Before(s.Child.CheckAt)
}

// ChildLooked notes that the sweep looked at step stepID's child and
// found it running (or made it): it looks again later, each time twice as
// late, up to DispatchGrace << 6 (an hour).
func (j *Job) ChildLooked(stepID string, now time.Time) error {
	s, _, err := j.Step(stepID)
	if err != nil || s.Child == nil {
		return err
	}
	s.Child.Checks++
	s.Child.CheckAt = now.Add(DispatchGrace << min(s.Child.Checks, 6))
	return j.settle(now)
}

// OrphansGone forgets the orphaned child jobs the sweep found ended (or
// never made).
func (j *Job) OrphansGone(gone []string) {
	j.Orphans = slices.DeleteFunc(j.Orphans, func(id string) bool { return slices.Contains(gone, id) })
	if len(j.Orphans) == 0 {
		j.Orphans = nil
	}
	j.Resweep()
}

// orphansDue is when the sweep cancels the job's orphaned children, should
// the cancel made after the write that orphaned them be lost.
func (j *Job) orphansDue() (time.Time, bool) {
	if len(j.Orphans) == 0 {
		return time.Time{}, false
	}
	return j.UpdatedAt.Add(DispatchGrace), true
}

// Children lists the child jobs the job's steps made, in the order of
// their steps and attempts (a map's items' in item order).
func (j *Job) Children() []string {
	var out []string
	for _, s := range j.Steps {
		if s.Spec.Action.Type != ActionJob {
			continue
		}
		for _, a := range s.Attempts {
			if a.Child != "" {
				out = append(out, a.Child)
			}
		}
	}
	return out
}

// ResultData is what a finished job ended with, which a parent's step
// succeeds with: in a job of steps in order, its last step's output (a
// skipped one's input passed on); in a DAG, the output of its one final
// step (one no other step depends on), or, with several, an object of
// each one's output by id (null for one skipped).
func (j *Job) ResultData() Data {
	final := j.finalSteps()
	if len(final) == 1 {
		if out, ok := j.OutputData(final[0]); ok {
			return out
		}
		return Data{raw: json.RawMessage(`null`)}
	}
	obj := make(map[string]Data, len(final))
	for _, k := range final {
		out, ok := j.OutputData(k)
		if !ok {
			out = Data{raw: json.RawMessage(`null`)}
		}
		obj[j.Steps[k].ID()] = out
	}
	return Data{object: obj}
}

// finalSteps are the positions of the steps nothing waits on: the last
// step in a job of steps in order, the sinks of a DAG (a map's items and
// replaced steps aside).
func (j *Job) finalSteps() []int {
	var live []int
	for k, s := range j.Steps {
		if s.MapOf == "" && s.ReplacedBy == nil {
			live = append(live, k)
		}
	}
	if !j.Graph {
		return live[len(live)-1:]
	}
	waitedOn := map[int]bool{}
	for _, k := range live {
		for _, d := range j.deps(k) {
			waitedOn[d] = true
		}
	}
	var out []int
	for _, k := range live {
		if !waitedOn[k] {
			out = append(out, k)
		}
	}
	return out
}

// ChildFailure is how a parent's step fails when its child job ended
// otherwise than completed: with the child's error, in its class when
// that is one a retry policy takes (retryable, network, blocked,
// timeout), otherwise fatal.
func ChildFailure(child *Job) Failure {
	if child.State == JobCancelled {
		return Failure{Class: ClassFatal, Message: "child job " + child.ID + " was cancelled"}
	}
	f := Failure{Class: ClassFatal, Message: "child job " + child.ID + " failed"}
	if e := child.Error; e != nil {
		f.Message += ": " + e.Message
		switch e.Class {
		case ClassRetryable, ClassNetwork, ClassBlocked, ClassTimeout:
			f.Class = e.Class
		}
	}
	return f
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// WalkJobSteps is WalkSteps into what else a submission brings: each
// map's item step (steps[1].action.step) and each child job's steps
// (steps[2].action.spec.steps[0]), queue being the job's. A submission's
// checks of targets and worker queues cover them all before anything is
// written.
func WalkJobSteps(steps []StepSpec, field, queue string, fn func(field string, st *StepSpec) error) error {
	return WalkSteps(steps, field, func(f string, st *StepSpec) error {
		if err := fn(f, st); err != nil {
			return err
		}
		a := st.Action
		if a.Type == ActionMap && a.Step != nil {
			item := StepSpec{ID: "item", Action: a.Step.Action}
			return WalkJobSteps([]StepSpec{item}, f+".action.step", queue, func(g string, st *StepSpec) error {
				return fn(strings.Replace(g, ".action.step[0]", ".action.step", 1), st)
			})
		}
		if a.Type != ActionJob {
			return nil
		}
		spec, _, err := ParseChildSpec(a.Spec, queue)
		if err != nil {
			return nil // refused when its step was validated
		}
		return WalkJobSteps(spec.Steps, f+".action.spec.steps", spec.Queue, fn)
	})
}

// ValidJobID reports whether s may be a job's id (a ULID).
func ValidJobID(s string) bool {
	_, err := ulid.ParseStrict(s)
	return err == nil
}
