package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Racers: once an approval, signal or redrive job's submit answered, a
// goroutine of its own sends what the job's RacePlan says, each request
// from its own goroutine at its planned time (so they meet in the engine
// at once), again after a 5xx or no answer as any client would, and
// notes every answer. The checks (checkRace) then hold the answers
// against the job's log: what landed first decides the job's end, the
// calls that lost answered 409 (or 200 for an idempotent repeat), none
// answered anything else.

// maxRedriveRounds bounds the redrives of one job: the first after the
// planned failure, and more only if a re-run lost its one attempt's lease
// (a clock jump, or a claim that crashed after writing it; see
// checkRedrive).
const maxRedriveRounds = 4

// raceCall is one request a racer sent, with every answer it got.
type raceCall struct {
	Op       string // approve, reject, cancel, signal, late_signal, redrive
	SignalID string // signal: its id ("" for none)
	K        int    // signal: its payload's "k"
	Round    int    // redrive: which round (1 after the planned failure)
	Statuses []int  // every answer, in order; 0 for no answer
	// Outcome: signal: what the last answer said became of it (delivered,
	// kept, dropped; "" when it did not say).
	Outcome string
}

// final answers the last status, 0 for none.
func (c raceCall) final() int {
	if len(c.Statuses) == 0 {
		return 0
	}
	return c.Statuses[len(c.Statuses)-1]
}

// retried reports whether the call was sent more than once (after a 5xx
// or no answer): a 409 at the end may then answer its own first send.
func (c raceCall) retried() bool { return len(c.Statuses) > 1 }

// mayHaveLanded counts the sends that may have been applied: those
// answered 2xx, 5xx or not at all.
func (c raceCall) mayHaveLanded() int {
	n := 0
	for _, st := range c.Statuses {
		if st == 0 || st >= 500 || st >= 200 && st < 300 {
			n++
		}
	}
	return n
}

func (c raceCall) String() string {
	s := c.Op
	if c.Op == "signal" || c.Op == "late_signal" {
		s += fmt.Sprintf("(k%d id %q)", c.K, c.SignalID)
	}
	if c.Round > 0 {
		s += fmt.Sprintf("(round %d)", c.Round)
	}
	return fmt.Sprintf("%s answered %v", s, c.Statuses)
}

// raceRecord is what one racer did.
type raceRecord struct {
	mu     sync.Mutex
	calls  []raceCall
	rounds int // redrive rounds sent
	done   atomic.Bool
}

func (rr *raceRecord) add(c raceCall) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.calls = append(rr.calls, c)
}

func (rr *raceRecord) snapshot() []raceCall {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]raceCall(nil), rr.calls...)
}

// race runs a job's racer; it is done once the job is finished and every
// request it meant to send was answered (or the deadline passed).
func (r *run) race(ctx context.Context, s *submission, deadline time.Time) {
	defer s.race.done.Store(true)
	p := s.plan.Race
	switch s.plan.Kind {
	case "approval":
		r.f.Count(KindApprovalRace)
		r.raceOps(ctx, s, p.Ops, deadline)
		r.awaitEnd(ctx, s.id, deadline)
	case "signal":
		r.f.Count(KindSignalRace)
		r.raceOps(ctx, s, p.Ops, deadline)
		// A signal to a finished job is refused, and kept nowhere.
		if st := r.awaitEnd(ctx, s.id, deadline); st.Terminal() {
			late := RaceOp{Op: "signal", SignalID: "late", K: 99}
			c := r.send(ctx, s.id, late, deadline)
			c.Op = "late_signal"
			s.race.add(c)
		}
	case "redrive":
		for round := 1; round <= maxRedriveRounds; round++ {
			if st := r.awaitEnd(ctx, s.id, deadline); st != domain.JobFailed || !time.Now().Before(deadline) {
				return
			}
			n := 1
			if round == 1 {
				n = p.Redrives
			}
			if n > 1 {
				r.f.Count(KindRedriveRace)
			}
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					c := r.send(ctx, s.id, RaceOp{Op: "redrive"}, deadline)
					c.Round = round
					s.race.add(c)
				})
			}
			wg.Wait()
			s.race.mu.Lock()
			s.race.rounds = round
			s.race.mu.Unlock()
		}
	}
}

