package inmemory_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// The web UI in headless Chromium against the stack's API: what a
// person sees and clicks, and what the API says happened.

// browser is one headless Chromium of a test's own, with a fresh profile.
type browser struct {
	t    *testing.T
	ctx  context.Context
	dirs []string // where screenshots go

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// newBrowser starts Debian's chromium. Without it the test is skipped,
// except in CI (CI=true), where it fails: CI installs chromium (.ci/run), so
// a missing one means the browser test silently stopped running.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not on PATH: CI must run the web UI test (.ci/run installs Debian's chromium package)")
		}
		t.Skip("chromium is not on PATH: apt-get install chromium to run the web UI test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI containers
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The browser's life is bound to the context of its first action: one
	// with no timeout (each later action has its own).
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	b := &browser{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()

	shots := filepath.Join(t.TempDir(), "screenshots")
	require.NoError(t, os.MkdirAll(shots, 0o755))
	b.dirs = []string{shots}
	if dir := os.Getenv("STEPFLOW_UI_SCREENSHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		b.dirs = append(b.dirs, dir)
	}
	t.Cleanup(b.requireCleanConsole)
	t.Cleanup(func() {
		if t.Failed() {
			b.shot("failed.png") // what the page showed when the test failed
		}
	})
	return b
}

// do runs actions, each step bounded so a missing element fails the test
// rather than hanging it.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, actions...))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	require.NoError(b.t, err, "text of %s", sel)
	return s
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	require.NoError(b.t, err, "evaluate %s", js)
	return s
}

// awaitText waits until sel's text contains want.
func (b *browser) awaitText(sel, want string) {
	b.t.Helper()
	require.EventuallyWithT(b.t, func(c *assert.CollectT) {
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel)))
		if err != nil {
			c.Errorf("evaluate: %v", err)
			return
		}
		if !strings.Contains(got, want) {
			c.Errorf("%s reads %q, not %q", sel, got, want)
		}
	}, 30*time.Second, 100*time.Millisecond)
}

// shot saves a screenshot of the whole page.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	for _, dir := range b.dirs {
		require.NoError(b.t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	b.t.Logf("screenshot %s in %s", name, strings.Join(b.dirs, " and "))
}

// requireCleanConsole: the page threw nothing and broke no rule of its
// content security policy. Failed requests are the API's answers (a
// refused key answers 401), which the page shows itself.
func (b *browser) requireCleanConsole() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		if m.IsException() || m.Type == "error" && !strings.Contains(m.Text, "Failed to load resource") {
			b.t.Errorf("the page's console: %s (%s:%d)", m, m.URL, m.Line+1)
		}
	}
}

