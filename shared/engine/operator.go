package engine

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// The operator's figures (docs/metrics.md#operator-metrics): what one who
// runs the stack sees of it as a whole, every tenant's together. The
// heartbeat's sweep takes the readings once a minute and keeps the last
// ones in one item, so GET /v1/metrics answers them without calling SQS;
// the HTTP functions count their requests per route and add them to the
// stack's counters at most every StatsFlushEvery, as the step counters are.

// MaxWorkerLaneReadings bounds the worker queue lanes one sweep reads the
// depth of: SQS has no batch of GetQueueAttributes, so each is a request
// of its own, every minute. A stack with more reads the first of them by
// name, and says how many it listed.
const MaxWorkerLaneReadings = 50

// QueueDepth is what one queue holds, as SQS counts it (approximately).
type QueueDepth struct {
	// Queue is P0, P1 or P2 (the ready queues), DLQ (the dead-letter
	// queue), or a worker queue lane's SQS name.
	Queue                      string
	Visible, InFlight, Delayed int64
}

// QueueReadings are one reading of the stack's queues.
type QueueReadings struct {
	Stack   []QueueDepth // the ready queues, P0 to P2, then DLQ
	Workers []QueueDepth // the worker queue lanes read, by name
	// WorkerLanes is how many worker queue lanes the listing found
	// (at most 1,000: one page of ListQueues); Workers holds the first
	// MaxWorkerLaneReadings of them.
	WorkerLanes int
}

// WorkersTotal sums the worker queue lanes read.
func (r QueueReadings) WorkersTotal() QueueDepth {
	t := QueueDepth{Queue: WorkersQueue}
	for _, d := range r.Workers {
		t.Visible += d.Visible
		t.InFlight += d.InFlight
		t.Delayed += d.Delayed
	}
	return t
}

// WorkersQueue names the worker queue lanes read, summed, beside the
// stack's own queues.
const WorkersQueue = "workers"

// QueueGauges reads the depth of the stack's queues (the SQS adapter).
type QueueGauges interface {
	// QueueDepths reads the ready queues and the dead-letter queue, lists
	// the worker queue lanes and reads at most maxWorkers of them.
	QueueDepths(ctx context.Context, maxWorkers int) (QueueReadings, error)
}

// Readings are what the heartbeat's last sweep saw.
type Readings struct {
	At    time.Time     // when the sweep ended
	Took  time.Duration // how long it ran (its queue readings not counted)
	Sweep SweepReport
	// Queues is nil when they were not read (no gauge wired, or the read
	// failed: the sweep logs why).
	Queues *QueueReadings
	// LeasesLive are the stack's steps holding a lease (LEASED, RUNNING);
	// TimersWaiting those waiting on a time (WAITING: a sleep, a gate or a
	// wait, each until its time or deadline if it has one; RETRYING: a
	// backoff). Both from the stack's step counters.
	LeasesLive, TimersWaiting int64
	// OldestDue is how long the earliest entry the sweep found due in the
	// due index had been due (a lease that expired unreclaimed, a timer
	// that did not fire, a message lost): zero when nothing was due.
	OldestDue time.Duration
}

// RequestBuckets are api_request_duration_seconds' bucket bounds, in
// seconds.
var RequestBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// StatusClasses name the status classes requests are counted by;
// RequestCounts.Classes[i] counts StatusClasses[i].
var StatusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// ClassOf answers the index in StatusClasses of an HTTP status.
func ClassOf(status int) int { return min(max(status/100, 1), len(StatusClasses)) - 1 }

// RequestCounts are one route's requests: how many answered in each
// status class, and a histogram of how long they took (Counts[i] took at
// most RequestBuckets[i] and more than the bound before it; the last took
// longer than every bound).
type RequestCounts struct {
	Classes   [len(StatusClasses)]int64
	Counts    [len(RequestBuckets) + 1]int64
	SumMicros int64
}

// Observe counts one request that answered status after d.
func (r *RequestCounts) Observe(status int, d time.Duration) {
	r.Classes[ClassOf(status)]++
	i := 0
	for i < len(RequestBuckets) && d.Seconds() > RequestBuckets[i] {
		i++
	}
	r.Counts[i]++
	r.SumMicros += d.Microseconds()
}

// Add adds o to r.
func (r *RequestCounts) Add(o RequestCounts) {
	for i, n := range o.Classes {
		r.Classes[i] += n
	}
	for i, n := range o.Counts {
		r.Counts[i] += n
	}
	r.SumMicros += o.SumMicros
}

