package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/views"
)

// The checks are of two sorts. The history invariants (invariants) hold
// for every job of every tenant whatever its plan: its log replays to its
// document, each run of it has one terminal event, last, nothing a worker
// sent under a lost lease was applied, every view of it agrees, and so on.
// Beyond them each job has its kind's row in the workload table (rows):
// what it ends as given the faults injected and what its callers were
// answered; and every racing call's answer must agree with what the log
// shows of it (answerProblems).

// Category is what a failed check counts as in the summary line.
type Category string

const (
	Lost       Category = "lost"
	Duplicated Category = "duplicated"
	Mismatched Category = "mismatched"
)

// Check is one invariant, checked once per job (or per queue, message or
// key).
type Check struct {
	Name     string
	Category Category
	OK       int
	Failed   int
	Examples []string // the first few failures
}

// ledger collects checks by name, in the order first judged, and the keys
// (jobs, schedules, queues) that failed a check of each category: a job
// failing three checks counts once.
type ledger struct {
	checks []*Check
	byName map[string]*Check
	bad    map[Category]map[string]bool
	unread map[string]error // jobs whose read at the check failed, and why
}

func newLedger() *ledger {
	return &ledger{byName: map[string]*Check{}, bad: map[Category]map[string]bool{}}
}

// judge passes the check for key when there is no problem, and fails it
// once per problem otherwise.
func (l *ledger) judge(name string, cat Category, key string, problems ...string) {
	c := l.byName[name]
	if c == nil {
		c = &Check{Name: name, Category: cat}
		l.byName[name] = c
		l.checks = append(l.checks, c)
	}
	if len(problems) == 0 {
		c.OK++
		return
	}
	for _, p := range problems {
		c.Failed++
		if len(c.Examples) < 5 {
			c.Examples = append(c.Examples, key+": "+p)
		}
	}
	if l.bad[cat] == nil {
		l.bad[cat] = map[string]bool{}
	}
	l.bad[cat][key] = true
}

func (l *ledger) failed(cat Category) int { return len(l.bad[cat]) }

// invariants are the history invariants, held over every stored job.
var invariants = []struct {
	name  string
	cat   Category
	check func(j *domain.Job, late []string) []string
}{
	{"one terminal event per run, and it is last", Duplicated, func(j *domain.Job, _ []string) []string { return one(checkRuns(j)) }},
	{"nothing accepted under a lost lease", Duplicated, checkFencing},
	{"events replay to the stored state", Mismatched, func(j *domain.Job, _ []string) []string { return one(checkReplay(j)) }},
	{"every view of the log agrees with the document", Mismatched, func(j *domain.Job, _ []string) []string {
		err := views.CheckAll(j)
		return wrong(err != nil, fmt.Sprint(err))
	}},
	{"no job stores a dependency cycle", Mismatched, func(j *domain.Job, _ []string) []string {
		c := j.Cycle()
		return wrong(len(c) > 0, "a dependency cycle: "+strings.Join(c, ", "))
	}},
	{"nothing after a sleep starts before its wake time", Mismatched, func(j *domain.Job, _ []string) []string { return checkSleeps(j) }},
}

func one(msg string) []string { return wrong(msg != "", msg) }

// wrong answers problem when bad holds.
func wrong(bad bool, problem string) []string {
	if bad {
		return []string{problem}
	}
	return nil
}

// submission is one planned job as its callers heard it.
type submission struct {
	plan     JobPlan
	ids      map[string]int // job ids answered with 2xx, with how often
	id       string         // the first id answered
	finished bool           // seen finished within the bound

	mu    sync.Mutex
	calls []call // what its racer (or its planned cancel) sent
	raced atomic.Bool
}

func (s *submission) add(c call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *submission) key() string { return fmt.Sprintf("job %s (%s)", s.id, s.plan.Kind) }

// judgeSubmits holds the run's submits to their answers, each job to the
// invariants and its row, and the tenant's listing to the submits.
func (l *ledger) judgeSubmits(subs []*submission, listed map[string]bool, listErr error, stored, others map[string]*domain.Job, late map[string][]string) {
	const submitted = "every submit answered a job"
	answered := map[string]bool{}
	for i, s := range subs {
		if s.id == "" {
			l.judge(submitted, Lost, fmt.Sprintf("job %d", i), "no 2xx answer")
			continue
		}
		key := s.key()
		l.judge(submitted, Lost, key)
		l.judge("one job per Idempotency-Key", Duplicated, key, wrong(len(s.ids) > 1, fmt.Sprintf("key %s answered %d jobs: %v", s.plan.Key, len(s.ids), s.ids))...)
		for id := range s.ids {
			answered[id] = true
		}
		l.judge("every job answered 2xx is listed", Lost, key, wrong(listErr != nil || !listed[s.id], fmt.Sprintf("not listed (%v)", listErr))...)
		l.judgeJob(key, rows[s.plan.Kind], s, stored[s.id], late[s.id])
	}
	const beyond = "no job beyond those submitted and their steps' child jobs, one an attempt"
	for _, id := range slices.Sorted(maps.Keys(listed)) {
		if answered[id] {
			l.judge(beyond, Duplicated, "job "+id)
			continue
		}
		c := others[id]
		l.judge(beyond, Duplicated, "job "+id, wrong(c == nil || !madeBy(c, stored), "stored, but no submit answered it and no attempt of a submitted job's step made it")...)
		if c == nil {
			continue
		}
		key := "child job " + id
		for _, inv := range invariants {
			l.judge(inv.name, inv.cat, key, inv.check(c, late[id])...)
		}
		l.judge("every child job finished", Lost, key, wrong(!c.State.Terminal(), fmt.Sprintf("is %s; steps %s", c.State, stepStates(c)))...)
	}
}

