package devstack_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// costed is a job as GET /v1/jobs/{id} shows its cost and budget.
type costed struct {
	State domain.JobState `json:"state"`
	Cost  domain.Cost     `json:"cost"`
	Steps []struct {
		ID       string           `json:"id"`
		State    domain.StepState `json:"state"`
		CostUSD  float64          `json:"cost_usd"`
		Attempts []struct {
			CostUSD float64 `json:"cost_usd"`
		} `json:"attempts"`
	} `json:"steps"`
	Budget *struct {
		USD      float64 `json:"usd"`
		Exceeded *struct {
			CostUSD float64 `json:"cost_usd"`
		} `json:"exceeded"`
		Message string `json:"message"`
	} `json:"budget"`
}

func getCosted(t *testing.T, h *stacktest.Harness, id string) costed {
	t.Helper()
	var j costed
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id, keyA, nil, &j)
	return j
}

// A job counts what it costs as it runs; a worker's reported cost shows on
// its attempt and step and in the job's sum.
func TestAJobShowsWhatItCostAndWhatItsWorkerReported(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "ask", "action": map[string]any{"type": "worker", "queue": "llm"}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	leases := claim(t, h, keyA, "llm", "w1", 1, 5)
	require.Len(t, leases, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA,
		map[string]any{"output": map[string]any{"answer": 42}, "cost": map[string]any{"usd": 0.0123}}, nil)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	c := getCosted(t, h, j.ID)
	require.Equal(t, 0.0123, c.Steps[0].CostUSD)
	require.Equal(t, 0.0123, c.Steps[0].Attempts[0].CostUSD)
	require.Equal(t, 0.0123, c.Cost.ReportedUSD)
	require.Positive(t, c.Cost.EngineUSD)
	require.Less(t, c.Cost.EngineUSD, 0.0001, "a two-step job's AWS usage is some millionths of a dollar")
	require.InDelta(t, c.Cost.EngineUSD+c.Cost.ReportedUSD, c.Cost.USD, 1e-9)
	u := c.Cost.Units
	require.GreaterOrEqual(t, u.WriteUnits, 3.0, "its create, its lease and its outcome")
	require.Equal(t, 3.0, u.APIRequests, "its submit, the claim that took it alone and its complete")

	// A cost that is no amount of dollars is refused, naming it.
	k := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "ask", "action": map[string]any{"type": "worker", "queue": "llm2"}}}})
	leases = claim(t, h, keyA, "llm2", "w1", 1, 5)
	require.Len(t, leases, 1)
	status, raw := h.Call(t, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA, map[string]any{"cost": map[string]any{"usd": -1}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(raw), `"field":"cost.usd"`)
	require.Equal(t, domain.JobRunning, h.Get(t, keyA, k.ID).State, "nothing was written")
}

