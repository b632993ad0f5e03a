package inmemory_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/openapicheck"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/views"
	"github.com/stepflow/stepflow/shared/wire"
)

// lifecycles drives real jobs through the API, reading
// each job in every view after each move, and at the end holds what the
// views showed against each job's log projected into each vocabulary.
type lifecycles struct {
	t    *testing.T
	h    *stacktest.Harness
	seen map[string][]string // job id + " " + view -> the states GET ?view= answered, in order
}

func newLifecycles(t *testing.T, h *stacktest.Harness) *lifecycles {
	return &lifecycles{t: t, h: h, seen: map[string][]string{}}
}

// observe reads the job in every view and notes each state it shows.
func (l *lifecycles) observe(id string) {
	l.t.Helper()
	for _, view := range views.Names() {
		var doc struct {
			View  string
			State string
			Steps []struct{ ID, State string }
		}
		l.h.JSON(l.t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id+"?view="+view, keyA, nil, &doc)
		require.Equal(l.t, view, doc.View)
		k := id + " " + view
		if s := l.seen[k]; len(s) == 0 || s[len(s)-1] != doc.State {
			l.seen[k] = append(l.seen[k], doc.State)
		}
	}
}

func (l *lifecycles) submit(steps ...map[string]any) string {
	l.t.Helper()
	list := make([]any, len(steps))
	for i, s := range steps {
		list[i] = s
	}
	j := l.h.Submit(l.t, keyA, map[string]any{"steps": list})
	l.observe(j.ID)
	return j.ID
}

// post calls a job route and observes the job after it.
func (l *lifecycles) post(id, path string, body any) {
	l.t.Helper()
	l.h.JSON(l.t, http.StatusOK, http.MethodPost, "/v1/jobs/"+id+path, keyA, body, nil)
	l.observe(id)
}

// take claims the one lease on queue as worker.
func (l *lifecycles) take(queue, worker string) wire.ClaimedLease {
	l.t.Helper()
	got := claim(l.t, l.h, keyA, queue, worker, 1, 5)
	require.Len(l.t, got, 1, "a lease on %s", queue)
	l.observe(got[0].JobID)
	return got[0]
}

// end reports a lease's outcome: nil completes it, a class fails it.
func (l *lifecycles) end(c wire.ClaimedLease, fail map[string]any) {
	l.t.Helper()
	if fail == nil {
		l.h.JSON(l.t, http.StatusOK, http.MethodPost, "/v1/leases/"+c.LeaseID+"/complete", keyA, map[string]any{"output": "ok"}, nil)
	} else {
		l.h.JSON(l.t, http.StatusOK, http.MethodPost, "/v1/leases/"+c.LeaseID+"/fail", keyA, fail, nil)
	}
	l.observe(c.JobID)
}

func worker(id, queue string, extra ...string) map[string]any {
	s := map[string]any{"id": id, "action": map[string]any{"type": "worker", "queue": queue}}
	for i := 0; i+1 < len(extra); i += 2 {
		switch extra[i] {
		case "attempts":
			var n int
			_, _ = fmt.Sscan(extra[i+1], &n)
			s["retry"] = map[string]any{"max_attempts": n, "backoff": "fixed", "initial_delay_ms": 0}
		case "slow_retry":
			s["retry"] = map[string]any{"max_attempts": 3, "backoff": "fixed", "initial_delay_ms": 600000}
		case "lease":
			var n int
			_, _ = fmt.Sscan(extra[i+1], &n)
			s["action"].(map[string]any)["lease_seconds"] = n
		}
	}
	return s
}

func gate(id string, timeout int) map[string]any {
	a := map[string]any{"type": "approval"}
	if timeout > 0 {
		a["timeout_seconds"] = timeout
	}
	return map[string]any{"id": id, "action": a}
}

func wait(id, signal string, timeout int) map[string]any {
	a := map[string]any{"type": "wait", "signal": signal}
	if timeout > 0 {
		a["timeout_seconds"] = timeout
	}
	return map[string]any{"id": id, "action": a}
}

var (
	retryable = map[string]any{"class": "retryable", "message": "flaky"}
	fatal     = map[string]any{"class": "fatal", "message": "broken"}
	resource  = map[string]any{"class": "resource", "message": "gpu lost"}
	timedOut  = map[string]any{"class": "timeout", "message": "too slow"}
	askUser   = map[string]any{"class": "needs_user", "message": "which branch?", "prompt": "which branch?"}
)