func TestUIApprovesAJobWaitingAtItsGate(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	done := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hello", "action": map[string]any{"type": "pass"}}}})
	failed := h.Submit(t, keyA, map[string]any{"queue": "reports", "steps": []any{map[string]any{"id": "flaky", "action": map[string]any{"type": "fail", "class": "fatal", "message": "the report server said no"}}}})
	j := h.Submit(t, keyA, map[string]any{"queue": "release", "payload": map[string]any{"version": "1.4.2"}, "steps": []any{
		map[string]any{"id": "build", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "test-unit", "action": map[string]any{"type": "pass"}, "depends_on": []string{"build"}},
		map[string]any{"id": "test-e2e", "action": map[string]any{"type": "pass"}, "depends_on": []string{"build"}},
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}, "depends_on": []string{"test-unit", "test-e2e"}},
		map[string]any{"id": "deploy", "action": map[string]any{"type": "pass"}, "depends_on": []string{"gate"}},
	}})
	other := h.Submit(t, stacktest.KeyB, map[string]any{"steps": []any{map[string]any{"id": "theirs", "action": map[string]any{"type": "pass"}}}})
	h.AwaitState(t, keyA, done.ID, domain.JobCompleted)
	h.AwaitState(t, keyA, failed.ID, domain.JobFailed)
	h.Await(t, keyA, j.ID, "at its gate", func(j stacktest.Job) bool { return j.Steps[3].State == domain.StepNeedsUser })

	// A link with the key opens the UI signed in, and the key leaves the
	// address bar.
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, h.URL+"/ui#/jobs", loc)
	b.do(chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+failed.ID+`"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+done.ID+`"]`)))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('tr[data-job="`+other.ID+`"]').length)`), "another tenant's job")
	require.Contains(t, b.text(`tr[data-job="`+j.ID+`"]`), "WAITING")
	b.awaitText(`a.tile[href="#/jobs?state=WAITING"] .n`, "1")
	b.shot("jobs.png")

	// The state filter lists only that state's jobs.
	b.do(chromedp.Click(chromedp.CSS(`.chips a[data-state="FAILED"]`)), chromedp.WaitNotPresent(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(`tr[data-job="` + failed.ID + `"]`)))
	require.Equal(t, "1", b.eval(`String(document.querySelectorAll('#jobs tr[data-job]').length)`))
	b.do(chromedp.Click(chromedp.CSS(`.chips a:first-child`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))

	// The job page: its graph as the steps depend on each other, the gate
	// open, and only the buttons that apply.
	b.do(chromedp.Click(chromedp.CSS(`tr[data-job="`+j.ID+`"] a.job-link`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action="approve"][data-step="gate"]`)))
	require.Equal(t, "5 5", b.eval(`document.querySelectorAll('svg.dag .node').length + ' ' + document.querySelectorAll('svg.dag .edge').length`))
	require.Equal(t, "NEEDS_USER", b.text(`[data-step-state="gate"]`))
	require.Equal(t, "WAITING", b.text(`#job-state`))
	require.Equal(t, "cancel,budget", b.eval(`[...document.querySelectorAll('#job-actions button')].map(b => b.dataset.action).join(',')`), "no redrive, no signal: nothing failed, and no step waits on a signal; a budget may be set")
	b.awaitText(`#events`, "step_needs_user")
	b.shot("job-waiting.png")

	b.do(chromedp.SendKeys(chromedp.CSS(`input[name="by"]`), "ann"),
		chromedp.SendKeys(chromedp.CSS(`[data-step="gate"] input[name="comment"]`), "ship it"),
		chromedp.Click(chromedp.CSS(`button[data-action="approve"][data-step="gate"]`)))
	b.do(chromedp.WaitVisible(chromedp.CSS(`#job-state .st-completed`)))
	require.Equal(t, "SUCCEEDED", b.text(`[data-step-state="deploy"]`))
	require.Contains(t, b.text(`#job-notice`), "Approved gate")
	require.Contains(t, b.text(`[data-step="gate"] .facts`), "approved by ann: ship it")
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-actions button').length)`), "a completed job has nothing to cancel or redrive")
	b.awaitText(`#events`, "job_completed")
	b.shot("job-completed.png")

	got := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	var approved bool
	for _, e := range h.Events(t, keyA, j.ID) {
		approved = approved || e.Step == "gate" && e.Type == "step_succeeded" && strings.HasPrefix(e.Detail, "approved by ann (key key_")
	}
	require.True(t, approved, "the decision is recorded with who made it and the key's id")

	// A failed job offers a redrive; its error shows on its step.
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+failed.ID), chromedp.WaitVisible(chromedp.CSS(`button[data-action="redrive"]`)))
	require.Contains(t, b.text(`[data-step="flaky"] .facts`), "fatal: the report server said no")
	require.Equal(t, "FAILED", b.text(`#job-state`))
}

func TestUISignInAndAWrongKey(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hello", "action": map[string]any{"type": "pass"}}}})

	// Without a key the page loads and asks for one.
	b.do(chromedp.Navigate(h.URL+"/ui"), chromedp.WaitVisible(chromedp.CSS(`#signin-key`)))
	require.Equal(t, "false", b.eval(`String(!document.getElementById('nav').hidden)`), "nothing but the sign-in box")
	b.shot("signin.png")

	// A wrong key in a link: the API's error shows, and the key is not kept.
	b.do(chromedp.Navigate(h.URL + "/ui#key=not-a-key"))
	b.awaitText(`#signin-error`, "401 unauthorized: missing or unknown API key")
	require.Equal(t, "", b.eval(`localStorage.getItem('stepflow.key') || ''`))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.NotContains(t, loc, "not-a-key", "the key leaves the address bar")

	// A wrong key typed in: the API's error again.
	b.do(chromedp.SendKeys(chromedp.CSS(`#signin-key`), "still-wrong"), chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)))
	b.awaitText(`#signin-error`, "missing or unknown API key")
	b.shot("signin-wrong-key.png")

	// The right one signs in and is kept for the next visit.
	b.eval(`document.getElementById('signin-key').value = ''`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#signin-key`), keyA),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))
	b.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))

	// Signing out forgets it.
	b.do(chromedp.Click(chromedp.CSS(`#sign-out`)), chromedp.WaitVisible(chromedp.CSS(`#signin-key`)))
	require.Equal(t, "", b.eval(`localStorage.getItem('stepflow.key') || ''`))
}

