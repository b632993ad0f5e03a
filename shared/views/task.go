package views

import (
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// task is the quality platform's task (a job) and its runs (attempts).
// Its task machine has no failed state; a FAILED job reads "failed"
// (docs/model.md#a-failed-task-has-no-state-of-its-own).
var task = vocabulary{
	tables: func() []Table {
		return []Table{
			{
				Vocabulary: Task, Level: "task",
				States: []string{"inbox", "todo", "doing", "blocked", "done", "cancelled", "failed"},
				Allowed: pairs(
					[]string{"inbox", "todo", "cancelled"},
					[]string{"todo", "doing", "blocked", "cancelled"},
					[]string{"doing", "done", "blocked", "cancelled"},
					[]string{"blocked", "todo", "doing", "cancelled"},
					// Widenings:
					[]string{Initial, "todo"},
					[]string{"doing", "todo", "failed"},
					[]string{"blocked", "failed", "done"},
					[]string{"failed", "todo"},
				),
				Why: map[Pair]string{
					{Initial, "todo"}:     "POST /v1/jobs validates before it writes: a task is born todo (inbox is never stored)",
					{"doing", "todo"}:     "a step succeeded and the next one waits for its lease (RUNNING -> QUEUED), or a lease expired and the step went back to the queue",
					{"doing", "failed"}:   "a step failed for good (FAILED, which the task machine has no word for)",
					{"blocked", "failed"}: "a person rejected an approval, or a gate or a wait passed its deadline",
					{"blocked", "done"}:   "an approval, a signal or a sleep's time closed the last step (WAITING -> COMPLETED)",
					{"failed", "todo"}:    "POST /v1/jobs/{id}/redrive runs a failed job again",
				},
				Never: map[Pair]string{
					{"todo", "blocked"}:    "a queued job is not blocked: a gate, wait or sleep reached before any step ran moves it doing first (job_running, then job_waiting), as the formal machine enters Waiting only from Running",
					{"inbox", "todo"}:      "inbox is never stored: a task is born todo or refused with 400",
					{"inbox", "cancelled"}: "inbox is never stored: a refused submission writes nothing",
				},
			},
			{
				Vocabulary: Task, Level: "run",
				States: strs(domain.AllAttemptStates()),
				Allowed: append(attemptPairs(), pairs(
					[]string{string(domain.AttemptQueued), string(domain.AttemptRunning), string(domain.AttemptCancelled)},
				)...),
				Why: map[Pair]string{
					{Initial, "running"}: "a run exists from its lease on: the step waits PENDING or RETRYING, not a queued run",
				},
				Never: map[Pair]string{
					{"queued", "running"}:   "queued is never stored: the run starts running",
					{"queued", "cancelled"}: "queued is never stored: a cancel before the lease ends the step, not a run",
				},
			},
		}
	},
	moves: func(j *domain.Job, h *history) []Move {
		out := jobMoves(j, h, "task", func(i int) string { return taskJobWord(h.job[i].state) })
		return append(out, runMoves(h, "run")...)
	},
	consistent: func(j *domain.Job, h *history) error {
		if got, want := taskJobWord(h.last()), taskJobWord(j.State); got != want {
			return fmt.Errorf("the log says task %s, the stored job reads %s", got, want)
		}
		return consistentRuns(j, h)
	},
	stepWord: taskStepWord,
	project:  func(j *domain.Job) any { return taskDoc(j) },
	summarize: func(j *domain.Job) any {
		return TaskSummary{ID: j.ID, View: Task, State: taskJobWord(j.State), Priority: domain.Priority(j.Priority).Label(), Queue: j.Queue, ScheduleID: j.ScheduleID}
	},
	filter: wordFilter(taskJobWord),
}

// taskJobWord names a job state as a task.
func taskJobWord(s domain.JobState) string {
	switch s {
	case domain.JobQueued:
		return "todo"
	case domain.JobRunning:
		return "doing"
	case domain.JobWaiting, domain.JobParked, domain.JobRetrying:
		return "blocked"
	case domain.JobCompleted:
		return "done"
	case domain.JobFailed:
		return "failed"
	case domain.JobCancelled:
		return "cancelled"
	}
	return ""
}

// taskStepWord names a step state in the task's words: a step waiting
// for the one before it is blocked (the quality platform's unmet
// dependency), as is one backing off or waiting on a person, a signal or
// a time. A skipped step never ran, so it is not done: it reads skipped,
// a word the task machine lacks as it lacks failed.
func taskStepWord(s domain.StepState) string {
	switch s {
	case domain.StepPending, domain.StepSwitchingResource, domain.StepLeaseTimeout:
		return "todo"
	case domain.StepLeased, domain.StepRunning:
		return "doing"
	case domain.StepWaitingDeps, domain.StepRetrying, domain.StepFailedRetryable, domain.StepTimedOut, domain.StepNeedsUser, domain.StepWaiting:
		return "blocked"
	case domain.StepSucceeded:
		return "done"
	case domain.StepFailed, domain.StepFailedFatal, domain.StepFailedResource:
		return "failed"
	case domain.StepCancelled:
		return "cancelled"
	case domain.StepSkipped:
		return "skipped"
	}
	return ""
}

// TaskDoc is a job in the task view.
type TaskDoc struct {
	ID        string     `json:"id"`
	View      string     `json:"view"`
	State     string     `json:"state"`
	Priority  string     `json:"priority"`
	Queue     string     `json:"queue"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Steps     []TaskStep `json:"steps"`
	Runs      []TaskRun  `json:"runs"`
}

// TaskStep is one step of a task.
type TaskStep struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Action string            `json:"action"`
	Error  *domain.StepError `json:"error,omitempty"`
}

// TaskRun is one run (attempt) of a task's step.
type TaskRun struct {
	Step      string            `json:"step"`
	N         int               `json:"n"`
	State     string            `json:"state"`
	Worker    string            `json:"worker,omitempty"`
	StartedAt *time.Time        `json:"started_at,omitempty"`
	EndedAt   *time.Time        `json:"ended_at,omitempty"`
	Error     *domain.StepError `json:"error,omitempty"`
}

// TaskSummary is a job in a task-view listing.
type TaskSummary struct {
	ID         string `json:"id"`
	View       string `json:"view"`
	State      string `json:"state"`
	Priority   string `json:"priority"`
	Queue      string `json:"queue"`
	ScheduleID string `json:"schedule_id,omitempty"`
}

func taskDoc(j *domain.Job) TaskDoc {
	d := TaskDoc{
		ID: j.ID, View: Task, State: taskJobWord(j.State), Priority: domain.Priority(j.Priority).Label(), Queue: j.Queue,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EndedAt: j.EndedAt, Steps: []TaskStep{}, Runs: []TaskRun{},
	}
	for _, s := range j.Steps {
		d.Steps = append(d.Steps, TaskStep{ID: s.ID(), State: taskStepWord(s.State), Action: s.Spec.Action.Type, Error: s.Error})
		for _, a := range s.Attempts {
			d.Runs = append(d.Runs, TaskRun{Step: s.ID(), N: a.N, State: string(a.State), Worker: a.Worker, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Error: a.Error})
		}
	}
	return d
}
