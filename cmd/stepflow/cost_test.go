package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/client"
)

// get shows what a job cost, and a step's reported cost in a column of
// its own, only when some step reported one.
func TestGetShowsWhatAJobCost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.c.Submit(b.ctx, client.JobRequest{Steps: []client.StepSpec{
		{ID: "ask-llm", Action: client.Worker("llm", 0)},
		{ID: "store", Action: client.Pass()},
	}})
	require.NoError(t, err)
	var leases []client.Lease
	require.Eventually(t, func() bool {
		leases, err = b.c.Claim(b.ctx, client.ClaimRequest{Queue: "llm", Max: 1, WaitSeconds: 1})
		require.NoError(t, err)
		return len(leases) == 1
	}, 30*time.Second, 10*time.Millisecond)
	_, err = b.c.CompleteReporting(b.ctx, leases[0].LeaseID, map[string]string{"answer": "42"}, 0.0123)
	require.NoError(t, err)
	done := b.await(t, j.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })

	r := b.run(t, "get", j.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "cost     "+costLine(done.Cost)+"\n")
	require.Regexp(t, `cost     \$0\.01\d{4} \(engine \$0\.0000\d\d, reported \$0\.012300\)`, r.stdout)
	require.NotContains(t, r.stdout, "children")
	require.NotContains(t, r.stdout, "budget", "no budget, no budget line")
	require.Regexp(t, `STEP\s+ACTION\s+STATE\s+ATTEMPT\s+COST\s+NOTE`, r.stdout)
	require.Regexp(t, `ask-llm\s+worker\s+SUCCEEDED\s+1/\d+\s+\$0\.0123\s+output`, r.stdout)
	require.Regexp(t, `store\s+pass\s+SUCCEEDED\s+1/\d+\s+-\s+output`, r.stdout)

	plain := b.submitJSON(t, "--action", "pass")
	b.await(t, plain.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	r = b.run(t, "get", plain.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reported $0.000000)")
	require.NotContains(t, r.stdout, "COST", "no step reported a cost: no column for it")
}

func TestCostAndBudgetLines(t *testing.T) {
	require.Equal(t, "$0.000006 (engine $0.000006, reported $0.000000)", costLine(client.Cost{USD: 0.000006, EngineUSD: 0.000006}))
	require.Equal(t, "$1.500010 (engine $0.000010, reported $0.500000, children $1.000000)",
		costLine(client.Cost{USD: 1.50001, EngineUSD: 0.00001, ReportedUSD: 0.5, ChildrenUSD: 1}))
	for usd, want := range map[float64]string{0.5: "$0.50", 2: "$2.00", 0.0042: "$0.0042", 1234.5: "$1234.50", 0.9999999: "$1.00", 0.00000001: "$0.00"} {
		require.Equal(t, want, dollars(usd), "%g", usd)
	}
	j := &client.Job{ID: "J", Budget: &client.Budget{USD: 0.5}}
	require.Equal(t, "$0.50", budgetLine(j))
	j.Budget = &client.Budget{USD: 0.5, Exceeded: &client.BudgetExceeded{CostUSD: 0.51}, Message: "budget exceeded: $0.51 of $0.5"}
	require.Equal(t, "$0.50 — exceeded: budget exceeded: $0.51 of $0.5; raise it: stepflow budget J --usd N", budgetLine(j))
	j.Budget.Message = ""
	require.Equal(t, "$0.50 — exceeded: budget exceeded: $0.51 of $0.50; raise it: stepflow budget J --usd N", budgetLine(j))
}

// budget's arguments: --usd needs a job, a job needs --usd.
func TestBudgetNeedsAJobAndAnAmountTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, "budget", "--usd", "2")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "give the job's id")
	r = b.run(t, "budget", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "--usd N")
}