func TestUIResourcesSchedulesAndCancel(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	h.JSON(t, http.StatusCreated, http.MethodPut, "/v1/resources/gpu-1", keyA, map[string]any{"capabilities": []string{"gpu"}, "labels": map[string]string{"zone": "a"}, "capacity": 2}, nil)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "train", "action": map[string]any{"type": "worker", "queue": "ml"}, "requires": map[string]any{"capabilities": []string{"gpu"}}}}})
	var claimed struct {
		Leases []struct {
			JobID string `json:"job_id"`
		}
	}
	require.Eventually(t, func() bool {
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/claim", keyA, map[string]any{"queue": "ml", "max": 1, "wait_seconds": 1, "worker": "box-1"}, &claimed)
		return len(claimed.Leases) == 1
	}, 30*time.Second, 10*time.Millisecond)
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, map[string]any{"id": "nightly", "every": "24h", "job": map[string]any{"steps": []any{map[string]any{"id": "report", "action": map[string]any{"type": "pass"}}}}}, nil)

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Click(chromedp.CSS(`nav a[data-view="resources"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-resource="gpu-1"]`)))
	row := b.text(`tr[data-resource="gpu-1"]`)
	require.Contains(t, row, "1/2")
	require.Contains(t, row, j.ID)
	require.Contains(t, row, "zone=a")
	b.shot("resources.png")

	b.do(chromedp.Click(chromedp.CSS(`nav a[data-view="schedules"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="pause"]`)))
	b.do(chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="resume"]`)))
	var sched struct{ Paused bool }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules/nightly", keyA, nil, &sched)
	require.True(t, sched.Paused)
	b.shot("schedules.png")

	b.do(chromedp.Click(chromedp.CSS(`nav a[data-view="health"]`)), chromedp.WaitVisible(chromedp.CSS(`#health p.status`)))
	require.Equal(t, "ok", b.text(`#health p.status`))
	require.Contains(t, b.text(`#health`), "too few finished jobs (0 of 20) to grade the success rate", "what is not graded, and why")

	// Cancel asks for a second click, then ends the job and frees its slot.
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`button[data-action="cancel"]`)))
	b.do(chromedp.Click(chromedp.CSS(`button[data-action="cancel"]`)))
	b.awaitText(`button[data-action="cancel"]`, "Confirm cancel?")
	require.False(t, h.Get(t, keyA, j.ID).State.Terminal(), "one click cancels nothing")
	b.do(chromedp.Click(chromedp.CSS(`button[data-action="cancel"]`)), chromedp.WaitVisible(chromedp.CSS(`#job-state .st-cancelled`)))
	require.Equal(t, domain.JobCancelled, h.Get(t, keyA, j.ID).State)
	b.do(chromedp.Click(chromedp.CSS(`nav a[data-view="resources"]`)))
	b.awaitText(`tr[data-resource="gpu-1"]`, "0/2")
}

