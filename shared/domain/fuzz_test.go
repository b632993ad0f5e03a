package domain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
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
			var de *domain.Error
			if !errors.As(err, &de) {
				t.Fatalf("refused with %T, not a *domain.Error: %v", err, err)
			}
			if de.Code != domain.CodeInvalid && de.Code != domain.CodeTooLarge {
				t.Fatalf("refused with code %s: %v", de.Code, err)
			}
			return
		}
		j, err := domain.NewJob("tenant", "job", spec, "key", fuzzT0)
		if err != nil {
			t.Fatalf("accepted spec builds no job: %v", err)
		}
		if err := domain.CheckReplay(j); err != nil {
			t.Fatalf("new job does not replay: %v", err)
		}
		if err := domain.CheckFormal(j.Events); err != nil {
			t.Fatalf("new job: %v", err)
		}
		if j.State.Terminal() || len(j.Steps) != len(spec.Steps) || j.Steps[0].State == domain.StepWaitingDeps {
			t.Fatalf("new job: state %s, %d steps of %d, first step %s", j.State, len(j.Steps), len(spec.Steps), j.Steps[0].State)
		}

		// Validation is idempotent: the spec it filled in parses to itself.
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal accepted spec: %v", err)
		}
		if len(raw) <= domain.MaxBodyBytes {
			again, err := domain.ParseJobSpec(raw)
			if err != nil {
				t.Fatalf("accepted spec %s does not re-parse: %v", raw, err)
			}
			if !sameSpec(spec, again) {
				t.Fatalf("spec changed on re-parse:\n%s\n%s", raw, mustJSON(again))
			}
		}

		// Every step succeeding in turn (run, woken, signalled or
		// approved) completes the job.
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
				if err := domain.CheckReplay(j); err != nil {
					t.Fatalf("after step %d: %v", i, err)
				}
				if err := domain.CheckFormal(j.Events); err != nil {
					t.Fatalf("after step %d: %v", i, err)
				}
			}
		}
		if j.State != domain.JobCompleted || j.DueAt != nil {
			t.Fatalf("every step succeeded, yet the job is %s (due %v)", j.State, j.DueAt)
		}
	})
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
	case s.State == domain.StepWaiting && s.WakeAt != nil:
		_, err = j.Fire(s.ID(), *s.WakeAt)
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
	rng := rand.New(rand.NewPCG(1, 2))
	now := fuzzT0
	var leases []string // every lease id handed out
	terminalAt := -1    // events when the job finished
	for n, b := range data[1:] {
		op, arg := b%11, int(b/11)
		s := j.Steps[arg%len(j.Steps)]
		leaseID := func() string {
			if arg%3 != 0 && s.Lease != nil {
				return s.Lease.ID
			}
			if len(leases) > 0 {
				return leases[arg%len(leases)]
			}
			return "job.0.1.none"
		}
		before := snapshot(t, j)
		var err error
		var what string
		switch op {
		case 0:
			what = "lease " + s.ID()
			var l *domain.Lease
			l, err = j.Lease(s.ID(), domain.LeaseRequest{Nonce: fmt.Sprint(n), Duration: time.Duration(1+arg%4) * time.Second, ViaWorker: arg%2 == 1, Worker: fmt.Sprint("w", arg%3)}, now)
			if err == nil {
				leases = append(leases, l.ID)
			}
		case 1, 2:
			id := leaseID()
			live := s.Lease != nil && s.Lease.ID == id && now.Before(s.Lease.ExpiresAt) && (s.State == domain.StepLeased || s.State == domain.StepRunning)
			if op == 1 {
				what = "complete " + s.ID() + " under " + id
				_, err = j.Complete(s.ID(), id, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), now)
			} else {
				classes := []domain.FailureClass{domain.ClassRetryable, domain.ClassResource, domain.ClassFatal, domain.ClassNeedsUser, domain.ClassTimeout, domain.ClassReplan}
				what = "fail " + s.ID() + " under " + id
				f := domain.Failure{Class: classes[arg%len(classes)], Message: "fuzz"}
				if f.Class == domain.ClassReplan && arg%2 == 0 {
					f.Steps = []domain.StepSpec{{ID: fmt.Sprint("r", n), Action: domain.ActionSpec{Type: domain.ActionPass}}}
					if err := domain.ValidateSteps(f.Steps, "steps", "default"); err != nil {
						t.Fatal(err)
					}
				}
				_, err = j.Fail(s.ID(), id, f, now, rng)
			}
			if err == nil && !live {
				t.Fatalf("move %d: %s was accepted, but that lease is not the step's live lease (before: %s)", n, what, mustJSON(before.Steps))
			}
			if err != nil && live {
				t.Fatalf("move %d: %s refused under the live lease: %v", n, what, err)
			}
		case 3:
			what = "heartbeat " + s.ID()
			_, err = j.Heartbeat(s.ID(), leaseID(), time.Duration(1+arg%3)*time.Second, now)
		case 4:
			what = "reclaim " + s.ID()
			_, err = j.Reclaim(s.ID(), now)
		case 5:
			what = "sweep"
			for _, st := range j.Steps {
				redispatch, reclaim := j.NeedsSweep(st, now)
				if reclaim {
					if _, err = j.Reclaim(st.ID(), now); err != nil {
						t.Fatalf("move %d: the sweep's reclaim of %s failed: %v", n, st.ID(), err)
					}
				} else if redispatch {
					if err = j.Redispatched(st, now); err != nil {
						t.Fatalf("move %d: the sweep's re-dispatch of %s failed: %v", n, st.ID(), err)
					}
				}
			}
		case 6:
			what = "cancel"
			_, err = j.Cancel(now)
		case 7:
			what = "time"
			now = now.Add(time.Duration(arg) * 250 * time.Millisecond)
		case 8:
			what = fmt.Sprint("signal s", arg%2)
			_, _, err = j.Signal(domain.SignalRequest{Name: fmt.Sprint("s", arg%2), Payload: json.RawMessage(`1`)}, now)
		case 9:
			what = "timers"
			_, _, err = j.FireDue(now)
		case 10:
			what = "redrive"
			if _, err = j.Redrive(now); err == nil {
				terminalAt = -1
			}
		}
		if err != nil {
			// The engine saves nothing when a decision fails.
			j = before
		}
		checkJob(t, n, what, j)
		if j.State.Terminal() {
			if terminalAt < 0 {
				terminalAt = len(j.Events)
			} else if len(j.Events) != terminalAt {
				t.Fatalf("move %d (%s): the finished job changed: %d events, then %d", n, what, terminalAt, len(j.Events))
			}
		}
	}
}

