package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Health is the verdict of GET /v1/health (the quality platform's
// thresholds, docs/model.md#health).
type Health struct {
	// Tenant is whose health it is: the caller's, named by its key (the
	// web UI shows it, so a person sees whom a key signs in as).
	Tenant  string   `json:"tenant"`
	Status  string   `json:"status"` // ok, degraded, unhealthy
	Reasons []string `json:"reasons,omitempty"`
	// Notes say what was not graded, and why: a success rate of a few
	// jobs swings on each one, so it is graded only from SuccessMinJobs.
	Notes       []string `json:"notes,omitempty"`
	SuccessRate *float64 `json:"success_rate,omitempty"` // completed / finished over 24 h; absent with no finished job
	Backlog     int      `json:"backlog"`                // the tenant's jobs submitted and not started yet (over 24 h)
	Blocked     int64    `json:"blocked"`
	Completed   int64    `json:"completed_24h"`
	Failed      int64    `json:"failed_24h"`
	Cancelled   int64    `json:"cancelled_24h"`
	// AvgDuration is the average run time, in seconds, of the jobs that
	// completed or failed over 24 h; absent with none.
	AvgDuration *float64 `json:"avg_duration_seconds,omitempty"`
	// LastHeartbeat is when the heartbeat last swept; absent before its
	// first sweep.
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
}

// HealthThresholds say where each figure of the verdict stops being ok
// and where it becomes unhealthy (template parameters Health*,
// docs/model.md#health). Average duration, 24 h failures and a stale
// heartbeat reach degraded at most.
type HealthThresholds struct {
	SuccessOK        float64 // a success rate above this is ok (0.95)
	SuccessUnhealthy float64 // below this, unhealthy (0.80)
	SuccessMinJobs   int64   // the success rate is graded once this many jobs finished in 24 h (20)
	BacklogDegraded  int64   // a backlog from this is degraded (10)
	BacklogUnhealthy int64   // above this, unhealthy (50)
	BlockedDegraded  int64   // jobs blocked on a person, from this degraded (3)
	BlockedUnhealthy int64   // above this, unhealthy (10)
	AvgDuration      time.Duration
	Failures24h      int64 // failed jobs over 24 h, from this degraded (5)
	// SweepEvery is the heartbeat's period: a last sweep older than
	// StaleSweeps of them is a reason (degraded).
	SweepEvery time.Duration
}

// StaleSweeps is how many heartbeat periods may pass without a sweep
// before the verdict names it.
const StaleSweeps = 3

// DefaultHealthThresholds are the quality platform's.
func DefaultHealthThresholds() HealthThresholds {
	return HealthThresholds{
		SuccessOK: 0.95, SuccessUnhealthy: 0.80, SuccessMinJobs: 20, BacklogDegraded: 10, BacklogUnhealthy: 50,
		BlockedDegraded: 3, BlockedUnhealthy: 10, AvgDuration: 300 * time.Second, Failures24h: 5,
		SweepEvery: time.Minute,
	}
}

func (e *Engine) thresholds() HealthThresholds {
	if e.cfg.Thresholds == (HealthThresholds{}) {
		return DefaultHealthThresholds()
	}
	return e.cfg.Thresholds
}

// Health judges a tenant's health from its own counters (a few reads,
// computed on every request; docs/model.md#health says why): success
// rate (once enough jobs finished to say anything), backlog (its jobs submitted and not started) and jobs waiting on
// a person reach degraded or unhealthy; average run time, failures over
// 24 h and a heartbeat that stopped sweeping reach degraded. Every figure
// but the heartbeat is the tenant's own.
func (e *Engine) Health(ctx context.Context, tenant string) (Health, error) {
	e.flushStats(ctx, true) // this process's own counts, before reading them back
	now := e.now()
	st, err := e.cfg.Store.Stats(ctx, tenant, now)
	if err != nil {
		return Health{}, err
	}
	t := e.thresholds()
	// The tenant's own backlog, not the ready queues' length: another
	// tenant's work never makes this one look unhealthy.
	backlog := int(max(st.Queued, 0))
	h := Health{Tenant: tenant, Status: "ok", Backlog: backlog, Blocked: max(st.Blocked, 0), Completed: st.Completed, Failed: st.Failed, Cancelled: st.Cancelled, LastHeartbeat: st.LastSweep}
	level := 0
	judge := func(bad, worse bool, what string) {
		switch {
		case worse:
			level = max(level, 2)
			h.Reasons = append(h.Reasons, what)
		case bad:
			level = max(level, 1)
			h.Reasons = append(h.Reasons, what)
		}
	}
	done := st.Completed + st.Failed
	if done > 0 {
		rate := float64(st.Completed) / float64(done)
		h.SuccessRate = &rate
		if done >= t.SuccessMinJobs {
			judge(rate <= t.SuccessOK, rate < t.SuccessUnhealthy, fmt.Sprintf("success rate %.1f%%", rate*100))
		}
	}
	if done < t.SuccessMinJobs {
		// One failure of a handful would read as an outage.
		h.Notes = append(h.Notes, fmt.Sprintf("too few finished jobs (%d of %d) to grade the success rate", done, t.SuccessMinJobs))
	}
	judge(int64(backlog) >= t.BacklogDegraded, int64(backlog) > t.BacklogUnhealthy, fmt.Sprintf("backlog %d", backlog))
	judge(h.Blocked >= t.BlockedDegraded, h.Blocked > t.BlockedUnhealthy, fmt.Sprintf("%d jobs blocked on a person", h.Blocked))
	if st.Timed > 0 {
		avg := float64(st.DurationMs) / float64(st.Timed) / 1000
		h.AvgDuration = &avg
		judge(avg >= t.AvgDuration.Seconds(), false, fmt.Sprintf("average duration %.1f s", avg))
	}
	judge(st.Failed >= t.Failures24h, false, fmt.Sprintf("%d failures in 24 h", st.Failed))
	if st.LastSweep != nil {
		age := now.Sub(*st.LastSweep)
		judge(age > StaleSweeps*t.SweepEvery, false, fmt.Sprintf("heartbeat last swept %s ago", age.Round(time.Second)))
	}
	h.Status = []string{"ok", "degraded", "unhealthy"}[level]
	return h, nil
}

// StepMetrics answers a tenant's step metrics, counted since its counters
// began (GET /v1/metrics): one read of a few items.
func (e *Engine) StepMetrics(ctx context.Context, tenant string) (StepCounts, error) {
	e.flushStats(ctx, true) // this process's own counts, before reading them back
	return e.cfg.Store.StepStats(ctx, tenant)
}

// noteSweep records that the heartbeat swept at now (the health verdict's
// last_heartbeat), reads the stack's step counters and with them takes the
// sweep's readings (operator.go): it keeps those for GET /v1/metrics and
// hands them to the metrics sink with steps_by_state, the stack's steps in
// each state. A bounded number of requests a minute, whatever the load
// (docs/metrics.md counts them).
func (e *Engine) noteSweep(ctx context.Context, now time.Time, s sweepDone) {
	if err := e.cfg.Store.RecordSweep(ctx, now); err != nil {
		e.cfg.Log.WarnContext(ctx, "sweep time not recorded", "err", err)
	}
	if e.cfg.Metrics == nil && e.cfg.Operator == nil {
		return
	}
	c, err := e.cfg.Store.StepStats(ctx, AllTenants)
	if err != nil {
		e.cfg.Log.WarnContext(ctx, "steps by state not read", "err", err)
		return
	}
	r := e.readings(ctx, now, s, c)
	if e.cfg.Operator != nil {
		if err := e.cfg.Operator.PutReadings(ctx, r); err != nil {
			e.cfg.Log.WarnContext(ctx, "sweep readings not kept", "err", err)
		}
	}
	if e.cfg.Metrics != nil {
		e.cfg.Metrics.Emit(ctx, MetricsBatch{At: now, InState: StepsByState(c), Readings: &r})
	}
}

// StepsByState answers steps_by_state from c: every step state, a count
// lost with a stopped process never showing below zero.
func StepsByState(c StepCounts) map[domain.StepState]int64 {
	m := make(map[domain.StepState]int64, len(domain.AllStepStates()))
	for _, s := range domain.AllStepStates() {
		m[s] = max(c.InState[s], 0)
	}
	return m
}
