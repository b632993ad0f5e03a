package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// JobPlan is one job a run submits.
type JobPlan struct {
	N           int
	Kind        string // pass, pass3, pass5, retryable, fatal, sleep, worker, approval, signal, timer, redrive
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

func (p *RacePlan) String() string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	for _, o := range p.Ops {
		fmt.Fprintf(&b, " %s@%d", o.Op, o.After.Milliseconds())
		if o.Op == "signal" {
			fmt.Fprintf(&b, "[%q k%d]", o.SignalID, o.K)
		}
	}
	if p.Redrives > 0 {
		fmt.Fprintf(&b, " redrive x%d", p.Redrives)
	}
	if p.Junk > 0 {
		fmt.Fprintf(&b, " junk x%d", p.Junk)
	}
	return b.String()
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

type stepSpec struct {
	ID     string     `json:"id"`
	Action actionSpec `json:"action"`
	Retry  *retrySpec `json:"retry,omitempty"`
}

type actionSpec struct {
	Type         string   `json:"type"`
	Seconds      *float64 `json:"seconds,omitempty"`
	Class        string   `json:"class,omitempty"`
	Message      string   `json:"message,omitempty"`
	Queue        string   `json:"queue,omitempty"`
	LeaseSeconds int      `json:"lease_seconds,omitempty"`
	Signal       string   `json:"signal,omitempty"`
	Timeout      int      `json:"timeout_seconds,omitempty"`
}

type retrySpec struct {
	MaxAttempts    int    `json:"max_attempts"`
	Backoff        string `json:"backoff"`
	InitialDelayMS int    `json:"initial_delay_ms"`
	MaxDelayMS     int    `json:"max_delay_ms"`
}

type jobSpec struct {
	Steps    []stepSpec     `json:"steps"`
	Payload  map[string]any `json:"payload"`
	Priority int            `json:"priority"`
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
	{"pass", 14}, {"pass3", 10}, {"pass5", 8}, {"retryable", 12}, {"fatal", 8}, {"sleep", 12}, {"worker", 26},
	{"approval", 7}, {"signal", 7}, {"timer", 8}, {"redrive", 4},
}

// rows is the workload table: what a job of each kind ends as, given the
// faults and its callers' answers.
var rows = map[string]row{
	"pass": completes, "pass3": completes, "pass5": completes, "sleep": completes, "timer": completes,
	"retryable": fails, "fatal": fails,
	"worker":   {}, // its workers draw each attempt's outcome
	"approval": {end: approved, lossy: true, facts: facts(decisionFacts)},
	"signal":   {end: ends(domain.JobCompleted), lossy: true, facts: facts(signalFacts)},
	// Its racer redrives it again after a lost lease, up to a bound.
	"redrive":       {end: ends(domain.JobCompleted), lossy: true, facts: facts(requeueFacts)},
	"replan-worker": {end: ends(domain.JobCompleted), lossy: true, facts: facts(refusedCycle)},
	"replan-fail":   {end: ends(domain.JobCompleted), lossy: true, facts: facts(refusedCycle)},
	"flood":         {end: ends(domain.JobCompleted), lossy: true, facts: facts(floodFacts)},
	"res-worker":    {end: ends(domain.JobCompleted), lossy: true, facts: facts(onMatchingResources)},
	"res-pass":      {end: ends(domain.JobCompleted), lossy: true, facts: facts(onMatchingResources)},
	// Fails with class resource on every resource it is given: it fails
	// once none that matches is left (or its attempts ran out on leases).
	"res-switch": {end: ends(domain.JobFailed), facts: facts(switchedThroughAll, onMatchingResources)},
}

func facts(fs ...func(*domain.Job, []call) []string) []func(*domain.Job, []call) []string { return fs }

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
	spec := jobSpec{Payload: map[string]any{"seed": seed, "n": i}, Priority: r.IntN(3)}
	pass := func(id string) stepSpec { return stepSpec{ID: id, Action: actionSpec{Type: "pass"}} }
	switch kind {
	case "pass":
		spec.Steps = []stepSpec{pass("only")}
	case "pass3", "pass5":
		k := 3
		if kind == "pass5" {
			k = 5
		}
		for s := range k {
			spec.Steps = append(spec.Steps, pass(fmt.Sprintf("s%d", s+1)))
		}
	case "retryable":
		backoff := []string{"fixed", "exponential", "linear"}[r.IntN(3)]
		initial := 100 + 100*r.IntN(5)
		spec.Steps = []stepSpec{{ID: "flaky", Action: actionSpec{Type: "fail", Class: "retryable", Message: "chaos: always fails"},
			Retry: &retrySpec{MaxAttempts: 2 + r.IntN(2), Backoff: backoff, InitialDelayMS: initial, MaxDelayMS: 1000}}}
		if r.IntN(2) == 0 {
			spec.Steps = append([]stepSpec{pass("before")}, spec.Steps...)
		}
	case "fatal":
		spec.Steps = []stepSpec{{ID: "boom", Action: actionSpec{Type: "fail", Class: "fatal", Message: "chaos: fatal"}}, pass("never")}
	case "sleep":
		secs := float64(r.IntN(11)) / 10 // 0 to 1 s
		spec.Steps = []stepSpec{{ID: "nap", Action: actionSpec{Type: "sleep", Seconds: &secs}}}
		if r.IntN(2) == 0 {
			spec.Steps = append(spec.Steps, pass("after"))
		}
	case "worker":
		w := stepSpec{ID: "work", Action: actionSpec{Type: "worker", Queue: WorkerQueues[r.IntN(len(WorkerQueues))], LeaseSeconds: 1 + r.IntN(2)},
			Retry: &retrySpec{MaxAttempts: 3 + r.IntN(3), Backoff: "fixed", InitialDelayMS: 100 + 100*r.IntN(3), MaxDelayMS: 1000}}
		spec.Steps = []stepSpec{w}
		if r.IntN(3) == 0 {
			spec.Steps = []stepSpec{pass("prep"), w, pass("post")}
		}
	case "approval":
		// Opened at submit; with a deadline of 2 to 4 s (the chaos stack's
		// timer threshold is 2 s: 3 and 4 go through Step Functions) it
		// races the racer's decisions.
		gate := stepSpec{ID: "gate", Action: actionSpec{Type: "approval"}}
		if r.IntN(5) < 3 {
			gate.Action.Timeout = 2 + r.IntN(3)
		}
		spec.Steps = []stepSpec{gate}
		if r.IntN(2) == 0 {
			spec.Steps = append(spec.Steps, pass("after"))
		}
	case "signal":
		// The wait comes first, or after a short sleep or a worker step, so
		// a signal may come before the wait is reached (it is kept).
		switch x := r.IntN(10); {
		case x < 3:
			secs := 0.5 + 0.5*float64(r.IntN(4)) // 0.5 to 2 s
			spec.Steps = []stepSpec{{ID: "nap", Action: actionSpec{Type: "sleep", Seconds: &secs}}}
		case x < 6:
			spec.Payload[WorkerMarker] = WorkerAlwaysComplete
			spec.Steps = []stepSpec{{ID: "prep", Action: actionSpec{Type: "worker", Queue: WorkerQueues[r.IntN(len(WorkerQueues))], LeaseSeconds: 2},
				Retry: &retrySpec{MaxAttempts: 5, Backoff: "fixed", InitialDelayMS: 100, MaxDelayMS: 1000}}}
		}
		spec.Steps = append(spec.Steps, stepSpec{ID: "wait", Action: actionSpec{Type: "wait", Signal: SignalName}})
	case "timer":
		// 1 to 3 s, half of them past the threshold (2.5 and 3 s): Step
		// Functions timers.
		secs := []float64{1, 1.5, 2, 2.5, 3, 3}[r.IntN(6)]
		spec.Steps = []stepSpec{{ID: "nap", Action: actionSpec{Type: "sleep", Seconds: &secs}}, pass("after")}
	case "redrive":
		spec.Payload[WorkerMarker] = WorkerFailFirst
		spec.Steps = []stepSpec{{ID: "work", Action: actionSpec{Type: "worker", Queue: WorkerQueues[r.IntN(len(WorkerQueues))], LeaseSeconds: 2},
			Retry: &retrySpec{MaxAttempts: 1, Backoff: "fixed", InitialDelayMS: 100, MaxDelayMS: 1000}}}
		if r.IntN(3) == 0 {
			spec.Steps = append(spec.Steps, pass("post"))
		}
	}
	var cancel time.Duration
	if r.Float64() < 0.15 && !racers[kind] && kind != "timer" {
		cancel = time.Duration(100+r.IntN(1900)) * time.Millisecond
	}
	body, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return JobPlan{N: i, Kind: kind, Key: fmt.Sprintf("chaos-%d-%d", seed, i), Body: body, CancelAfter: cancel}
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
		fmt.Fprintf(h, "%d %s %s %d%s\n", p.N, p.Key, p.Body, p.CancelAfter, p.Race)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
