package views

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// byHand writes the moves a step's condition (when) makes, as the domain
// will once conditions are built: nothing in it makes them yet. Each move
// goes through the canonical tables and is logged as Job logs it.
type byHand struct {
	t   *testing.T
	j   *domain.Job
	now time.Time
}

func (h *byHand) at(d time.Duration) { h.now = t0.Add(d) }

func (h *byHand) step(id string, ev domain.StepEvent) *domain.Step {
	h.t.Helper()
	s, _, err := h.j.Step(id)
	require.NoError(h.t, err)
	to, err := domain.NextStepState(s.State, ev)
	require.NoError(h.t, err)
	s.State = to
	h.log(to.EventType(), id, s.Attempt)
	return s
}

func (h *byHand) job(ev domain.JobEvent) {
	h.t.Helper()
	to, err := domain.NextJobState(h.j.State, ev)
	require.NoError(h.t, err)
	h.j.State = to
	h.log(string(ev), "", 0)
	if to.Terminal() {
		at := h.now
		h.j.EndedAt = &at
	}
}

func (h *byHand) log(typ, step string, attempt int) {
	h.j.Events = append(h.j.Events, domain.Event{Seq: len(h.j.Events) + 1, Type: typ, At: h.now, Step: step, Attempt: attempt})
	h.j.UpdatedAt = h.now
}

// run leases and starts the step's next attempt: Job.Lease refuses a
// step whose dependencies were skipped until the domain counts them done.
func (h *byHand) run(id string) {
	h.t.Helper()
	s, _, err := h.j.Step(id)
	require.NoError(h.t, err)
	at := h.now
	s.Attempt++
	s.Attempts = append(s.Attempts, domain.Attempt{N: s.Attempt, State: domain.AttemptRunning, Worker: "w1", StartedAt: &at})
	h.step(id, domain.StepEvLease)
	h.step(id, domain.StepEvStart)
}

// succeed ends the step's running attempt with output.
func (h *byHand) succeed(id, output string) {
	h.t.Helper()
	s := h.step(id, domain.StepEvSucceed)
	at := h.now
	a := &s.Attempts[len(s.Attempts)-1]
	a.State, a.EndedAt, a.Output = domain.AttemptSucceeded, &at, json.RawMessage(output)
	s.Output, s.Lease = json.RawMessage(output), nil
}

func newJob(t *testing.T, id, steps string) (*domain.Job, *byHand) {
	t.Helper()
	spec, err := domain.ParseJobSpec([]byte(`{"steps": ` + steps + `}`))
	require.NoError(t, err)
	j, err := domain.NewJob("tenant", id, spec, "", t0)
	require.NoError(t, err)
	return j, &byHand{t: t, j: j, now: t0}
}

func lease(t *testing.T, j *domain.Job, step string, at time.Duration) {
	t.Helper()
	_, err := j.Lease(step, domain.LeaseRequest{Worker: "w1", ViaWorker: true, Nonce: "n-" + step, Duration: 10 * time.Minute}, t0.Add(at))
	require.NoError(t, err)
}

// conditionsJob has every move a condition makes. c's condition reads
// only the payload and is false at submit (PENDING -> SKIPPED); b's is
// false once a succeeded (WAITING_DEPS -> SKIPPED); d, which depends on
// both, goes on; e's names a member d's output lacks, so it fails without
// running (PENDING -> FAILED_FATAL -> FAILED, no attempt), which fails the
// job and cancels f.
func conditionsJob(t *testing.T) *domain.Job {
	t.Helper()
	j, h := newJob(t, "cond1", `[
		{"id": "a", "action": {"type": "worker"}},
		{"id": "b", "action": {"type": "worker"}, "depends_on": ["a"]},
		{"id": "c", "action": {"type": "worker"}},
		{"id": "d", "action": {"type": "worker"}, "depends_on": ["b", "c"]},
		{"id": "e", "action": {"type": "worker"}, "depends_on": ["d"]},
		{"id": "f", "action": {"type": "worker"}, "depends_on": ["e"]}]`)
	h.step("c", domain.StepEvSkip) // in the submit's write
	lease(t, j, "a", time.Minute)

	h.at(2 * time.Minute)
	h.succeed("a", `{"deploy": false}`)
	h.step("b", domain.StepEvSkip)
	h.step("d", domain.StepEvDepsMet)
	h.job(domain.JobEvRequeued)

	h.at(3 * time.Minute)
	h.run("d")
	h.job(domain.JobEvLeased)

	h.at(4 * time.Minute)
	h.succeed("d", `{}`)
	h.step("e", domain.StepEvDepsMet)
	h.step("e", domain.StepEvFailFatal)
	e := h.step("e", domain.StepEvFail)
	e.Error = &domain.StepError{Class: domain.ClassFatal, Message: "when: d has no member region"}
	h.step("f", domain.StepEvCancel)
	j.Error = e.Error
	h.job(domain.JobEvFailed)
	return j
}

