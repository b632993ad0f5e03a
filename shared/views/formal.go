package views

import (
	"fmt"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// formal is the formal job machine: the canonical job states, named as it
// names them. Its table is the canonical job table, which is the formal
// one with the widenings docs/model.md#formal-job-machine lists.
var formal = vocabulary{
	tables: func() []Table {
		allowed := image(canonicalJobPairs, formalWord)
		why := map[Pair]string{}
		for _, p := range allowed {
			if !slices.Contains(formalOwn, p) {
				why[p] = formalWidening[p]
			}
		}
		never := map[Pair]string{}
		for p, r := range canonicalJobNever {
			never[Pair{formalWord(domain.JobState(p.From)), formalWord(domain.JobState(p.To))}] = r
		}
		return []Table{{
			Vocabulary: Formal, Level: "job",
			States:  []string{"Queued", "Running", "Waiting", "Parked", "Retrying", "Completed", "Failed", "Cancelled"},
			Allowed: allowed, Why: why, Never: never,
		}}
	},
	moves: func(j *domain.Job, h *history) []Move {
		return jobMoves(j, h, "job", func(i int) string { return formalWord(h.job[i].state) })
	},
	consistent: func(j *domain.Job, h *history) error {
		// The job events themselves, not only the states they lead to,
		// must be the formal table's or a documented widening.
		if err := domain.CheckFormal(j.Events); err != nil {
			return err
		}
		if got, want := derivedFormal(j.Events), formalWord(j.State); got != want {
			return fmt.Errorf("stored %s, derived from the events (the last state event wins) %s", want, got)
		}
		return nil
	},
	stepWord: formalStepWord,
	project:  func(j *domain.Job) any { return formalDoc(j) },
	summarize: func(j *domain.Job) any {
		return FormalSummary{ID: j.ID, View: Formal, State: formalWord(j.State), DerivedState: derivedFormal(j.Events), Queue: j.Queue, ScheduleID: j.ScheduleID}
	},
	filter: wordFilter(formalWord),
}

// formalOwn: the moves of the formal machine's own table.
var formalOwn = pairs(
	[]string{Initial, "Queued"},
	[]string{"Queued", "Running"},
	[]string{"Running", "Queued", "Waiting", "Completed", "Failed", "Cancelled"},
	[]string{"Waiting", "Queued", "Cancelled"},
	[]string{"Parked", "Queued", "Cancelled"},
	[]string{"Retrying", "Queued", "Running"},
	[]string{"Failed", "Queued"},
)

// formalWidening says why the canonical table adds each move: the
// domain's list of widenings, each with the lifecycle row that needs it
// (docs/model.md#formal-job-machine).
var formalWidening = func() map[Pair]string {
	out := map[Pair]string{}
	for _, w := range domain.JobWidenings() {
		out[Pair{formalWord(w.From), formalWord(w.To)}] = w.Why + " (required by " + w.Lifecycle + ": " + w.Row + ")"
	}
	return out
}()

// formalWord names a job state as the formal machine does.
func formalWord(s domain.JobState) string {
	switch s {
	case domain.JobQueued:
		return "Queued"
	case domain.JobRunning:
		return "Running"
	case domain.JobWaiting:
		return "Waiting"
	case domain.JobParked:
		return "Parked"
	case domain.JobRetrying:
		return "Retrying"
	case domain.JobCompleted:
		return "Completed"
	case domain.JobFailed:
		return "Failed"
	case domain.JobCancelled:
		return "Cancelled"
	}
	return ""
}

// formalStepWord names a step state with the formal machine's words (it
// has no step machine: the word of the job state the step would put its
// job in). A skipped step lets its job complete as a succeeded one does.
func formalStepWord(s domain.StepState) string {
	switch s {
	case domain.StepPending, domain.StepWaitingDeps, domain.StepSwitchingResource, domain.StepLeaseTimeout:
		return "Queued"
	case domain.StepLeased, domain.StepRunning:
		return "Running"
	case domain.StepNeedsUser, domain.StepWaiting:
		return "Waiting"
	case domain.StepRetrying, domain.StepFailedRetryable, domain.StepTimedOut:
		return "Retrying"
	case domain.StepSucceeded, domain.StepSkipped:
		return "Completed"
	case domain.StepFailed, domain.StepFailedFatal, domain.StepFailedResource:
		return "Failed"
	case domain.StepCancelled:
		return "Cancelled"
	}
	return ""
}

// formalTarget is the formal machine's event table read as
// DeriveStatusFromEvents reads it: each state event names the state it
// leads to, whatever the state before.
var formalTarget = map[string]string{
	string(domain.JobEvCreated): "Queued", string(domain.JobEvQueued): "Queued", string(domain.JobEvRequeued): "Queued",
	string(domain.JobEvLeased): "Running", string(domain.JobEvRunning): "Running",
	string(domain.JobEvWaiting): "Waiting", string(domain.JobEvParked): "Parked", string(domain.JobEvRetrying): "Retrying",
	string(domain.JobEvWaitCompleted): "Queued",
	string(domain.JobEvCompleted):     "Completed", string(domain.JobEvFailed): "Failed", string(domain.JobEvCancelled): "Cancelled",
}

// derivedFormal is the formal machine's DeriveStatusFromEvents: scan in
// order, the last state event decides. It reads no stored state, so it is
// a second opinion beside it.
func derivedFormal(events []domain.Event) string {
	out := ""
	for _, ev := range events {
		if to, ok := formalTarget[ev.Type]; ok {
			out = to
		}
	}
	return out
}

// FormalDoc is a job in the formal view.
type FormalDoc struct {
	ID           string       `json:"id"`
	View         string       `json:"view"`
	State        string       `json:"state"`
	DerivedState string       `json:"derived_state"` // from the event log: the last state event wins
	LastEvent    *FormalEvent `json:"last_state_event,omitempty"`
	Queue        string       `json:"queue"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
	EndedAt      *time.Time   `json:"ended_at,omitempty"`
	Steps        []FormalStep `json:"steps"`
}

// FormalEvent names the event the derived state comes from.
type FormalEvent struct {
	Seq  int       `json:"seq"`
	Type string    `json:"type"`
	At   time.Time `json:"at"`
}

// FormalStep is one step (a node) in the formal machine's words.
type FormalStep struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Action string            `json:"action"`
	Error  *domain.StepError `json:"error,omitempty"`
}

// FormalSummary is a job in a formal-view listing.
type FormalSummary struct {
	ID           string `json:"id"`
	View         string `json:"view"`
	State        string `json:"state"`
	DerivedState string `json:"derived_state"`
	Queue        string `json:"queue"`
	ScheduleID   string `json:"schedule_id,omitempty"`
}

func formalDoc(j *domain.Job) FormalDoc {
	d := FormalDoc{
		ID: j.ID, View: Formal, State: formalWord(j.State), DerivedState: derivedFormal(j.Events), Queue: j.Queue,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EndedAt: j.EndedAt, Steps: []FormalStep{},
	}
	for i := len(j.Events) - 1; i >= 0; i-- {
		if ev := j.Events[i]; formalTarget[ev.Type] != "" {
			d.LastEvent = &FormalEvent{Seq: ev.Seq, Type: ev.Type, At: ev.At}
			break
		}
	}
	for _, s := range j.Steps {
		d.Steps = append(d.Steps, FormalStep{ID: s.ID(), State: formalStepWord(s.State), Action: s.Spec.Action.Type, Error: s.Error})
	}
	return d
}