// A job whose cost passes its budget starts no further step: it waits at
// its budget gate, saying so, and goes on once a person raises it; a
// running step finishes and is recorded.
func TestAJobPastItsBudgetWaitsUntilItIsRaised(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"budget": map[string]any{"usd": 0.01}, "steps": []any{
		map[string]any{"id": "plan", "action": map[string]any{"type": "worker", "queue": "agent"}},
		map[string]any{"id": "act", "action": map[string]any{"type": "pass"}},
	}})
	leases := claim(t, h, keyA, "agent", "w1", 1, 5)
	require.Len(t, leases, 1)
	// The attempt spent more than the budget: it is recorded, and what
	// follows does not start.
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA,
		map[string]any{"output": map[string]any{"plan": "go"}, "cost": map[string]any{"usd": 0.02}}, nil)
	held := h.AwaitState(t, keyA, j.ID, domain.JobWaiting)
	require.Equal(t, domain.StepSucceeded, held.Steps[0].State, "the running step finished and was recorded")
	require.Equal(t, domain.StepPending, held.Steps[1].State, "no further step started")
	c := getCosted(t, h, j.ID)
	require.NotNil(t, c.Budget.Exceeded)
	require.Regexp(t, `^budget exceeded: \$0\.020\d+ of \$0\.01$`, c.Budget.Message)
	require.Contains(t, h.EventTypes(t, keyA, j.ID), domain.NoteBudgetExceeded)
	// The sweep sends nothing to a job at its gate.
	h.Sweep(t)
	require.Equal(t, domain.StepPending, h.Get(t, keyA, j.ID).Steps[1].State)

	// A budget below what it cost is refused, naming usd; one above lets
	// it go on.
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/budget", keyA, map[string]any{"usd": 0.015})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(raw), `"field":"usd"`)
	require.Contains(t, string(raw), "has cost so far")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/budget", keyA, map[string]any{"usd": 0.05}, nil)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	c = getCosted(t, h, j.ID)
	require.Nil(t, c.Budget.Exceeded)
	require.Equal(t, 0.05, c.Budget.USD)
	events := h.Events(t, keyA, j.ID)
	var set string
	for _, e := range events {
		if e.Type == domain.NoteBudgetSet {
			set = e.Detail
		}
	}
	require.Regexp(t, `^budget set to \$0\.05 by key_[0-9a-f]{12}$`, set)
	h.CheckReplay(t, stacktest.TenantA, j.ID)

	// Cancel ends a job at its gate too.
	k := h.Submit(t, keyA, map[string]any{"budget": map[string]any{"usd": 0.000001}, "steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "pass"}},
	}})
	h.AwaitState(t, keyA, k.ID, domain.JobWaiting)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+k.ID+"/cancel", keyA, nil, nil)
	h.AwaitState(t, keyA, k.ID, domain.JobCancelled)
}

// A tenant past its daily budget gets 402, saying which budget and when
// it resets; nothing is written, and another tenant is not held.
func TestATenantPastItsDailyBudgetIsRefused(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) {
		o.Env = map[string]string{"STEPFLOW_TENANT_BUDGETS": stacktest.TenantA + ":0.00001"}
	})
	var budget struct {
		Tenant   string   `json:"tenant"`
		DailyUSD *float64 `json:"daily_usd"`
		Spent    float64  `json:"spent_today_usd"`
		Exceeded bool     `json:"exceeded"`
		ResetsAt string   `json:"resets_at"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/budget", keyA, nil, &budget)
	require.Equal(t, 0.00001, *budget.DailyUSD)
	require.False(t, budget.Exceeded)

	spec := map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}
	var refused []byte
	made := 0
	for range 20 { // a job costs some millionths: a few pass the budget
		status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, spec)
		if status == http.StatusPaymentRequired {
			refused = raw
			break
		}
		require.Equal(t, http.StatusCreated, status, "%s", raw)
		made++
	}
	require.NotNil(t, refused, "the daily budget was never reached")
	require.Positive(t, made)
	require.Contains(t, string(refused), `"code":"budget_exceeded"`)
	require.Regexp(t, `tenant tenant-a has spent \$[0-9.]+ today, its daily budget of \$0\.00001 .*resets at \d{4}-\d\d-\d\dT00:00:00Z`, string(refused))
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs/batch", keyA, map[string]any{"jobs": []any{spec}})
	require.Equal(t, http.StatusPaymentRequired, status, "%s", raw)

	var list struct{ Jobs []struct{ ID string } }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?limit=100", keyA, nil, &list)
	require.Len(t, list.Jobs, made, "a refused submit wrote nothing")

	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/budget", keyA, nil, &budget)
	require.True(t, budget.Exceeded)
	require.GreaterOrEqual(t, budget.Spent, 0.00001)
	require.Regexp(t, `T00:00:00Z$`, budget.ResetsAt)

	h.Submit(t, stacktest.KeyB, spec) // another tenant has no budget
	var other map[string]any
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/budget", stacktest.KeyB, nil, &other)
	require.NotContains(t, other, "daily_usd", fmt.Sprint(other))
	require.Equal(t, false, other["exceeded"])
}
