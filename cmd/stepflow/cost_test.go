package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

// get shows what a job cost, and a step's reported cost in a column of
// its own, only when some step reported one.
func TestGetShowsWhatAJobCost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.askLLM(t, nil, 0.0123)
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

// heldAtItsBudget submits a job with a budget its first step's reported
// cost goes past, and answers it once it waits at its budget gate.
func (b *bundle) heldAtItsBudget(t *testing.T) *client.Job {
	t.Helper()
	j := b.askLLM(t, &client.Budget{USD: 0.005}, 0.01)
	return b.await(t, j.ID, func(j *client.Job) bool { return j.Budget != nil && j.Budget.Exceeded != nil })
}

// A job held at its budget gate: get says so and how to raise it; budget
// refuses an amount not above its cost, with the API's message, and
// raises it to one that is, and the job goes on; budget with no job shows
// the tenant's daily budget (none here).
func TestBudgetRaisesAHeldJobsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.heldAtItsBudget(t)
	require.Equal(t, client.JobWaiting, j.State)
	require.Equal(t, "store", j.Steps[1].ID)
	require.Zero(t, j.Steps[1].Attempt, "no further step starts")

	r := b.run(t, "get", j.ID)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^budget   \$0\.005 — exceeded: budget exceeded: \$0\.01\d* of \$0\.005; raise it: stepflow budget `+j.ID+` --usd N$`, r.stdout)

	r = b.run(t, "budget", j.ID, "--usd", "0.001")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "400 invalid: usd")
	require.Equal(t, client.JobWaiting, b.await(t, j.ID, func(*client.Job) bool { return true }).State, "a refusal changes nothing")

	r = b.run(t, "budget", j.ID, "--usd", "2.5")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^`+j.ID+` \S+ budget \$2\.50\n$`, r.stdout)
	done := b.await(t, j.ID, func(j *client.Job) bool { return j.State == client.JobCompleted })
	require.Equal(t, 2.5, done.Budget.USD)
	require.Nil(t, done.Budget.Exceeded)
	r = b.run(t, "get", j.ID)
	require.Contains(t, r.stdout, "budget   $2.50\n")
	r = b.run(t, "events", j.ID)
	require.Contains(t, r.stdout, "budget_exceeded")
	require.Contains(t, r.stdout, "budget_set")

	r = b.run(t, "budget", j.ID, "--usd", "3")
	require.Equal(t, exitError, r.code, "a finished job's budget is kept")
	require.Contains(t, r.stderr, "409")

	r = b.run(t, "budget")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?s)tenant       \S+\ndaily        none \(no daily budget for this tenant\)\nspent today  \$\d+\.\d+\nresets at    \d{4}-`, r.stdout)
	r = b.run(t, "budget", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var tb client.TenantBudget
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &tb))
	require.Nil(t, tb.DailyUSD)
	require.True(t, tb.ResetsAt.After(time.Now()))
}

// Past the tenant's daily budget: budget says so, and a submit is refused
// saying where to look.
func TestBudgetShowsTheTenantsDailyBudget(t *testing.T) {
	t.Parallel()
	b := setupOn(t, stacktest.New(t, func(o *devstack.Options) {
		o.Env = map[string]string{"STEPFLOW_TENANT_BUDGETS": stacktest.TenantA + ":0.00001"}
	}))
	r := b.run(t, "budget")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^daily        \$0\.00001$`, r.stdout)
	require.NotContains(t, r.stdout, "exceeded")
	for range 20 { // a job costs some millionths: a few pass the budget
		if r = b.run(t, "submit", "--action", "pass"); r.code != 0 {
			break
		}
	}
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "402 budget_exceeded: tenant "+stacktest.TenantA+" has spent")
	require.Contains(t, r.stderr, "(stepflow budget shows the tenant's daily budget)")
	r = b.run(t, "budget")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^spent today  \$0\.0000\d+ \(exceeded: submits are refused until it resets\)$`, r.stdout)
}

// askLLM submits a job whose worker step ask-llm (then a pass step) a
// worker completes reporting usd spent, under budget when given.
func (b *bundle) askLLM(t *testing.T, budget *client.Budget, usd float64) *client.Job {
	t.Helper()
	j, err := b.c.Submit(b.ctx, client.JobRequest{Budget: budget, Steps: []client.StepSpec{
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
	_, err = b.c.CompleteReporting(b.ctx, leases[0].LeaseID, map[string]string{"answer": "42"}, usd)
	require.NoError(t, err)
	return j
}
