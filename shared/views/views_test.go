package views

import (
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

var t0 = time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)

// gatedJob is a run with an approval gate, then a worker step that fails
// once (retryable) and succeeds on its retry: every view has something to
// say about it.
func gatedJob(t *testing.T) *domain.Job {
	t.Helper()
	spec, err := domain.ParseJobSpec([]byte(`{"priority": "P0", "steps": [
		{"id": "ok", "action": {"type": "approval"}},
		{"id": "build", "action": {"type": "worker"}, "retry": {"max_attempts": 3, "backoff": "fixed", "initial_delay_ms": 1000}}]}`))
	require.NoError(t, err)
	j, err := domain.NewJob("tenant", "job1", spec, "", t0)
	require.NoError(t, err)
	_, _, err = j.Approve("ok", domain.Decision{Approved: true, By: "ana"}, t0.Add(time.Minute))
	require.NoError(t, err)
	l, err := j.Lease("build", domain.LeaseRequest{Worker: "w1", ViaWorker: true, Nonce: "n1", Duration: 10 * time.Minute}, t0.Add(2*time.Minute))
	require.NoError(t, err)
	_, err = j.Fail("build", l.ID, domain.Failure{Class: domain.ClassRetryable, Message: "flaky"}, t0.Add(3*time.Minute), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	l, err = j.Lease("build", domain.LeaseRequest{Worker: "w1", ViaWorker: true, Nonce: "n2", Duration: 10 * time.Minute}, t0.Add(4*time.Minute))
	require.NoError(t, err)
	_, err = j.Complete("build", l.ID, json.RawMessage(`{"artifact": "a.tgz"}`), t0.Add(5*time.Minute))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, j.State)
	return j
}

func readJob(t *testing.T, name string) *domain.Job {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var j domain.Job
	require.NoError(t, json.Unmarshal(raw, &j))
	return &j
}