// moves drives the jobs that need no clock: retries, gates, resource
// switches, a person's answer, redrive, cancels in every state, waits.
func (l *lifecycles) moves() {
	// Two steps, the first failing once: retry, then the next step.
	id := l.submit(worker("a", "q1", "attempts", "3"), worker("b", "q1"))
	l.end(l.take("q1", "w1"), retryable)
	l.end(l.take("q1", "w1"), nil)
	l.end(l.take("q1", "w1"), nil)
	l.h.AwaitState(l.t, keyA, id, domain.JobCompleted)

	// A gate first; a resource failure switches; a fatal one fails the
	// job and cancels the step after; redrive runs both again.
	id = l.submit(gate("ok", 0), worker("w", "q2", "attempts", "3"), worker("after", "q2"))
	l.post(id, "/steps/ok/approve", map[string]any{"by": "ana"})
	l.end(l.take("q2", "w1"), resource)
	l.end(l.take("q2", "w2"), fatal)
	l.post(id, "/redrive", nil)
	l.end(l.take("q2", "w3"), nil)
	l.end(l.take("q2", "w3"), nil)
	l.h.AwaitState(l.t, keyA, id, domain.JobCompleted)

	// A person's answer, then a gate they reject.
	id = l.submit(worker("n", "q3", "attempts", "3"), gate("g", 0))
	l.end(l.take("q3", "w1"), askUser)
	l.post(id, "/steps/n/resume", map[string]any{"input": "main"})
	l.end(l.take("q3", "w1"), nil)
	l.post(id, "/steps/g/reject", map[string]any{"by": "bob"})

	// A DAG: one branch waits on a person while the other runs.
	id = l.submit(gate("g", 0), worker("w", "q4"), map[string]any{"id": "z", "action": map[string]any{"type": "pass"}, "depends_on": []string{"g", "w"}})
	l.end(l.take("q4", "w1"), nil)
	l.post(id, "/steps/g/approve", map[string]any{"by": "ana"})
	l.h.AwaitState(l.t, keyA, id, domain.JobCompleted)

	// Conditions: one false at submit (PENDING -> SKIPPED), one false once
	// its dependency is done (WAITING_DEPS -> SKIPPED), and one that cannot
	// be decided (PENDING -> FAILED_FATAL -> FAILED).
	l.submit(map[string]any{"id": "s", "action": map[string]any{"type": "pass"}, "when": "has(payload.n)"})
	id = l.submit(worker("c", "q9"),
		map[string]any{"id": "yes", "action": map[string]any{"type": "pass"}, "depends_on": []string{"c"}, "when": "steps.c.output == 'no'"},
		map[string]any{"id": "no", "action": map[string]any{"type": "pass"}, "depends_on": []string{"c"}, "when": "steps.c.output.missing"})
	l.end(l.take("q9", "w1"), nil)
	l.h.AwaitState(l.t, keyA, id, domain.JobFailed)

	// Resources: spent attempts fail a resource failure for good.
	l.submit(worker("r", "q5", "attempts", "1"))
	l.end(l.take("q5", "w1"), resource)
	// Retryable with the attempts spent.
	l.submit(worker("r", "q6", "attempts", "1"))
	l.end(l.take("q6", "w1"), retryable)
	// A timeout retried, then one with no attempt left.
	id = l.submit(worker("t", "q7", "attempts", "2"))
	l.end(l.take("q7", "w1"), timedOut)
	l.end(l.take("q7", "w1"), timedOut)

	// Waits: a near one the last step, signalled; a parked one before a
	// step, signalled; a parked last one, signalled.
	id = l.submit(wait("s", "go", 60))
	l.post(id, "/signal", map[string]any{"name": "go"})
	id = l.submit(wait("s", "go", 0), worker("x", "q8"))
	l.post(id, "/signal", map[string]any{"name": "go"})
	l.end(l.take("q8", "w1"), nil)
	id = l.submit(wait("s", "go", 0))
	l.post(id, "/signal", map[string]any{"name": "go"})

	// Cancels: queued; running (its run cancelled, the next step waiting
	// on it); at a gate; backing off; parked; switching resource.
	id = l.submit(worker("c", "c1"))
	l.post(id, "/cancel", nil)
	id = l.submit(worker("c", "c2"), worker("d", "c2"))
	l.take("c2", "w1")
	l.post(id, "/cancel", nil)
	id = l.submit(gate("g", 0))
	l.post(id, "/cancel", nil)
	id = l.submit(worker("c", "c3", "slow_retry", ""))
	l.end(l.take("c3", "w1"), retryable)
	l.post(id, "/cancel", nil)
	id = l.submit(wait("s", "never", 0))
	l.post(id, "/cancel", nil)
	id = l.submit(worker("c", "c4", "attempts", "3"))
	l.end(l.take("c4", "w1"), resource)
	l.post(id, "/cancel", nil)
	id = l.submit(wait("s", "never", 60))
	l.post(id, "/cancel", nil)
}

