// Package views reads a job in the words of each lifecycle stepflow serves
// (docs/model.md): the canonical model, the quality platform's tasks and
// runs, the formal job machine, the approval-gated runs, and the
// event-sourced job status. For each vocabulary it answers a projection of
// a job into that vocabulary's document, the vocabulary's transition
// tables as data, the projection of a job's event log into its states, and
// Check, which holds every move of that projection against its tables. It
// does no I/O: views are read-time projections of the stored job, never
// written.
package views

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stepflow/stepflow/shared/domain"
)

// The vocabularies. The first four are views the API answers
// (GET /v1/jobs/{id}?view=); EventSourced is the event-sourced status,
// which conformance checks and the formal view shows as derived_state.
const (
	Canonical    = "canonical"
	Task         = "task"
	Formal       = "formal"
	Gated        = "gated"
	EventSourced = "event_sourced"
)

// Names answers the views the API answers, the default first.
func Names() []string { return []string{Canonical, Task, Formal, Gated} }

// Vocabularies answers every vocabulary Check knows.
func Vocabularies() []string { return append(Names(), EventSourced) }

// Initial is how a table writes the pseudo-state before a thing's first
// state.
const Initial = "(initial)"

// Pair is one move, from one state to another.
type Pair struct{ From, To string }

func (p Pair) String() string { return p.From + " -> " + p.To }

// Table is the transitions of one level of a vocabulary (its jobs, tasks,
// runs or steps): the moves it allows, each either the lifecycle's own or
// a widening the canonical model needs (Why says which), and those of its
// own that stepflow never makes (Never says why).
type Table struct {
	Vocabulary string
	Level      string // "job", "step", "attempt", "task", "run"
	States     []string
	Allowed    []Pair
	Why        map[Pair]string // widenings: why stepflow makes a move the lifecycle does not list
	Never      map[Pair]string // allowed, but stepflow never makes it: why
}

// Allows reports whether the table allows p.
func (t Table) Allows(p Pair) bool { return slices.Contains(t.Allowed, p) }

// Reached answers the allowed moves stepflow makes: what a conformance
// test must see.
func (t Table) Reached() []Pair {
	var out []Pair
	for _, p := range t.Allowed {
		if _, never := t.Never[p]; !never {
			out = append(out, p)
		}
	}
	return out
}

// Move is one move of a projected event log: Subject (the job, a step, or
// a run "step#n") went From -> To at the event Seq.
type Move struct {
	Level   string
	Subject string
	Seq     int
	Pair
}

// Tables answers a vocabulary's tables, one per level it has.
func Tables(vocab string) ([]Table, error) {
	v, err := lookup(vocab)
	if err != nil {
		return nil, err
	}
	return v.tables(), nil
}

// Moves projects a job's event log into the vocabulary's states and
// answers every move, in log order within each subject (job first, then
// steps, then runs). Repeats of a state (two canonical states one word
// names) are no move.
func Moves(vocab string, j *domain.Job) ([]Move, error) {
	v, err := lookup(vocab)
	if err != nil {
		return nil, err
	}
	h, err := historyOf(j)
	if err != nil {
		return nil, err
	}
	return v.moves(j, h), nil
}

// Check projects a job's event log into the vocabulary and holds every
// move against its tables, and the last state of each projection against
// what the vocabulary's document shows for the stored job. The error names
// the job, the event and the forbidden pair.
func Check(vocab string, j *domain.Job) error {
	v, err := lookup(vocab)
	if err != nil {
		return err
	}
	h, err := historyOf(j)
	if err != nil {
		return err
	}
	tables := map[string]Table{}
	for _, t := range v.tables() {
		tables[t.Level] = t
	}
	for _, m := range v.moves(j, h) {
		t := tables[m.Level]
		if !t.Allows(m.Pair) {
			return fmt.Errorf("job %s: event %d: %s %s %s moved %s, which the %s %s table does not allow",
				j.ID, m.Seq, vocab, m.Level, m.Subject, m.Pair, vocab, m.Level)
		}
	}
	if err := v.consistent(j, h); err != nil {
		return fmt.Errorf("job %s: %s view: %w", j.ID, vocab, err)
	}
	return nil
}

