package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// JobPlan is one job a run submits.
type JobPlan struct {
	N           int
	Kind        string // pass, pass3, pass5, long, retryable, fatal, sleep, worker, approval, signal, timer, redrive
	Key         string // Idempotency-Key
	Body        []byte // the exact bytes submitted, every retry
	CancelAfter time.Duration
	// Race is what the job's racer sends once the submit answered
	// (approval, signal, redrive and flood jobs); nil for the other kinds.
	Race *RacePlan
	// Refused is a body submitted first that must be refused (replan-fail:
	// its fail action's replan closes a cycle).
	Refused []byte
}

// RacePlan is a racer's part of the plan, drawn from StreamRacers.
type RacePlan struct {
	// Ops are sent at once, each from its own goroutine, After the submit
	// answered (approval: approve, reject, cancel; signal: signal, cancel).
	Ops []RaceOp
	// Redrives is how many redrives a redrive job's racer sends at once
	// when it first sees the job FAILED (1 or 2).
	Redrives int
	// Junk is how many signals of unknown names a flood sends.
	Junk int
}

// RaceOp is one request of a racer.
type RaceOp struct {
	Op    string        // approve, reject, cancel, signal
	After time.Duration // from the submit's answer
	// A signal's id ("" for none: a repeat is then a second signal) and
	// its payload's "k", unique within the job.
	SignalID string
	K        int
}

// WorkerQueues are the worker queues the chaos workers serve.
var WorkerQueues = []string{"wq-0", "wq-1"}

// TimerSteps are the ids the plan gives steps no executor runs (sleeps,
// approval gates, waits): every message for one is a timer.
var TimerSteps = map[string]bool{"nap": true, "gate": true, "wait": true}

// WorkerMarker is the payload member that tells the chaos workers how to
// treat a job's worker step whatever they draw (workers.go): the signal
// kind's prelude always completes (a lost lease still retries it), the
// redrive kind's fails fatally on its first attempt and completes on the
// next, the one after the redrive.
const (
	WorkerMarker         = "chaos_worker"
	WorkerAlwaysComplete = "complete"
	WorkerFailFirst      = "fail_first"
)

// SignalName is what the signal kind's wait waits for.
const SignalName = "go"

// step answers a step of a job's spec whose action is of type typ with
// members (name, value, ...); the caller adds the step's own members
// (retry, requires, depends_on).
func step(id, typ string, members ...any) map[string]any {
	action := map[string]any{"type": typ}
	for i := 0; i+1 < len(members); i += 2 {
		action[members[i].(string)] = members[i+1]
	}
	return map[string]any{"id": id, "action": action}
}

// fixedRetry answers a fixed retry policy.
func fixedRetry(attempts, initialMS int) map[string]any {
	return map[string]any{"max_attempts": attempts, "backoff": "fixed", "initial_delay_ms": initialMS, "max_delay_ms": 1000}
}

func with(s map[string]any, member string, v any) map[string]any {
	s[member] = v
	return s
}

