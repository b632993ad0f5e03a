package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/wire"
)

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
func (w *workers) replan(ctx context.Context, name string, l wire.ClaimedLease) {
	var in struct {
		Replan replanSpec `json:"replan"`
	}
	_ = json.Unmarshal(l.Input, &in)
	fail := func(closing bool) []byte {
		b, _ := json.Marshal(map[string]any{"class": "replan", "message": fmt.Sprintf("chaos: replan by %s (closing a cycle: %v)", name, closing), "steps": in.Replan.newSteps(closing)})
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
