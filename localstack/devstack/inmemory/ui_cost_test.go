package inmemory_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// askLLM submits a job whose first step a worker completes reporting it
// spent usd, and answers the job once that step succeeded.
func askLLM(t *testing.T, h *stacktest.Harness, spec map[string]any, usd float64) stacktest.Job {
	t.Helper()
	spec["steps"] = []any{
		map[string]any{"id": "ask", "action": map[string]any{"type": "worker", "queue": "llm"}},
		map[string]any{"id": "store", "action": map[string]any{"type": "pass"}},
	}
	j := h.Submit(t, keyA, spec)
	var leases []struct {
		LeaseID string `json:"lease_id"`
	}
	require.Eventually(t, func() bool {
		var c struct {
			Leases []struct {
				LeaseID string `json:"lease_id"`
			} `json:"leases"`
		}
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/claim", keyA, map[string]any{"queue": "llm", "max": 1, "wait_seconds": 1, "worker": "box-1"}, &c)
		leases = c.Leases
		return len(leases) == 1
	}, 30*time.Second, 10*time.Millisecond)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA,
		map[string]any{"output": map[string]any{"answer": 42}, "cost": map[string]any{"usd": usd}}, nil)
	return j
}

// The job page says what the job cost and of what, its usage units on
// demand, and what a step and its attempt reported they spent.
func TestUIShowsWhatAJobCost(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := askLLM(t, h, map[string]any{}, 0.0123)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`#job-cost`)))
	b.awaitText(`#job-cost`, "reported $0.012300")
	require.Regexp(t, `^\$0\.01\d{4} \(engine \$0\.0000\d\d, reported \$0\.012300\)`, b.text(`#job-cost`))
	require.Equal(t, "spent $0.0123", b.text(`[data-step-cost="ask"]`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('[data-step-cost="store"]').length)`), "a step that reported nothing")
	require.Equal(t, "$0.0123", b.text(`[data-step="ask"] [data-attempt-cost="1"]`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('[data-step="store"] [data-attempt-cost]').length)`), "no cost column where no attempt reported one")
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-budget *').length + document.querySelectorAll('#budget-form').length)`), "a finished job has no budget to set")

	// The units, on demand.
	require.Equal(t, "false", b.eval(`String(document.getElementById('job-cost-units').open)`))
	b.do(chromedp.Click(chromedp.CSS(`#job-cost-units summary`)), chromedp.WaitVisible(chromedp.CSS(`#job-cost-units tr[data-unit="dynamodb_write_units"]`)))
	require.Contains(t, b.text(`#job-cost-units`), "DynamoDB write units")
	require.Contains(t, b.text(`#job-cost-units`), "API Gateway requests")
	b.shot("job-cost.png")
}

// A job held at its budget gate: the page says why in a banner; the API's
// refusal of too small a budget shows beside the input, changing nothing;
// a raise through the button lets the job go on, and the page follows.
func TestUIRaisesAHeldJobsBudget(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := askLLM(t, h, map[string]any{"budget": map[string]any{"usd": 0.005}}, 0.01)
	h.Await(t, keyA, j.ID, "held at its budget gate", func(j stacktest.Job) bool { return j.State == domain.JobWaiting })

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`#job-budget.budget-gate button[data-action="budget"]`)))
	require.Regexp(t, `^Waiting: budget exceeded: \$0\.01\d* of \$0\.005`, b.text(`#job-budget .budget-why`))
	require.Equal(t, "Raise budget", b.text(`#job-budget button[data-action="budget"]`))
	require.Equal(t, "$0.005", b.text(`#job-budget-usd`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-actions #budget-form').length)`), "one budget form: the banner's")
	b.shot("job-budget-exceeded.png")

	b.do(chromedp.SendKeys(chromedp.CSS(`#budget-usd`), "0.001"), chromedp.Click(chromedp.CSS(`button[data-action="budget"]`)))
	b.awaitText(`#budget-error`, "400 invalid: usd")
	require.Equal(t, "true", b.eval(`document.getElementById('budget-usd').getAttribute('aria-invalid') || ''`))
	require.Equal(t, domain.JobWaiting, h.Get(t, keyA, j.ID).State)
	b.shot("job-budget-refused.png")

	b.eval(`document.getElementById('budget-usd').value = ''`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#budget-usd`), "2"), chromedp.Click(chromedp.CSS(`button[data-action="budget"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-state .st-completed`)))
	require.Contains(t, b.text(`#job-notice`), "Budget set to $2.00")
	require.Equal(t, "$2.00", b.text(`#job-budget-usd`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-budget *').length)`), "the banner is gone")
	b.awaitText(`#events`, "budget_set")
	require.Equal(t, domain.JobCompleted, h.Get(t, keyA, j.ID).State)
}

// Any unfinished job may be given a budget from its page.
func TestUISetsABudgetOnAnUnfinishedJob(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}}}})
	h.AwaitState(t, keyA, j.ID, domain.JobWaiting)
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`#job-actions button[data-action="budget"]`)))
	require.Equal(t, "Set budget", b.text(`#job-actions button[data-action="budget"]`))
	b.do(chromedp.SendKeys(chromedp.CSS(`#budget-usd`), "0.5"), chromedp.Click(chromedp.CSS(`button[data-action="budget"]`)))
	b.awaitText(`#job-budget-usd`, "$0.50")
	require.Equal(t, "Change budget", b.text(`#job-actions button[data-action="budget"]`))
	require.Contains(t, b.text(`#job-notice`), "Budget set to $0.50")
}

// The health page shows what the tenant spent today of its daily budget,
// and when that resets; a tenant with none sees nothing of it. It fits a
// phone.
func TestUIShowsTheTenantsDailyBudget(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.New(t, func(o *devstack.Options) {
		o.Env = map[string]string{"STEPFLOW_TENANT_BUDGETS": stacktest.TenantA + ":5"}
	})
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/health"), chromedp.WaitVisible(chromedp.CSS(`#daily-budget #daily-spent`)))
	require.Regexp(t, `^\$\d+\.\d+ spent today of \$5\.00$`, b.text(`#daily-spent`))
	require.Contains(t, b.text(`#daily-budget`), "Resets ")
	require.Regexp(t, `T00:00:00Z$`, b.eval(`document.querySelector('#daily-budget time').getAttribute('datetime')`))
	b.do(chromedp.EmulateViewport(phoneWidth, 900))
	width, err := strconv.Atoi(b.eval(`String(document.documentElement.scrollWidth)`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, phoneWidth, "wider than a phone: %s", b.eval(widest))
	b.shot("phone-health-budget.png")

	b.eval(`localStorage.setItem('stepflow.key', ` + strconv.Quote(stacktest.KeyB) + `); ''`)
	b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#health p.status`)))
	time.Sleep(500 * time.Millisecond) // its budget's answer, which shows nothing
	require.Equal(t, "true", b.eval(`String(document.getElementById('daily-budget').hidden)`), "tenant B has no daily budget")
}
