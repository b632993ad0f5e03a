package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepflow/stepflow/shared/wire"
)

// ZombieTag marks what a chaos worker reports after its lease was lost: a
// complete's output carries {"zombie": true} and a fail's message starts
// with "[zombie]". The engine must refuse every such outcome, so no job may
// end up holding one.
const ZombieTag = "zombie"

// workers are the chaos workers: goroutines claiming worker steps over
// HTTP, each lease handled by one of three behaviours (normal, zombie,
// skewed clock) drawn from StreamWorkers.
type workers struct {
	f     *Faults
	c     *client
	clock *Clock
	wg    sync.WaitGroup
	pool  *resourcePool // notes the leases of resource jobs (resources.go); nil for none

	claimed  atomic.Int64
	outcomes atomic.Int64 // outcomes the engine accepted
	refused  atomic.Int64 // 409s

	mu   sync.Mutex
	late map[string][]string // by job: outcomes and heartbeats sent after their lease expired that the engine accepted
	*notes
}

func (w *workers) start(ctx context.Context, per int) {
	for _, q := range WorkerQueues {
		for i := range per {
			name := fmt.Sprintf("%s-w%d", q, i)
			w.wg.Go(func() { w.loop(ctx, name, q) })
		}
	}
}

func (w *workers) loop(ctx context.Context, name, queue string) {
	for ctx.Err() == nil {
		if a := w.claim(ctx, name, queue); !a.ok() {
			if a.status != 0 && !a.retryable() {
				w.note("claim answered %d: %s", a.status, a.body)
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

// claim makes one claim, a long poll of a second as a real worker's, and
// hands each lease it is given to handle.
func (w *workers) claim(ctx context.Context, name, queue string) answer {
	body, _ := json.Marshal(map[string]any{"queue": queue, "max": 2, "wait_seconds": 1, "worker": name})
	a := w.c.once(ctx, http.MethodPost, "/v1/claim", body)
	var ca struct {
		Leases []wire.ClaimedLease `json:"leases"`
	}
	if a.ok() {
		if err := json.Unmarshal(a.body, &ca); err != nil {
			w.note("claim answer unreadable: %v", err)
		}
	}
	for _, l := range ca.Leases {
		w.claimed.Add(1)
		w.wg.Go(func() { w.handle(ctx, name, l) })
	}
	return a
}

// workerOutcomes are what a worker reports, with their weights (of 100).
var workerOutcomes = weightedKinds{{"complete", 70}, {"retryable", 12}, {"fatal", 8}, {"resource", 5}, {"timeout", 5}}

// behaviour is how a worker treats one lease.
type behaviour struct {
	zombie    bool          // stall past the lease, then report anyway
	skew      time.Duration // the worker's clock minus the stack's; non-zero for a skewed worker
	stall     time.Duration // how long past the lease a zombie wakes
	work      time.Duration // how long the work takes
	heartbeat bool
	outcome   string // complete, retryable, fatal, resource, timeout
}

func (w *workers) behaviour() behaviour {
	var b behaviour
	b.zombie = w.f.Chance(StreamWorkers, KindZombie, w.f.P.Zombie)
	skewed := !b.zombie && w.f.Chance(StreamWorkers, KindSkew, w.f.P.Skew)
	w.f.Draw(StreamWorkers, func(r *rand.Rand) {
		if skewed {
			b.skew = time.Duration(1000+r.IntN(3000)) * time.Millisecond
			if r.IntN(2) == 0 {
				b.skew = -b.skew
			}
		}
		b.stall = time.Duration(50+r.IntN(600)) * time.Millisecond
		b.work = time.Duration(r.IntN(150)) * time.Millisecond
		b.heartbeat = r.IntN(2) == 0
		b.outcome = workerOutcomes.pick(r)
	})
	return b
}

// PlannedFatal is the message of the fatal failure a redrive job's worker
// step meets on its first attempt.
const PlannedFatal = "chaos: planned fatal failure, to be redriven"

// leaseInput is what a lease's input tells the chaos workers.
type leaseInput struct {
	Marker string     `json:"chaos_worker"` // WorkerMarker
	Script []string   `json:"chaos_script"` // a resource job's (ScriptMember), by attempt
	Replan replanSpec `json:"replan"`       // a replan-worker job's
}

func (w *workers) handle(ctx context.Context, name string, l wire.ClaimedLease) {
	expires := l.ExpiresAt
	var in leaseInput
	_ = json.Unmarshal(l.Input, &in)
	switch m := in.Marker; {
	case m == WorkerResource:
		w.resource(ctx, name, l, script(in.Script, l.Attempt))
		return
	case m == WorkerReplan:
		w.replan(ctx, name, l, in.Replan)
		return
	case m == WorkerFailFirst:
		// A redrive job's first attempt fails fatally at once: its step
		// allows one attempt, so the job fails; a later one completes.
		class := ""
		if l.Attempt <= 1 {
			class = "fatal"
		}
		w.report(ctx, l, &expires, class, PlannedFatal, name)
		return
	}
	b := w.behaviour()
	if in.Marker == WorkerAlwaysComplete {
		b.outcome = "complete"
	}
	// A zombie wakes past its lease; a skewed worker plans by its own
	// clock, acting 300 ms before the lease runs out as it reckons (behind
	// the stack's clock, it acts late).
	wait := func() {
		switch {
		case b.zombie:
			w.waitUntil(ctx, func() bool { return w.clock.Now().After(expires.Add(b.stall)) })
		case b.skew != 0:
			w.waitUntil(ctx, func() bool { return !w.clock.Now().Add(b.skew).Before(expires.Add(-300 * time.Millisecond)) })
		default:
			sleep(ctx, b.work)
		}
	}
	wait()
	if b.heartbeat {
		a := w.send(ctx, l, "heartbeat", &expires, func(bool) []byte { return []byte(`{}`) })
		var hb wire.HeartbeatResult
		if a.ok() && json.Unmarshal(a.body, &hb) == nil {
			if hb.CancelRequested || hb.ExpiresAt == nil {
				return // the job was cancelled: stop working
			}
			expires = *hb.ExpiresAt
		}
		if !b.zombie {
			wait()
		}
	}
	class := b.outcome
	if class == "complete" {
		class = ""
	}
	if ctx.Err() == nil {
		w.report(ctx, l, &expires, class, fmt.Sprintf("worker %s reports %s", name, b.outcome), name)
	}
}

// report completes a lease (class "", msg unused) or fails it with class
// and msg; sent late, its output carries the zombie tag, its message
// starts "[zombie]".
func (w *workers) report(ctx context.Context, l wire.ClaimedLease, expires *time.Time, class, msg, name string) answer {
	op := map[bool]string{true: "complete", false: "fail"}[class == ""]
	return w.send(ctx, l, op, expires, func(late bool) []byte {
		v := map[string]any{"class": class, "message": msg}
		if late {
			v["message"] = "[" + ZombieTag + "] " + msg
		}
		if class == "" {
			out := map[string]any{"worker": name, "attempt": l.Attempt}
			if late {
				out[ZombieTag] = true
			}
			v = map[string]any{"output": out}
		}
		raw, _ := json.Marshal(v)
		return raw
	})
}

// waitUntil polls cond every 20 ms (the stack's clock may jump).
func (w *workers) waitUntil(ctx context.Context, cond func() bool) {
	poll(ctx, time.Now().Add(time.Hour), 20*time.Millisecond, cond)
}

// send posts a heartbeat or an outcome under a lease, again after a 5xx
// or a transport error (the same lease). Whether it is late is judged by
// the stack's clock just before each send against *expires, the latest
// the lease may run to: a late one is tagged, and the engine must refuse
// it. A heartbeat answered 5xx or not at all may have been applied, so
// *expires moves to the latest expiry it could have set.
func (w *workers) send(ctx context.Context, l wire.ClaimedLease, op string, expires *time.Time, body func(late bool) []byte) answer {
	wait := 50 * time.Millisecond
	var a answer
	for try := 0; try < 6 && ctx.Err() == nil; try++ {
		sent := w.clock.Now()
		late := !sent.Before(*expires)
		if op != "heartbeat" && batched(l.LeaseID) {
			a = unbatch(w.c.once(ctx, http.MethodPost, "/v1/leases/batch", batchOf(l.LeaseID, body(late))))
		} else {
			a = w.c.once(ctx, http.MethodPost, "/v1/leases/"+l.LeaseID+"/"+op, body(late))
		}
		switch {
		case a.ok():
			if late {
				w.mu.Lock()
				w.late[l.JobID] = append(w.late[l.JobID], fmt.Sprintf("%s of lease %s sent %s after it expired was answered %d %s",
					op, l.LeaseID, sent.Sub(*expires).Round(time.Millisecond), a.status, truncate(a.body, 160)))
				w.mu.Unlock()
			}
			if op != "heartbeat" {
				w.outcomes.Add(1)
			}
			return a
		case a.status == http.StatusConflict:
			w.refused.Add(1)
			return a
		case !a.retryable():
			w.note("%s of lease %s answered %d: %s", op, l.LeaseID, a.status, a.body)
			return a
		}
		if op == "heartbeat" {
			if maybe := w.clock.Now().Add(time.Duration(l.LeaseSeconds) * time.Second); maybe.After(*expires) {
				*expires = maybe
			}
		}
		sleep(ctx, wait)
		wait *= 2
	}
	return a
}

// batched says whether a lease's outcome goes by POST /v1/leases/batch
// rather than /complete or /fail: half the leases, by their id (no draw
// from the seeded streams, which stay as they were).
func batched(leaseID string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(leaseID))
	return h.Sum32()%2 == 0
}

// batchOf is a /complete or /fail body as POST /v1/leases/batch takes it.
func batchOf(leaseID string, body []byte) []byte {
	var item map[string]any
	_ = json.Unmarshal(body, &item)
	item["lease_id"] = leaseID
	raw, _ := json.Marshal(map[string]any{"outcomes": []any{item}})
	return raw
}

// unbatch answers a batch of one outcome as /complete or /fail would
// have.
func unbatch(a answer) answer { return unbatchOne(a, "outcomes", "result") }

// unbatchOne answers a batch of one (its items under list, each with its
// status and its value under value, or its error) as the single route
// would have answered it: the item's status, with its value or its error.
func unbatchOne(a answer, list, value string) answer {
	if !a.ok() {
		return a
	}
	var res map[string][]map[string]json.RawMessage
	if err := json.Unmarshal(a.body, &res); err != nil || len(res[list]) != 1 {
		return answer{status: a.status, body: a.body, err: fmt.Errorf("a batch of one answered %s", truncate(a.body, 160))}
	}
	it := res[list][0]
	var status int
	if err := json.Unmarshal(it["status"], &status); err != nil {
		return answer{status: a.status, body: a.body, err: fmt.Errorf("a batch of one answered no status: %s", truncate(a.body, 160))}
	}
	if e := it["error"]; len(e) > 0 {
		return answer{status: status, body: []byte(`{"error":` + string(e) + `}`)}
	}
	return answer{status: status, body: it[value]}
}
