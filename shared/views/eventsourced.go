package views

import (
	"fmt"

	"github.com/stepflow/stepflow/shared/domain"
)

// eventSourced is the event-sourced job status: a projection of the job's
// events, the last state event deciding. Leased is merged into Running
// and Parked, which it does not have, reads Waiting (a long wait).
var eventSourced = vocabulary{
	tables: func() []Table {
		never := map[Pair]string{}
		for p, r := range canonicalJobNever {
			never[Pair{esWord(domain.JobState(p.From)), esWord(domain.JobState(p.To))}] = r
		}
		return []Table{{
			Vocabulary: EventSourced, Level: "job",
			States:  []string{"Queued", "Running", "Waiting", "Retrying", "Completed", "Failed", "Cancelled"},
			Allowed: image(canonicalJobPairs, esWord),
			Never:   never,
		}}
	},
	moves: func(j *domain.Job, h *history) []Move {
		return jobMoves(j, h, "job", func(i int) string { return esWord(h.job[i].state) })
	},
	consistent: func(j *domain.Job, _ *history) error {
		derived := ""
		for _, ev := range j.Events {
			if domain.IsNote(ev.Type) {
				continue
			}
			if _, isStep := stepStateOf(ev.Type); isStep {
				continue
			}
			to, ok := esTarget[ev.Type]
			if !ok {
				return fmt.Errorf("event %d: %s is not a state event of the event-sourced status", ev.Seq, ev.Type)
			}
			derived = to
		}
		if want := esWord(j.State); derived != want {
			return fmt.Errorf("status derived from the events is %s, the stored status reads %s", derived, want)
		}
		return nil
	},
	filter: wordFilter(esWord),
}

// esTarget: each state event and the status it leads to. job_parked and
// job_retrying are the canonical model's events for the two states the
// formal machine names without one; Parked reads Waiting here.
var esTarget = map[string]string{
	string(domain.JobEvCreated): "Queued", string(domain.JobEvQueued): "Queued", string(domain.JobEvRequeued): "Queued",
	string(domain.JobEvLeased): "Running", string(domain.JobEvRunning): "Running",
	string(domain.JobEvWaiting): "Waiting", string(domain.JobEvParked): "Waiting", string(domain.JobEvRetrying): "Retrying",
	string(domain.JobEvWaitCompleted): "Queued",
	string(domain.JobEvCompleted):     "Completed", string(domain.JobEvFailed): "Failed", string(domain.JobEvCancelled): "Cancelled",
}

// esWord names a job state as the event-sourced status does.
func esWord(s domain.JobState) string {
	if s == domain.JobParked {
		return "Waiting"
	}
	return formalWord(s)
}

// EventSourcedStatus answers the job's status derived from its events
// alone, the last state event deciding ("" for a job with none).
func EventSourcedStatus(events []domain.Event) string {
	derived := ""
	for _, ev := range events {
		if to, ok := esTarget[ev.Type]; ok {
			derived = to
		}
	}
	return derived
}
