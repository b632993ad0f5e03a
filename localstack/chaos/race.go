package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Racers: once a job's submit answered, a goroutine of its own sends what
// its plan says, each request from its own goroutine at its planned time
// (so they meet in the engine at once), again after a 5xx or no answer as
// any client would, and notes every answer: an approval job's approve,
// reject and cancel, a signal job's signals and cancel, a redrive job's
// redrives, a flood's signals, any other job's planned cancel. What
// landed first decides the job's end; answerProblems holds every answer
// against the log: a call whose effect the log shows answered 200 (or
// was retried), one whose effect it does not show did not. What a gate or
// a wait makes of the call that landed (the decision stored, the first
// signal taken and its payload the output, a kept signal taken when the
// wait is reached) is the domain's, in the one write that lands it:
// shared/domain's wait_test.go, shared/engine's TestRejectedGateFailsItsJob
// and sdk/client's TestGatesSignalsResumeRedriveAndCancel prove it, and a
// second decision or take is a move the replay invariant refuses.

// maxRedriveRounds bounds the redrives of one job: the first after the
// planned failure, and more only if a re-run lost its one attempt's lease.
const maxRedriveRounds = 4

// race runs a job's racer; it is done once every request it meant to send
// was answered (or the deadline passed).
func (r *run) race(ctx context.Context, s *submission, deadline time.Time) {
	defer s.raced.Store(true)
	p := s.plan
	var ops []RaceOp
	switch p.Kind {
	case "flood":
		r.flood(ctx, s, deadline)
		return
	case "redrive":
		r.redrive(ctx, s, deadline)
		return
	case "approval", "signal":
		r.f.Count(map[string]Kind{"approval": KindApprovalRace, "signal": KindSignalRace}[p.Kind])
		ops = p.Race.Ops
	}
	if p.CancelAfter > 0 {
		ops = append(ops, RaceOp{Op: "cancel", After: p.CancelAfter})
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Go(func() {
			sleep(ctx, time.Until(start.Add(op.After)))
			s.add(r.send(ctx, s.id, op, deadline))
		})
	}
	wg.Wait()
	// A signal to a finished job is refused, and kept nowhere.
	if p.Kind == "signal" && r.awaitEnd(ctx, s.id, deadline).Terminal() {
		c := r.send(ctx, s.id, RaceOp{Op: "signal", SignalID: "late", K: 99}, deadline)
		c.Op = "late_signal"
		s.add(c)
	}
}

// redrive redrives the job each time it is seen FAILED: at first as many
// times at once as planned, then once per round.
func (r *run) redrive(ctx context.Context, s *submission, deadline time.Time) {
	for round := 1; round <= maxRedriveRounds; round++ {
		if r.awaitEnd(ctx, s.id, deadline) != domain.JobFailed || !time.Now().Before(deadline) {
			return
		}
		n := 1
		if round == 1 && s.plan.Race.Redrives > 1 {
			n = s.plan.Race.Redrives
			r.f.Count(KindRedriveRace)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				c := r.send(ctx, s.id, RaceOp{Op: "redrive"}, deadline)
				c.Round = round
				s.add(c)
			})
		}
		wg.Wait()
	}
}

// send makes one racer request, again after a 5xx or no answer.
func (r *run) send(ctx context.Context, id string, op RaceOp, deadline time.Time) call {
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
	return r.c.do(ctx, deadline, call{Op: op.Op, SignalID: op.SignalID, K: op.K}, http.MethodPost, path, body)
}

// awaitEnd polls the table (without faults) until the job is finished or
// the deadline passes, and answers its state then.
func (r *run) awaitEnd(ctx context.Context, id string, deadline time.Time) domain.JobState {
	var state domain.JobState
	poll(ctx, deadline, 100*time.Millisecond, func() bool {
		j, err := r.raw.Get(ctx, Tenant, id)
		if err == nil {
			state = j.State
		}
		return state.Terminal()
	})
	return state
}

// effect answers how often the job's log shows the effect of a racing
// call's group (group), and false for a call that does not race (its
// row judges it).
func effect(j *domain.Job, c call) (int, bool) {
	n := 0
	switch c.Op {
	case "cancel":
		return btoi(j.State == domain.JobCancelled), true
	case "approve", "reject":
		for _, ev := range j.Events {
			n += btoi(ev.Step == "gate" && (c.Op == "approve" && ev.Type == domain.StepSucceeded.EventType() ||
				c.Op == "reject" && ev.Type == domain.StepFailed.EventType() && strings.HasPrefix(ev.Detail, "rejected")))
		}
	case "signal", "late_signal":
		for _, sg := range j.Signals {
			n += btoi(c.SignalID != "" && sg.ID == c.SignalID || c.SignalID == "" && signalK(sg) == c.K)
		}
	case "redrive":
		return btoi(requeues(j) >= c.Round), true
	default:
		return 0, false
	}
	return n, true
}

