package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
)

// gauges answers fixed queue readings, as the SQS adapter would.
type gauges struct {
	readings engine.QueueReadings
	err      error
	asked    []int // maxWorkers of each call
}

func (g *gauges) QueueDepths(_ context.Context, maxWorkers int) (engine.QueueReadings, error) {
	g.asked = append(g.asked, maxWorkers)
	return g.readings, g.err
}

// The sweep reads the queues once, counts the live leases and waiting
// timers from the stack's step counters, keeps its readings where
// OperatorMetrics reads them and hands them to the metrics sink.
func TestSweepKeepsItsReadings(t *testing.T) {
	t.Parallel()
	g := &gauges{readings: engine.QueueReadings{
		Stack:       []engine.QueueDepth{{Queue: "P0", Visible: 2}, {Queue: "P1"}, {Queue: "P2"}, {Queue: "DLQ", Visible: 1}},
		Workers:     []engine.QueueDepth{{Queue: "s-w-8-tenant-a-gpu", Visible: 1, InFlight: 2}},
		WorkerLanes: 3,
	}}
	metrics := &sink{}
	b := setup(t, func(c *engine.Config) { c.Gauges, c.Metrics = g, metrics })
	b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":3600}}]}`)
	b.drain(t)
	leased := b.submit(t, tenantB, workerJob)
	require.Len(t, b.claim(t, tenantB, "gpu"), 1)
	_, err := b.e.StepMetrics(b.ctx, tenantA) // writes this process's counts, as its next flush would
	require.NoError(t, err)

	rep := b.sweep(t)
	require.Equal(t, []int{engine.MaxWorkerLaneReadings}, g.asked, "one reading of the queues a sweep, bounded")
	m, err := b.e.OperatorMetrics(b.ctx, nil)
	require.NoError(t, err)
	r := m.Readings
	require.NotNil(t, r)
	require.Equal(t, b.clock.Now(), r.At)
	require.Equal(t, rep, r.Sweep)
	require.Equal(t, int64(1), r.LeasesLive, "tenant b's worker holds its lease")
	require.Equal(t, int64(1), r.TimersWaiting, "tenant a's step sleeps")
	require.Zero(t, r.OldestDue, "nothing was due")
	require.Equal(t, &g.readings, r.Queues)

	metrics.mu.Lock()
	last := metrics.batches[len(metrics.batches)-1]
	metrics.mu.Unlock()
	require.Equal(t, r, last.Readings, "the sink gets what was kept")
	require.NotEmpty(t, last.InState, "with steps_by_state, as before")

	// A lease that expired unreclaimed is due: the sweep says how late.
	b.clock.Advance(time.Minute + 2*time.Minute)
	due := b.job(t, tenantB, leased.ID).DueAt
	require.NotNil(t, due)
	require.Equal(t, 1, b.sweep(t).Reclaimed)
	m, err = b.e.OperatorMetrics(b.ctx, nil)
	require.NoError(t, err)
	require.Equal(t, b.clock.Now().Sub(*due), m.Readings.OldestDue)
	require.Positive(t, m.Readings.OldestDue)
}

// A failed reading of the queues loses them alone: the sweep's own
// figures are kept.
func TestReadingsWithoutTheQueues(t *testing.T) {
	t.Parallel()
	g := &gauges{err: errors.New("sqs: throttled")}
	b := setup(t, func(c *engine.Config) { c.Gauges = g })
	b.sweep(t)
	m, err := b.e.OperatorMetrics(b.ctx, nil)
	require.NoError(t, err)
	require.NotNil(t, m.Readings)
	require.Nil(t, m.Readings.Queues)
}

// Each route's requests go to the stack's counters, added to what other
// processes counted, and to the sink with their durations.
func TestRequestsAreCountedPerRoute(t *testing.T) {
	t.Parallel()
	metrics := &sink{}
	b := setup(t, func(c *engine.Config) { c.Metrics = metrics })
	batch := func(statuses ...int) map[string]*engine.RouteBatch {
		rb := &engine.RouteBatch{}
		for _, s := range statuses {
			rb.Observe(s, 30*time.Millisecond)
		}
		return map[string]*engine.RouteBatch{"POST /v1/jobs": rb}
	}
	b.e.RecordRequests(b.ctx, b.clock.Now(), batch(201, 201, 400))
	b.e.RecordRequests(b.ctx, b.clock.Now(), batch(503)) // another instance's

	m, err := b.e.OperatorMetrics(b.ctx, []string{"POST /v1/jobs", "GET /v1/jobs"})
	require.NoError(t, err)
	require.Len(t, m.Requests, 1, "a route without requests has no counters")
	c := m.Requests["POST /v1/jobs"]
	require.Equal(t, [5]int64{0, 2, 0, 1, 1}, c.Classes)
	require.Equal(t, int64(4), c.Count())
	require.Equal(t, int64(4), c.Counts[3], "30 ms: the 50 ms bucket")
	require.Equal(t, int64(120_000), c.SumMicros)

	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	require.Len(t, metrics.batches, 2)
	require.Equal(t, []float64{0.03, 0.03, 0.03}, metrics.batches[0].Requests["POST /v1/jobs"].Seconds)
}