// raceOps sends ops at once, each at its planned time from now.
func (r *run) raceOps(ctx context.Context, s *submission, ops []RaceOp, deadline time.Time) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(func() {
			sleep(ctx, time.Until(start.Add(op.After)))
			s.race.add(r.send(ctx, s.id, op, deadline))
		})
	}
	wg.Wait()
}

// send makes one racer request, again after a 5xx or no answer.
func (r *run) send(ctx context.Context, id string, op RaceOp, deadline time.Time) raceCall {
	var path string
	var body []byte
	switch op.Op {
	case "approve", "reject":
		path = "/v1/jobs/" + id + "/steps/gate/" + op.Op
		body = []byte(`{"by":"chaos-racer","comment":"racing"}`)
	case "cancel":
		path = "/v1/jobs/" + id + "/cancel"
	case "signal":
		path = "/v1/jobs/" + id + "/signal"
		v := map[string]any{"name": SignalName, "payload": map[string]any{"k": op.K}}
		if op.SignalID != "" {
			v["id"] = op.SignalID
		}
		body, _ = json.Marshal(v)
	case "redrive":
		path = "/v1/jobs/" + id + "/redrive"
		body = []byte(`{}`)
	default:
		panic("chaos: unknown racer op " + op.Op)
	}
	c := raceCall{Op: op.Op, SignalID: op.SignalID, K: op.K}
	for _, a := range r.c.retry(ctx, deadline, http.MethodPost, path, body) {
		c.Statuses = append(c.Statuses, a.status)
		c.Outcome = signalOutcome(a.body)
	}
	return c
}

// signalOutcome reads what an answer to a signal says became of it
// ("signal":{"outcome":...}); "" when it says nothing.
func signalOutcome(body []byte) string {
	var v struct {
		Signal struct {
			Outcome string `json:"outcome"`
		} `json:"signal"`
	}
	_ = json.Unmarshal(body, &v)
	return v.Signal.Outcome
}

