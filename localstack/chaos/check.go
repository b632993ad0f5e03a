package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/views"
)

// The checks are of two sorts. The history invariants (invariants) hold
// for every job of every tenant whatever its plan: its log replays to its
// document, each run of it has one terminal event, last, nothing a worker
// sent under a lost lease was applied, every view of it agrees, and so on.
// Beyond them each workload has a table (kind -> expectation) of what a
// job of its plan ends as, given the faults injected and what its callers
// were answered; judgeJob holds each job to its row.

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

func (c *Check) pass() { c.OK++ }

func (c *Check) fail(format string, args ...any) {
	c.Failed++
	if len(c.Examples) < 5 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// ledger collects checks by name, in the order first judged, and the keys
// (jobs, schedules, queues) that failed a check of each category: a job
// failing three checks counts once.
type ledger struct {
	prefix string // before each check's name: "hostile: " for the hostile tenant's
	checks []*Check
	byName map[string]*Check
	bad    map[Category]map[string]bool
}

func newLedger() *ledger {
	return &ledger{byName: map[string]*Check{}, bad: map[Category]map[string]bool{}}
}

func (l *ledger) check(name string, cat Category) *Check {
	name = l.prefix + name
	c := l.byName[name]
	if c == nil {
		c = &Check{Name: name, Category: cat}
		l.byName[name] = c
		l.checks = append(l.checks, c)
	}
	return c
}

// judge passes the check for key when there is no problem, and fails it
// once per problem otherwise.
func (l *ledger) judge(name string, cat Category, key string, problems ...string) {
	c := l.check(name, cat)
	if len(problems) == 0 {
		c.pass()
		return
	}
	for _, p := range problems {
		c.fail("%s: %s", key, p)
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
	check func(j *domain.Job, late []lateAnswer) []string
}{
	{"one terminal event per run, and it is last", Duplicated, func(j *domain.Job, _ []lateAnswer) []string { return one(checkRuns(j)) }},
	{"nothing accepted under a lost lease", Duplicated, checkFencing},
	{"events replay to the stored state", Mismatched, func(j *domain.Job, _ []lateAnswer) []string { return one(checkReplay(j)) }},
	{"every view of the log agrees with the document", Mismatched, func(j *domain.Job, _ []lateAnswer) []string { return errs(views.CheckAll(j)) }},
	{"no job stores a dependency cycle", Mismatched, func(j *domain.Job, _ []lateAnswer) []string {
		if c := j.Cycle(); len(c) > 0 {
			return []string{"a dependency cycle: " + strings.Join(c, ", ")}
		}
		return nil
	}},
	{"nothing after a sleep starts before its wake time", Mismatched, func(j *domain.Job, _ []lateAnswer) []string { return checkSleeps(j) }},
}

func one(msg string) []string {
	if msg == "" {
		return nil
	}
	return []string{msg}
}

func errs(err error) []string {
	if err == nil {
		return nil
	}
	return []string{err.Error()}
}

// history holds one stored job to every invariant.
func (l *ledger) history(key string, j *domain.Job, late []lateAnswer) {
	for _, inv := range invariants {
		l.judge(inv.name, inv.cat, key, inv.check(j, late)...)
	}
}

// expectation is a workload table's row: what a job of one kind ends as.
type expectation struct {
	// end answers the state it ends in unless a cancel landed; nil for
	// any terminal state (its workers draw the outcome).
	end func(j *domain.Job) domain.JobState
	// lossy: a job meant to complete may instead fail on a step whose
	// attempts all ran out on lost leases, a fault's doing.
	lossy bool
	// facts are what else its log and its callers' answers must show.
	facts []func(j *domain.Job, s *submission) []string
}

func ends(state domain.JobState) func(*domain.Job) domain.JobState {
	return func(*domain.Job) domain.JobState { return state }
}

var (
	completes = expectation{end: ends(domain.JobCompleted), lossy: true}
	fails     = expectation{end: ends(domain.JobFailed)}
)

// judged is one job a workload planned, as stored and as its callers heard.
type judged struct {
	key  string      // how failures name it: "job <id> (<kind>)"
	sub  *submission // nil when the workload keeps no answers
	job  *domain.Job // nil when it is not stored
	done bool        // seen finished within the bound
	late []lateAnswer
}

// judgeJob holds a planned job to the invariants and to its row.
func (l *ledger) judgeJob(e expectation, x judged) {
	const stored, finished, end = "every job submitted is stored", "every job finished within the bound", "every job ends as its plan and the faults imply"
	if x.job == nil {
		l.judge(stored, Lost, x.key, "not stored")
		return
	}
	l.judge(stored, Lost, x.key)
	j := x.job
	l.history(x.key, j, x.late)
	if !j.State.Terminal() || !x.done {
		l.judge(finished, Lost, x.key, fmt.Sprintf("is %s; steps %s", j.State, stepStates(j)))
		return
	}
	l.judge(finished, Lost, x.key)
	problems := endProblems(e, j, x.sub)
	for _, fact := range e.facts {
		problems = append(problems, fact(j, x.sub)...)
	}
	l.judge(end, Mismatched, x.key, problems...)
}

// endProblems: a cancel answered 200 exactly when the job is CANCELLED
// (one that had no answer may have landed); otherwise the job ended as
// its row says, or failed on lost leases where the row allows.
func endProblems(e expectation, j *domain.Job, s *submission) []string {
	cancel, sent := cancelAnswer(s)
	switch {
	case cancel == http.StatusOK && j.State != domain.JobCancelled:
		return []string{fmt.Sprintf("its cancel answered 200 but it is %s", j.State)}
	case j.State == domain.JobCancelled && !sent:
		return []string{"it is CANCELLED but no cancel was sent"}
	case j.State == domain.JobCancelled && cancel != http.StatusOK && cancel != 0 && cancel < 500:
		return []string{fmt.Sprintf("it is CANCELLED but its cancel answered %d", cancel)}
	case j.State == domain.JobCancelled || e.end == nil:
		return nil
	}
	want := e.end(j)
	if j.State == want || e.lossy && want == domain.JobCompleted && j.State == domain.JobFailed && failedOnLostLeases(j) {
		return nil
	}
	return []string{fmt.Sprintf("is %s, not %s; steps %s", j.State, want, stepStates(j))}
}

// cancelAnswer answers the last status of the job's planned or racing
// cancel, and whether one was sent.
func cancelAnswer(s *submission) (int, bool) {
	if s == nil {
		return 0, false
	}
	if len(s.cancel) > 0 {
		return s.cancel[len(s.cancel)-1], true
	}
	if s.race != nil {
		for _, c := range s.race.snapshot() {
			if c.Op == "cancel" {
				return c.final(), true
			}
		}
	}
	return 0, false
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

// exchange is one request a workload made whose answer is known in
// advance: a poison body is refused, another tenant's job is not found.
type exchange struct {
	what     string
	statuses []int // every answer, in order; 0 for none
	want     int
	// strict: sent once with the faults paused, the first answer counts;
	// once: sent once under faults, a 5xx or no answer says nothing.
	strict, once bool
	bad          string // what else was wrong with the answer, if anything
}

func (x exchange) problem() string {
	if len(x.statuses) == 0 {
		return x.what + ": never sent"
	}
	last := x.statuses[len(x.statuses)-1]
	switch {
	case x.bad != "":
		return fmt.Sprintf("%s answered %v: %s", x.what, x.statuses, x.bad)
	case x.want >= 300 && has2xx(x.statuses):
		return fmt.Sprintf("%s was accepted: %v", x.what, x.statuses)
	case x.once && !x.strict && retryableStatus(last):
		return ""
	case x.strict && len(x.statuses) != 1, last != x.want:
		return fmt.Sprintf("%s answered %v, not %d", x.what, x.statuses, x.want)
	}
	return ""
}

// retryableStatus: a fault met the request before its body was read (or
// its answer was lost).
func retryableStatus(s int) bool { return s == 0 || s >= 500 || s == http.StatusTooManyRequests }

func has2xx(statuses []int) bool {
	for _, s := range statuses {
		if s >= 200 && s < 300 {
			return true
		}
	}
	return false
}

// checkTerminalOnce: a finished job's log holds exactly one of
// job_completed, job_failed, job_cancelled, as its last event; an
// unfinished one holds none.
func checkTerminalOnce(j *domain.Job) string {
	var terminal []int
	for i, ev := range j.Events {
		switch domain.JobEvent(ev.Type) {
		case domain.JobEvCompleted, domain.JobEvFailed, domain.JobEvCancelled:
			terminal = append(terminal, i)
		}
	}
	switch {
	case !j.State.Terminal() && len(terminal) > 0:
		return fmt.Sprintf("is %s but its log holds %s", j.State, j.Events[terminal[0]].Type)
	case !j.State.Terminal():
		return ""
	case len(terminal) != 1:
		var types []string
		for _, i := range terminal {
			types = append(types, j.Events[i].Type)
		}
		return fmt.Sprintf("%d terminal events: %v", len(terminal), types)
	case terminal[0] != len(j.Events)-1:
		return fmt.Sprintf("%s is event %d of %d; after it: %s", j.Events[terminal[0]].Type, terminal[0]+1, len(j.Events), j.Events[terminal[0]+1].Type)
	}
	return ""
}

// checkRuns: checkTerminalOnce for each run of the job, a redrive's
// job_requeued starting the next; every run but the last ends job_failed.
func checkRuns(j *domain.Job) string {
	start, n := 0, 1
	for i, ev := range j.Events {
		if ev.Type != string(domain.JobEvRequeued) || ev.Detail != "redrive" {
			continue
		}
		run := j.Events[start:i]
		if len(run) == 0 || run[len(run)-1].Type != string(domain.JobEvFailed) {
			return fmt.Sprintf("run %d was redriven but does not end with job_failed", n)
		}
		if msg := checkTerminalOnce(&domain.Job{State: domain.JobFailed, Events: run}); msg != "" {
			return fmt.Sprintf("run %d: %s", n, msg)
		}
		start, n = i, n+1
	}
	if msg := checkTerminalOnce(&domain.Job{State: j.State, Events: j.Events[start:]}); msg != "" && n > 1 {
		return fmt.Sprintf("run %d: %s", n, msg)
	} else {
		return msg
	}
}

// checkFencing: no outcome a worker sent after its lease was lost was
// applied (no output or error carries the zombie tag, and no late request
// was answered 2xx), and each step has at most one succeeded attempt,
// its last.
func checkFencing(j *domain.Job, late []lateAnswer) []string {
	var out []string
	for _, l := range late {
		out = append(out, fmt.Sprintf("%s of lease %s sent %s after it expired was answered %d %s",
			l.Op, l.Lease, l.Sent.Sub(l.Expires).Round(time.Millisecond), l.Status, l.Answer))
	}
	for _, s := range j.Steps {
		if zombie(s.Output) {
			out = append(out, fmt.Sprintf("step %s output %s carries the zombie tag", s.ID(), s.Output))
		}
		succeeded := 0
		for i, a := range s.Attempts {
			if zombie(a.Output) || a.Error != nil && strings.Contains(a.Error.Message, "["+ZombieTag+"]") {
				out = append(out, fmt.Sprintf("step %s attempt %d took a zombie's report", s.ID(), a.N))
			}
			if a.State == domain.AttemptSucceeded {
				succeeded++
				if i != len(s.Attempts)-1 {
					out = append(out, fmt.Sprintf("step %s attempt %d succeeded but is not the last (%d attempts)", s.ID(), a.N, len(s.Attempts)))
				}
			}
		}
		if succeeded > 1 {
			out = append(out, fmt.Sprintf("step %s has %d succeeded attempts", s.ID(), succeeded))
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
