package inmemory_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

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
