package views

import (
	"fmt"
	"strings"

	"github.com/stepflow/stepflow/shared/domain"
)

// history is a job's event log folded into canonical states: the job's
// state after each job event, each step's after each of its events, and
// each attempt's, as the log says (not as the stored projection does).
// Every vocabulary's sequences are read from it.
type history struct {
	job   []jobPoint
	steps []stepHistory // in the job's step order, then steps known only from the log
	runs  []runHistory  // in the order they started
}

type jobPoint struct {
	seq   int
	event string
	state domain.JobState
}

type stepHistory struct {
	id     string
	points []stepPoint // starts {0, PENDING}: steps are born PENDING without an event
}

type stepPoint struct {
	seq   int
	state domain.StepState
}

type runHistory struct {
	step   string
	n      int
	points []runPoint
}

type runPoint struct {
	seq   int
	state domain.AttemptState
}

// stepStateOf reads the step state a step_<state> event names (the store
// reads older spellings as today's).
func stepStateOf(typ string) (domain.StepState, bool) {
	st, ok := strings.CutPrefix(typ, "step_")
	if !ok {
		return "", false
	}
	return domain.StepState(strings.ToUpper(st)), true
}

func running(s domain.StepState) bool { return s == domain.StepLeased || s == domain.StepRunning }

// historyOf folds j's log. Job events go through the job table (an
// illegal one is an error, as in replay); step events are recorded as
// they are, for each vocabulary's own table to judge.
func historyOf(j *domain.Job) (*history, error) {
	h := &history{}
	stepAt := map[string]int{}
	for _, s := range j.Steps {
		stepAt[s.Spec.ID] = len(h.steps)
		h.steps = append(h.steps, stepHistory{id: s.Spec.ID, points: []stepPoint{{0, domain.StepPending}}})
	}
	open := map[string]int{} // step id -> index in h.runs of its running attempt
	state := domain.JobInitial
	for _, ev := range j.Events {
		if domain.IsNote(ev.Type) {
			continue
		}
		to, isStep := stepStateOf(ev.Type)
		if !isStep {
			next, err := domain.NextJobState(state, domain.JobEvent(ev.Type))
			if err != nil {
				return nil, fmt.Errorf("job %s: event %d: %w", j.ID, ev.Seq, err)
			}
			state = next
			h.job = append(h.job, jobPoint{ev.Seq, ev.Type, next})
			continue
		}
		i, ok := stepAt[ev.Step]
		if !ok {
			stepAt[ev.Step] = len(h.steps)
			i = len(h.steps)
			h.steps = append(h.steps, stepHistory{id: ev.Step, points: []stepPoint{{0, domain.StepPending}}})
		}
		sh := &h.steps[i]
		from := sh.points[len(sh.points)-1].state
		sh.points = append(sh.points, stepPoint{ev.Seq, to})
		switch r, isOpen := open[ev.Step]; {
		case running(to) && !running(from):
			open[ev.Step] = len(h.runs)
			h.runs = append(h.runs, runHistory{step: ev.Step, n: ev.Attempt, points: []runPoint{{ev.Seq, domain.AttemptRunning}}})
		case isOpen && !running(to):
			delete(open, ev.Step)
			end, err := attemptEnd(j, ev.Step, h.runs[r].n, to)
			if err != nil {
				return nil, fmt.Errorf("job %s: event %d: %w", j.ID, ev.Seq, err)
			}
			h.runs[r].points = append(h.runs[r].points, runPoint{ev.Seq, end})
		}
	}
	return h, nil
}

// attemptEnd answers how the step's move to `to` ended its running
// attempt n. A cancel ends it cancelled, or timeout when its lease had
// already run out (which only the stored attempt knows).
func attemptEnd(j *domain.Job, step string, n int, to domain.StepState) (domain.AttemptState, error) {
	switch to {
	case domain.StepSucceeded:
		return domain.AttemptSucceeded, nil
	case domain.StepFailedRetryable, domain.StepFailedResource, domain.StepFailedFatal, domain.StepNeedsUser:
		return domain.AttemptFailed, nil
	case domain.StepTimedOut, domain.StepLeaseTimeout:
		return domain.AttemptTimeout, nil
	case domain.StepCancelled:
		if a := storedAttempt(j, step, n); a != nil && a.State == domain.AttemptTimeout {
			return domain.AttemptTimeout, nil
		}
		return domain.AttemptCancelled, nil
	}
	return "", fmt.Errorf("step %s went from running to %s, which ends no attempt", step, to)
}

func storedAttempt(j *domain.Job, step string, n int) *domain.Attempt {
	s, _, err := j.Step(step) // by the job's index: this is asked of every attempt
	if err != nil {
		return nil
	}
	for i := range s.Attempts {
		if s.Attempts[i].N == n {
			return &s.Attempts[i]
		}
	}
	return nil
}

// last answers the job's state after its last job event.
func (h *history) last() domain.JobState {
	if len(h.job) == 0 {
		return domain.JobInitial
	}
	return h.job[len(h.job)-1].state
}