// clocked drives the jobs whose moves need time to pass: expired leases
// and deadlines, on a harness of their own whose clock the test moves.
func (l *lifecycles) clocked() {
	h := l.h
	again := l.submit(worker("l", "t1", "lease", "30"))
	once := l.submit(map[string]any{"id": "l", "action": map[string]any{"type": "worker", "queue": "t2", "lease_seconds": 30}, "retry": map[string]any{"max_attempts": 1}})
	l.take("t1", "w1")
	l.take("t2", "w1")
	g := l.submit(gate("g", 600))
	w := l.submit(wait("s", "late", 600))
	p := l.submit(wait("s", "late", 3600))
	// Resource waits past their bound: a first attempt's (PENDING), one
	// after a retry's backoff (RETRYING), one after a switch
	// (SWITCHING_RESOURCE), their resources gone meanwhile.
	res := func(id string) {
		h.JSON(l.t, http.StatusCreated, http.MethodPut, "/v1/resources/"+id, keyA, map[string]any{"capabilities": []string{"c-" + id}}, nil)
	}
	needs := func(queue string, caps ...string) map[string]any {
		s := worker("r", queue, "attempts", "3")
		s["requires"], s["resource_wait_seconds"] = map[string]any{"capabilities": caps}, 60
		return s
	}
	never := l.submit(needs("rw1", "quantum"))
	res("rw2")
	retried := l.submit(needs("rw2", "c-rw2"))
	l.end(l.take("rw2", "w1"), retryable)
	h.JSON(l.t, http.StatusOK, http.MethodDelete, "/v1/resources/rw2", keyA, nil, nil)
	h.JSON(l.t, http.StatusCreated, http.MethodPut, "/v1/resources/rw3a", keyA, map[string]any{"capabilities": []string{"c-rw3"}}, nil)
	h.JSON(l.t, http.StatusCreated, http.MethodPut, "/v1/resources/rw3b", keyA, map[string]any{"capabilities": []string{"c-rw3"}}, nil)
	switched := l.submit(needs("rw3", "c-rw3"))
	c := l.take("rw3", "w1")
	l.end(c, resource)
	other := map[string]string{"rw3a": "rw3b", "rw3b": "rw3a"}[c.Resource.ID]
	h.JSON(l.t, http.StatusOK, http.MethodDelete, "/v1/resources/"+other, keyA, nil, nil)
	for _, q := range []string{"rw1", "rw2", "rw3"} {
		require.Empty(l.t, claim(l.t, h, keyA, q, "w2", 1, 0), "no slot for %s", q)
	}
	for _, id := range []string{never, retried, switched} {
		l.observe(id)
	}
	h.Clock.Advance(3600*time.Second + domain.DispatchGrace + time.Second)
	h.Sweep(l.t)
	h.Sweep(l.t)
	for _, id := range []string{again, once, g, w, p, never, retried, switched} {
		l.observe(id)
	}
	l.end(l.take("t1", "w2"), nil)
	h.AwaitState(l.t, keyA, once, domain.JobFailed)
	h.AwaitState(l.t, keyA, p, domain.JobFailed)
	for _, id := range []string{never, retried, switched} {
		h.AwaitState(l.t, keyA, id, domain.JobFailed)
	}
}

// check holds every job of the harness against its views: each job's
// log, projected into each vocabulary, passes Check; what the views
// answered along the way is that projection's states, in order; and
// answers every move it made, per vocabulary and level.
func (l *lifecycles) check(seen map[string]map[views.Pair]bool) {
	ctx := context.Background()
	jobs, _, err := l.h.Engine.List(ctx, tenantA, engine.ListFilter{Limit: 100})
	require.NoError(l.t, err)
	for _, js := range jobs {
		l.observe(js.ID) // as it is now, then its log
		j, err := l.h.Engine.Get(ctx, tenantA, js.ID)
		require.NoError(l.t, err)
		for _, vocab := range views.Vocabularies() {
			require.NoError(l.t, views.Check(vocab, j))
			moves, err := views.Moves(vocab, j)
			require.NoError(l.t, err)
			var states []string
			for _, m := range moves {
				key := vocab + " " + m.Level
				if seen[key] == nil {
					seen[key] = map[views.Pair]bool{}
				}
				seen[key][m.Pair] = true
				if m.Subject == j.ID && m.Level == jobLevel(vocab) {
					states = append(states, m.To)
				}
			}
			if observed := l.seen[j.ID+" "+vocab]; len(observed) > 0 {
				require.True(l.t, subsequence(observed, states), "job %s: the %s view answered %v, its log reads %v", j.ID, vocab, observed, states)
				require.Equal(l.t, states[len(states)-1], observed[len(observed)-1], "job %s: the %s view's last answer", j.ID, vocab)
			}
		}
	}
}

