package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
// notes every answer. The racer kinds' rows (planEnds) hold the answers
// against the job's log: what landed first decides the job's end, the
// calls that lost answered 409 (or 200 for an idempotent repeat).

// maxRedriveRounds bounds the redrives of one job: the first after the
// planned failure, and more only if a re-run lost its one attempt's lease.
const maxRedriveRounds = 4

// raceCall is one request a racer sent, with every answer it got.
type raceCall struct {
	Op       string // approve, reject, cancel, signal, late_signal, redrive
	SignalID string // signal: its id ("" for none)
	K        int    // signal: its payload's "k"
	Round    int    // redrive: which round (1 after the planned failure)
	Statuses []int  // every answer, in order; 0 for no answer
	Outcome  string // signal: what the last answer said became of it
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
	case "approval", "signal":
		r.f.Count(map[string]Kind{"approval": KindApprovalRace, "signal": KindSignalRace}[s.plan.Kind])
		start := time.Now()
		var wg sync.WaitGroup
		for _, op := range p.Ops {
			wg.Go(func() {
				sleep(ctx, time.Until(start.Add(op.After)))
				s.race.add(r.send(ctx, s.id, op, deadline))
			})
		}
		wg.Wait()
		// A signal to a finished job is refused, and kept nowhere.
		if st := r.awaitEnd(ctx, s.id, deadline); st.Terminal() && s.plan.Kind == "signal" {
			c := r.send(ctx, s.id, RaceOp{Op: "signal", SignalID: "late", K: 99}, deadline)
			c.Op = "late_signal"
			s.race.add(c)
		}
	case "flood":
		r.flood(ctx, s, deadline)
	case "redrive":
		for round := 1; round <= maxRedriveRounds; round++ {
			if st := r.awaitEnd(ctx, s.id, deadline); st != domain.JobFailed || !time.Now().Before(deadline) {
				return
			}
			n := 1
			if round == 1 && p.Redrives > 1 {
				n = p.Redrives
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

// send makes one racer request, again after a 5xx or no answer.
func (r *run) send(ctx context.Context, id string, op RaceOp, deadline time.Time) raceCall {
	path, body := "/v1/jobs/"+id+"/"+op.Op, []byte(`{}`)
	switch op.Op {
	case "approve", "reject":
		path = "/v1/jobs/" + id + "/steps/gate/" + op.Op
		body = []byte(`{"by":"chaos-racer","comment":"racing"}`)
	case "cancel":
		body = nil
	case "signal":
		v := map[string]any{"name": SignalName, "payload": map[string]any{"k": op.K}}
		if op.SignalID != "" {
			v["id"] = op.SignalID
		}
		body, _ = json.Marshal(v)
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

// racing wraps a racer kind's facts: every racing call, beyond them, was
// answered 200 or 409 in the end.
func racing(fact func(j *domain.Job, calls []raceCall, rounds int) []string) []func(*domain.Job, *submission) []string {
	return []func(*domain.Job, *submission) []string{func(j *domain.Job, s *submission) []string {
		if s == nil || s.race == nil {
			return []string{"its racer never ran"}
		}
		calls := s.race.snapshot()
		var out []string
		for _, c := range calls {
			if f := c.final(); f != http.StatusOK && f != http.StatusConflict {
				out = append(out, fmt.Sprintf("%s: neither 200 nor 409 in the end", c))
			}
		}
		s.race.mu.Lock()
		rounds := s.race.rounds
		s.race.mu.Unlock()
		return append(out, fact(j, calls, rounds)...)
	}}
}

// gateEnds is what a job ends as by what closed its gate first.
var gateEnds = map[string]domain.JobState{"approve": domain.JobCompleted, "reject": domain.JobFailed, "timeout": domain.JobFailed}

// gateCloser answers what closed the gate first (approve, reject,
// timeout, cancel; "" for nothing), and how many decisions took effect.
func gateCloser(j *domain.Job) (first string, decisions int) {
	for _, ev := range j.Events {
		what := ""
		switch {
		case ev.Step != "gate":
		case ev.Type == domain.StepSucceeded.EventType():
			what = "approve"
		case ev.Type == domain.StepFailed.EventType() && strings.HasPrefix(ev.Detail, "rejected"):
			what = "reject"
		case ev.Type == domain.StepTimedOut.EventType():
			what = "timeout"
		case ev.Type == domain.StepCancelled.EventType():
			what = "cancel"
		}
		if what == "approve" || what == "reject" {
			decisions++
		}
		if first == "" {
			first = what
		}
	}
	return first, decisions
}

func gateEnd(j *domain.Job) domain.JobState { first, _ := gateCloser(j); return gateEnds[first] }

// gateFacts: one decision took effect, the stored decision says which,
// and approve and reject answered 200 exactly when they closed the gate
// (a repeated approve answering 200 too).
func gateFacts(j *domain.Job, calls []raceCall, _ int) []string {
	first, decisions := gateCloser(j)
	var out []string
	if decisions > 1 {
		out = append(out, fmt.Sprintf("the gate was decided %d times: one decision takes effect", decisions))
	}
	gate, _, err := j.Step("gate")
	if err != nil {
		return append(out, err.Error())
	}
	decided := first == "approve" || first == "reject"
	if d := gate.Decision; (d != nil) != decided || d != nil && d.Approved != (first == "approve") {
		out = append(out, fmt.Sprintf("the gate was closed first by %q but its decision is %+v", first, d))
	}
	for _, c := range calls {
		if f := c.final(); (c.Op == "approve" || c.Op == "reject") && (f == http.StatusOK || f == http.StatusConflict) && (first == c.Op) != (f == http.StatusOK) {
			out = append(out, fmt.Sprintf("%s, but the gate was closed first by %q", c, first))
		}
	}
	return out
}

// signalFacts: the wait took the first signal that landed (kept if it came
// before the wait), an id is recorded once, a signal answered 200 (and not
// dropped) was recorded, one answered 409 or dropped was not (unless an
// earlier send of it landed), none more often than it was sent, and a
// signal to the finished job was refused.
func signalFacts(j *domain.Job, calls []raceCall, _ int) []string {
	out, byK, byID := recordedSignals(j)
	for _, c := range calls {
		n, f, dropped := byK[c.K], c.final(), c.Outcome == domain.SignalDropped
		switch {
		case c.Op == "late_signal" && (f != http.StatusConflict || n > 0):
			out = append(out, fmt.Sprintf("%s, recorded %d times: a signal to a finished job answers 409 and writes nothing", c, n))
		case c.Op != "signal":
		case n > c.mayHaveLanded():
			out = append(out, fmt.Sprintf("%s, recorded %d times", c, n))
		case f == http.StatusOK && !dropped && n == 0 && (c.SignalID == "" || byID[c.SignalID] == 0):
			out = append(out, fmt.Sprintf("%s, but it was never recorded", c))
		case !c.retried() && n > 0 && (dropped || f == http.StatusConflict):
			out = append(out, fmt.Sprintf("%s (%s), yet it was recorded", c, c.Outcome))
		}
	}
	return out
}

// recordedSignals reads the job's signals: by payload "k" and by id, how
// often each was recorded; and what is wrong with them (one no racer sent,
// an id twice, a completed wait whose output is not the first one's).
func recordedSignals(j *domain.Job) (out []string, byK map[int]int, byID map[string]int) {
	byK, byID = map[int]int{}, map[string]int{}
	wait, _, _ := j.Step("wait")
	for i, sg := range j.Signals {
		var p, got struct {
			K int `json:"k"`
		}
		if sg.Name != SignalName || json.Unmarshal(sg.Payload, &p) != nil {
			out = append(out, fmt.Sprintf("a signal %q with payload %s that no racer sent", sg.Name, sg.Payload))
			continue
		}
		byK[p.K]++
		if byID[sg.ID]++; sg.ID != "" && byID[sg.ID] == 2 {
			out = append(out, fmt.Sprintf("signal id %q recorded twice", sg.ID))
		}
		switch {
		case j.State != domain.JobCompleted:
		case i == 0 && (sg.Step != "wait" || json.Unmarshal(wait.Output, &got) != nil || got.K != p.K):
			out = append(out, fmt.Sprintf("the wait's output %s is not the first signal's payload (k%d, taken by %q)", wait.Output, p.K, sg.Step))
		case i > 0 && sg.Step != "":
			out = append(out, fmt.Sprintf("signal k%d was taken by %q too", p.K, sg.Step))
		}
	}
	if j.State == domain.JobCompleted && len(j.Signals) == 0 {
		out = append(out, "COMPLETED with no signal recorded")
	}
	return out, byK, byID
}

// redriveFacts: the job failed on its planned fatal failure and was
// redriven, one job_requeued per job_failed and per round of redrives; in
// each round a redrive answered 200 (a 409 only after a retry: the first
// send may have landed), so none answered 409 though it ran; and no
// attempt of its worker step failed but the planned first or by a lost
// lease.
func redriveFacts(j *domain.Job, calls []raceCall, rounds int) []string {
	out := requeueFacts(j, rounds)
	if work, _, err := j.Step("work"); err == nil {
		for _, a := range work.Attempts {
			planned := a.N == 1 && a.State == domain.AttemptFailed && a.Error != nil && a.Error.Message == PlannedFatal
			if a.State != domain.AttemptSucceeded && a.State != domain.AttemptTimeout && !planned {
				out = append(out, fmt.Sprintf("step work attempt %d ended %s: not what the plan or a lost lease implies", a.N, a.State))
			}
		}
	}
	answered := map[int]bool{}
	for _, c := range calls {
		if c.Op == "redrive" {
			answered[c.Round] = answered[c.Round] || c.final() == http.StatusOK || c.final() == http.StatusConflict && c.retried()
		}
	}
	for round, ok := range answered {
		if !ok {
			out = append(out, fmt.Sprintf("round %d: no redrive answered 200, yet the job was redriven", round))
		}
	}
	return out
}

// requeueFacts: one job_requeued per job_failed and per round of
// redrives, at least one; the last failure is not redriven when every
// round its racer may send re-ran the job onto a lost lease.
func requeueFacts(j *domain.Job, rounds int) []string {
	failed, requeued := 0, 0
	for _, ev := range j.Events {
		switch {
		case ev.Type == string(domain.JobEvFailed):
			failed++
		case ev.Type == string(domain.JobEvRequeued) && ev.Detail == "redrive":
			requeued++
		}
	}
	exhausted := rounds == maxRedriveRounds && failed == requeued+1 && j.State == domain.JobFailed
	if requeued == 0 || requeued != rounds || requeued != failed && !exhausted {
		return []string{fmt.Sprintf("%d job_failed, %d job_requeued, %d redrive rounds: want one requeue per failure and round, at least one", failed, requeued, rounds)}
	}
	return nil
}

// redriveEnd: a redrive job completes, unless each of the rounds its
// racer may send re-ran it onto a lost lease.
func redriveEnd(j *domain.Job) domain.JobState {
	if work, _, err := j.Step("work"); err == nil && j.State == domain.JobFailed && len(work.Attempts) > maxRedriveRounds {
		if last := work.Attempts[len(work.Attempts)-1]; last.State == domain.AttemptTimeout {
			return domain.JobFailed
		}
	}
	return domain.JobCompleted
}
