package inmemory_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// setValue replaces what a text control holds, as typing would (its
// input event fires): faster than typing, and a textarea adds no indent.
func (b *browser) setValue(sel, value string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`(() => { const el = document.querySelector(%q); el.value = %q; el.dispatchEvent(new Event('input', { bubbles: true })); return ''; })()`, sel, value))
}

// await waits until the expression js is true.
func (b *browser) await(js, what string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
		return err == nil && ok
	}, 30*time.Second, 50*time.Millisecond, what)
}

// lineOf answers the line (from 1) of the first line of text holding s.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("no line of %q holds %q", text, s)
	return 0
}

// jobCount answers how many jobs tenant A has.
func jobCount(t *testing.T, h *stacktest.Harness) int {
	t.Helper()
	var page struct{ Jobs []struct{ ID string } }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?limit=100", keyA, nil, &page)
	return len(page.Jobs)
}

// The new-job page: a spec the API refuses shows the API's message at
// the line of the field it names, in JSON and in YAML; one that is no
// YAML is refused by the page; a good one is submitted and its page opens.
func TestUISubmitsAJobAndShowsItsFieldErrors(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	b.do(chromedp.Click(chromedp.CSS(`#new-job-link`)), chromedp.WaitVisible(chromedp.CSS(`#spec`)))
	require.Contains(t, b.eval(`document.getElementById('spec').value`), `"type": "pass"`, "it starts from an example")

	bad := `{
  "payload": {"n": 1},
  "steps": [
    {
      "id": "greet",
      "action": {
        "type": "worker",
        "queue": "no spaces allowed"
      }
    }
  ]
}
`
	b.setValue(`#spec`, bad)
	b.do(chromedp.Click(chromedp.CSS(`#submit-job`)))
	b.awaitText(`#spec-error`, "line 8: 400 invalid: steps[0].action.queue: must match")
	require.Equal(t, "8", b.text(`.gutter .ln.err`), "the line of the field is marked")
	require.Equal(t, `        "queue": "no spaces allowed"`, b.eval(`(() => { const a = document.getElementById('spec'); return a.value.slice(a.selectionStart, a.selectionEnd); })()`), "and selected")
	require.Equal(t, "true", b.eval(`document.getElementById('spec').getAttribute('aria-invalid')`))
	require.Zero(t, jobCount(t, h), "a refused job is not made")
	b.shot("new-job-error.png")

	// The same in YAML: the text is written anew, and the error points at
	// the YAML's line.
	b.do(chromedp.Click(chromedp.CSS(`.segmented label:nth-child(2)`)))
	b.await(`document.getElementById('spec').value.includes('queue: no spaces allowed')`, "the JSON written as YAML")
	yaml := b.eval(`document.getElementById('spec').value`)
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('.gutter .ln.err').length)`), "nothing marked until submitted again")
	b.do(chromedp.Click(chromedp.CSS(`#submit-job`)))
	want := lineOf(t, yaml, "queue: no spaces allowed")
	b.awaitText(`#spec-error`, fmt.Sprintf("line %d: 400 invalid: steps[0].action.queue", want))
	require.Equal(t, strconv.Itoa(want), b.text(`.gutter .ln.err`))
	b.shot("new-job-yaml-error.png")

	// Text that is no YAML is refused before anything is sent.
	b.setValue(`#spec`, "steps:\n  - id: a\n   action: {type: pass}\n")
	b.do(chromedp.Click(chromedp.CSS(`#submit-job`)))
	b.awaitText(`#spec-error`, "line 3: not YAML")
	require.Zero(t, jobCount(t, h))

	// A good one: submitted, and its page opens.
	b.setValue(`#spec`, "payload: {name: ada}\nsteps:\n  - id: greet\n    action: {type: worker, queue: greet}\n  - id: ship\n    action: {type: approval}\n")
	b.do(chromedp.Click(chromedp.CSS(`#submit-job`)), chromedp.WaitVisible(chromedp.CSS(`#job-state`)))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	m := regexp.MustCompile(`#/jobs/([0-9A-Z]{26})$`).FindStringSubmatch(loc)
	require.NotNil(t, m, "the job's page: %s", loc)
	got := h.Get(t, keyA, m[1])
	require.Len(t, got.Steps, 2)
	require.Equal(t, "greet", got.Steps[0].ID)
	b.awaitText(`h1`, m[1])
	require.Equal(t, 1, jobCount(t, h))
}