func jobLevel(vocab string) string {
	switch vocab {
	case views.Task:
		return "task"
	case views.Gated:
		return "run"
	}
	return "job"
}

// subsequence reports whether a's states come in b in a's order.
func subsequence(a, b []string) bool {
	i := 0
	for _, s := range b {
		if i < len(a) && a[i] == s {
			i++
		}
	}
	return i == len(a)
}

// Each lifecycle, through the API: real jobs go through
// every move its table allows; each view answers them in order; and every
// move each vocabulary's table allows (but those stepflow never makes,
// each with its reason in the table) was seen at least once.
func TestEveryLifecycleMoveShowsInItsView(t *testing.T) {
	t.Parallel()
	seen := map[string]map[views.Pair]bool{}
	for _, drive := range []func(*lifecycles){(*lifecycles).moves, (*lifecycles).clocked} {
		h := stacktest.NewInMemory(t)
		openapicheck.Check(t, h) // every view's answers are the ones the document describes
		l := newLifecycles(t, h)
		drive(l)
		l.check(seen)
	}
	var unseen []string
	for _, vocab := range views.Vocabularies() {
		tables, err := views.Tables(vocab)
		require.NoError(t, err)
		for _, tb := range tables {
			for _, p := range tb.Reached() {
				if !seen[vocab+" "+tb.Level][p] {
					unseen = append(unseen, fmt.Sprintf("%s %s: %s", vocab, tb.Level, p))
				}
			}
			for p := range seen[vocab+" "+tb.Level] {
				require.True(t, tb.Allows(p), "%s %s: %s", vocab, tb.Level, p)
				_, never := tb.Never[p]
				require.False(t, never, "%s %s: %s is made, though the table says never", vocab, tb.Level, p)
			}
		}
	}
	sort.Strings(unseen)
	require.Empty(t, unseen, "allowed moves no job made:\n%s", strings.Join(unseen, "\n"))
}

// Listing in a view's words: a word may name several canonical states,
// the gated view tells PENDING from RUNNING by the job's log, paging
// stays whole, and unknown views and words answer 400 naming the field.
func TestListingInAViewsWords(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	openapicheck.Check(t, h)
	waiting := h.Submit(t, keyA, map[string]any{"steps": []any{gate("g", 0)}})
	fresh := h.Submit(t, keyA, map[string]any{"steps": []any{worker("a", "lq")}})
	between := h.Submit(t, keyA, map[string]any{"steps": []any{worker("a", "lq2"), worker("b", "lq2")}})
	l := claim(t, h, keyA, "lq2", "w1", 1, 5)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, nil, nil)
	require.Equal(t, domain.JobQueued, h.Get(t, keyA, between.ID).State, "between its steps")

	list := func(query string) []string {
		var ids []string
		cursor := ""
		for {
			var page struct {
				Jobs []struct {
					ID, View, State, Priority string
				}
				NextCursor string `json:"next_cursor"`
			}
			h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?limit=1&"+query+"&cursor="+cursor, keyA, nil, &page)
			for _, j := range page.Jobs {
				ids = append(ids, j.ID+" "+j.State)
			}
			if page.NextCursor == "" {
				return ids
			}
			cursor = page.NextCursor
		}
	}
	require.Equal(t, []string{fresh.ID + " PENDING"}, list("view=gated&state=pending"))
	require.Equal(t, []string{between.ID + " RUNNING"}, list("view=gated&state=RUNNING"))
	require.Equal(t, []string{waiting.ID + " blocked"}, list("view=task&state=blocked"))
	require.ElementsMatch(t, []string{fresh.ID + " todo", between.ID + " todo"}, list("view=task&state=todo"))
	require.Empty(t, list("view=task&state=inbox"), "no job is ever inbox")
	require.Len(t, list("view=formal"), 3)

	for _, c := range []struct{ path, field, says string }{
		{"/v1/jobs?view=kanban", "view", "canonical, task, formal, gated"},
		{"/v1/jobs/" + fresh.ID + "?view=Task", "view", "canonical, task, formal, gated"},
		{"/v1/jobs?view=task&state=QUEUED", "state", "inbox, todo, doing, blocked, done, cancelled, failed"},
		{"/v1/jobs?view=gated&state=CANCELLED", "state", "PENDING, RUNNING, WAITING_APPROVAL, SUCCEEDED, FAILED, CANCELED"},
	} {
		status, body := h.Call(t, http.MethodGet, c.path, keyA, nil)
		require.Equal(t, http.StatusBadRequest, status, c.path)
		require.Contains(t, string(body), `"field":"`+c.field+`"`, c.path)
		require.Contains(t, string(body), c.says, c.path)
	}
	status, _ := h.Call(t, http.MethodGet, "/v1/jobs/"+fresh.ID+"?view=task", stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, status, "another tenant's job, in any view")
}