// Each view's document of the same job, against its golden file: the
// fixed contract (id, view, state, steps[].id and .state; task's priority
// and runs, formal's derived_state) is what examples are written against.
func TestDocuments(t *testing.T) {
	t.Parallel()
	j := gatedJob(t)
	for _, view := range []string{Task, Formal, Gated} {
		doc, err := Project(view, j)
		require.NoError(t, err)
		got, err := json.MarshalIndent(doc, "", "  ")
		require.NoError(t, err)
		golden := filepath.Join("testdata", view+".golden.json")
		if *update {
			require.NoError(t, os.WriteFile(golden, append(got, '\n'), 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got), view)

		var contract struct {
			ID, View, State string
			Steps           []struct{ ID, State string }
		}
		require.NoError(t, json.Unmarshal(got, &contract))
		require.Equal(t, "job1", contract.ID)
		require.Equal(t, view, contract.View)
		require.Contains(t, JobWords(view), contract.State)
		require.Len(t, contract.Steps, 2)
	}
}

// The job's log, in each vocabulary, moves in order through the words
// its lifecycle uses.
func TestMovesInOrder(t *testing.T) {
	t.Parallel()
	j := gatedJob(t)
	for vocab, want := range map[string][]string{
		// The gate opens first: the job passes through RUNNING in the same
		// write, as the formal machine enters Waiting only from Running.
		Canonical:    {"(initial) -> QUEUED", "QUEUED -> RUNNING", "RUNNING -> WAITING", "WAITING -> QUEUED", "QUEUED -> RUNNING", "RUNNING -> RETRYING", "RETRYING -> RUNNING", "RUNNING -> COMPLETED"},
		Task:         {"(initial) -> todo", "todo -> doing", "doing -> blocked", "blocked -> todo", "todo -> doing", "doing -> blocked", "blocked -> doing", "doing -> done"},
		Formal:       {"(initial) -> Queued", "Queued -> Running", "Running -> Waiting", "Waiting -> Queued", "Queued -> Running", "Running -> Retrying", "Retrying -> Running", "Running -> Completed"},
		Gated:        {"(initial) -> PENDING", "PENDING -> RUNNING", "RUNNING -> WAITING_APPROVAL", "WAITING_APPROVAL -> RUNNING", "RUNNING -> SUCCEEDED"},
		EventSourced: {"(initial) -> Queued", "Queued -> Running", "Running -> Waiting", "Waiting -> Queued", "Queued -> Running", "Running -> Retrying", "Retrying -> Running", "Running -> Completed"},
	} {
		require.Equal(t, want, jobMovesIn(t, vocab, j), vocab)
		require.NoError(t, Check(vocab, j), vocab)
	}
	moves, err := Moves(Gated, j)
	require.NoError(t, err)
	var build, runs []string
	for _, m := range moves {
		if m.Subject == "build" {
			build = append(build, m.Pair.String())
		}
	}
	require.Equal(t, []string{"PENDING -> RUNNING", "RUNNING -> PENDING", "PENDING -> RUNNING", "RUNNING -> SUCCEEDED"}, build)
	moves, err = Moves(Task, j)
	require.NoError(t, err)
	for _, m := range moves {
		if m.Level == "run" {
			runs = append(runs, m.Subject+" "+m.Pair.String())
		}
	}
	require.Equal(t, []string{"build#1 (initial) -> running", "build#1 running -> failed", "build#2 (initial) -> running", "build#2 running -> succeeded"}, runs)
}

// Every move the canonical tables allow reads, in each vocabulary, as a
// move its table allows (or as no move): the tables are complete, so a
// legal job never fails Check for want of a row.
func TestTablesHoldEveryCanonicalMove(t *testing.T) {
	t.Parallel()
	t.Run("jobs", checkJobTables)
	t.Run("gated runs", checkGatedRunTable)
	t.Run("gated steps", checkGatedStepTable)
	t.Run("step words", checkStepWords)
	t.Run("condition moves", checkConditionMoves)
	t.Run("tables", checkTablesAreClosed)
}

// passedThrough: the step states a step only passes through inside one
// change, which the gated view does not show (docs/model.md#views).
var passedThrough = []domain.StepState{
	domain.StepLeased, domain.StepFailedRetryable, domain.StepFailedResource,
	domain.StepFailedFatal, domain.StepLeaseTimeout, domain.StepTimedOut,
}

// checkStepWords: every view's documents name every step state a step
// rests in with one of the view's words, so a move into it is a move
// its table is asked about, not one read as none.
func checkStepWords(t *testing.T) {
	own := map[string][]string{
		Task:   append(JobWords(Task), "skipped"), // the one word only steps have: no task is skipped
		Formal: JobWords(Formal),
		Gated:  allowedTable(t, Gated, "step").States,
	}
	for _, vocab := range Names() {
		word := vocabularies[vocab].stepWord
		require.NotNil(t, word, vocab)
		for _, s := range domain.AllStepStates() {
			w := word(s)
			if w == "" && vocab == Gated && slices.Contains(passedThrough, s) {
				continue // gated shows where the change left the step
			}
			require.NotEmpty(t, w, "%s has no word for step %s", vocab, s)
			if vocab == Canonical {
				require.Equal(t, string(s), w)
			} else {
				require.Contains(t, own[vocab], w, "%s names step %s %s, which is not one of its states", vocab, s, w)
			}
		}
	}
}

// checkConditionMoves: the moves a step's condition makes are in the
// canonical step table, and the gated step table allows each as it reads
// it, saying why.
func checkConditionMoves(t *testing.T) {
	steps, gated := allowedTable(t, Canonical, "step"), allowedTable(t, Gated, "step")
	for _, p := range [][2]domain.StepState{
		{domain.StepPending, domain.StepSkipped},
		{domain.StepWaitingDeps, domain.StepSkipped},
		{domain.StepPending, domain.StepFailedFatal},
		{domain.StepFailedFatal, domain.StepFailed},
	} {
		require.True(t, steps.Allows(Pair{string(p[0]), string(p[1])}), "canonical step %s -> %s", p[0], p[1])
	}
	for _, p := range []Pair{{"PENDING", "SKIPPED"}, {"PENDING", "FAILED"}} {
		require.True(t, gated.Allows(p), "gated step %s", p)
		require.NotEmpty(t, gated.Why[p], "gated step %s is a widening", p)
	}
}

// allowedTable answers vocab's table of level.
func allowedTable(t *testing.T, vocab, level string) Table {
	t.Helper()
	ts, err := Tables(vocab)
	require.NoError(t, err)
	for _, tb := range ts {
		if tb.Level == level {
			return tb
		}
	}
	t.Fatalf("%s has no %s table", vocab, level)
	return Table{}
}

// checkJobTables: the task, formal and event-sourced job tables allow every
// canonical job move as their words read it, and have a word for every
// job state.
func checkJobTables(t *testing.T) {
	for vocab, word := range map[string]func(domain.JobState) string{Task: taskJobWord, Formal: formalWord, EventSourced: esWord} {
		level := "job"
		if vocab == Task {
			level = "task"
		}
		tb := allowedTable(t, vocab, level)
		for _, p := range canonicalJobPairs() {
			from, to := Initial, word(domain.JobState(p.To))
			if p.From != Initial {
				from = word(domain.JobState(p.From))
			}
			if from != to {
				require.True(t, tb.Allows(Pair{from, to}), "%s: canonical %s reads %s -> %s, which its table does not allow", vocab, p, from, to)
			}
		}
		for _, s := range domain.AllJobStates() {
			require.Contains(t, tb.States, word(s), "%s has no word for %s", vocab, s)
		}
	}
}

// checkGatedRunTable: a run's QUEUED reads PENDING until the job first
// moves, RUNNING after; every canonical job move reads as an allowed one.
func checkGatedRunTable(t *testing.T) {
	run := allowedTable(t, Gated, "run")
	for _, p := range canonicalJobPairs() {
		for _, moved := range []bool{false, true} {
			if !moved && p.From != Initial && p.From != string(domain.JobQueued) || moved && p.From == Initial {
				continue
			}
			from := Initial
			if p.From != Initial {
				from = gatedJobWord(domain.JobState(p.From), moved)
			}
			to := gatedJobWord(domain.JobState(p.To), moved || p.To != string(domain.JobQueued))
			if from != to {
				require.True(t, run.Allows(Pair{from, to}), "gated run: canonical %s reads %s -> %s", p, from, to)
			}
		}
	}
}

// checkGatedStepTable: in the gated view, every path between states a step
// rests in, through states it only passes, reads as an allowed move.
func checkGatedStepTable(t *testing.T) {
	steps := allowedTable(t, Gated, "step")
	next := map[domain.StepState][]domain.StepState{}
	for _, p := range canonicalStepPairs() {
		next[domain.StepState(p.From)] = append(next[domain.StepState(p.From)], domain.StepState(p.To))
	}
	for _, from := range domain.AllStepStates() {
		if gatedStepWord(from) == "" {
			continue
		}
		for _, s := range restingStatesAfter(from, next) {
			if p := (Pair{gatedStepWord(from), gatedStepWord(s)}); p.From != p.To {
				require.True(t, steps.Allows(p), "gated step: canonical %s -> %s reads %s", from, s, p)
			}
		}
	}
}

// restingStatesAfter answers the states with a gated word a step reaches
// from from, through states without one.
func restingStatesAfter(from domain.StepState, next map[domain.StepState][]domain.StepState) []domain.StepState {
	var out []domain.StepState
	seen := map[domain.StepState]bool{}
	queue := slices.Clone(next[from])
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if seen[s] {
			continue
		}
		seen[s] = true
		if gatedStepWord(s) == "" {
			queue = append(queue, next[s]...)
			continue
		}
		out = append(out, s)
	}
	return out
}