// Resources and schedules are made and changed with forms that show the
// API's refusal beside the field it names.
func TestUICreatesAndEditsResourcesAndSchedules(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))

	// A resource: the API's bounds, then its label rule, then made.
	b.do(chromedp.Navigate(h.URL+"/ui#/resources"), chromedp.Click(chromedp.CSS(`#new-resource`)), chromedp.WaitVisible(chromedp.CSS(`#resource-id`)))
	b.setValue(`#resource-id`, "gpu-2")
	b.setValue(`#resource-capacity`, "2000")
	b.setValue(`#resource-capabilities`, "gpu, cuda")
	b.setValue(`#resource-labels`, "zone=a!")
	b.do(chromedp.Click(chromedp.CSS(`#save-resource`)))
	b.awaitText(`#resource-capacity-error`, "400 invalid: capacity: must be between 1 and 1000")
	require.Equal(t, "true", b.eval(`document.getElementById('resource-capacity').getAttribute('aria-invalid')`))
	b.shot("resource-error.png")
	b.setValue(`#resource-capacity`, "2")
	b.do(chromedp.Click(chromedp.CSS(`#save-resource`)))
	b.awaitText(`#resource-labels-error`, "body.labels.zone: must match")
	require.Equal(t, "true", b.eval(`String(document.getElementById('resource-capacity-error').hidden)`), "the capacity's error is gone")
	status, _ := h.Call(t, http.MethodGet, "/v1/resources/gpu-2", keyA, nil)
	require.Equal(t, http.StatusNotFound, status, "nothing made yet")
	b.setValue(`#resource-labels`, "zone=a")
	b.do(chromedp.Click(chromedp.CSS(`#save-resource`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-resource="gpu-2"]`)))
	b.awaitText(`tr[data-resource="gpu-2"]`, "0/2")
	require.Contains(t, b.text(`tr[data-resource="gpu-2"]`), "zone=a")

	// Changed: its form holds it as it is.
	b.do(chromedp.Click(chromedp.CSS(`tr[data-resource="gpu-2"] a[data-action="edit"]`)), chromedp.WaitEnabled(chromedp.CSS(`#save-resource`)))
	require.Equal(t, "gpu, cuda", b.eval(`document.getElementById('resource-capabilities').value`))
	require.Equal(t, "true", b.eval(`String(document.getElementById('resource-id').readOnly)`))
	b.setValue(`#resource-capacity`, "3")
	b.do(chromedp.Click(chromedp.CSS(`#save-resource`)))
	b.awaitText(`tr[data-resource="gpu-2"]`, "0/3")
	var res struct {
		Capacity     int
		Capabilities []string
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/resources/gpu-2", keyA, nil, &res)
	require.Equal(t, 3, res.Capacity)
	require.Equal(t, []string{"gpu", "cuda"}, res.Capabilities)

	// A schedule: a bad duration at its field, a bad job at its line.
	b.do(chromedp.Click(chromedp.CSS(`nav a[data-view="schedules"]`)), chromedp.Click(chromedp.CSS(`#new-schedule`)), chromedp.WaitVisible(chromedp.CSS(`#schedule-id`)))
	b.setValue(`#schedule-id`, "nightly")
	b.setValue(`#schedule-every`, "3 days")
	b.do(chromedp.Click(chromedp.CSS(`#save-schedule`)))
	b.awaitText(`#schedule-every-error`, "400 invalid: every: ")
	b.setValue(`#schedule-every`, "24h")
	job := "{\n  \"steps\": [\n    {\n      \"id\": \"report\",\n      \"action\": {\n        \"type\": \"nope\"\n      }\n    }\n  ]\n}\n"
	b.setValue(`#schedule-job`, job)
	b.do(chromedp.Click(chromedp.CSS(`#save-schedule`)))
	b.awaitText(`#schedule-job-error`, "400 invalid: job.steps[0].")
	require.Equal(t, strconv.Itoa(lineOf(t, job, "nope")), b.text(`.gutter .ln.err`))
	require.Equal(t, "true", b.eval(`String(document.getElementById('schedule-every-error').hidden)`))
	b.shot("schedule-error.png")
	b.setValue(`#schedule-job`, strings.Replace(job, "nope", "pass", 1))
	b.do(chromedp.Click(chromedp.CSS(`#save-schedule`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"]`)))
	require.Contains(t, b.text(`tr[data-schedule="nightly"]`), "every 24h")

	// Changed while paused: replaced in place (PUT), still paused, the
	// same schedule (made when it was).
	var before struct {
		CreatedAt string `json:"created_at"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules/nightly", keyA, nil, &before)
	b.do(chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="resume"]`)))
	b.do(chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] a[data-action="edit"]`)), chromedp.WaitEnabled(chromedp.CSS(`#save-schedule`)))
	require.Equal(t, "24h0m0s", b.eval(`document.getElementById('schedule-every').value`), "as the API says it")
	require.Contains(t, b.eval(`document.getElementById('schedule-job').value`), `"id": "report"`)
	b.setValue(`#schedule-every`, "12h")
	b.do(chromedp.Click(chromedp.CSS(`#save-schedule`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"]`)))
	b.awaitText(`tr[data-schedule="nightly"]`, "every 12h")
	var sched struct {
		Every     string
		Paused    bool
		CreatedAt string `json:"created_at"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules/nightly", keyA, nil, &sched)
	require.Equal(t, "12h0m0s", sched.Every)
	require.True(t, sched.Paused, "paused as it was")
	require.Equal(t, before.CreatedAt, sched.CreatedAt, "replaced, not made again")
}

// The jobs list searches by id prefix and by when jobs were made.
func TestUISearchesJobsByIDAndTime(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	h := stacktest.NewInMemory(t)
	pass := map[string]any{"steps": []any{map[string]any{"id": "s", "action": map[string]any{"type": "pass"}}}}
	// Marks a second apart in whole seconds (a datetime-local input holds
	// seconds); the jobs of each mark are made after it.
	var marks []time.Time
	var ids []string
	for range 3 {
		marks = append(marks, h.Clock.Now().Truncate(time.Second))
		ids = append(ids, h.Submit(t, keyA, pass).ID)
		h.Clock.Advance(time.Hour)
	}
	for _, id := range ids {
		h.AwaitState(t, keyA, id, domain.JobCompleted)
	}
	rows := `[...document.querySelectorAll('#jobs tr[data-job]')].map((r) => r.dataset.job).join(' ')`

	b.do(chromedp.Navigate(h.URL+"/ui#key="+keyA), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+ids[0]+`"]`)))
	b.setValue(`#job-filters input[name="id_prefix"]`, strings.ToLower(ids[1]))
	b.do(chromedp.Click(chromedp.CSS(`#job-filters button[type="submit"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-job="`+ids[0]+`"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+ids[1]+`"]`)))
	b.do(chromedp.Poll[chromedp.Void](rows + ` === '` + ids[1] + `'`)) // that job alone (a render may be in flight)

	// A span of times, from the address and again through the form's
	// inputs (which show it in the browser's zone).
	span := "#/jobs?created_after=" + marks[1].Format(time.RFC3339) + "&created_before=" + marks[2].Format(time.RFC3339)
	b.do(chromedp.Navigate(h.URL+"/ui"+span), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+ids[1]+`"]`)))
	b.do(chromedp.Poll[chromedp.Void](rows + ` === '` + ids[1] + `'`)) // that job alone (a render may be in flight)
	require.NotEmpty(t, b.eval(`document.querySelector('#job-filters input[name="created_after"]').value`))
	b.do(chromedp.Click(chromedp.CSS(`#job-filters button[type="submit"]`)),
		// The submit renders the list anew: wait for its rows, not for text
		// the list before it may still show.
		chromedp.Poll[chromedp.Void](rows+` === '`+ids[1]+`'`)) // the list shows that job alone
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, loc, "created_after="+strings.ReplaceAll(marks[1].UTC().Format("2006-01-02T15:04:05.000Z"), ":", "%3A"), "the same time, from the input")
	b.shot("jobs-search.png")

	// A prefix no id can have: the API's refusal at the search.
	b.do(chromedp.Navigate(h.URL+"/ui#/jobs"), chromedp.WaitVisible(chromedp.CSS(`tr[data-job="`+ids[0]+`"]`)))
	b.setValue(`#job-filters input[name="id_prefix"]`, "01I")
	b.do(chromedp.Click(chromedp.CSS(`#job-filters button[type="submit"]`)))
	b.awaitText(`#jobs-error`, "400 invalid: id_prefix: ")
	require.Equal(t, "true", b.eval(`document.querySelector('#job-filters input[name="id_prefix"]').getAttribute('aria-invalid')`))
	require.Equal(t, "", b.eval(rows))
}