func snapshot(t *testing.T, j *domain.Job) *domain.Job {
	t.Helper()
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var c domain.Job
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func checkJob(t *testing.T, n int, what string, j *domain.Job) {
	t.Helper()
	if err := domain.CheckReplay(j); err != nil {
		t.Fatalf("move %d (%s): %v", n, what, err)
	}
	if err := domain.CheckFormal(j.Events); err != nil {
		t.Fatalf("move %d (%s): %v", n, what, err)
	}
	terminal := 0
	for i, ev := range j.Events {
		if ev.Seq != i+1 {
			t.Fatalf("move %d (%s): event %d has seq %d", n, what, i+1, ev.Seq)
		}
		switch domain.JobEvent(ev.Type) {
		case domain.JobEvRequeued:
			terminal = 0 // a redrive of the failed job: it runs again
		case domain.JobEvCompleted, domain.JobEvFailed, domain.JobEvCancelled:
			terminal++
			redriven := i+1 < len(j.Events) && ev.Type == string(domain.JobEvFailed) && j.Events[i+1].Type == string(domain.JobEvRequeued)
			if i != len(j.Events)-1 && !redriven {
				t.Fatalf("move %d (%s): %s is not the last event", n, what, ev.Type)
			}
		}
	}
	if terminal > 1 || (terminal == 1) != j.State.Terminal() {
		t.Fatalf("move %d (%s): job %s with %d terminal events", n, what, j.State, terminal)
	}
	if j.State.Terminal() && j.DueAt != nil {
		t.Fatalf("move %d (%s): finished job still due", n, what)
	}
	// No job rests for ever without a reason a person reads: an
	// unfinished one is due for the sweep, or waits on a person, a signal
	// or a time.
	if !j.State.Terminal() && j.DueAt == nil && !slices.ContainsFunc(j.Steps, func(s *domain.Step) bool {
		return s.State == domain.StepNeedsUser || s.State == domain.StepWaiting
	}) {
		t.Fatalf("move %d (%s): job %s is due for nothing and waits on nobody: %s", n, what, j.State, mustJSON(j.Steps))
	}
	for _, s := range j.Steps {
		if len(s.Attempts) != s.Attempt || s.Attempt-s.AttemptBase > s.Spec.Retry.MaxAttempts {
			t.Fatalf("move %d (%s): step %s: attempt %d, %d attempts recorded, max %d", n, what, s.ID(), s.Attempt, len(s.Attempts), s.Spec.Retry.MaxAttempts)
		}
		for i, a := range s.Attempts {
			if a.State == domain.AttemptSucceeded && (i != len(s.Attempts)-1 || s.State != domain.StepSucceeded) {
				t.Fatalf("move %d (%s): step %s (%s): attempt %d succeeded but is not its last", n, what, s.ID(), s.State, a.N)
			}
			if !a.State.Terminal() && (i != len(s.Attempts)-1 || s.Lease == nil) {
				t.Fatalf("move %d (%s): step %s: attempt %d is %s without a lease", n, what, s.ID(), a.N, a.State)
			}
		}
		if (s.Lease != nil) != (s.State == domain.StepLeased || s.State == domain.StepRunning) {
			t.Fatalf("move %d (%s): step %s is %s with lease %v", n, what, s.ID(), s.State, s.Lease)
		}
	}
}
