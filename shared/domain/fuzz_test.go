package domain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Run briefly in CI:
//
//	go test -run='^$' -fuzz='^FuzzParseJobSpec$' -fuzztime=10s ./shared/domain
//	go test -run='^$' -fuzz='^FuzzTransitions$' -fuzztime=10s ./shared/domain
//
// Plain `go test` runs each target over its committed corpus
// (testdata/fuzz/<FuzzName>/).

var fuzzT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// FuzzParseJobSpec: ParseJobSpec never panics; what it refuses it refuses
// with a client error; what it accepts builds a job whose events replay,
// re-parses from its own JSON to the same spec, and runs to COMPLETED when
// every step succeeds.
func FuzzParseJobSpec(f *testing.F) {
	f.Add([]byte(`{"steps":[{"id":"a","action":{"type":"pass"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, err := domain.ParseJobSpec(body)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		j := checkNewJob(t, spec)
		checkReparse(t, spec)
		runToCompletion(t, j)
	})
}

// checkRefusal requires a refusal to be a client error.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) {
		t.Fatalf("refused with %T, not a *domain.Error: %v", err, err)
	}
	if de.Code != domain.CodeInvalid && de.Code != domain.CodeTooLarge {
		t.Fatalf("refused with code %s: %v", de.Code, err)
	}
}

// checkNewJob builds the accepted spec's job and requires it to replay,
// unfinished, with a step that may start.
func checkNewJob(t *testing.T, spec *domain.JobSpec) *domain.Job {
	t.Helper()
	j, err := domain.NewJob("tenant", "job", spec, "key", fuzzT0)
	if err != nil {
		t.Fatalf("accepted spec builds no job: %v", err)
	}
	checkEventLog(t, "new job", j)
	if j.State.Terminal() || len(j.Steps) != len(spec.Steps) || j.Steps[0].State == domain.StepWaitingDeps {
		t.Fatalf("new job: state %s, %d steps of %d, first step %s", j.State, len(j.Steps), len(spec.Steps), j.Steps[0].State)
	}
	return j
}

// checkReparse requires validation to be idempotent: the spec it filled
// in parses to itself.
func checkReparse(t *testing.T, spec *domain.JobSpec) {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("marshal accepted spec: %v", err)
	}
	if len(raw) > domain.MaxJobSpecBytes {
		return
	}
	again, err := domain.ParseJobSpec(raw)
	if err != nil {
		t.Fatalf("accepted spec %s does not re-parse: %v", raw, err)
	}
	if !sameSpec(spec, again) {
		t.Fatalf("spec changed on re-parse:\n%s\n%s", raw, mustJSON(again))
	}
}

// runToCompletion requires that every step succeeding in turn (run,
// woken, signalled or approved) completes the job.
func runToCompletion(t *testing.T, j *domain.Job) {
	t.Helper()
	now := fuzzT0
	if j.RunAt != nil {
		now = *j.RunAt
	}
	for pass := 0; !j.State.Terminal() && pass <= len(j.Steps); pass++ {
		for i, s := range j.Steps {
			now = now.Add(time.Second)
			if err := succeed(j, s, i, now); err != nil {
				t.Fatalf("step %d (%s, %s): %v", i, s.ID(), s.State, err)
			}
			checkEventLog(t, fmt.Sprintf("after step %d", i), j)
		}
	}
	if j.State != domain.JobCompleted || j.DueAt != nil {
		t.Fatalf("every step succeeded, yet the job is %s (due %v)", j.State, j.DueAt)
	}
}

// checkEventLog requires the job's events to replay to its state and its
// job events to be legal in the formal job table.
func checkEventLog(t *testing.T, when string, j *domain.Job) {
	t.Helper()
	if err := domain.CheckReplay(j); err != nil {
		t.Fatalf("%s: does not replay: %v", when, err)
	}
	if err := domain.CheckFormal(j.Events); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
}

// succeed makes step i go on as far as it can at now: a runnable step runs
// and succeeds, a sleep wakes, a wait takes its signal, a gate is approved.
func succeed(j *domain.Job, s *domain.Step, i int, now time.Time) error {
	var err error
	switch {
	case s.State == domain.StepPending && s.ReadyAt != nil && !domain.Executed(s.Spec.Action.Type):
		_, err = j.Fire(s.ID(), now) // opens at run_at
		if err == nil && s.State != domain.StepPending {
			return succeed(j, s, i, now)
		}
	case s.State == domain.StepPending:
		var l *domain.Lease
		if l, err = j.Lease(s.ID(), domain.LeaseRequest{Nonce: fmt.Sprint("n", i), Duration: time.Minute, ViaWorker: s.Spec.Action.Type == domain.ActionWorker}, now); err == nil {
			_, err = j.Complete(s.ID(), l.ID, json.RawMessage(`{"ok":true}`), now)
		}
	case s.State == domain.StepWaiting && s.Timer != nil && s.Timer.WakeAt != nil:
		_, err = j.Fire(s.ID(), *s.Timer.WakeAt)
	case s.State == domain.StepWaiting:
		_, _, err = j.Signal(domain.SignalRequest{Name: s.Spec.Action.Signal, Payload: json.RawMessage(`1`)}, now)
	case s.State == domain.StepNeedsUser:
		_, _, err = j.Approve(s.ID(), domain.Decision{By: "fuzz"}, now)
	}
	return err
}

func sameSpec(a, b *domain.JobSpec) bool {
	var pa, pb any
	if json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || !reflect.DeepEqual(pa, pb) {
		return false
	}
	ca, cb := *a, *b
	ca.Payload, cb.Payload = nil, nil
	return reflect.DeepEqual(ca, cb)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// stepEvents and jobEvents are every event of the tables plus one no table
// knows.
func stepEvents() []domain.StepEvent {
	var out []domain.StepEvent
	for _, t := range domain.StepTable() {
		out = append(out, t.Event)
	}
	return append(out, "no_such_event")
}

func jobEvents() []domain.JobEvent {
	var out []domain.JobEvent
	for _, t := range domain.JobTable() {
		out = append(out, t.Event)
	}
	return append(out, "no_such_event")
}

// FuzzTransitions: the input's first half picks (state, event) pairs on
// which NextStepState and NextJobState must agree with the tables; the
// whole input then drives a random walk of lease, complete, fail,
// heartbeat, reclaim, sweep, cancel and time over a job, after every move
// of which the job must replay to its state, finish at most once, hold at
// most max_attempts attempts, and accept an outcome only under its live
// lease.
func FuzzTransitions(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkTables(t, data[:len(data)/2])
		walk(t, data)
	})
}

func checkTables(t *testing.T, data []byte) {
	steps, sevs := domain.AllStepStates(), stepEvents()
	jobs, jevs := append(domain.AllJobStates(), domain.JobInitial, "NO_SUCH_STATE"), jobEvents()
	for i := 0; i+1 < len(data); i += 2 {
		s, e := steps[int(data[i])%len(steps)], sevs[int(data[i+1])%len(sevs)]
		to, err := domain.NextStepState(s, e)
		want, ok := lookupRow(domain.StepTable(), s, e)
		agree(t, "step", string(s), string(e), string(to), err, string(want), ok)

		js, je := jobs[int(data[i+1])%len(jobs)], jevs[int(data[i])%len(jevs)]
		jto, err := domain.NextJobState(js, je)
		jwant, ok := lookupRow(domain.JobTable(), js, je)
		agree(t, "job", string(js), string(je), string(jto), err, string(jwant), ok)
	}
}

func lookupRow[S ~string, E ~string](table []domain.Transition[S, E], state S, event E) (S, bool) {
	for _, row := range table {
		if row.Event == event {
			return row.Destination, slices.Contains(row.Sources, state)
		}
	}
	return state, false
}

func agree(t *testing.T, kind, from, event, to string, err error, want string, allowed bool) {
	t.Helper()
	if allowed {
		if err != nil || to != want {
			t.Fatalf("%s %s --%s-> %s, %v; the table says %s", kind, from, event, to, err, want)
		}
		return
	}
	var ite *domain.IllegalTransitionError
	if !errors.As(err, &ite) || to != from || ite.From != from || ite.Event != event || ite.Kind != kind {
		t.Fatalf("%s %s --%s-> %s, %v; the table allows no such move", kind, from, event, to, err)
	}
	if domain.CodeOf(err) != domain.CodeConflict {
		t.Fatalf("an illegal transition must answer 409, not %s", domain.CodeOf(err))
	}
}

// walkSpecs are the jobs a walk starts from.
var walkSpecs = []string{
	`{"steps":[{"id":"a","action":{"type":"pass"}}]}`,
	`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}},{"id":"c","action":{"type":"pass"}}]}`,
	`{"steps":[{"id":"w","action":{"type":"worker","lease_seconds":2},"retry":{"max_attempts":3,"backoff":"fixed","initial_delay_ms":500}}]}`,
	`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"w","action":{"type":"worker"},"retry":{"max_attempts":1}}]}`,
	`{"steps":[{"id":"f","action":{"type":"fail","class":"retryable"},"retry":{"max_attempts":2,"backoff":"exponential","initial_delay_ms":100,"jitter":true}},{"id":"b","action":{"type":"pass"}}]}`,
	`{"steps":[{"id":"w","action":{"type":"wait","signal":"s0","timeout_seconds":3}},{"id":"n","action":{"type":"sleep","seconds":2}},{"id":"g","action":{"type":"approval","timeout_seconds":4}},{"id":"x","action":{"type":"worker"}},{"id":"z","action":{"type":"pass"},"depends_on":["w","n","g","x"]}]}`,
	`{"steps":[{"id":"x","action":{"type":"worker"},"retry":{"max_attempts":2}},{"id":"w","action":{"type":"wait","signal":"s1"}},{"id":"y","action":{"type":"worker"}}]}`,
}

func walk(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	spec, err := domain.ParseJobSpec([]byte(walkSpecs[int(data[0])%len(walkSpecs)]))
	if err != nil {
		t.Fatal(err)
	}
	j, err := domain.NewJob("tenant", "job", spec, "", fuzzT0)
	if err != nil {
		t.Fatal(err)
	}
	w := &walker{t: t, j: j, rng: rand.New(rand.NewPCG(1, 2)), now: fuzzT0, terminalAt: -1}
	for n, b := range data[1:] {
		w.move(n, b)
	}
}

// walker is one random walk over a job.
type walker struct {
	t          *testing.T
	j          *domain.Job
	rng        *rand.Rand
	now        time.Time
	leases     []string    // every lease id handed out
	terminalAt int         // events when the job finished; -1 while it runs
	before     *domain.Job // the job before the move being made
}

// walkMove is one kind of move: on step s, with the input byte's argument,
// as move n. It answers what it did and the decision's error.
type walkMove func(w *walker, n int, s *domain.Step, arg int) (string, error)

// walkMoves are the moves an input byte picks from (byte % 11).
var walkMoves = [...]walkMove{
	(*walker).lease, (*walker).complete, (*walker).fail, (*walker).heartbeat,
	(*walker).reclaim, (*walker).sweep, (*walker).cancel, (*walker).passTime,
	(*walker).signal, (*walker).fireTimers, (*walker).redrive,
}

// move makes the move byte b picks, restores the job when its decision
// failed (the engine saves nothing then), and checks the job.
func (w *walker) move(n int, b byte) {
	op, arg := int(b)%len(walkMoves), int(b)/len(walkMoves)
	s := w.j.Steps[arg%len(w.j.Steps)]
	w.before = snapshot(w.j)
	what, err := walkMoves[op](w, n, s, arg)
	if err != nil {
		w.j = w.before
	}
	checkJob(w.t, n, what, w.j)
	if !w.j.State.Terminal() {
		return
	}
	if w.terminalAt < 0 {
		w.terminalAt = len(w.j.Events)
	} else if len(w.j.Events) != w.terminalAt {
		w.t.Fatalf("move %d (%s): the finished job changed: %d events, then %d", n, what, w.terminalAt, len(w.j.Events))
	}
}

// leaseID picks the lease a move acts under: mostly the step's own, else
// one handed out before, else one never handed out.
func (w *walker) leaseID(s *domain.Step, arg int) string {
	if arg%3 != 0 && s.Lease != nil {
		return s.Lease.ID
	}
	if len(w.leases) > 0 {
		return w.leases[arg%len(w.leases)]
	}
	return "job.0.1.none"
}

func (w *walker) lease(n int, s *domain.Step, arg int) (string, error) {
	l, err := w.j.Lease(s.ID(), domain.LeaseRequest{Nonce: fmt.Sprint(n), Duration: time.Duration(1+arg%4) * time.Second, ViaWorker: arg%2 == 1, Worker: fmt.Sprint("w", arg%3)}, w.now)
	if err == nil {
		w.leases = append(w.leases, l.ID)
	}
	return "lease " + s.ID(), err
}

func (w *walker) complete(n int, s *domain.Step, arg int) (string, error) {
	id := w.leaseID(s, arg)
	live := w.live(s, id)
	what := "complete " + s.ID() + " under " + id
	_, err := w.j.Complete(s.ID(), id, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), w.now)
	w.onlyUnderTheLiveLease(n, what, live, err)
	return what, err
}

var walkFailureClasses = []domain.FailureClass{domain.ClassRetryable, domain.ClassResource, domain.ClassFatal, domain.ClassNeedsUser, domain.ClassTimeout, domain.ClassReplan}

func (w *walker) fail(n int, s *domain.Step, arg int) (string, error) {
	id := w.leaseID(s, arg)
	live := w.live(s, id)
	what := "fail " + s.ID() + " under " + id
	f := domain.Failure{Class: walkFailureClasses[arg%len(walkFailureClasses)], Message: "fuzz"}
	if f.Class == domain.ClassReplan && arg%2 == 0 {
		f.Steps = []domain.StepSpec{{ID: fmt.Sprint("r", n), Action: domain.ActionSpec{Type: domain.ActionPass}}}
		if err := domain.ValidateSteps(f.Steps, "steps", "default"); err != nil {
			w.t.Fatal(err)
		}
	}
	_, err := w.j.Fail(s.ID(), id, f, w.now, w.rng)
	w.onlyUnderTheLiveLease(n, what, live, err)
	return what, err
}

// live answers whether id is the step's live lease: the one an outcome is
// taken under.
func (w *walker) live(s *domain.Step, id string) bool {
	return s.Lease != nil && s.Lease.ID == id && w.now.Before(s.Lease.ExpiresAt) && (s.State == domain.StepLeased || s.State == domain.StepRunning)
}

func (w *walker) onlyUnderTheLiveLease(n int, what string, live bool, err error) {
	if err == nil && !live {
		w.t.Fatalf("move %d: %s was accepted, but that lease is not the step's live lease (before: %s)", n, what, mustJSON(w.before.Steps))
	}
	if err != nil && live {
		w.t.Fatalf("move %d: %s refused under the live lease: %v", n, what, err)
	}
}

func (w *walker) heartbeat(_ int, s *domain.Step, arg int) (string, error) {
	_, err := w.j.Heartbeat(s.ID(), w.leaseID(s, arg), time.Duration(1+arg%3)*time.Second, w.now)
	return "heartbeat " + s.ID(), err
}

func (w *walker) reclaim(_ int, s *domain.Step, _ int) (string, error) {
	_, err := w.j.Reclaim(s.ID(), w.now)
	return "reclaim " + s.ID(), err
}

// sweep does what the sweep does to each step; none of it may fail.
func (w *walker) sweep(n int, _ *domain.Step, _ int) (string, error) {
	for _, st := range w.j.Steps {
		redispatch, reclaim := w.j.NeedsSweep(st, w.now)
		if reclaim {
			if _, err := w.j.Reclaim(st.ID(), w.now); err != nil {
				w.t.Fatalf("move %d: the sweep's reclaim of %s failed: %v", n, st.ID(), err)
			}
		} else if redispatch {
			if err := w.j.Redispatched(st, w.now); err != nil {
				w.t.Fatalf("move %d: the sweep's re-dispatch of %s failed: %v", n, st.ID(), err)
			}
		}
	}
	return "sweep", nil
}

func (w *walker) cancel(int, *domain.Step, int) (string, error) {
	_, err := w.j.Cancel(w.now)
	return "cancel", err
}

func (w *walker) passTime(_ int, _ *domain.Step, arg int) (string, error) {
	w.now = w.now.Add(time.Duration(arg) * 250 * time.Millisecond)
	return "time", nil
}

func (w *walker) signal(_ int, _ *domain.Step, arg int) (string, error) {
	name := fmt.Sprint("s", arg%2)
	_, _, err := w.j.Signal(domain.SignalRequest{Name: name, Payload: json.RawMessage(`1`)}, w.now)
	return "signal " + name, err
}

func (w *walker) fireTimers(int, *domain.Step, int) (string, error) {
	_, _, err := w.j.FireDue(w.now, nil)
	return "timers", err
}

func (w *walker) redrive(int, *domain.Step, int) (string, error) {
	_, err := w.j.Redrive(w.now)
	if err == nil {
		w.terminalAt = -1 // the failed job runs again
	}
	return "redrive", err
}

// snapshot copies the job, so a failed decision can be undone. A copy by
// reflection, not a JSON round trip: that was most of a walk's time.
func snapshot(j *domain.Job) *domain.Job {
	return deepCopy(reflect.ValueOf(j)).Interface().(*domain.Job)
}

// deepCopy copies v, following pointers, slices, maps and interfaces, so
// the copy shares nothing a decision may change. Unexported fields are
// copied as they are; a time.Time is a value.
func deepCopy(v reflect.Value) reflect.Value {
	if !v.IsValid() || plain(v.Type()) {
		return v
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return v
		}
		if v.Kind() == reflect.Pointer {
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(deepCopy(v.Elem()))
			return c
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(deepCopy(v.Elem()))
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		if plain(v.Type().Elem()) {
			reflect.Copy(c, v)
			return c
		}
		for i := range v.Len() {
			c.Index(i).Set(deepCopy(v.Index(i)))
		}
		return c
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			c.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for _, i := range referenceFields(v.Type()) {
			c.Field(i).Set(deepCopy(v.Field(i)))
		}
		return c
	}
	return v
}

var (
	plainTypes        sync.Map // reflect.Type -> bool
	referenceFieldsOf sync.Map // reflect.Type -> []int
)

// referenceFields answers the exported fields of struct type t that are
// not plain: those a copy must follow.
func referenceFields(t reflect.Type) []int {
	if f, ok := referenceFieldsOf.Load(t); ok {
		return f.([]int)
	}
	var f []int
	for i := range t.NumField() {
		if t.Field(i).IsExported() && !plain(t.Field(i).Type) {
			f = append(f, i)
		}
	}
	referenceFieldsOf.Store(t, f)
	return f
}

// plain answers whether a value of type t shares nothing mutable when it
// is copied: no pointer, slice, map or interface in it (a time.Time's
// location is never changed).
func plain(t reflect.Type) bool {
	if p, ok := plainTypes.Load(t); ok {
		return p.(bool)
	}
	p := true
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		p = false
	case reflect.Array:
		p = plain(t.Elem())
	case reflect.Struct:
		if t != reflect.TypeFor[time.Time]() {
			for i := range t.NumField() {
				p = p && plain(t.Field(i).Type)
			}
		}
	}
	plainTypes.Store(t, p)
	return p
}

// checkJob requires of the job after a move: its events replay to its
// state in order, it finished at most once and rests only for a reason,
// and each step's attempts and lease agree with its state.
func checkJob(t *testing.T, n int, what string, j *domain.Job) {
	t.Helper()
	at := fmt.Sprintf("move %d (%s)", n, what)
	checkEventLog(t, at, j)
	checkFinishedOnce(t, at, j)
	checkResting(t, at, j)
	for _, s := range j.Steps {
		checkAttempts(t, at, s)
	}
}

// checkFinishedOnce requires events numbered in order and at most one
// terminal job event, the last (or the failure a redrive follows).
func checkFinishedOnce(t *testing.T, at string, j *domain.Job) {
	t.Helper()
	terminal := 0
	for i, ev := range j.Events {
		if ev.Seq != i+1 {
			t.Fatalf("%s: event %d has seq %d", at, i+1, ev.Seq)
		}
		switch domain.JobEvent(ev.Type) {
		case domain.JobEvRequeued:
			terminal = 0 // a redrive of the failed job: it runs again
		case domain.JobEvCompleted, domain.JobEvFailed, domain.JobEvCancelled:
			terminal++
			redriven := i+1 < len(j.Events) && ev.Type == string(domain.JobEvFailed) && j.Events[i+1].Type == string(domain.JobEvRequeued)
			if i != len(j.Events)-1 && !redriven {
				t.Fatalf("%s: %s is not the last event", at, ev.Type)
			}
		}
	}
	if terminal > 1 || (terminal == 1) != j.State.Terminal() {
		t.Fatalf("%s: job %s with %d terminal events", at, j.State, terminal)
	}
}

// checkResting requires a finished job not to be due, and an unfinished
// one to rest for ever only with a reason a person reads: it is due for
// the sweep, or waits on a person, a signal or a time.
func checkResting(t *testing.T, at string, j *domain.Job) {
	t.Helper()
	if j.State.Terminal() {
		if j.DueAt != nil {
			t.Fatalf("%s: finished job still due", at)
		}
		return
	}
	if j.DueAt == nil && !slices.ContainsFunc(j.Steps, func(s *domain.Step) bool {
		return s.State == domain.StepNeedsUser || s.State == domain.StepWaiting
	}) {
		t.Fatalf("%s: job %s is due for nothing and waits on nobody: %s", at, j.State, mustJSON(j.Steps))
	}
}

// checkAttempts requires a step to hold at most max_attempts attempts, a
// succeeded one only last, an unfinished one only under a lease, and a
// lease exactly while it is leased or running.
func checkAttempts(t *testing.T, at string, s *domain.Step) {
	t.Helper()
	if len(s.Attempts) != s.Attempt || s.Attempt-s.AttemptBase > s.Spec.Retry.MaxAttempts {
		t.Fatalf("%s: step %s: attempt %d, %d attempts recorded, max %d", at, s.ID(), s.Attempt, len(s.Attempts), s.Spec.Retry.MaxAttempts)
	}
	for i, a := range s.Attempts {
		last := i == len(s.Attempts)-1
		if a.State == domain.AttemptSucceeded && (!last || s.State != domain.StepSucceeded) {
			t.Fatalf("%s: step %s (%s): attempt %d succeeded but is not its last", at, s.ID(), s.State, a.N)
		}
		if !a.State.Terminal() && (!last || s.Lease == nil) {
			t.Fatalf("%s: step %s: attempt %d is %s without a lease", at, s.ID(), a.N, a.State)
		}
	}
	if (s.Lease != nil) != (s.State == domain.StepLeased || s.State == domain.StepRunning) {
		t.Fatalf("%s: step %s is %s with lease %v", at, s.ID(), s.State, s.Lease)
	}
}
