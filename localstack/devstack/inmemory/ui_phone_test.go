package inmemory_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// phoneWidth is a phone's screen in CSS pixels (a large one held upright).
const phoneWidth = 420

// At a phone's width no page is wider than the screen: wide tables,
// graphs and the header scroll or wrap inside it. Each page is shown with
// what makes it widest (long ids, a graph, attempts with errors, events,
// a budget gate's banner) and saved as a screenshot beside the desktop
// ones.
func TestUIFitsAPhone(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	dag := h.Submit(t, keyA, map[string]any{"queue": "release", "payload": map[string]any{"version": "1.4.2"}, "steps": []any{
		map[string]any{"id": "build", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "test-unit", "action": map[string]any{"type": "pass"}, "depends_on": []string{"build"}},
		map[string]any{"id": "test-e2e", "action": map[string]any{"type": "pass"}, "depends_on": []string{"build"}},
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}, "depends_on": []string{"test-unit", "test-e2e"}},
		map[string]any{"id": "deploy", "action": map[string]any{"type": "pass"}, "depends_on": []string{"gate"}},
	}})
	failed := h.Submit(t, keyA, map[string]any{"queue": "reports", "steps": []any{map[string]any{"id": "flaky-report-generator", "retry": map[string]any{"max_attempts": 2, "initial_delay_ms": 10},
		"action": map[string]any{"type": "fail", "class": "retryable", "message": "the report server said no, at length: upstream_connect_error_or_disconnect/reset_before_headers"}}}})
	h.JSON(t, http.StatusCreated, http.MethodPut, "/v1/resources/gpu-a100-eu-west-1-rack-17", keyA, map[string]any{"capabilities": []string{"gpu", "cuda", "a100"}, "labels": map[string]string{"zone": "eu-west-1a", "rack": "17"}, "capacity": 4}, nil)
	worker := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "train", "action": map[string]any{"type": "worker", "queue": "ml-training-long-queue-name"}, "requires": map[string]any{"capabilities": []string{"gpu"}}}}})
	require.Eventually(t, func() bool { return len(claim(t, h, keyA, "ml-training-long-queue-name", "box-1", 1, 1)) == 1 }, 30*time.Second, 10*time.Millisecond)
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "nightly-report-for-the-finance-team", "cron": "30 2 * * 1-5", "time_zone": "Europe/Berlin",
		"job": map[string]any{"steps": []any{map[string]any{"id": "report", "action": map[string]any{"type": "pass"}}}}}, nil)
	held := askLLM(t, h, map[string]any{"budget": map[string]any{"usd": 0.005}}, 0.01)
	h.Await(t, keyA, held.ID, "at its budget gate", func(j stacktest.Job) bool { return j.State == domain.JobWaiting })
	h.Await(t, keyA, dag.ID, "at its gate", func(j stacktest.Job) bool { return j.Steps[3].State == domain.StepNeedsUser })
	h.AwaitState(t, keyA, failed.ID, domain.JobFailed)

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+dag.ID+`"]`)))
	b.do(chromedp.EmulateViewport(phoneWidth, 900))
	for _, p := range []struct{ name, hash, ready string }{
		{"jobs", "#/jobs", `tr[data-job="` + worker.ID + `"]`},
		{"job", "#/jobs/" + dag.ID, `#events li[data-seq]`},
		{"job-failed", "#/jobs/" + failed.ID, `article[data-step="flaky-report-generator"] table.attempts`},
		{"job-budget", "#/jobs/" + held.ID, `#job-budget.budget-gate button[data-action="budget"]`},
		{"new-job", "#/new", `#spec`},
		{"schedules", "#/schedules", `tr[data-schedule="nightly-report-for-the-finance-team"]`},
		{"schedule-edit", "#/schedules/nightly-report-for-the-finance-team/edit", `#save-schedule:not([disabled])`},
		{"resources", "#/resources", `tr[data-resource="gpu-a100-eu-west-1-rack-17"]`},
		{"resource-edit", "#/resources/gpu-a100-eu-west-1-rack-17/edit", `#save-resource:not([disabled])`},
		{"queues", "#/queues", `tr[data-queue="ml-training-long-queue-name"]`},
		{"health", "#/health", `#health p.status`},
	} {
		b.do(chromedp.Navigate(h.URL+"/ui"+p.hash), chromedp.WaitVisible(chromedp.CSS(p.ready)))
		if p.name == "job" {
			b.awaitText(`#events`, "step_needs_user") // the timeline at its longest
		}
		width, err := strconv.Atoi(b.eval(`String(document.documentElement.scrollWidth)`))
		require.NoError(t, err)
		t.Logf("%s at %d px: the page is %d px wide", p.name, phoneWidth, width)
		b.shot("phone-" + p.name + ".png")
		require.LessOrEqual(t, width, phoneWidth, "%s is wider than a phone: %s", p.name, b.eval(widest))
	}
}

// widest names the elements that reach past the screen's right edge, the
// innermost first, to say what overflows.
const widest = `[...document.querySelectorAll('body *')]
  .filter((el) => el.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(-5).map((el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '') + ' ' + Math.round(el.getBoundingClientRect().right))
  .join(', ')`
