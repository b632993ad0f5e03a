// Package metrics writes the metrics the engine counts, in the agent
// platform's names for the steps and stepflow's own for the operator's
// figures (docs/metrics.md), as CloudWatch Embedded Metric Format records
// in a function's log (EMF); package prometheus under it writes them in
// the text exposition format GET /v1/metrics answers.
package metrics

import (
	"reflect"
	"strings"

	"github.com/stepflow/stepflow/shared/engine"
)

// The step metrics, as the agent platform spells them.
const (
	Transitions  = "step_state_transitions_total"
	Duration     = "step_duration_seconds"
	Retries      = "step_retries_total"
	StepsByState = "steps_by_state"
)

// The operator's metrics (docs/metrics.md#operator-metrics): the same
// names in EMF records and on GET /v1/metrics.
const (
	// QueueMessages is what a queue holds, by queue and state (visible,
	// in_flight, delayed); WorkerQueueMessages the same of each worker
	// queue lane read (on /v1/metrics only: a CloudWatch dimension value
	// per queue would be a billed metric per queue).
	QueueMessages       = "queue_messages"
	WorkerQueueMessages = "worker_queue_messages"
	// WorkerQueueLanes is how many worker queue lanes the sweep listed,
	// WorkerQueueLanesRead how many of them it read.
	WorkerQueueLanes     = "worker_queue_lanes"
	WorkerQueueLanesRead = "worker_queue_lanes_read"
	// LeasesLive and TimersWaiting count the stack's steps holding a
	// lease and waiting on a time; DueOldestAge is how long the earliest
	// entry the sweep found due had been due.
	LeasesLive    = "leases_live"
	TimersWaiting = "timers_waiting"
	DueOldestAge  = "due_oldest_age_seconds"
	// SweepDuration is how long the last sweep ran; the heartbeat writes
	// it every sweep (the template's sweep-stale alarm watches it), and
	// SweepTimestamp is when it ended (on /v1/metrics).
	SweepDuration  = "sweep_duration_seconds"
	SweepTimestamp = "sweep_timestamp_seconds"
	// APIRequests counts requests by route and status class;
	// APIRequestDuration is how long they took, by route.
	APIRequests        = "api_requests_total"
	APIRequestDuration = "api_request_duration_seconds"
)

// Figure is one named value.
type Figure struct {
	Name  string
	Value int64
}

// SweepFigures answers what a sweep did, a metric a field of its report,
// named sweep_<the field's JSON name> (sweep_due, sweep_reclaimed, ...), in
// the report's order: a field added to the report is a metric at once.
func SweepFigures(rep engine.SweepReport) []Figure {
	v := reflect.ValueOf(rep)
	out := make([]Figure, 0, v.NumField())
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !v.Field(i).CanInt() {
			continue
		}
		out = append(out, Figure{Name: "sweep_" + name, Value: v.Field(i).Int()})
	}
	return out
}