// Count is how many requests r holds.
func (r RequestCounts) Count() int64 {
	var n int64
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// RouteBatch is one route's requests since its function's last flush:
// each one's status class and duration, for the metrics sink (which
// wants the durations themselves) and the stack's counters.
type RouteBatch struct {
	Classes [len(StatusClasses)]int64
	Seconds []float64
	counts  RequestCounts
}

// Observe notes one request that answered status after d.
func (b *RouteBatch) Observe(status int, d time.Duration) {
	b.Classes[ClassOf(status)]++
	b.Seconds = append(b.Seconds, d.Seconds())
	b.counts.Observe(status, d)
}

// Counts answers the batch as counters.
func (b *RouteBatch) Counts() RequestCounts { return b.counts }

// OperatorStore keeps the operator's figures: the sweep's last readings
// (one item, replaced each sweep) and the request counters per route
// (since counting began, as the step counters). Both stores keep them;
// New takes it from the store.
type OperatorStore interface {
	PutReadings(ctx context.Context, r Readings) error
	// RecordRequests adds counts to the routes' counters.
	RecordRequests(ctx context.Context, counts map[string]RequestCounts) error
	// OperatorFigures answers the last readings (nil before the first)
	// and the counters of the routes named, in one read.
	OperatorFigures(ctx context.Context, routes []string) (*Readings, map[string]RequestCounts, error)
}

// OperatorMetrics are what GET /v1/metrics answers an operator.
type OperatorMetrics struct {
	Steps    StepCounts // the stack's: every tenant's together
	Readings *Readings  // nil before the first sweep kept them
	Requests map[string]RequestCounts
}

// OperatorMetrics answers the stack's figures: its step counters, the
// last sweep's readings and the request counters of routes. It reads
// the table (two reads) and never SQS.
func (e *Engine) OperatorMetrics(ctx context.Context, routes []string) (OperatorMetrics, error) {
	e.flushStats(ctx, true) // this process's own counts, before reading them back
	var m OperatorMetrics
	var err error
	if m.Steps, err = e.cfg.Store.StepStats(ctx, AllTenants); err != nil {
		return m, err
	}
	if e.cfg.Operator == nil {
		return m, nil
	}
	m.Readings, m.Requests, err = e.cfg.Operator.OperatorFigures(ctx, routes)
	return m, err
}

// RecordRequests adds an HTTP function's requests since its last flush to
// the stack's counters (one write a route) and hands them to the metrics
// sink. Best effort, as the step counters: a failed write is logged and
// dropped.
func (e *Engine) RecordRequests(ctx context.Context, at time.Time, batch map[string]*RouteBatch) {
	if len(batch) == 0 {
		return
	}
	if e.cfg.Operator != nil {
		counts := make(map[string]RequestCounts, len(batch))
		for route, b := range batch {
			counts[route] = b.Counts()
		}
		if err := e.cfg.Operator.RecordRequests(context.WithoutCancel(ctx), counts); err != nil {
			e.cfg.Log.WarnContext(ctx, "request counts not recorded", "err", err)
		}
	}
	if e.cfg.Metrics != nil {
		e.cfg.Metrics.Emit(ctx, MetricsBatch{At: at, Requests: batch})
	}
}

// LeasesAndTimers answers, from step counters, the steps holding a lease
// (LEASED, RUNNING) and those waiting on a time (WAITING, RETRYING): see
// Readings.
func LeasesAndTimers(c StepCounts) (leases, timers int64) {
	in := StepsByState(c)
	return in[domain.StepLeased] + in[domain.StepRunning], in[domain.StepWaiting] + in[domain.StepRetrying]
}

// sweepDone is what a sweep hands noteSweep: its report, how long it ran
// and the due entries it read.
type sweepDone struct {
	report SweepReport
	took   time.Duration
	due    []DueJob
}

// readings takes the sweep's readings at now: the queues' depths (SQS),
// and from the stack's step counters c, the live leases and waiting
// timers.
func (e *Engine) readings(ctx context.Context, now time.Time, s sweepDone, c StepCounts) Readings {
	r := Readings{At: now, Took: s.took, Sweep: s.report}
	r.LeasesLive, r.TimersWaiting = LeasesAndTimers(c)
	if len(s.due) > 0 {
		// Both stores write due times as RFC 3339 in UTC, in milliseconds,
		// so they sort as strings.
		earliest := slices.MinFunc(s.due, func(a, b DueJob) int { return strings.Compare(a.Due, b.Due) }).Due
		if at, err := time.Parse(time.RFC3339, earliest); err == nil && at.Before(now) {
			r.OldestDue = now.Sub(at)
		}
	}
	if e.cfg.Gauges != nil {
		q, err := e.cfg.Gauges.QueueDepths(ctx, MaxWorkerLaneReadings)
		if err != nil {
			e.cfg.Log.WarnContext(ctx, "queue depths not read", "err", err)
		} else {
			r.Queues = &q
		}
	}
	return r
}