// CheckAll runs Check for every vocabulary.
func CheckAll(j *domain.Job) error {
	for _, name := range Vocabularies() {
		if err := Check(name, j); err != nil {
			return err
		}
	}
	return nil
}

// Project answers the job's document in the view's words: every document
// has id, view, state and steps[] (id, state). Canonical is answered by
// the API's own job document; Project answers the others.
func Project(view string, j *domain.Job) (any, error) {
	v, ok := vocabularies[view]
	if !ok || v.project == nil {
		return nil, unknownView(view)
	}
	return v.project(j), nil
}

// Summarize answers a job's list item in the view's words.
func Summarize(view string, j *domain.Job) (any, error) {
	v, ok := vocabularies[view]
	if !ok || v.summarize == nil {
		return nil, unknownView(view)
	}
	return v.summarize(j), nil
}

// ParseView answers the view a request names ("" is canonical), or a 400
// naming field view.
func ParseView(s string) (string, error) {
	if s == "" {
		return Canonical, nil
	}
	if slices.Contains(Names(), s) {
		return s, nil
	}
	return "", unknownView(s)
}

func unknownView(s string) error {
	return domain.Invalid("view", "%.40q is not a view; the views are %s", s, strings.Join(Names(), ", "))
}

// Filter is what a state word of a view selects: jobs in any of States
// (canonical), and of those only the ones Keep accepts (nil: all). A
// word no job is ever in selects nothing (States empty).
type Filter struct {
	States []domain.JobState
	Keep   func(*domain.Job) bool
}

// StateFilter reads ?state= in the view's words (any case), or answers a
// 400 naming field state that lists the view's words.
func StateFilter(view, word string) (Filter, error) {
	words := JobWords(view)
	i := slices.IndexFunc(words, func(w string) bool { return strings.EqualFold(w, word) })
	if i < 0 {
		return Filter{}, domain.Invalid("state", "%.40q is not a %s job state; the %s states are %s", word, view, view, strings.Join(words, ", "))
	}
	return vocabularies[view].filter(words[i]), nil
}

// JobWords answers a view's job-level states, in lifecycle order.
func JobWords(view string) []string {
	v, err := lookup(view)
	if err != nil {
		return nil
	}
	return v.tables()[0].States
}