// awaitEnd polls the table (without faults) until the job is finished or
// the deadline passes, and answers its state then.
func (r *run) awaitEnd(ctx context.Context, id string, deadline time.Time) domain.JobState {
	for {
		j, err := r.raw.Get(ctx, Tenant, id)
		if err == nil && j.State.Terminal() {
			return j.State
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			if err != nil {
				return ""
			}
			return j.State
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// RaceTotals add up what the racers and the timer steps came to in a run.
type RaceTotals struct {
	// Gates counts approval gates by what closed them first: approve,
	// reject, timeout, cancel.
	Gates map[string]int
	// Signal jobs; signals sent and recorded; signals a wait took that
	// had been kept before it was reached; jobs a cancel ended first; late
	// signals sent to a finished job and answered 409.
	SignalJobs, SignalsSent, SignalsRecorded, SignalsKept, SignalCancelled, LateSignals, LateRefused int
	// SignalsDropped: signals answered 200 "dropped" (the wait had one kept).
	SignalsDropped int
	// Redrive jobs, job_requeued events, concurrent redrive pairs, and
	// re-runs that lost their one attempt's lease and were redriven again.
	RedriveJobs, Requeued, RedrivePairs, Rerun int
	// Calls retried after a 5xx or no answer.
	Retried int
	// Notes say what was out of the ordinary but no failure.
	Notes []string
	// Sleeps whose wake time was checked against what followed, those of
	// them past the timer threshold (Step Functions), and the least time
	// from a wake time to the next step's first move, on the stack's
	// clock (a clock jump during a sleep adds a minute to it).
	Sleeps, SleepsViaSFN int
	MinSlack             time.Duration
}

func (t *RaceTotals) note(format string, args ...any) {
	if len(t.Notes) < 20 {
		t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
	}
}

// attemptStates renders a step's attempts: "1 failed (fatal: ...), 2 timeout".
func attemptStates(j *domain.Job, step string) string {
	s, _, err := j.Step(step)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, a := range s.Attempts {
		p := fmt.Sprintf("%d %s", a.N, a.State)
		if a.Error != nil {
			p += fmt.Sprintf(" (%s: %s)", a.Error.Class, a.Error.Message)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

func (t *RaceTotals) brief() string {
	if t.Gates == nil && t.SignalJobs+t.RedriveJobs+t.Sleeps == 0 {
		return "none"
	}
	var gates []string
	for _, k := range []string{"approve", "reject", "timeout", "cancel"} {
		gates = append(gates, fmt.Sprintf("%s %d", k, t.Gates[k]))
	}
	slack := "-"
	if t.Sleeps > 0 {
		slack = t.MinSlack.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("gates closed first by %s; signal jobs %d (%d sent, %d recorded, %d kept before the wait, %d dropped, %d ended by cancel, late %d/%d refused); "+
		"redrive jobs %d (%d requeued, %d concurrent pairs, %d re-runs redriven again); racer calls retried %d; sleeps %d (%d via Step Functions), least start after wake %s",
		strings.Join(gates, ", "), t.SignalJobs, t.SignalsSent, t.SignalsRecorded, t.SignalsKept, t.SignalsDropped, t.SignalCancelled, t.LateRefused, t.LateSignals,
		t.RedriveJobs, t.Requeued, t.RedrivePairs, t.Rerun, t.Retried, t.Sleeps, t.SleepsViaSFN, slack)
}

// checkOutcome: the job ended in the state its plan and the faults drawn
// imply. A planned cancel answered 200 exactly when the job is
// CANCELLED; otherwise a job of pass, sleep and timer steps COMPLETED
// (or FAILED only on a step whose attempts ran out on lost leases, a
// fault's doing), a retryable or fatal one FAILED. Racer kinds are
// checkRace's.
func checkOutcome(j *domain.Job, s *submission) string {
	if racers[s.plan.Kind] {
		return ""
	}
	cancel := 0
	if len(s.cancel) > 0 {
		cancel = s.cancel[len(s.cancel)-1]
	}
	switch {
	case cancel == http.StatusOK && j.State != domain.JobCancelled:
		return fmt.Sprintf("its cancel answered 200 (%v) but it is %s", s.cancel, j.State)
	case cancel == http.StatusConflict && j.State == domain.JobCancelled:
		return fmt.Sprintf("its cancel answered 409 (%v) but it is CANCELLED", s.cancel)
	case j.State == domain.JobCancelled && cancel == 0 && len(s.cancel) == 0:
		return "it is CANCELLED but no cancel was sent"
	case j.State == domain.JobCancelled && cancel != http.StatusOK && cancel != 0 && cancel < 500:
		return fmt.Sprintf("it is CANCELLED but its cancel answered %v", s.cancel)
	case j.State == domain.JobCancelled:
		return ""
	}
	switch s.plan.Kind {
	case "pass", "pass3", "pass5", "sleep", "timer":
		if j.State == domain.JobFailed && failedOnLostLeases(j) {
			return ""
		}
		if j.State != domain.JobCompleted {
			return fmt.Sprintf("is %s, not COMPLETED; steps %s", j.State, stepStates(j))
		}
	case "retryable", "fatal":
		if j.State != domain.JobFailed {
			return fmt.Sprintf("is %s, not FAILED; steps %s", j.State, stepStates(j))
		}
	}
	return ""
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

// checkSleeps: no sleep woke before its time, and nothing after it
// started before then (the events' times, on the stack's clock). It
// answers the problems, and for each sleep checked whether it was past the
// timer threshold and how long after its wake time the next step first
// moved.
func checkSleeps(j *domain.Job) (problems []string, sleeps []sleepSeen) {
	for i, s := range j.Steps {
		a := s.Spec.Action
		if a.Type != domain.ActionSleep || a.Seconds == nil || *a.Seconds <= 0 {
			continue
		}
		d := time.Duration(*a.Seconds * float64(time.Second)).Truncate(time.Millisecond)
		opened := -1
		for k, ev := range j.Events {
			if ev.Step == s.ID() && ev.Type == domain.StepWaiting.EventType() {
				opened = k
			}
		}
		if opened < 0 {
			continue // cancelled before it was reached
		}
		wake := j.Events[opened].At.Add(d)
		var next string
		if i+1 < len(j.Steps) {
			next = j.Steps[i+1].ID()
		}
		seen := sleepSeen{viaSFN: d > RunTimerThreshold, slack: -1}
		for _, ev := range j.Events[opened+1:] {
			switch {
			case ev.Step == s.ID() && ev.Type == domain.StepSucceeded.EventType():
				if ev.At.Before(wake) {
					problems = append(problems, fmt.Sprintf("step %s woke at %s, %s before its wake time %s", s.ID(), ev.At.Format(time.RFC3339Nano), wake.Sub(ev.At), wake.Format(time.RFC3339Nano)))
				}
			case ev.Step != "" && ev.Step == next && ev.Type != domain.StepCancelled.EventType():
				if ev.At.Before(wake) {
					problems = append(problems, fmt.Sprintf("step %s moved (%s) at %s, %s before step %s's wake time", next, ev.Type, ev.At.Format(time.RFC3339Nano), wake.Sub(ev.At), s.ID()))
				} else if seen.slack < 0 {
					seen.slack = ev.At.Sub(wake)
				}
			}
		}
		if seen.slack >= 0 {
			sleeps = append(sleeps, seen)
		}
	}
	return problems, sleeps
}

type sleepSeen struct {
	viaSFN bool
	slack  time.Duration
}

// checkRace holds a racer's answers against the job's log and adds to
// the run's totals.
func checkRace(j *domain.Job, s *submission, t *RaceTotals) []string {
	if s.race == nil {
		return nil
	}
	calls := s.race.snapshot()
	var out []string
	for _, c := range calls {
		if c.retried() {
			t.Retried++
		}
		switch f := c.final(); {
		case f == http.StatusOK, f == http.StatusConflict:
		case f == 0 || f >= 500:
			out = append(out, fmt.Sprintf("%s: never answered but with a 5xx or no answer", c))
		default:
			out = append(out, fmt.Sprintf("%s: neither 200 nor 409", c))
		}
	}
	switch s.plan.Kind {
	case "approval":
		out = append(out, checkApproval(j, calls, t)...)
	case "signal":
		out = append(out, checkSignals(j, calls, t)...)
	case "redrive":
		s.race.mu.Lock()
		rounds := s.race.rounds
		s.race.mu.Unlock()
		out = append(out, checkRedrive(j, calls, rounds, s.plan.Race.Redrives, t)...)
	}
	return out
}

// cancelAnswer answers the final status of the racer's cancel, if it sent
// one.
func cancelAnswer(calls []raceCall) (int, bool) {
	for _, c := range calls {
		if c.Op == "cancel" {
			return c.final(), true
		}
	}
	return 0, false
}

// checkCancel: the racer's cancel answered 200 exactly when the job is
// CANCELLED, and nothing else cancelled it.
func checkCancel(j *domain.Job, calls []raceCall) []string {
	st, sent := cancelAnswer(calls)
	switch {
	case st == http.StatusOK && j.State != domain.JobCancelled:
		return []string{fmt.Sprintf("the cancel answered 200 but the job is %s", j.State)}
	case st == http.StatusConflict && j.State == domain.JobCancelled:
		return []string{"the cancel answered 409 but the job is CANCELLED"}
	case !sent && j.State == domain.JobCancelled:
		return []string{"the job is CANCELLED but the racer sent no cancel"}
	}
	return nil
}

// checkApproval: the gate was closed once, by what landed first of
// approve, reject, its deadline and cancel, and the job ended as that
// implies; approve answered 200 exactly when an approve closed it (a
// second approve writing nothing), reject exactly when a reject did, and
// the stored decision says which.
func checkApproval(j *domain.Job, calls []raceCall, t *RaceTotals) []string {
	var out []string
	gate, _, err := j.Step("gate")
	if err != nil {
		return []string{err.Error()}
	}
	first, approvals, rejects := "", 0, 0
	for _, ev := range j.Events {
		if ev.Step != "gate" {
			continue
		}
		var what string
		switch {
		case ev.Type == domain.StepSucceeded.EventType():
			approvals++
			what = "approve"
		case ev.Type == domain.StepFailed.EventType() && strings.HasPrefix(ev.Detail, "rejected"):
			rejects++
			what = "reject"
		case ev.Type == domain.StepTimedOut.EventType():
			what = "timeout"
		case ev.Type == domain.StepCancelled.EventType():
			what = "cancel"
		}
		if first == "" {
			first = what
		}
	}
	if t.Gates == nil {
		t.Gates = map[string]int{}
	}
	t.Gates[first]++
	if approvals+rejects > 1 {
		out = append(out, fmt.Sprintf("the gate was decided %d times (%d approvals, %d rejections): one decision takes effect", approvals+rejects, approvals, rejects))
	}
	cancel, _ := cancelAnswer(calls)
	want := map[string]domain.JobState{"approve": domain.JobCompleted, "reject": domain.JobFailed, "timeout": domain.JobFailed, "cancel": domain.JobCancelled}[first]
	switch {
	case first == "approve" && cancel == http.StatusOK && len(j.Steps) > 1:
		want = domain.JobCancelled // the cancel landed after the approve, before the step after it ended
	case first == "approve" && j.State == domain.JobFailed && failedOnLostLeases(j):
		want = domain.JobFailed // the step after it lost every lease
	}
	switch {
	case first == "":
		out = append(out, fmt.Sprintf("the gate was never closed; it is %s, the job %s", gate.State, j.State))
	case j.State != want:
		out = append(out, fmt.Sprintf("the gate was closed first by %s, so the job should be %s; it is %s", first, want, j.State))
	}
	switch d := gate.Decision; {
	case (first == "approve" || first == "reject") && d == nil:
		out = append(out, fmt.Sprintf("the gate was closed by %s but its step holds no decision", first))
	case first == "approve" && !d.Approved, first == "reject" && d.Approved:
		out = append(out, fmt.Sprintf("the gate was closed by %s but its decision says approved=%v", first, d.Approved))
	case first != "approve" && first != "reject" && d != nil:
		out = append(out, fmt.Sprintf("the gate was closed by %s yet holds a decision (approved=%v)", first, d.Approved))
	}
	for _, c := range calls {
		f := c.final()
		if f != http.StatusOK && f != http.StatusConflict {
			continue // said above
		}
		switch c.Op {
		case "approve":
			if won := first == "approve"; won != (f == http.StatusOK) {
				out = append(out, fmt.Sprintf("%s, but the gate was closed first by %s", c, first))
			}
		case "reject":
			if won := first == "reject"; won != (f == http.StatusOK) {
				out = append(out, fmt.Sprintf("%s, but the gate was closed first by %s", c, first))
			}
		}
	}
	return append(out, checkCancel(j, calls)...)
}

// checkSignals: the wait took the first signal that landed (kept if it
// came before the wait was reached), and the job COMPLETED with its
// payload as the wait's output, unless the cancel landed first; each
// signal answered 200 was recorded (once per id: a repeated id writes
// nothing, a signal without one may land twice only if it was sent
// twice), one answered 409 was not (unless its first send landed), and a
// signal to the finished job was refused.
func checkSignals(j *domain.Job, calls []raceCall, t *RaceTotals) []string {
	var out []string
	t.SignalJobs++
	type rec struct {
		k    int
		id   string
		step string
		at   time.Time
	}
	var recorded []rec
	for _, sg := range j.Signals {
		var p struct {
			K int `json:"k"`
		}
		if sg.Name != SignalName || json.Unmarshal(sg.Payload, &p) != nil {
			out = append(out, fmt.Sprintf("a signal %q with payload %s that no racer sent", sg.Name, sg.Payload))
			continue
		}
		recorded = append(recorded, rec{k: p.K, id: sg.ID, step: sg.Step, at: sg.At})
	}
	t.SignalsRecorded += len(recorded)
	byK := map[int]int{}
	byID := map[string]int{}
	for _, r := range recorded {
		byK[r.k]++
		if r.id != "" {
			byID[r.id]++
		}
	}
	for id, n := range byID {
		if n > 1 {
			out = append(out, fmt.Sprintf("signal id %q recorded %d times", id, n))
		}
	}
	cancel, _ := cancelAnswer(calls)
	prep := j.Steps[0]
	want := domain.JobCompleted
	switch {
	case cancel == http.StatusOK:
		want = domain.JobCancelled
	case prep.ID() == "prep" && prep.State == domain.StepFailed && failedOnLostLeases(j):
		want = domain.JobFailed // the worker before the wait lost every lease
	}
	if j.State != want {
		out = append(out, fmt.Sprintf("should be %s (cancel answered %d); it is %s, steps %s", want, cancel, j.State, stepStates(j)))
	}
	if want == domain.JobCancelled {
		t.SignalCancelled++
	}
	wait, _, err := j.Step("wait")
	if err != nil {
		return append(out, err.Error())
	}
	if j.State == domain.JobCompleted {
		switch {
		case len(recorded) == 0:
			out = append(out, "COMPLETED with no signal recorded")
		case recorded[0].step != "wait":
			out = append(out, fmt.Sprintf("the first signal recorded (k%d) was taken by %q, not the wait", recorded[0].k, recorded[0].step))
		default:
			var got struct {
				K int `json:"k"`
			}
			if err := json.Unmarshal(wait.Output, &got); err != nil || got.K != recorded[0].k {
				out = append(out, fmt.Sprintf("the wait's output is %s, not the first signal's payload (k%d)", wait.Output, recorded[0].k))
			}
			opened := time.Time{}
			for _, ev := range j.Events {
				if ev.Step == "wait" && ev.Type == domain.StepWaiting.EventType() {
					opened = ev.At
				}
			}
			if recorded[0].at.Before(opened) {
				t.SignalsKept++
			}
		}
		for _, r := range recorded[1:] {
			if r.step != "" {
				out = append(out, fmt.Sprintf("signal k%d was taken by %q too", r.k, r.step))
			}
		}
	}
	groups := map[string]int{} // id -> sends answered 200
	for _, c := range calls {
		if c.Op != "signal" && c.Op != "late_signal" {
			continue
		}
		f := c.final()
		if c.Op == "late_signal" {
			t.LateSignals++
			if f == http.StatusConflict {
				t.LateRefused++
			} else {
				out = append(out, fmt.Sprintf("%s: a signal to a finished job must answer 409", c))
			}
			if byK[c.K] > 0 {
				out = append(out, fmt.Sprintf("%s, yet it was recorded", c))
			}
			continue
		}
		t.SignalsSent++
		n := byK[c.K]
		if n > c.mayHaveLanded() {
			out = append(out, fmt.Sprintf("%s, recorded %d times", c, n))
		}
		switch {
		case f == http.StatusOK && c.Outcome == domain.SignalDropped:
			// Nothing waits for it any more (the wait has its signal kept):
			// it writes nothing, unless an earlier send of it landed.
			t.SignalsDropped++
			if n > 0 && !c.retried() {
				out = append(out, fmt.Sprintf("%s, dropped, yet it was recorded", c))
			}
		case f == http.StatusOK && c.SignalID == "" && n == 0:
			out = append(out, fmt.Sprintf("%s, but it was never recorded", c))
		case f == http.StatusOK && c.SignalID != "":
			groups[c.SignalID]++
		case f == http.StatusConflict && !j.State.Terminal():
			out = append(out, fmt.Sprintf("%s, yet the job is %s", c, j.State))
		case f == http.StatusConflict && n > 0 && !c.retried():
			out = append(out, fmt.Sprintf("%s, yet it was recorded", c))
		}
	}
	for id, ok := range groups {
		if byID[id] != 1 {
			out = append(out, fmt.Sprintf("signals with id %q answered 200 %d times, recorded %d times (want once)", id, ok, byID[id]))
		}
	}
	return append(out, checkCancel(j, calls)...)
}

// checkRedrive: the job failed on its planned fatal failure, was redriven
// (one of two concurrent redrives answering 200, the other 200 or 409),
// and COMPLETED on its next attempt: one job_requeued per job_failed and
// per round of redrives. A re-run whose one attempt lost its lease (the
// clock jumped past it, a claim crashed after writing it) fails the job
// again and the racer redrives it once more; that is noted, not failed.
func checkRedrive(j *domain.Job, calls []raceCall, rounds, planned int, t *RaceTotals) []string {
	var out []string
	t.RedriveJobs++
	if planned > 1 {
		t.RedrivePairs++
	}
	failed, requeued := 0, 0
	for i, ev := range j.Events {
		switch domain.JobEvent(ev.Type) {
		case domain.JobEvFailed:
			failed++
		case domain.JobEvRequeued:
			if ev.Detail == "redrive" {
				requeued++
				if i == 0 || j.Events[i-1].Type != string(domain.JobEvFailed) {
					out = append(out, fmt.Sprintf("job_requeued (event %d) does not follow job_failed", ev.Seq))
				}
			}
		}
	}
	t.Requeued += requeued
	if requeued > 1 {
		t.Rerun += requeued - 1
		t.note("job %s was redriven %d times: steps %s, attempts of work %s", j.ID, requeued, stepStates(j), attemptStates(j, "work"))
	}
	if j.State != domain.JobCompleted {
		out = append(out, fmt.Sprintf("is %s after %d redrive rounds, not COMPLETED; steps %s", j.State, rounds, stepStates(j)))
	}
	if requeued == 0 || requeued != failed || requeued != rounds {
		out = append(out, fmt.Sprintf("%d job_failed, %d job_requeued, %d redrive rounds: want one requeue per failure and round, at least one", failed, requeued, rounds))
	}
	work, _, err := j.Step("work")
	if err != nil {
		return append(out, err.Error())
	}
	// The planned fatal failure ends attempt 1 (unless it lost its lease
	// first); a later attempt may only have lost its lease.
	for _, a := range work.Attempts {
		switch {
		case a.State == domain.AttemptSucceeded, a.State == domain.AttemptTimeout:
		case a.N == 1 && a.State == domain.AttemptFailed && a.Error != nil && a.Error.Message == PlannedFatal:
		default:
			msg := ""
			if a.Error != nil {
				msg = a.Error.Message
			}
			out = append(out, fmt.Sprintf("step work attempt %d ended %s (%q): not what the plan or a lost lease implies", a.N, a.State, msg))
		}
	}
	byRound := map[int][]raceCall{}
	for _, c := range calls {
		if c.Op == "redrive" {
			byRound[c.Round] = append(byRound[c.Round], c)
		}
	}
	for round, cs := range byRound {
		ok := slices.ContainsFunc(cs, func(c raceCall) bool {
			return c.final() == http.StatusOK || c.final() == http.StatusConflict && c.retried()
		})
		if !ok {
			out = append(out, fmt.Sprintf("round %d: no redrive answered 200: %v", round, cs))
		}
	}
	return out
}

// checkRuns: exactly one terminal event per run of the job, each last in
// its run: every terminal event is the log's last, or a job_failed right
// before the job_requeued of a redrive. (checkTerminalOnce, with
// redrives.)
func checkRuns(j *domain.Job) string {
	var runs [][]domain.Event
	start := 0
	for i, ev := range j.Events {
		if ev.Type == string(domain.JobEvRequeued) && ev.Detail == "redrive" {
			runs = append(runs, j.Events[start:i])
			start = i
		}
	}
	last := &domain.Job{State: j.State, Events: j.Events[start:]}
	for k, run := range runs {
		if len(run) == 0 || run[len(run)-1].Type != string(domain.JobEvFailed) {
			return fmt.Sprintf("run %d was redriven but does not end with job_failed", k+1)
		}
		// A finished run: its one terminal event, job_failed, is last.
		if msg := checkTerminalOnce(&domain.Job{State: domain.JobFailed, Events: run}); msg != "" {
			return fmt.Sprintf("run %d: %s", k+1, msg)
		}
	}
	if msg := checkTerminalOnce(last); msg != "" {
		if len(runs) > 0 {
			return fmt.Sprintf("run %d: %s", len(runs)+1, msg)
		}
		return msg
	}
	return ""
}
