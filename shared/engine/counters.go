package engine

import (
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// The counters the engine keeps per tenant (health, GET /v1/stats) and
// for the stack (the step metrics): what a saved change adds to them.

// Stats are a tenant's outcome counts over a window, and how many of its
// jobs wait on a person now.
type Stats struct {
	Completed, Failed, Cancelled int64
	Blocked                      int64
	// Queued is the tenant's backlog: jobs submitted and not yet started,
	// summed over the same 24 hourly buckets, so a count lost with a
	// stopped process ages out of the window instead of drifting for ever.
	Queued int64
	// DurationMs is the run time of the jobs that completed or failed in
	// the window (the time their attempts ran), Timed how many they were.
	DurationMs, Timed int64
	// CostNanoUSD is what the tenant's jobs cost in the window, in
	// billionths of a dollar; SpentTodayNanoUSD since midnight UTC, which
	// its daily budget is held to.
	CostNanoUSD, SpentTodayNanoUSD int64
	// LastSweep is when the heartbeat last swept (the stack's, not the
	// tenant's); nil before its first sweep.
	LastSweep *time.Time
}

// Add sums a delta's counters into the window's: Stats reads a tenant's
// hourly buckets and its blocked gauge as deltas (a test checks that each
// counter is summed).
func (s *Stats) Add(d StatsDelta) {
	s.Completed += d.Completed
	s.Failed += d.Failed
	s.Cancelled += d.Cancelled
	s.Blocked += d.Blocked
	s.Queued += d.Queued
	s.DurationMs += d.DurationMs
	s.Timed += d.Timed
	s.CostNanoUSD += d.CostNanoUSD
}

// StatsDelta is what a batch of changes adds to a tenant's counters.
type StatsDelta struct {
	Completed, Failed, Cancelled int64
	Blocked                      int64 // jobs that started (+) or stopped (-) waiting on a person
	Queued                       int64 // jobs submitted (+) or that left QUEUED (-)
	DurationMs, Timed            int64 // run time of jobs that completed or failed, and how many
	CostNanoUSD                  int64 // what the tenant's jobs cost, in billionths of a dollar
	// Steps adds to the cumulative step counters (never windowed).
	Steps StepCounts
}

// Zero reports whether the delta changes nothing.
func (d StatsDelta) Zero() bool {
	return d.Completed == 0 && d.Failed == 0 && d.Cancelled == 0 && d.Blocked == 0 && d.Queued == 0 &&
		d.DurationMs == 0 && d.Timed == 0 && d.CostNanoUSD == 0 && d.Steps.Empty()
}

// Windowed reports whether the delta adds to the hourly counters.
func (d StatsDelta) Windowed() bool {
	return d.Completed != 0 || d.Failed != 0 || d.Cancelled != 0 || d.Queued != 0 || d.DurationMs != 0 || d.Timed != 0 || d.CostNanoUSD != 0
}

// Hourly is the part of d the hourly counters add: d without the blocked
// gauge and the step counters, which are kept on their own.
func (d StatsDelta) Hourly() StatsDelta {
	d.Blocked, d.Steps = 0, StepCounts{}
	return d
}

// Add sums o into d, every counter (a test checks that each field is).
func (d *StatsDelta) Add(o StatsDelta) {
	d.Completed += o.Completed
	d.Failed += o.Failed
	d.Cancelled += o.Cancelled
	d.Blocked += o.Blocked
	d.Queued += o.Queued
	d.DurationMs += o.DurationMs
	d.Timed += o.Timed
	d.CostNanoUSD += o.CostNanoUSD
	d.Steps.Add(o.Steps)
}

// AllTenants names the stack's own step counters in RecordStats and
// StepStats: every tenant's together (no tenant name has a '*').
const AllTenants = "*"

// StepMove is one step transition.
type StepMove struct{ From, To domain.StepState }

// DurationBuckets are step_duration_seconds' bucket bounds, in seconds.
var DurationBuckets = [...]float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}

// Durations is a histogram of attempt run times: Counts[i] attempts took
// at most DurationBuckets[i] and more than the bound before it; the last
// count took longer than every bound. SumMs is their total.
type Durations struct {
	Counts [len(DurationBuckets) + 1]int64
	SumMs  int64
}

// Observe counts one attempt that ran d.
func (h *Durations) Observe(d time.Duration) {
	i := 0
	for i < len(DurationBuckets) && d.Seconds() > DurationBuckets[i] {
		i++
	}
	h.Counts[i]++
	h.SumMs += d.Milliseconds()
}

// Count is how many attempts the histogram holds.
func (h Durations) Count() int64 {
	var n int64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// StepCounts are step metrics in the agent platform's names
// (docs/metrics.md): counted since the counters began, or, in a delta,
// what a batch of changes adds.
type StepCounts struct {
	Moves     map[StepMove]int64                // step_state_transitions_total
	Retries   int64                             // step_retries_total: moves into RETRYING
	Durations map[domain.AttemptState]Durations // step_duration_seconds, by how each attempt ended
	InState   map[domain.StepState]int64        // steps_by_state (a gauge: moves add and take away)
}

// Empty reports whether the counts hold nothing.
func (c StepCounts) Empty() bool {
	for _, n := range c.Moves {
		if n != 0 {
			return false
		}
	}
	for _, n := range c.InState {
		if n != 0 {
			return false
		}
	}
	return c.Retries == 0 && len(c.Durations) == 0
}

// Add adds o to c.
func (c *StepCounts) Add(o StepCounts) {
	for m, n := range o.Moves {
		c.Move(m, n)
	}
	for s, n := range o.InState {
		c.Gauge(s, n)
	}
	c.Retries += o.Retries
	for st, h := range o.Durations {
		if c.Durations == nil {
			c.Durations = map[domain.AttemptState]Durations{}
		}
		t := c.Durations[st]
		for i := range t.Counts {
			t.Counts[i] += h.Counts[i]
		}
		t.SumMs += h.SumMs
		c.Durations[st] = t
	}
}

// Move counts n moves m.
func (c *StepCounts) Move(m StepMove, n int64) {
	if c.Moves == nil {
		c.Moves = map[StepMove]int64{}
	}
	c.Moves[m] += n
}

// Gauge adds n to the steps in state s.
func (c *StepCounts) Gauge(s domain.StepState, n int64) {
	if c.InState == nil {
		c.InState = map[domain.StepState]int64{}
	}
	c.InState[s] += n
}

// Observe counts one attempt that ended in state after running d.
func (c *StepCounts) Observe(state domain.AttemptState, d time.Duration) {
	if c.Durations == nil {
		c.Durations = map[domain.AttemptState]Durations{}
	}
	h := c.Durations[state]
	h.Observe(d)
	c.Durations[state] = h
}

// OutcomeDelta counts one job finished in state (completed, failed or
// cancelled; any other state counts nothing).
func OutcomeDelta(state domain.JobState) StatsDelta {
	switch state {
	case domain.JobCompleted:
		return StatsDelta{Completed: 1}
	case domain.JobFailed:
		return StatsDelta{Failed: 1}
	case domain.JobCancelled:
		return StatsDelta{Cancelled: 1}
	}
	return StatsDelta{}
}