// madeBy reports whether child job c is the one an attempt of its
// parent's step names: the parent was submitted, and its attempt made c
// (a child's id is derived from its parent's attempt, so one per attempt).
func madeBy(c *domain.Job, stored map[string]*domain.Job) bool {
	if c.Parent == nil || stored[c.Parent.Job] == nil {
		return false
	}
	s, _, err := stored[c.Parent.Job].Step(c.Parent.Step)
	if err != nil {
		return false
	}
	for _, a := range s.Attempts {
		if a.N == c.Parent.Attempt {
			return a.Child == c.ID
		}
	}
	return false
}

// judgeJob holds a planned job to the invariants and to its row.
func (l *ledger) judgeJob(key string, e row, s *submission, j *domain.Job, late []string) {
	const stored, finished, end = "every job submitted is stored", "every job finished within the bound", "every job ends as its plan and the faults imply"
	if j == nil {
		l.judge(stored, Lost, key, fmt.Sprintf("not stored (read: %v)", l.unread[s.id]))
		return
	}
	l.judge(stored, Lost, key)
	for _, inv := range invariants {
		l.judge(inv.name, inv.cat, key, inv.check(j, late)...)
	}
	if !j.State.Terminal() || !s.finished {
		l.judge(finished, Lost, key, fmt.Sprintf("is %s; steps %s", j.State, stepStates(j)))
		return
	}
	l.judge(finished, Lost, key)
	l.judge(end, Mismatched, key, problems(e, j, s.calls)...) // its racer is done
}

// row is a workload table's row: what a job of one kind ends as.
type row struct {
	// end answers the state it ends in unless a cancel landed, given its
	// callers' answers; nil for any terminal state (its workers draw the
	// outcome).
	end func(calls []call) domain.JobState
	// lossy: a job meant to complete may instead fail on a step whose
	// attempts all ran out on lost leases, a fault's doing.
	lossy bool
}

func ends(state domain.JobState) func([]call) domain.JobState {
	return func([]call) domain.JobState { return state }
}

var (
	completes = row{end: ends(domain.JobCompleted), lossy: true}
	fails     = row{end: ends(domain.JobFailed)}
)

// problems answers what is wrong with a finished job against its row:
// its end, and its callers' answers.
func problems(e row, j *domain.Job, calls []call) []string {
	return append(answerProblems(j, calls), one(endProblem(e, j, calls))...)
}

// endProblem: a CANCELLED job was sent a cancel (whose answer
// answerProblems holds to the log); any other ended as its row says, or
// failed on lost leases where the row allows.
func endProblem(e row, j *domain.Job, calls []call) string {
	if j.State == domain.JobCancelled {
		if !slices.ContainsFunc(calls, func(c call) bool { return c.Op == "cancel" }) {
			return "it is CANCELLED but no cancel was sent"
		}
		return ""
	}
	if e.end == nil {
		return ""
	}
	want := e.end(calls)
	if j.State == want || e.lossy && want == domain.JobCompleted && j.State == domain.JobFailed && failedOnLostLeases(j) {
		return ""
	}
	return fmt.Sprintf("is %s, not %s; steps %s", j.State, want, stepStates(j))
}

// failedOnLostLeases reports whether the step that failed the job ran out
// of attempts on leases that expired (the execute function crashed, the
// clock jumped, a worker stalled) rather than on a failure of its own.
func failedOnLostLeases(j *domain.Job) bool {
	for _, s := range j.Steps {
		if s.State == domain.StepFailed && s.ReplacedBy == nil {
			return s.Error != nil && s.Error.Class == domain.ClassTimeout && len(s.Attempts) > 0 && s.Attempts[len(s.Attempts)-1].State == domain.AttemptTimeout
		}
	}
	return false
}

func stepStates(j *domain.Job) string {
	var parts []string
	for _, s := range j.Steps {
		parts = append(parts, fmt.Sprintf("%s=%s/%d", s.ID(), s.State, s.Attempt))
	}
	return strings.Join(parts, " ")
}