func TestUISignalsAWaitingJobAndShowsTheAPIsErrors(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "paid", "action": map[string]any{"type": "wait", "signal": "payment", "timeout_seconds": 3600}},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}},
	}})
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`button[data-action="signal"]`)))
	require.Equal(t, "payment", b.eval(`document.querySelector('#job-actions input[name="name"]').value`), "the name the wait waits for")

	// Bad input: the page's own check, then the API's 400 naming the field;
	// neither changes the job.
	b.do(chromedp.SendKeys(chromedp.CSS(`#job-actions textarea[name="payload"]`), `{"amount":`),
		chromedp.Click(chromedp.CSS(`button[data-action="signal"]`)))
	b.awaitText(`#job-actions .error`, "payload: is not JSON")
	b.eval(`document.querySelector('#job-actions input[name="name"]').value = ''; document.querySelector('#job-actions textarea[name="payload"]').value = ''`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#job-actions input[name="name"]`), "pay ment"),
		chromedp.SendKeys(chromedp.CSS(`#job-actions textarea[name="payload"]`), `{"amount":5}`),
		chromedp.Click(chromedp.CSS(`button[data-action="signal"]`)))
	b.awaitText(`#job-actions .error`, "400 invalid: name: ")
	require.Equal(t, domain.StepWaiting, h.Get(t, keyA, j.ID).Steps[0].State)
	b.shot("signal-error.png")

	b.eval(`document.querySelector('#job-actions input[name="name"]').value = ''`)
	b.do(chromedp.SendKeys(chromedp.CSS(`#job-actions input[name="name"]`), "payment"),
		chromedp.Click(chromedp.CSS(`button[data-action="signal"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-state .st-completed`)))
	require.Contains(t, b.text(`#job-notice`), "Signal payment sent")
	got := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"amount":5}`, string(got.Steps[0].Output), "the payload typed in is the wait's output")
}

// A link with another key than the one the browser keeps does not sign
// the person in as someone else unseen: the page asks first, naming the
// tenant of each key, and keeps the old key until told otherwise.
func TestUILinkWithAnotherKeyAsksFirst(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	kept := func() string { return b.eval(`localStorage.getItem('stepflow.key') || ''`) }

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	require.Equal(t, keyA, kept(), "with no key kept, a link's key is kept")

	// Declined: the old key stays, and the jobs view comes back.
	b.do(chromedp.Navigate(h.URL+"/ui#key="+stacktest.KeyB), chromedp.WaitVisible(chromedp.CSS(`#key-question`)))
	b.awaitText(`#key-kept-tenant`, stacktest.TenantA)
	b.awaitText(`#key-link-tenant`, stacktest.TenantB)
	require.Equal(t, keyA, kept(), "nothing is replaced before the person answers")
	require.Equal(t, "true", b.eval(`String(document.getElementById('nav').hidden)`), "no view shows behind the question")
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.NotContains(t, loc, stacktest.KeyB, "the key leaves the address bar")
	b.shot("key-question.png")
	b.do(chromedp.Click(chromedp.CSS(`#key-keep`)), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	require.Equal(t, keyA, kept())

	// A link whose key the API refuses cannot be switched to.
	b.do(chromedp.Navigate(h.URL+"/ui#key=not-a-key"), chromedp.WaitVisible(chromedp.CSS(`#key-question`)))
	b.awaitText(`#key-switch-error`, "401 unauthorized")
	require.Equal(t, "true", b.eval(`String(document.getElementById('key-switch').disabled)`))
	b.do(chromedp.Click(chromedp.CSS(`#key-keep`)), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	require.Equal(t, keyA, kept())

	// Confirmed: the link's key replaces the old one, here through a link
	// opened in the tab that shows the UI already.
	b.eval(`location.hash = '#key=` + stacktest.KeyB + `'; 'ok'`)
	b.do(chromedp.WaitVisible(chromedp.CSS(`#key-question`)))
	b.awaitText(`#key-link-tenant`, stacktest.TenantB)
	b.do(chromedp.WaitEnabled(chromedp.CSS(`#key-switch`)), chromedp.Click(chromedp.CSS(`#key-switch`)), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	require.Equal(t, stacktest.KeyB, kept())
}

// A map is one node of the graph and one card, counting its items by
// state, with the items on demand; a skipped step is grey.
func TestUIShowsAMapAsOneNode(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"pages": []string{"a", "b", "c", "d", "e", "f"}}, "steps": []any{
		map[string]any{"id": "each", "action": map[string]any{"type": "map", "items": "payload.pages", "max_concurrency": 2,
			"step": map[string]any{"action": map[string]any{"type": "worker", "queue": "uimap"}}}},
		map[string]any{"id": "publish", "action": map[string]any{"type": "pass"}, "depends_on": []string{"each"}, "when": "size(steps.each.output) > 10"},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}, "depends_on": []string{"publish"}},
	}})
	leases := claim(t, h, keyA, "uimap", "w", 10, 1)
	require.Len(t, leases, 2, "two at a time")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA, map[string]any{"output": "done"}, nil)

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`.map-items[data-map="each"]`)))
	require.Equal(t, "3", b.eval(`String(document.querySelectorAll('svg.dag .node').length)`), "the map's items are no nodes of the graph")
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('article.step[data-step^="each["]').length)`), "nor cards of their own")
	b.awaitText(`.map-items[data-map="each"] .counts`, "6 items:")
	require.Equal(t, "1 1 1 3", b.eval(`['SUCCEEDED','RUNNING','PENDING','WAITING_DEPS'].map((s) => { const c = document.querySelector('.map-items .count[data-count="' + s + '"]'); return c ? c.textContent.trim().split(' ')[0] : '0'; }).join(' ')`))
	b.do(chromedp.Click(chromedp.CSS(`.map-items summary`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-item="each[5]"]`)))
	b.shot("map.png")

	// The rest done: the map's output has 6 items, so publish is skipped.
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[1].LeaseID+"/complete", keyA, map[string]any{"output": "done"}, nil)
	for done := 2; done < 6; {
		for _, l := range claim(t, h, keyA, "uimap", "w", 10, 1) {
			h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": "done"}, nil)
			done++
		}
	}
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	b.awaitText(`[data-step-state="publish"]`, "SKIPPED")
	b.awaitText(`.map-items[data-map="each"] .counts`, "6 items: 6 SUCCEEDED")
	b.requireCleanConsole()
}

