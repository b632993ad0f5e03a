package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
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
// second decision or take is a move the replay invariant refuses; a
// signal to a finished job answers 409 (localstack/devstack's
// openapi_e2e_test.go).

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
	case "signal":
		for _, sg := range j.Signals {
			var p struct {
				K int `json:"k"`
			}
			_ = json.Unmarshal(sg.Payload, &p)
			n += btoi(c.SignalID != "" && sg.ID == c.SignalID || c.SignalID == "" && p.K == c.K)
		}
	case "redrive": // round r took effect once r redrives requeued the job
		for _, ev := range j.Events {
			n += btoi(ev.Type == string(domain.JobEvRequeued) && ev.Detail == "redrive")
		}
		return btoi(n >= c.Round), true
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
	case c.Op == "signal":
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
// 409 in the end; one answered 200 took effect; one that took effect
// answered 200 if it is idempotent, and some call of its group did (or was
// retried: its first send may have landed); and no effect shows more often
// than its sends could have landed, a signal id's once.
func answerProblems(j *domain.Job, calls []call) []string {
	var out []string
	groups := map[string][]call{}
	for _, c := range calls {
		if _, racing := effect(j, c); !racing {
			continue
		}
		if f := c.final(); f != http.StatusConflict && f != http.StatusOK {
			out = append(out, fmt.Sprintf("%s: neither 200 nor 409 in the end", c))
		}
		groups[c.group()] = append(groups[c.group()], c)
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
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

// Replans and signal floods under chaos, jobs of the run's beside its plan:
//
//   - replan-worker: a job x -> s1 -> s2 -> s3 (and u beside them) whose
//     worker step x the chaos workers fail with class replan, first with
//     steps of which one depends on s1, s2 or s3 (drawn): that would close
//     a dependency cycle; then with steps that fit, after which the job
//     must complete.
//   - replan-fail: the same two replans carried by a fail action: the
//     first submitted on its own, the second run to COMPLETED.
//   - flood: a job whose waits (ready, then wait) are flooded from four
//     senders with signals of names no wait listens for, the job's own
//     go among them, then ready: the job must complete, go's answer
//     agreeing with its log.
//
// A cycle-closing replan accepted would store a cycle, or a job no submit
// answered (replan-fail's), which the run's checks find; that it is
// refused with 400 naming the depends_on, writing nothing, is
// shared/domain's TestReplanThatClosesACycleIsRefused and
// TestFailActionReplanThatClosesACycleIsRefusedAtSubmit and
// shared/engine's TestReplanThatClosesACycleWritesNothing. That unknown
// names are dropped, writing nothing, and cannot lock out the wait's own
// signal is shared/domain's TestUnknownSignalsCannotLockOutTheWait.

// WorkerReplan is the WorkerMarker of a replan-worker job.
const WorkerReplan = "replan"

// replanSpec is what a replan job's payload says of its replans.
type replanSpec struct {
	Depth int  `json:"depth"` // the cycle closes through s<Depth>
	Chain bool `json:"chain"` // the closing step is not a sink (another new step follows it)
}

// ReplanPlan draws the replans' and floods' jobs from StreamReplans,
// numbered from first.
func (f *Faults) ReplanPlan(first int) []JobPlan {
	var out []JobPlan
	f.Draw(StreamReplans, func(r *rand.Rand) {
		for i, kind := range []string{"replan-worker", "replan-worker", "replan-worker", "replan-fail", "replan-fail", "flood", "flood"} {
			p := JobPlan{N: first + i, Kind: kind, Key: fmt.Sprintf("chaos-%d-%d", f.Seed, first+i)}
			rs := replanSpec{Depth: 1 + r.IntN(3), Chain: r.IntN(2) == 0}
			if kind == "flood" {
				p.Race = &RacePlan{Junk: 60 + r.IntN(61)}
			}
			p.Body = rs.body(kind, false)
			if kind == "replan-fail" {
				p.Refused = rs.body(kind, true)
			}
			out = append(out, p)
		}
	})
	return out
}

func after(s map[string]any, deps ...string) map[string]any { return with(s, "depends_on", deps) }

// newSteps answers a replan's steps: closing, one depends on s<Depth>,
// which runs after the replanned step (a cycle once s1 waits on them);
// else on u, which does not.
func (p replanSpec) newSteps(closing bool) []map[string]any {
	on := "u"
	if closing {
		on = fmt.Sprintf("s%d", p.Depth)
	}
	steps := []map[string]any{after(step("n", "pass"), on)}
	if p.Chain {
		steps = append(steps, after(step("m", "pass"), "n"))
	}
	return steps
}

// body answers a job's spec; for replan-fail its fail step carries the
// replan (closing a cycle or not).
func (p replanSpec) body(kind string, closing bool) []byte {
	steps := []map[string]any{step("ready", "wait", "signal", "ready"), step("wait", "wait", "signal", SignalName), step("after", "pass")}
	payload := map[string]any{}
	switch kind {
	case "replan-worker":
		// A lease long enough for the worker's two answers on a machine
		// loaded by `make test` (with 5 s, each lease ran out before its
		// fitting replan, attempt after attempt).
		steps = []map[string]any{step("x", "worker", "queue", WorkerQueues[0], "lease_seconds", 15)}
		payload[WorkerMarker], payload["replan"] = WorkerReplan, p
	case "replan-fail":
		steps = []map[string]any{step("x", "fail", "class", "replan", "message", "chaos: replan", "steps", p.newSteps(closing))}
	}
	if kind != "flood" {
		steps = append(steps, after(step("s1", "pass"), "x"), after(step("s2", "pass"), "s1"), after(step("s3", "pass"), "s2"), step("u", "pass"))
		for _, st := range steps {
			st["retry"] = fixedRetry(20, 100) // each step may lose many attempts to the faults
		}
	}
	return spec(steps, payload)
}

// replan fails a replan-worker lease with the cycle-closing replan, then
// with the fitting one.
func (w *workers) replan(ctx context.Context, name string, l wire.ClaimedLease, p replanSpec) {
	fail := func(closing bool) []byte {
		b, _ := json.Marshal(map[string]any{"class": "replan", "message": fmt.Sprintf("chaos: replan by %s (closing a cycle: %v)", name, closing), "steps": p.newSteps(closing)})
		return b
	}
	w.c.retry(ctx, time.Now().Add(10*time.Second), http.MethodPost, "/v1/leases/"+l.LeaseID+"/fail", fail(true))
	expires := l.ExpiresAt
	w.send(ctx, l, "fail", &expires, func(late bool) []byte {
		if late {
			return []byte(`{"class":"replan","message":"[` + ZombieTag + `] a late replan","steps":[]}`)
		}
		return fail(false)
	})
}

// flood sends a flood job's signals: from four senders the unknown names,
// the job's own go among them, then ready.
func (r *run) flood(ctx context.Context, s *submission, deadline time.Time) {
	path, junk := "/v1/jobs/"+s.id+"/signal", s.plan.Race.Junk
	var senders sync.WaitGroup
	for from := range 4 {
		senders.Go(func() {
			for k := from; k < junk; k += 4 {
				if k == junk/2 {
					s.add(r.c.do(ctx, deadline, call{Op: "signal", SignalID: "flood-own"}, http.MethodPost, path, []byte(`{"name":"`+SignalName+`","id":"flood-own","payload":{"own":true}}`)))
				}
				r.c.retry(ctx, deadline, http.MethodPost, path, []byte(fmt.Sprintf(`{"name":"junk-%d"}`, k)))
			}
		})
	}
	senders.Wait()
	r.c.retry(ctx, deadline, http.MethodPost, path, []byte(`{"name":"ready","id":"flood-ready"}`))
}