// checkRuns: each run of the job (a redrive's job_requeued starts the
// next) holds one of job_completed, job_failed, job_cancelled, as its
// last event; every run but the last ends job_failed, and the last holds
// none while the job is unfinished.
func checkRuns(j *domain.Job) string {
	var runs [][]domain.Event
	start := 0
	for i, ev := range j.Events {
		if ev.Type == string(domain.JobEvRequeued) && ev.Detail == "redrive" {
			runs, start = append(runs, j.Events[start:i]), i
		}
	}
	runs = append(runs, j.Events[start:])
	terminal := func(ev domain.Event) bool {
		return slices.Contains([]domain.JobEvent{domain.JobEvCompleted, domain.JobEvFailed, domain.JobEvCancelled}, domain.JobEvent(ev.Type))
	}
	for n, run := range runs {
		var ends []string
		for _, ev := range run {
			if terminal(ev) {
				ends = append(ends, ev.Type)
			}
		}
		unfinished := n == len(runs)-1 && !j.State.Terminal()
		switch {
		case n < len(runs)-1 && (len(run) == 0 || run[len(run)-1].Type != string(domain.JobEvFailed)):
			return fmt.Sprintf("run %d was redriven but does not end with job_failed", n+1)
		case unfinished && len(ends) > 0:
			return fmt.Sprintf("run %d: is %s but its log holds %v", n+1, j.State, ends)
		case !unfinished && (len(ends) != 1 || !terminal(run[len(run)-1])):
			return fmt.Sprintf("run %d: %d terminal events %v, and its last event is %s", n+1, len(ends), ends, run[len(run)-1].Type)
		}
	}
	return ""
}

// checkFencing: no outcome a worker sent after its lease was lost was
// applied (no output or error carries the zombie tag, and no late request
// was answered 2xx), and a step's only succeeded attempt is its last.
func checkFencing(j *domain.Job, late []string) []string {
	out := slices.Clone(late)
	for _, s := range j.Steps {
		if zombie(s.Output) {
			out = append(out, fmt.Sprintf("step %s output %s carries the zombie tag", s.ID(), s.Output))
		}
		for i, a := range s.Attempts {
			if zombie(a.Output) || a.Error != nil && strings.Contains(a.Error.Message, "["+ZombieTag+"]") {
				out = append(out, fmt.Sprintf("step %s attempt %d took a zombie's report", s.ID(), a.N))
			}
			if a.State == domain.AttemptSucceeded && i != len(s.Attempts)-1 {
				out = append(out, fmt.Sprintf("step %s attempt %d succeeded but is not the last (%d attempts)", s.ID(), a.N, len(s.Attempts)))
			}
		}
	}
	return out
}

func zombie(raw json.RawMessage) bool {
	if len(raw) == 0 || !bytes.Contains(raw, []byte(ZombieTag)) {
		return false
	}
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil {
		return true // carries the tag in some other shape
	}
	tagged, _ := v[ZombieTag].(bool)
	return tagged
}

// checkReplay: the log replays to the stored state, its job events are
// legal in the formal job table plus the documented widenings, its
// sequence numbers run 1..n, and a finished job has left the due index.
func checkReplay(j *domain.Job) string {
	if err := domain.CheckReplay(j); err != nil {
		return err.Error()
	}
	if err := domain.CheckFormal(j.Events); err != nil {
		return err.Error()
	}
	for i, ev := range j.Events {
		if ev.Seq != i+1 {
			return fmt.Sprintf("event %d has seq %d", i+1, ev.Seq)
		}
	}
	if j.State.Terminal() && j.DueAt != nil {
		return fmt.Sprintf("is %s but still due at %s", j.State, j.DueAt.Format(time.RFC3339Nano))
	}
	return ""
}

// checkSleeps: no sleep woke before its time, and nothing after it moved
// before then (the events' times, on the stack's clock).
func checkSleeps(j *domain.Job) []string {
	var out []string
	for i, s := range j.Steps {
		a := s.Spec.Action
		if a.Type != domain.ActionSleep || a.Seconds == nil || *a.Seconds <= 0 {
			continue
		}
		opened := -1
		for k, ev := range j.Events {
			if ev.Step == s.ID() && ev.Type == domain.StepWaiting.EventType() {
				opened = k
			}
		}
		if opened < 0 {
			continue // cancelled before it was reached
		}
		wake := j.Events[opened].At.Add(time.Duration(*a.Seconds * float64(time.Second)).Truncate(time.Millisecond))
		next := ""
		if i+1 < len(j.Steps) {
			next = j.Steps[i+1].ID()
		}
		for _, ev := range j.Events[opened+1:] {
			woke := ev.Step == s.ID() && ev.Type == domain.StepSucceeded.EventType()
			moved := ev.Step != "" && ev.Step == next && ev.Type != domain.StepCancelled.EventType()
			if (woke || moved) && ev.At.Before(wake) {
				out = append(out, fmt.Sprintf("step %s %s at %s, %s before step %s's wake time", ev.Step, ev.Type, ev.At.Format(time.RFC3339Nano), wake.Sub(ev.At), s.ID()))
			}
		}
	}
	return out
}
