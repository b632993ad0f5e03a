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
	Kind        string // pass, pass3, pass5, retryable, fatal, sleep, worker
	Key         string // Idempotency-Key
	Body        []byte // the exact bytes submitted, every retry
	CancelAfter time.Duration
}

// WorkerQueues are the worker queues the chaos workers serve.
var WorkerQueues = []string{"wq-0", "wq-1"}

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

// planKinds are the job kinds with their weights.
var planKinds = []struct {
	kind   string
	weight int
}{
	{"pass", 14}, {"pass3", 10}, {"pass5", 8}, {"retryable", 12}, {"fatal", 8}, {"sleep", 12}, {"worker", 26},
}

// Plan draws the jobs of a run from StreamPlan: the same seed, the same
// jobs, byte for byte.
func (f *Faults) Plan(n int) []JobPlan {
	out := make([]JobPlan, 0, n)
	total := 0
	for _, k := range planKinds {
		total += k.weight
	}
	for i := range n {
		var p JobPlan
		f.Draw(StreamPlan, func(r *rand.Rand) { p = planOne(r, f.Seed, i, total) })
		out = append(out, p)
	}
	return out
}

func planOne(r *rand.Rand, seed uint64, i, total int) JobPlan {
	w := r.IntN(total)
	kind := planKinds[len(planKinds)-1].kind
	for _, k := range planKinds {
		if w < k.weight {
			kind = k.kind
			break
		}
		w -= k.weight
	}
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
	}
	var cancel time.Duration
	if r.Float64() < 0.15 {
		cancel = time.Duration(100+r.IntN(1900)) * time.Millisecond
	}
	body, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return JobPlan{N: i, Kind: kind, Key: fmt.Sprintf("chaos-%d-%d", seed, i), Body: body, CancelAfter: cancel}
}

// PlanDigest identifies a plan: the same seed and job count give the same
// digest on every machine.
func PlanDigest(plan []JobPlan) string {
	h := sha256.New()
	for _, p := range plan {
		fmt.Fprintf(h, "%d %s %s %d\n", p.N, p.Key, p.Body, p.CancelAfter)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