// checkTablesAreClosed: every table's never-made moves and widenings are
// in it, and its moves are between its own states.
func checkTablesAreClosed(t *testing.T) {
	for _, vocab := range Vocabularies() {
		ts, err := Tables(vocab)
		require.NoError(t, err)
		for _, tb := range ts {
			for p := range tb.Never {
				require.True(t, tb.Allows(p), "%s %s: never-made %s is not in the table", vocab, tb.Level, p)
			}
			for p := range tb.Why {
				require.True(t, tb.Allows(p), "%s %s: widening %s is not in the table", vocab, tb.Level, p)
			}
			for _, p := range tb.Allowed {
				require.True(t, p.From == Initial || slices.Contains(tb.States, p.From), "%s %s: %s", vocab, tb.Level, p)
				require.Contains(t, tb.States, p.To, "%s %s: %s", vocab, tb.Level, p)
			}
		}
	}
}

// A log with a step move no lifecycle allows (a step SUCCEEDED straight
// from PENDING) fails Check, naming the job, the event and the pair.
func TestCheckNamesTheForbiddenMove(t *testing.T) {
	t.Parallel()
	j := readJob(t, "forbidden_step.json")
	err := Check(Gated, j)
	require.ErrorContains(t, err, "job bad1: event 2: gated step a moved PENDING -> SUCCEEDED, which the gated step table does not allow")
	err = Check(Canonical, j)
	require.ErrorContains(t, err, "job bad1: event 2: canonical step a moved PENDING -> SUCCEEDED")
}