// A job step links its child job, on its node and its card; the parent
// links its children, and the child its parent and the step that made it.
func TestUILinksAChildJobAndItsParent(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"order": 7}, "steps": []any{
		map[string]any{"id": "sub", "action": map[string]any{"type": "job", "spec": map[string]any{
			"steps": []any{map[string]any{"id": "inner", "action": map[string]any{"type": "pass"}}}}}},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}},
	}})
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	parent := h.Get(t, keyA, j.ID)
	require.Len(t, parent.Children, 1)
	child := parent.Children[0]
	require.Equal(t, domain.JobCompleted, h.Get(t, keyA, child).State)

	// The parent's page: its child among its facts, on the job step's node
	// of the graph, on its card and on the attempt that made it.
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+j.ID+`"]`)))
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs/"+j.ID), chromedp.WaitVisible(chromedp.CSS(`#job-children a[data-job="`+child+`"]`)))
	require.Equal(t, "#/jobs/"+child, b.eval(`document.querySelector('#job-children a[data-job="`+child+`"]').getAttribute('href')`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-parent').length)`), "a job no step made has no parent")
	require.Equal(t, "1", b.eval(`String(document.querySelectorAll('svg.dag .node[data-step="sub"] a.child-link[data-child="`+child+`"]').length)`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('svg.dag .node[data-step="ship"] a.child-link').length)`), "only a job step has a child")
	require.Equal(t, child, b.text(`article[data-step="sub"] .facts a.child-link`))
	require.Equal(t, child, b.text(`article[data-step="sub"] a[data-attempt-child="1"]`))
	b.shot("job-parent.png")

	// The graph's link opens the child, whose page links its parent and the
	// step that made it.
	b.do(chromedp.Click(chromedp.CSS(`svg.dag .node[data-step="sub"] a.child-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-parent a[data-job="`+j.ID+`"]`)))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, h.URL+"/ui#/jobs/"+child, loc)
	require.Contains(t, b.text(`h1`), child)
	require.Equal(t, j.ID+" step sub, attempt 1", b.text(`#job-parent`))
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('#job-children').length)`), "the child made no child")
	b.shot("job-child.png")

	// At a phone's width the links wrap inside the page.
	b.do(chromedp.EmulateViewport(360, 800))
	require.Equal(t, "true", b.eval(`String(document.querySelector('#job-parent').getBoundingClientRect().right <= innerWidth)`))
	b.shot("job-child-narrow.png")
	b.do(chromedp.EmulateViewport(1280, 900))

	// The parent's step link opens the parent's page at that step's card.
	b.do(chromedp.Click(chromedp.CSS(`#job-parent a[data-step="sub"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-children a[data-job="`+child+`"]`)))
	loc, err = chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, h.URL+"/ui#/jobs/"+j.ID+"?step=sub", loc)

	// The jobs list of a parent's children: the child alone.
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs?parent="+j.ID), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+child+`"]`)))
	require.Equal(t, "1", b.eval(`String(document.querySelectorAll('#jobs tr[data-job]').length)`))
	require.Contains(t, b.text(`#jobs-parent`), j.ID)
	b.requireCleanConsole()
}
