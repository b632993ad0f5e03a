package views

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// gated is the approval-gated runs: a run (a job) and its steps share one
// set of states. A QUEUED job is PENDING until it first moves, RUNNING
// after (between steps, after a redrive). Steps pass through some
// canonical states inside one change (FAILED_RETRYABLE, TIMED_OUT ...):
// the view shows where the change left them.
var gated = vocabulary{
	tables: func() []Table {
		states := []string{"PENDING", "RUNNING", "WAITING_APPROVAL", "SUCCEEDED", "FAILED", "CANCELED"}
		return []Table{
			{
				Vocabulary: Gated, Level: "run", States: states,
				Allowed: pairs(
					[]string{Initial, "PENDING"},
					[]string{"PENDING", "RUNNING", "CANCELED"},
					[]string{"RUNNING", "WAITING_APPROVAL", "SUCCEEDED", "FAILED", "CANCELED"},
					[]string{"WAITING_APPROVAL", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED"},
					// Widening:
					[]string{"FAILED", "RUNNING"},
				),
				Why: map[Pair]string{
					{"FAILED", "RUNNING"}: "POST /v1/jobs/{id}/redrive runs a failed run again from its failed steps",
				},
			},
			{
				// SKIPPED: a word the run system's steps lack, as the task
				// view's failed is one its tasks lack.
				Vocabulary: Gated, Level: "step", States: append(slices.Clip(states), "SKIPPED"),
				Allowed: pairs(
					[]string{"PENDING", "RUNNING", "WAITING_APPROVAL", "CANCELED"},
					[]string{"RUNNING", "SUCCEEDED", "PENDING", "FAILED", "CANCELED"},
					[]string{"WAITING_APPROVAL", "SUCCEEDED", "CANCELED"},
					// Widenings:
					[]string{"RUNNING", "WAITING_APPROVAL"},
					[]string{"WAITING_APPROVAL", "FAILED", "PENDING", "RUNNING"},
					[]string{"FAILED", "PENDING"},
					[]string{"CANCELED", "PENDING"},
					[]string{"PENDING", "FAILED", "SKIPPED"},
				),
				Why: map[Pair]string{
					{"RUNNING", "WAITING_APPROVAL"}: "a worker's outcome asks a person (class needs_user); a sleep or a wait step also reads WAITING_APPROVAL",
					{"WAITING_APPROVAL", "FAILED"}:  "a person rejects the gate, or a gate or wait passes its deadline",
					{"WAITING_APPROVAL", "PENDING"}: "a person answered a needs_user step (resume): it runs again under a new lease",
					{"FAILED", "PENDING"}:           "redrive reopens the failed step",
					{"CANCELED", "PENDING"}:         "redrive reopens the steps the failure cancelled",
					{"PENDING", "FAILED"}:           "no resource slot came within the step's resource_wait_seconds (class resource), or its condition (when) could not be evaluated (PENDING -> FAILED_FATAL -> FAILED): it fails before it ever runs",
					{"PENDING", "SKIPPED"}:          "its condition (when) was false when its dependencies were done: it ends without running, and what depends on it goes on",
					{"WAITING_APPROVAL", "RUNNING"}: "the canonical step table keeps the agent platform's NEEDS_USER -> RUNNING",
				},
				Never: map[Pair]string{
					{"WAITING_APPROVAL", "RUNNING"}: "a person's resume makes the step PENDING; it runs only under a new lease",
				},
			},
		}
	},
	moves: func(j *domain.Job, h *history) []Move {
		return append(gatedRunMoves(j, h), stepMoves(h, "step", gatedStepWord)...)
	},
	consistent: func(j *domain.Job, h *history) error {
		if moves := gatedRunMoves(j, h); len(moves) > 0 {
			if got, want := moves[len(moves)-1].To, gatedJobWordOf(j); got != want {
				return fmt.Errorf("the log says run %s, the stored job reads %s", got, want)
			}
		}
		return nil
	},
	stepWord: gatedStepWord,
	project:  func(j *domain.Job) any { return gatedDoc(j) },
	summarize: func(j *domain.Job) any {
		return GatedSummary{ID: j.ID, View: Gated, State: gatedJobWordOf(j), Queue: j.Queue, ScheduleID: j.ScheduleID}
	},
	filter: gatedFilter,
}

func gatedRunMoves(j *domain.Job, h *history) []Move {
	moved := false
	return jobMoves(j, h, "run", func(i int) string {
		moved = moved || h.job[i].state != domain.JobQueued
		return gatedJobWord(h.job[i].state, moved)
	})
}

// gatedJobWord names a job state as a run; moved: the job has been in a
// state other than QUEUED.
func gatedJobWord(s domain.JobState, moved bool) string {
	switch s {
	case domain.JobQueued:
		if moved {
			return "RUNNING"
		}
		return "PENDING"
	case domain.JobRunning, domain.JobRetrying:
		return "RUNNING"
	case domain.JobWaiting, domain.JobParked:
		return "WAITING_APPROVAL"
	case domain.JobCompleted:
		return "SUCCEEDED"
	case domain.JobFailed:
		return "FAILED"
	case domain.JobCancelled:
		return "CANCELED"
	}
	return ""
}

// gatedJobWordOf names a stored job as a run: a QUEUED job whose every
// job event led to QUEUED has not moved yet.
func gatedJobWordOf(j *domain.Job) string {
	moved := false
	for _, ev := range j.Events {
		if formalTarget[ev.Type] != "" && formalTarget[ev.Type] != "Queued" {
			moved = true
		}
	}
	return gatedJobWord(j.State, moved)
}

// gatedFilter selects a run state's jobs. QUEUED is PENDING before the run
// first moved and RUNNING after: only the job's log tells which.
func gatedFilter(w string) Filter {
	queued := w == "PENDING" || w == "RUNNING"
	var f Filter
	for _, s := range domain.AllJobStates() {
		if s == domain.JobQueued && queued || s != domain.JobQueued && gatedJobWord(s, true) == w {
			f.States = append(f.States, s)
		}
	}
	if queued {
		f.Keep = func(j *domain.Job) bool { return gatedJobWordOf(j) == w }
	}
	return f
}

// gatedStepWord names a step state; "" for the states a step only passes
// through inside one change.
func gatedStepWord(s domain.StepState) string {
	switch s {
	case domain.StepPending, domain.StepWaitingDeps, domain.StepRetrying, domain.StepSwitchingResource:
		return "PENDING"
	case domain.StepLeased, domain.StepRunning:
		return "RUNNING"
	case domain.StepNeedsUser, domain.StepWaiting:
		return "WAITING_APPROVAL"
	case domain.StepSucceeded:
		return "SUCCEEDED"
	case domain.StepFailed:
		return "FAILED"
	case domain.StepCancelled:
		return "CANCELED"
	case domain.StepSkipped:
		return "SKIPPED"
	}
	return ""
}

// GatedDoc is a job in the gated view: a run.
type GatedDoc struct {
	ID        string      `json:"id"`
	View      string      `json:"view"`
	State     string      `json:"state"`
	Queue     string      `json:"queue"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
	EndedAt   *time.Time  `json:"ended_at,omitempty"`
	Steps     []GatedStep `json:"steps"`
	// Cost is what the run cost: the engine's and what its steps reported.
	Cost domain.Cost `json:"cost"`
}

// GatedStep is one step of a run.
type GatedStep struct {
	ID        string            `json:"id"`
	State     string            `json:"state"`
	Action    string            `json:"action"`
	Approval  bool              `json:"approval,omitempty"` // an approval step: only the API moves it
	Attempts  int               `json:"attempts"`
	NextRunAt *time.Time        `json:"next_run_at,omitempty"`
	Output    json.RawMessage   `json:"output,omitempty"`
	Error     *domain.StepError `json:"error,omitempty"`
	Decision  *domain.Decision  `json:"decision,omitempty"`
	// CostUSD is what its attempts reported they spent: a run keeps each
	// step's output and cost.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// GatedSummary is a job in a gated-view listing.
type GatedSummary struct {
	ID         string `json:"id"`
	View       string `json:"view"`
	State      string `json:"state"`
	Queue      string `json:"queue"`
	ScheduleID string `json:"schedule_id,omitempty"`
}

func gatedDoc(j *domain.Job) GatedDoc {
	d := GatedDoc{
		ID: j.ID, View: Gated, State: gatedJobWordOf(j), Queue: j.Queue,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EndedAt: j.EndedAt, Steps: []GatedStep{}, Cost: j.Cost(),
	}
	for _, s := range j.Steps {
		gs := GatedStep{
			ID: s.ID(), State: gatedStepWord(s.State), Action: s.Spec.Action.Type, Approval: s.Spec.Action.Type == domain.ActionApproval,
			Attempts: s.Attempt, Output: s.Output, Error: s.Error, Decision: s.Decision, CostUSD: s.ReportedUSD(),
		}
		if s.State == domain.StepRetrying {
			gs.NextRunAt = s.ReadyAt
		}
		d.Steps = append(d.Steps, gs)
	}
	return d
}