// Stored attempts must be the ones the log started, in the state it left
// them: an attempt stored succeeded whose step failed is caught.
func TestCheckHoldsAttemptsToTheLog(t *testing.T) {
	t.Parallel()
	j := readJob(t, "attempt_mismatch.json")
	require.ErrorContains(t, Check(Task, j), "attempt a#1 is stored succeeded, the log says failed")
}

// The formal view's derived state is computed from the events alone: a
// stored state the events do not end in is caught.
func TestCheckDerivedState(t *testing.T) {
	t.Parallel()
	j := gatedJob(t)
	j.State = domain.JobFailed
	require.ErrorContains(t, Check(Formal, j), "stored Failed, derived from the events (the last state event wins) Completed")
	require.ErrorContains(t, Check(EventSourced, j), "derived from the events is Completed, the stored status reads Failed")
}

func TestParseViewAndStateFilter(t *testing.T) {
	t.Parallel()
	v, err := ParseView("")
	require.NoError(t, err)
	require.Equal(t, Canonical, v)
	_, err = ParseView("kanban")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "view", de.Field)
	require.Contains(t, de.Message, "canonical, task, formal, gated")

	f, err := StateFilter(Task, "BLOCKED")
	require.NoError(t, err)
	require.Equal(t, []domain.JobState{domain.JobWaiting, domain.JobParked, domain.JobRetrying}, f.States)
	f, err = StateFilter(Task, "inbox")
	require.NoError(t, err)
	require.Empty(t, f.States)
	f, err = StateFilter(Gated, "pending")
	require.NoError(t, err)
	require.Equal(t, []domain.JobState{domain.JobQueued}, f.States)
	require.False(t, f.Keep(gatedJob(t)))
	_, err = StateFilter(Gated, "WAITING")
	require.ErrorAs(t, err, &de)
	require.Equal(t, "state", de.Field)
	require.Contains(t, de.Message, "PENDING, RUNNING, WAITING_APPROVAL, SUCCEEDED, FAILED, CANCELED")
}

// jobMovesIn answers the moves of j itself (not its steps or runs) in
// vocab's words, in order.
func jobMovesIn(t *testing.T, vocab string, j *domain.Job) []string {
	t.Helper()
	moves, err := Moves(vocab, j)
	require.NoError(t, err)
	var got []string
	for _, m := range moves {
		if m.Subject == j.ID {
			got = append(got, m.Pair.String())
		}
	}
	return got
}
