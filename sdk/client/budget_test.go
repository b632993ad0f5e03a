package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

// A submit past the tenant's daily budget answers 402: an error the
// caller recognises, not retried (nothing changes until the day resets).
func TestA402IsBudgetExceededAndNotRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	body := `{"error":{"code":"budget_exceeded","message":"tenant dev spent its daily budget of $5"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "k", nil)
	_, err := c.Submit(t.Context(), client.JobRequest{Steps: []client.StepSpec{pass("a")}})
	require.True(t, client.IsBudgetExceeded(err), "%v", err)
	require.Equal(t, int32(1), calls.Load())
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusPaymentRequired, e.Status)
	require.Equal(t, "stepflow: 402 budget_exceeded: tenant dev spent its daily budget of $5", err.Error())

	// A 402 of something in front of the API, in its own words.
	body = `{"message":"over budget"}`
	_, err = c.Submit(t.Context(), client.JobRequest{Steps: []client.StepSpec{pass("a")}})
	require.True(t, client.IsBudgetExceeded(err), "%v", err)
	require.False(t, client.IsBudgetExceeded(nil))
}

// A job's budget: its cost past it holds the job at its budget gate;
// SetBudget refuses an amount not above the cost (naming usd), raises it
// to one that is, and the job goes on; another tenant's job is not found,
// a finished job's budget is kept.
func TestSetBudgetLetsAHeldJobGoOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.c.Submit(b.ctx, client.JobRequest{Budget: &client.Budget{USD: 0.005}, Steps: []client.StepSpec{
		{ID: "ask", Action: client.Worker("llm", 0)}, pass("store"),
	}})
	require.NoError(t, err)
	require.Equal(t, 0.005, j.Budget.USD)
	var leases []client.Lease
	require.Eventually(t, func() bool {
		leases, err = b.c.Claim(b.ctx, client.ClaimRequest{Queue: "llm", Max: 1, WaitSeconds: 1})
		require.NoError(t, err)
		return len(leases) == 1
	}, 30*time.Second, 10*time.Millisecond)
	_, err = b.c.CompleteReporting(b.ctx, leases[0].LeaseID, map[string]int{"answer": 42}, 0.01)
	require.NoError(t, err)
	held := b.await(t, j.ID, func(j *client.Job) bool { return j.Budget.Exceeded != nil })
	require.Equal(t, client.JobWaiting, held.State)
	require.GreaterOrEqual(t, held.Budget.Exceeded.CostUSD, 0.01)
	require.False(t, held.Budget.Exceeded.At.IsZero())
	require.Contains(t, held.Budget.Message, "budget exceeded")
	require.InDelta(t, 0.01, held.Cost.ReportedUSD, 1e-9)
	require.Positive(t, held.Cost.Units.DynamoDBWriteUnits)

	_, err = b.c.SetBudget(b.ctx, j.ID, 0.001)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 400, e.Status)
	require.Equal(t, "usd", e.Field)
	_, err = b.b.SetBudget(b.ctx, j.ID, 1)
	require.True(t, client.IsNotFound(err), "%v", err)

	raised, err := b.c.SetBudget(b.ctx, j.ID, 1)
	require.NoError(t, err)
	require.Equal(t, 1.0, raised.Budget.USD)
	require.Nil(t, raised.Budget.Exceeded)
	done := b.awaitState(t, j.ID, client.JobCompleted)
	require.Equal(t, 1.0, done.Budget.USD)
	_, err = b.c.SetBudget(b.ctx, j.ID, 2)
	require.True(t, client.IsConflict(err), "%v", err)

	tb, err := b.c.Budget(b.ctx)
	require.NoError(t, err)
	require.Equal(t, stacktest.TenantA, tb.Tenant)
	require.Nil(t, tb.DailyUSD, "no daily budget set")
	require.True(t, tb.ResetsAt.After(time.Now()))
}

// Past the tenant's daily budget a submit is refused with an error
// IsBudgetExceeded reports; Budget says so, and what was spent.
func TestASubmitPastTheDailyBudgetIsBudgetExceeded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *devstack.Options) {
		o.Env = map[string]string{"STEPFLOW_TENANT_BUDGETS": stacktest.TenantA + ":0.00001"}
	})
	tb, err := b.c.Budget(b.ctx)
	require.NoError(t, err)
	require.NotNil(t, tb.DailyUSD)
	require.Equal(t, 0.00001, *tb.DailyUSD)
	require.False(t, tb.Exceeded)

	var refused error
	for range 20 { // a job costs some millionths: a few pass the budget
		if _, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{pass("a")}}); err != nil {
			refused = err
			break
		}
	}
	require.True(t, client.IsBudgetExceeded(refused), "%v", refused)
	require.Contains(t, refused.Error(), "402 budget_exceeded")
	tb, err = b.c.Budget(b.ctx)
	require.NoError(t, err)
	require.True(t, tb.Exceeded)
	require.GreaterOrEqual(t, tb.SpentTodayUSD, 0.00001)
}