// StepWords answers the words a view's documents name steps with, in
// canonical step order, each once: what its steps[].state may be.
func StepWords(view string) []string {
	v, err := lookup(view)
	if err != nil || v.stepWord == nil {
		return nil
	}
	var out []string
	for _, s := range domain.AllStepStates() {
		if w := v.stepWord(s); w != "" && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// vocabulary is one lifecycle's reading of the canonical model.
type vocabulary struct {
	tables     func() []Table
	stepWord   func(domain.StepState) string // how its documents name a step state; nil: it has no steps
	moves      func(j *domain.Job, h *history) []Move
	consistent func(j *domain.Job, h *history) error
	project    func(j *domain.Job) any  // the job's document; nil: the view has none of its own
	summarize  func(j *domain.Job) any  // the job's list item; nil as project
	filter     func(word string) Filter // what one of its job words selects (StateFilter)
}

// vocabularies are every vocabulary by name: the one table.
var vocabularies = map[string]vocabulary{
	Canonical:    canonical,
	Task:         task,
	Formal:       formal,
	Gated:        gated,
	EventSourced: eventSourced,
}

func lookup(name string) (vocabulary, error) {
	if v, ok := vocabularies[name]; ok {
		return v, nil
	}
	return vocabulary{}, fmt.Errorf("views: %q is not a vocabulary (%s)", name, strings.Join(Vocabularies(), ", "))
}

// wordFilter answers the filter of a vocabulary that names each canonical
// job state with one word.
func wordFilter(word func(domain.JobState) string) func(string) Filter {
	return func(w string) Filter {
		var f Filter
		for _, s := range domain.AllJobStates() {
			if word(s) == w {
				f.States = append(f.States, s)
			}
		}
		return f
	}
}

// jobMoves maps the job's canonical states through word (the history
// point and every point before it given) and answers the moves, repeats
// dropped. The first move is from Initial.
func jobMoves(j *domain.Job, h *history, level string, word func(i int) string) []Move {
	var out []Move
	from := Initial
	for i, p := range h.job {
		to := word(i)
		if to == "" || to == from {
			continue
		}
		out = append(out, Move{Level: level, Subject: j.ID, Seq: p.seq, Pair: Pair{from, to}})
		from = to
	}
	return out
}

// stepMoves maps each step's canonical states through word ("" for a
// state the vocabulary does not show: a step passes through it inside
// one change) and answers the moves, repeats dropped. A step's first
// state is no move: steps are born with their job.
func stepMoves(h *history, level string, word func(domain.StepState) string) []Move {
	var out []Move
	for _, sh := range h.steps {
		from := word(sh.points[0].state)
		for _, p := range sh.points[1:] {
			to := word(p.state)
			if to == "" || to == from {
				continue
			}
			out = append(out, Move{Level: level, Subject: sh.id, Seq: p.seq, Pair: Pair{from, to}})
			from = to
		}
	}
	return out
}

// runMoves answers each attempt's moves, from Initial.
func runMoves(h *history, level string) []Move {
	var out []Move
	for _, r := range h.runs {
		from := Initial
		for _, p := range r.points {
			out = append(out, Move{Level: level, Subject: fmt.Sprintf("%s#%d", r.step, r.n), Seq: p.seq, Pair: Pair{from, string(p.state)}})
			from = string(p.state)
		}
	}
	return out
}

// consistentRuns requires the stored attempts to be the ones the log
// started, each in the state the log left it.
func consistentRuns(j *domain.Job, h *history) error {
	seen := map[string]bool{}
	for _, r := range h.runs {
		key := fmt.Sprintf("%s#%d", r.step, r.n)
		seen[key] = true
		a := storedAttempt(j, r.step, r.n)
		if a == nil {
			return fmt.Errorf("the log starts attempt %s, which the job does not hold", key)
		}
		if want := r.points[len(r.points)-1].state; a.State != want {
			return fmt.Errorf("attempt %s is stored %s, the log says %s", key, a.State, want)
		}
	}
	for _, s := range j.Steps {
		for _, a := range s.Attempts {
			if key := fmt.Sprintf("%s#%d", s.Spec.ID, a.N); !seen[key] {
				return fmt.Errorf("attempt %s is stored, but the log never started it", key)
			}
		}
	}
	return nil
}

// pairs builds a table's pairs from (from, to...) rows.
func pairs(rows ...[]string) []Pair {
	var out []Pair
	for _, r := range rows {
		for _, to := range r[1:] {
			out = append(out, Pair{r[0], to})
		}
	}
	return out
}

// image answers the pairs of a canonical table as word names them,
// repeats dropped, in table order: a vocabulary whose words name the
// canonical states one to one (or several to one) allows exactly these.
func image[S ~string](sources func() []Pair, word func(S) string) []Pair {
	var out []Pair
	for _, p := range sources() {
		from := Initial
		if p.From != Initial {
			from = word(S(p.From))
		}
		to := word(S(p.To))
		if from == "" || to == "" || from == to {
			continue
		}
		if q := (Pair{from, to}); !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// canonicalJobPairs answers the job table's moves.
func canonicalJobPairs() []Pair {
	var out []Pair
	for _, t := range domain.JobTable() {
		for _, s := range t.Sources {
			from := string(s)
			if s == domain.JobInitial {
				from = Initial
			}
			if p := (Pair{from, string(t.Destination)}); p.From != p.To && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// canonicalStepPairs answers the step table's moves.
func canonicalStepPairs() []Pair {
	var out []Pair
	for _, t := range domain.StepTable() {
		for _, s := range t.Sources {
			if p := (Pair{string(s), string(t.Destination)}); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func strs[S ~string](xs []S) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}
