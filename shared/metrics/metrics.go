// Package metrics writes the step metrics the engine counts, in the agent
// platform's names (docs/metrics.md) as CloudWatch Embedded Metric Format
// records in a function's log (EMF); package prometheus under it writes
// them in the text exposition format GET /v1/metrics answers.
package metrics

// The metric names, as the agent platform spells them.
const (
	Transitions  = "step_state_transitions_total"
	Duration     = "step_duration_seconds"
	Retries      = "step_retries_total"
	StepsByState = "steps_by_state"
)
