package engine_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// A job counts what it costs as it goes: its part of the request that
// submitted it, its writes and reads, its sends, and its part of each
// invocation that ran it; the last write saves all of it.
func TestAJobCountsItsOwnUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := engine.WithTab(b.ctx, engine.Request(1))
	j, _, err := b.e.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"depends_on":["a"]}]}`), "")
	require.NoError(t, err)
	require.Equal(t, 1.0, j.Usage.APIRequests, "the submit's request")
	require.Equal(t, 1.0, j.Usage.LambdaRequests, "the API function's invocation")
	require.Equal(t, 1.0, j.Usage.SQSRequests, "the first step's send")
	require.GreaterOrEqual(t, j.Usage.WriteUnits, 1.0, "the create")

	ds := b.queue.TakeReady(10)
	require.Len(t, ds, 1)
	// One record of an invocation of two: half the invocation, half its
	// receive and half its delete.
	res, err := b.e.Execute(engine.WithTab(b.ctx, engine.Record(2)), ds[0])
	require.NoError(t, err)
	require.Equal(t, engine.Executed, res)
	b.drain(t)

	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	u := done.Usage
	require.Equal(t, 1.0, u.APIRequests)
	require.Equal(t, 1.5, u.LambdaRequests, "the submit's invocation and half of one execute invocation")
	require.Greater(t, u.WriteUnits, j.Usage.WriteUnits, "each write after the create counts its own units")
	require.Positive(t, u.LambdaGBSeconds, "the function's time on it")
	require.Positive(t, u.TableGBMonths, "a finished job's item is kept for its retention")
	c := done.Cost()
	require.Positive(t, c.EngineUSD)
	require.Zero(t, c.ReportedUSD)
	require.InDelta(t, u.EngineUSD(), c.USD, 1e-9)
}

// A worker's outcome may say what the attempt spent: each attempt keeps
// it, the step shows their sum, and the job's cost adds it to the
// engine's. A cost that is no amount of dollars is refused, naming it,
// with nothing written.
func TestAWorkersReportedCostIsTheJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"ask","action":{"type":"worker","queue":"llm"},"retry":{"max_attempts":2,"backoff":"fixed","initial_delay_ms":1000}}]}`)

	ls := b.claim(t, tenantA, "llm")
	require.Len(t, ls, 1)
	_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "retryable", Message: "rate limited", CostUSD: 0.01})
	require.NoError(t, err)
	_, err = b.e.CompleteReporting(b.ctx, tenantA, "nope", json.RawMessage(`{}`), -1)
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "cost.usd", de.Field)

	b.clock.Advance(2e9)
	b.sweep(t)
	ls = b.claim(t, tenantA, "llm")
	require.Len(t, ls, 1)
	_, err = b.e.CompleteReporting(b.ctx, tenantA, ls[0].LeaseID, json.RawMessage(`{"answer":42}`), 0.0325)
	require.NoError(t, err)

	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	s := done.Steps[0]
	require.Equal(t, []float64{0.01, 0.0325}, []float64{s.Attempts[0].CostUSD, s.Attempts[1].CostUSD})
	require.InDelta(t, 0.0425, s.ReportedUSD(), 1e-12)
	c := done.Cost()
	require.InDelta(t, 0.0425, c.ReportedUSD, 1e-12)
	require.Positive(t, c.EngineUSD)
	require.InDelta(t, c.EngineUSD+c.ReportedUSD, c.USD, 1e-9)
}

// A parent's cost includes what each child job it waited on cost.
func TestAChildJobsCostIsItsParents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, parentJob)
	b.drain(t)
	done := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	child := b.childOf(t, done, "sub")
	require.Equal(t, domain.JobCompleted, child.State)
	require.Equal(t, child.Cost().USD, done.Cost().ChildrenUSD, "what the child cost, all told")
	require.InDelta(t, done.Cost().EngineUSD+child.Cost().USD, done.Cost().USD, 1e-9)
}