// skippedToTheEnd completes with its last step skipped: a job whose
// every step succeeded or was skipped completes.
func skippedToTheEnd(t *testing.T) *domain.Job {
	t.Helper()
	j, h := newJob(t, "cond2", `[
		{"id": "a", "action": {"type": "worker"}},
		{"id": "b", "action": {"type": "worker"}}]`)
	lease(t, j, "a", time.Minute)
	h.at(2 * time.Minute)
	h.succeed("a", `{}`)
	h.step("b", domain.StepEvSkip)
	h.job(domain.JobEvCompleted)
	return j
}

// Skipped steps, and one whose condition could not be evaluated, read in
// each view's words, and every vocabulary's Check holds their jobs.
func TestConditionsInEveryView(t *testing.T) {
	t.Parallel()
	cond, end := conditionsJob(t), skippedToTheEnd(t)
	for _, j := range []*domain.Job{cond, end} {
		require.NoError(t, domain.CheckReplay(j))
		for _, vocab := range Vocabularies() {
			require.NoError(t, Check(vocab, j), "%s %s", j.ID, vocab)
		}
	}
	skipped := 0
	for _, ev := range cond.Events {
		if ev.Type == "step_skipped" {
			skipped++
		}
	}
	require.Equal(t, 2, skipped, "the log holds step_skipped for b and c")

	for view, want := range map[string]map[string]string{
		Canonical: {"a": "SUCCEEDED", "b": "SKIPPED", "c": "SKIPPED", "d": "SUCCEEDED", "e": "FAILED", "f": "CANCELLED"},
		Task:      {"a": "done", "b": "skipped", "c": "skipped", "d": "done", "e": "failed", "f": "cancelled"},
		Formal:    {"a": "Completed", "b": "Completed", "c": "Completed", "d": "Completed", "e": "Failed", "f": "Cancelled"},
		Gated:     {"a": "SUCCEEDED", "b": "SKIPPED", "c": "SKIPPED", "d": "SUCCEEDED", "e": "FAILED", "f": "CANCELED"},
	} {
		got := map[string]string{}
		if view == Canonical {
			for _, s := range cond.Steps {
				got[s.ID()] = string(s.State)
			}
		} else {
			doc, err := Project(view, cond)
			require.NoError(t, err)
			raw, err := json.Marshal(doc)
			require.NoError(t, err)
			var d struct{ Steps []struct{ ID, State string } }
			require.NoError(t, json.Unmarshal(raw, &d))
			for _, s := range d.Steps {
				got[s.ID] = s.State
			}
		}
		require.Equal(t, want, got, view)
		for _, w := range got {
			require.Contains(t, StepWords(view), w, view)
		}
	}

	// The step moves, as each vocabulary with steps reads them.
	for vocab, want := range map[string][]string{
		Canonical: {
			"b PENDING -> WAITING_DEPS", "b WAITING_DEPS -> SKIPPED", "c PENDING -> SKIPPED",
			"e PENDING -> WAITING_DEPS", "e WAITING_DEPS -> PENDING", "e PENDING -> FAILED_FATAL", "e FAILED_FATAL -> FAILED",
		},
		Gated: {"b PENDING -> SKIPPED", "c PENDING -> SKIPPED", "e PENDING -> FAILED"},
	} {
		moves, err := Moves(vocab, cond)
		require.NoError(t, err)
		var got []string
		for _, m := range moves {
			if m.Level == "step" && (m.Subject == "b" || m.Subject == "c" || m.Subject == "e") {
				got = append(got, m.Subject+" "+m.Pair.String())
			}
		}
		require.Equal(t, want, got, vocab)
	}

	// Each job's own moves: a job ends as its steps imply.
	for vocab, want := range map[string][]string{
		Task:   {"(initial) -> todo", "todo -> doing", "doing -> done"},
		Formal: {"(initial) -> Queued", "Queued -> Running", "Running -> Completed"},
		Gated:  {"(initial) -> PENDING", "PENDING -> RUNNING", "RUNNING -> SUCCEEDED"},
	} {
		require.Equal(t, want, jobMovesIn(t, vocab, end), vocab)
	}
	doc, err := Project(Task, cond)
	require.NoError(t, err)
	require.Equal(t, "failed", doc.(TaskDoc).State)
	require.Len(t, doc.(TaskDoc).Runs, 2, "no run for a skipped step, nor for one whose condition failed")
}
