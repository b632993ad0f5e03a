package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// sink keeps what the engine hands the metrics sink.
type sink struct {
	mu      sync.Mutex
	batches []engine.MetricsBatch
}

func (s *sink) Emit(_ context.Context, b engine.MetricsBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, b)
}

func TestStepMetricsCountAWorkersRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	metrics := &sink{}
	b.e.Configure(func(c *engine.Config) { c.Metrics = metrics })
	b.submit(t, tenantB, `{"steps":[{"id":"p","action":{"type":"pass"}}]}`) // another tenant's work
	b.drain(t)
	b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"},"retry":{"max_attempts":3,"backoff":"fixed","initial_delay_ms":1000}}]}`)
	for range 2 {
		ls := b.claim(t, tenantA, "q")
		require.Len(t, ls, 1)
		b.clock.Advance(2 * time.Second)
		_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "retryable", Message: "busy"})
		require.NoError(t, err)
		b.clock.Advance(time.Second)
	}
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	b.clock.Advance(4 * time.Second)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, nil)
	require.NoError(t, err)

	// The job's log: PENDING -> LEASED -> RUNNING, twice RUNNING ->
	// FAILED_RETRYABLE -> RETRYING -> RUNNING, then SUCCEEDED.
	move := func(from, to domain.StepState) engine.StepMove { return engine.StepMove{From: from, To: to} }
	wantMoves := map[engine.StepMove]int64{
		move(domain.StepPending, domain.StepLeased):           1,
		move(domain.StepLeased, domain.StepRunning):           1,
		move(domain.StepRunning, domain.StepFailedRetryable):  2,
		move(domain.StepFailedRetryable, domain.StepRetrying): 2,
		move(domain.StepRetrying, domain.StepRunning):         2,
		move(domain.StepRunning, domain.StepSucceeded):        1,
	}
	c, err := b.e.StepMetrics(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, wantMoves, c.Moves)
	require.Equal(t, int64(2), c.Retries)
	require.Equal(t, int64(1), engine.StepsByState(c)[domain.StepSucceeded])
	for _, st := range domain.AllStepStates() {
		if st != domain.StepSucceeded {
			require.Zero(t, engine.StepsByState(c)[st], st)
		}
	}
	failed, ok := c.Durations[domain.AttemptFailed], c.Durations[domain.AttemptSucceeded]
	require.Equal(t, int64(2), failed.Count())
	require.Equal(t, int64(4000), failed.SumMs)
	require.Equal(t, int64(1), ok.Count())
	require.Equal(t, int64(4000), ok.SumMs)
	require.Equal(t, int64(1), ok.Counts[3], "4 s: the 5 s bucket")

	// Tenant b's counters hold its own pass step only.
	cb, err := b.e.StepMetrics(b.ctx, tenantB)
	require.NoError(t, err)
	require.Zero(t, cb.Retries)
	require.Equal(t, int64(1), engine.StepsByState(cb)[domain.StepSucceeded])
	require.NotContains(t, cb.Moves, move(domain.StepRunning, domain.StepFailedRetryable))

	// The job ran 8 s: the average run time the verdict judges.
	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.InDelta(t, 8, *h.AvgDuration, 1e-9)
	require.Equal(t, "ok", h.Status, "%v", h.Reasons)
	require.Nil(t, h.LastHeartbeat, "no sweep yet")

	// The sink had every move and attempt of both tenants, together.
	var moves int64
	samples := map[domain.AttemptState][]float64{}
	for _, bt := range metrics.batches {
		for _, n := range bt.Moves {
			moves += n
		}
		for st, v := range bt.Durations {
			samples[st] = append(samples[st], v...)
		}
	}
	require.Equal(t, int64(9+3), moves, "a's nine moves, b's pass step: PENDING -> LEASED -> RUNNING -> SUCCEEDED")
	require.Equal(t, []float64{2, 2}, samples[domain.AttemptFailed])
	require.Len(t, samples[domain.AttemptSucceeded], 2)

	// A sweep records itself and hands the sink the stack's steps by state.
	b.sweep(t)
	last := metrics.batches[len(metrics.batches)-1]
	require.Equal(t, int64(2), last.InState[domain.StepSucceeded], "a's step and b's")
	require.Len(t, last.InState, len(domain.AllStepStates()))
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.NotNil(t, h.LastHeartbeat)
	require.True(t, b.clock.Now().Equal(*h.LastHeartbeat))
	b.clock.Advance(4 * time.Minute)
	h, err = b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, "degraded", h.Status)
	require.Equal(t, []string{"heartbeat last swept 4m0s ago"}, h.Reasons)
}