// group names the calls that have one effect: a redrive round's, a
// signal id's (or, without one, its payload's), an op's.
func (c call) group() string {
	switch {
	case c.Op == "redrive":
		return fmt.Sprintf("redrive round %d", c.Round)
	case c.SignalID != "":
		return fmt.Sprintf("signal id %q", c.SignalID)
	case c.Op == "signal" || c.Op == "late_signal":
		return fmt.Sprintf("signal k%d", c.K)
	}
	return c.Op
}

// idempotent ops answer 200 again once they took effect.
var idempotent = map[string]bool{"approve": true, "cancel": true}

// took: answered 200, and not dropped.
func (c call) took() bool { return c.final() == http.StatusOK && c.outcome() != domain.SignalDropped }

// mayHaveLanded counts the sends that may have been applied: those
// answered 2xx, 5xx or not at all.
func (c call) mayHaveLanded() int {
	n := 0
	for _, st := range c.Statuses {
		n += btoi(retryableStatus(st) || st >= 200 && st < 300)
	}
	return n
}

// answerProblems holds every racing call to the log: it answered 200 or
// 409 in the end (a signal to the finished job 409); one answered 200
// took effect; one that took effect answered 200 if it is idempotent, and
// some call of its group did (or was retried: its first send may have
// landed); and no effect shows more often than its sends could have
// landed, a signal id's once.
func answerProblems(j *domain.Job, calls []call) []string {
	var out, order []string
	groups := map[string][]call{}
	for _, c := range calls {
		if _, racing := effect(j, c); !racing {
			continue
		}
		if f := c.final(); f != http.StatusConflict && (f != http.StatusOK || c.Op == "late_signal") {
			out = append(out, fmt.Sprintf("%s: not %s in the end", c, map[bool]string{true: "409", false: "200 or 409"}[c.Op == "late_signal"]))
		}
		if groups[c.group()] == nil {
			order = append(order, c.group())
		}
		groups[c.group()] = append(groups[c.group()], c)
	}
	for _, g := range order {
		cs := groups[g]
		n, _ := effect(j, cs[0])
		may, answered := 0, false
		for _, c := range cs {
			may += c.mayHaveLanded()
			answered = answered || c.took() || c.retried()
			switch {
			case c.took() && n == 0:
				out = append(out, fmt.Sprintf("%s, but the log shows no effect of it", c))
			case idempotent[c.Op] && n > 0 && c.final() != http.StatusOK:
				out = append(out, fmt.Sprintf("%s, though it took effect (a repeat answers 200)", c))
			}
		}
		switch {
		case n > 0 && !answered:
			out = append(out, fmt.Sprintf("%s took effect, yet none of its calls answered 200: %v", g, cs))
		case n > may || n > 1 && cs[0].SignalID != "":
			out = append(out, fmt.Sprintf("%s took effect %d times: %v", g, n, cs))
		}
	}
	return out
}

// approved: an approval job whose approve answered 200 completes; one
// without fails (rejected, or timed out).
func approved(calls []call) domain.JobState {
	for _, c := range calls {
		if c.Op == "approve" && c.final() == http.StatusOK {
			return domain.JobCompleted
		}
	}
	return domain.JobFailed
}

func signalK(sg domain.Signal) int {
	var p struct {
		K int `json:"k"`
	}
	_ = json.Unmarshal(sg.Payload, &p)
	return p.K
}

func requeues(j *domain.Job) int {
	n := 0
	for _, ev := range j.Events {
		n += btoi(ev.Type == string(domain.JobEvRequeued) && ev.Detail == "redrive")
	}
	return n
}

// requeueFacts: one job_requeued per round of redrives its racer sent,
// and a job that failed again redriven until its racer's bound.
func requeueFacts(j *domain.Job, calls []call) []string {
	rounds := 0
	for _, c := range calls {
		rounds = max(rounds, c.Round)
	}
	if n := requeues(j); n != rounds || j.State == domain.JobFailed && rounds < maxRedriveRounds {
		return []string{fmt.Sprintf("%s after %d job_requeued and %d redrive rounds: want one requeue per round, and a failed job redriven %d times", j.State, n, rounds, maxRedriveRounds)}
	}
	return nil
}
