package domain

import (
	"fmt"
	"slices"
	"strings"
)

// Replayed is the state a job's event log implies.
type Replayed struct {
	Job   JobState
	Steps map[string]StepState
}

// Replay folds a job's events through the transition tables (the formal
// job machine's DeriveStatusFromEvents, docs/model.md#event-log-and-replay). Steps start PENDING; every event must be a legal
// move from the state before it, or Replay says which one is not.
func Replay(events []Event) (Replayed, error) {
	r := Replayed{Job: JobInitial, Steps: map[string]StepState{}}
	for _, ev := range events {
		if IsNote(ev.Type) {
			continue
		}
		if st, ok := strings.CutPrefix(ev.Type, "step_"); ok {
			from, seen := r.Steps[ev.Step]
			if !seen {
				from = StepPending
			}
			to := StepState(strings.ToUpper(st))
			if !stepMoveAllowed(from, to) {
				return r, fmt.Errorf("event %d: step %s cannot go from %s to %s", ev.Seq, ev.Step, from, to)
			}
			r.Steps[ev.Step] = to
			continue
		}
		to, err := NextJobState(r.Job, JobEvent(ev.Type))
		if err != nil {
			return r, fmt.Errorf("event %d: %w", ev.Seq, err)
		}
		r.Job = to
	}
	return r, nil
}

func stepMoveAllowed(from, to StepState) bool {
	for _, t := range stepTransitions {
		if t.Destination == to && slices.Contains(t.Sources, from) {
			return true
		}
	}
	return false
}

// CheckReplay reports whether j's stored state is what its events say.
func CheckReplay(j *Job) error {
	r, err := Replay(j.Events)
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	if r.Job != j.State {
		return fmt.Errorf("job %s: stored %s, events say %s", j.ID, j.State, r.Job)
	}
	for _, s := range j.Steps {
		want, ok := r.Steps[s.Spec.ID]
		if !ok {
			want = StepPending
		}
		if want != s.State {
			return fmt.Errorf("job %s step %s: stored %s, events say %s", j.ID, s.Spec.ID, s.State, want)
		}
	}
	return nil
}