// spec answers a job spec's bytes (of the default priority without one).
func spec(steps []map[string]any, payload map[string]any, priority ...int) []byte {
	v := map[string]any{"steps": steps, "payload": payload}
	if len(priority) > 0 {
		v["priority"] = priority[0]
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// weightedKinds are kinds with their weights, drawn by pick.
type weightedKinds []struct {
	kind   string
	weight int
}

// pick draws a kind with one r.IntN, each kind as likely as its weight.
func (ks weightedKinds) pick(r *rand.Rand) string {
	total := 0
	for _, k := range ks {
		total += k.weight
	}
	w := r.IntN(total)
	for _, k := range ks {
		if w < k.weight {
			return k.kind
		}
		w -= k.weight
	}
	return ks[len(ks)-1].kind
}

// planKinds are the job kinds with their weights.
var planKinds = weightedKinds{
	{"pass", 14}, {"pass3", 10}, {"pass5", 8}, {"long", 4}, {"retryable", 12}, {"fatal", 8}, {"sleep", 12}, {"worker", 26},
	{"approval", 7}, {"signal", 7}, {"timer", 8}, {"redrive", 4},
}

// rows is the workload table: what a job of each kind ends as, given the
// faults and its callers' answers.
var rows = map[string]row{
	"pass": completes, "pass3": completes, "pass5": completes, "long": completes, "sleep": completes, "timer": completes,
	"retryable": fails, "fatal": fails,
	"worker":   {}, // its workers draw each attempt's outcome
	"approval": {end: approved, lossy: true},
	"signal":   completes,
	// Its racer redrives it again after a lost lease, up to a bound; a
	// redrive refused though the job is FAILED leaves the planned failure.
	"redrive":       completes,
	"replan-worker": completes, "replan-fail": completes, "flood": completes,
	"res-worker": completes, "res-pass": completes,
	// Fails with class resource on every resource it is given: it fails
	// once none that matches is left (or its attempts ran out on leases).
	"res-switch": fails,
}

// racers are the kinds a racer works on.
var racers = map[string]bool{"approval": true, "signal": true, "redrive": true}

// Plan draws the jobs of a run from StreamPlan: the same seed, the same
// jobs, byte for byte.
func (f *Faults) Plan(n int) []JobPlan {
	out := make([]JobPlan, 0, n)
	for i := range n {
		var p JobPlan
		f.Draw(StreamPlan, func(r *rand.Rand) { p = planOne(r, f.Seed, i) })
		if racers[p.Kind] {
			f.Draw(StreamRacers, func(r *rand.Rand) { p.Race = planRace(r, p.Kind) })
		}
		out = append(out, p)
	}
	return out
}

func planOne(r *rand.Rand, seed uint64, i int) JobPlan {
	kind := planKinds.pick(r)
	payload, priority := map[string]any{"seed": seed, "n": i}, r.IntN(3)
	pass := func(id string) map[string]any { return step(id, "pass") }
	queue := func() string { return WorkerQueues[r.IntN(len(WorkerQueues))] }
	var steps []map[string]any
	switch kind {
	case "pass":
		steps = append(steps, pass("only"))
	case "pass3", "pass5":
		for s := range 3 + 2*btoi(kind == "pass5") {
			steps = append(steps, pass(fmt.Sprintf("s%d", s+1)))
		}
		switch {
		case kind == "pass3" && i%3 == 1:
			// A child job of two pass steps in the middle: made after the
			// write that leases its step, telling its parent its end, each
			// write meeting the faults (the sweep makes or tells what a
			// lost one did not). By the job's number: no draw.
			steps[1] = step("s2", "job", "spec", map[string]any{"steps": []map[string]any{pass("c1"), pass("c2")}})
		case kind == "pass3" && i%3 == 2:
			// A condition (s2 is skipped for an odd job number) and a
			// shaped input and output, decided in the writes the faults
			// meet. By the job's number: no draw.
			steps[1] = with(steps[1], "when", "int(payload.n) % 2 == 0")
			steps[2] = with(with(steps[2], "input", "{'n': payload.n, 'seed': payload.seed}"), "output", "{'kept': output.n}")
		case kind == "pass5" && i%4 == 1:
			// A fan-out of built-in branches, sent together at the submit:
			// an execute batch leases those it holds in one write
			// (ExecuteTogether). By the job's number: no draw.
			steps[4] = with(pass("join"), "depends_on", []string{"s1", "s2", "s3", "s4"})
		case kind == "pass5" && i%4 == 2:
			// A map of six items, two at a time, between pass steps: its
			// children's writes meet the faults, and its output feeds s5.
			payload["items"] = []int{1, 2, 3, 4, 5, 6}
			steps[2] = step("s3", "map", "items", "payload.items", "max_concurrency", 2,
				"step", map[string]any{"action": map[string]any{"type": "pass"}, "output": "output.item"})
		case kind == "pass5" && i%4 == 3:
			// Branches one write makes runnable together: the chain
			// records them in one write (runTogether).
			for _, b := range []int{1, 2, 3} {
				steps[b] = with(steps[b], "depends_on", []string{"s1"})
			}
			steps[4] = with(pass("join"), "depends_on", []string{"s2", "s3", "s4"})
		}
	case "long":
		// Long enough to be kept apart (a header and parts, sealed as it
		// goes, shared/store/parts.go), with a worker step amid its pass
		// steps, so its writes meet faults from several processes.
		payload[WorkerMarker] = WorkerAlwaysComplete
		for s := range 24 {
			steps = append(steps, pass(fmt.Sprintf("s%02d", s+1)))
			if s == 11 {
				steps = append(steps, with(step("work", "worker", "queue", queue(), "lease_seconds", 2), "retry", fixedRetry(5, 100)))
			}
		}
	case "retryable":
		backoff, initial := []string{"fixed", "exponential", "linear"}[r.IntN(3)], 100+100*r.IntN(5)
		flaky := with(step("flaky", "fail", "class", "retryable", "message", "chaos: always fails"), "retry",
			map[string]any{"max_attempts": 2 + r.IntN(2), "backoff": backoff, "initial_delay_ms": initial, "max_delay_ms": 1000})
		if r.IntN(2) == 0 {
			steps = append(steps, pass("before"))
		}
		steps = append(steps, flaky)
	case "fatal":
		steps = append(steps, step("boom", "fail", "class", "fatal", "message", "chaos: fatal"), pass("never"))
	case "sleep":
		steps = append(steps, step("nap", "sleep", "seconds", float64(r.IntN(11))/10)) // 0 to 1 s
		if r.IntN(2) == 0 {
			steps = append(steps, pass("after"))
		}
	case "worker":
		w := step("work", "worker", "queue", queue(), "lease_seconds", 1+r.IntN(2))
		w["retry"] = fixedRetry(3+r.IntN(3), 100+100*r.IntN(3))
		steps = append(steps, w)
		switch r.IntN(6) {
		case 0, 1:
			steps = []map[string]any{pass("prep"), w, pass("post")}
		case 2, 3:
			// A fan-out: its branches end together, so their outcomes race
			// on the job (outcome marks) and a claim may lease two at once.
			q := w["action"].(map[string]any)["queue"]
			steps = []map[string]any{w}
			for _, id := range []string{"work-b", "work-c", "work-d"} {
				b := step(id, "worker", "queue", q, "lease_seconds", w["action"].(map[string]any)["lease_seconds"])
				b["retry"] = w["retry"]
				steps = append(steps, b)
			}
			steps = append(steps, with(pass("join"), "depends_on", []string{"work", "work-b", "work-c", "work-d"}))
		}
	case "approval":
		// Opened at submit; with a deadline of 2 to 4 s (the chaos stack's
		// timer threshold is 2 s: 3 and 4 go through Step Functions) it
		// races the racer's decisions.
		steps = append(steps, step("gate", "approval"))
		if r.IntN(5) < 3 {
			steps[0]["action"].(map[string]any)["timeout_seconds"] = 2 + r.IntN(3)
		}
		if r.IntN(2) == 0 {
			steps = append(steps, pass("after"))
		}
	case "signal":
		// The wait comes first, or after a short sleep or a worker step, so
		// a signal may come before the wait is reached (it is kept).
		switch x := r.IntN(10); {
		case x < 3:
			steps = append(steps, step("nap", "sleep", "seconds", 0.5+0.5*float64(r.IntN(4)))) // 0.5 to 2 s
		case x < 6:
			payload[WorkerMarker] = WorkerAlwaysComplete
			steps = append(steps, with(step("prep", "worker", "queue", queue(), "lease_seconds", 2), "retry", fixedRetry(5, 100)))
		}
		steps = append(steps, step("wait", "wait", "signal", SignalName))
	case "timer":
		// 1 to 3 s, half of them past the threshold (2.5 and 3 s): Step
		// Functions timers.
		steps = append(steps, step("nap", "sleep", "seconds", []float64{1, 1.5, 2, 2.5, 3, 3}[r.IntN(6)]), pass("after"))
	case "redrive":
		payload[WorkerMarker] = WorkerFailFirst
		steps = append(steps, with(step("work", "worker", "queue", queue(), "lease_seconds", 2), "retry", fixedRetry(1, 100)))
		if r.IntN(3) == 0 {
			steps = append(steps, pass("post"))
		}
	}
	var cancel time.Duration
	if r.Float64() < 0.15 && !racers[kind] && kind != "timer" {
		cancel = time.Duration(100+r.IntN(1900)) * time.Millisecond
	}
	return JobPlan{N: i, Kind: kind, Key: fmt.Sprintf("chaos-%d-%d", seed, i), Body: spec(steps, payload, priority), CancelAfter: cancel}
}

// planRace draws what a racer sends.
func planRace(r *rand.Rand, kind string) *RacePlan {
	p := &RacePlan{}
	// The ops go out together, within a few hundred milliseconds, at a
	// time that falls before or after a deadline, a sleep or a worker.
	base := time.Duration(r.IntN(2500)) * time.Millisecond
	at := func(spread int) time.Duration { return base + time.Duration(r.IntN(spread))*time.Millisecond }
	switch kind {
	case "approval":
		// Two to four of approve, approve again, reject, cancel, in a
		// random order: any two hold a decision.
		pool := []string{"approve", "approve", "reject", "cancel"}
		r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		for _, op := range pool[:2+r.IntN(3)] {
			p.Ops = append(p.Ops, RaceOp{Op: op, After: at(150)})
		}
	case "signal":
		// One to three signals: each without an id, with an id of its
		// own, or with the id another one has too.
		for k := range 1 + r.IntN(3) {
			o := RaceOp{Op: "signal", After: at(400), K: k + 1}
			switch r.IntN(3) {
			case 1:
				o.SignalID = fmt.Sprintf("sig-%d", k+1)
			case 2:
				o.SignalID = "sig-same"
			}
			p.Ops = append(p.Ops, o)
		}
		if r.IntN(4) == 0 {
			p.Ops = append(p.Ops, RaceOp{Op: "cancel", After: at(400)})
		}
	case "redrive":
		p.Redrives = 1 + r.IntN(2)
	}
	return p
}

// PlanDigest identifies a plan: the same seed and job count give the same
// digest on every machine.
func PlanDigest(plan []JobPlan) string {
	h := sha256.New()
	for _, p := range plan {
		fmt.Fprintf(h, "%d %s %s %d %+v\n", p.N, p.Key, p.Body, p.CancelAfter, p.Race)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
