package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The hostile tenant is a second tenant in every run, with its own API
// key, that behaves as an attacker would, over the HTTP API, while the
// run's own jobs go through their faults. Its name is the run's tenant
// followed by "-wq": under the worker queue names of old
// (<prefix><tenant>-<queue>), its queues "0" and "1" were the SQS queues
// of the run's tenant's "wq-0" and "wq-1" ("chaos-wq" + "-" + "0" is
// "chaos" + "-" + "wq-0"), and it claims those names over and over.
const (
	HostileTenant = Tenant + "-wq"
	HostileKey    = "chaos-wq-key"

	// HostileOwnQueue is the worker queue its flood's worker jobs go to,
	// which it claims and completes itself.
	HostileOwnQueue = "own"

	// hostileLeaseSeconds is its worker steps' lease: long beside the
	// time a claim and its outcome take, short beside the sweeper's clock
	// jumps, so a lease lost to a crash is reclaimed within seconds.
	hostileLeaseSeconds = 300

	// PoisonDepth is how deeply its deepest poison bodies nest.
	PoisonDepth = 10000
)

// The step ids of its flood's worker jobs say how its worker treats them.
const (
	stepWork     = "work"     // completed
	stepPoisoned = "poisoned" // first sent the poison outputs, then completed
)

// HostileConfig sizes the hostile tenant; a zero field takes its default.
type HostileConfig struct {
	Off     bool // no hostile tenant in the run
	Pass    int  // cheap pass jobs in its flood (40)
	Work    int  // worker jobs on its own queue it claims and completes (3)
	Unknown int  // claims on queue names no job ever named (20)
}

func (c *HostileConfig) defaults() {
	if c.Pass == 0 {
		c.Pass = 40
	}
	if c.Work == 0 {
		c.Work = 3
	}
	if c.Unknown == 0 {
		c.Unknown = 20
	}
}

// CollidingQueues are the hostile tenant's queue names that named the
// run's WorkerQueues under the old naming: "0" and "1".
func CollidingQueues() []string {
	out := make([]string, 0, len(WorkerQueues))
	for _, q := range WorkerQueues {
		name, ok := strings.CutPrefix(q, strings.TrimPrefix(HostileTenant, Tenant+"-")+"-")
		if !ok {
			panic("chaos: worker queue " + q + " does not collide with the hostile tenant's names")
		}
		out = append(out, name)
	}
	return out
}

// Poison is a body the API must refuse with 400, and write nothing for.
type Poison struct {
	Name string
	// Complete: sent as a worker's complete under the lease of the
	// "poisoned" step, not as a submit.
	Complete bool
	Body     []byte
}

// HostilePlan is what the hostile tenant sends in a run, drawn from
// StreamHostile: the same seed, the same bodies, byte for byte.
type HostilePlan struct {
	// Flood must all finish: its worker jobs on HostileOwnQueue first
	// (the one whose completes are poisoned, then the others), then the
	// pass jobs (the first with a payload nested as deep as a submit may).
	Flood   []JobPlan
	Unknown []string // queue names no job names, each claimed once
	Poison  []Poison
}

type hostileSpec struct {
	Steps    []stepSpec      `json:"steps"`
	Payload  json.RawMessage `json:"payload"`
	Priority int             `json:"priority"`
}

// HostilePlan draws the hostile tenant's plan for a run.
func (f *Faults) HostilePlan(c HostileConfig) HostilePlan {
	c.defaults()
	var p HostilePlan
	f.Draw(StreamHostile, func(r *rand.Rand) { p = hostilePlan(r, f.Seed, c) })
	return p
}

func hostilePlan(r *rand.Rand, seed uint64, c HostileConfig) HostilePlan {
	var p HostilePlan
	n := 0
	job := func(kind string, steps []stepSpec, payload json.RawMessage) JobPlan {
		if payload == nil {
			payload, _ = json.Marshal(map[string]any{"hostile": seed, "n": n, "junk": fmt.Sprintf("%016x", r.Uint64())})
		}
		body, err := json.Marshal(hostileSpec{Steps: steps, Payload: payload, Priority: r.IntN(3)})
		if err != nil {
			panic(err)
		}
		jp := JobPlan{N: n, Kind: kind, Key: fmt.Sprintf("hostile-%d-%d", seed, n), Body: body}
		n++
		return jp
	}
	worker := func(id, queue string) []stepSpec {
		return []stepSpec{{ID: id, Action: actionSpec{Type: "worker", Queue: queue, LeaseSeconds: hostileLeaseSeconds},
			Retry: &retrySpec{MaxAttempts: 5, Backoff: "fixed", InitialDelayMS: 100, MaxDelayMS: 1000}}}
	}
	p.Flood = append(p.Flood, job(stepPoisoned, worker(stepPoisoned, HostileOwnQueue), nil))
	for range c.Work - 1 {
		p.Flood = append(p.Flood, job(stepWork, worker(stepWork, HostileOwnQueue), nil))
	}
	for i := range c.Pass {
		var payload json.RawMessage
		if i == 0 {
			// As deep as a payload may nest: the body around it is one
			// level more (domain.MaxJSONDepth).
			payload = nested(63, "")
		}
		p.Flood = append(p.Flood, job("pass", []stepSpec{{ID: "only", Action: actionSpec{Type: "pass"}}}, payload))
	}
	// The run's own queue names first (the hostile tenant's own queues of
	// those names were never used), then random ones.
	p.Unknown = append(p.Unknown, WorkerQueues...)
	for len(p.Unknown) < c.Unknown {
		p.Unknown = append(p.Unknown, fmt.Sprintf("u%d-%08x", len(p.Unknown), r.Uint32()))
	}
	p.Unknown = p.Unknown[:c.Unknown]
	p.Poison = poisonBodies()
	return p
}

// nested answers an array nested depth deep around inner ("" for none).
func nested(depth int, inner string) json.RawMessage {
	return json.RawMessage(strings.Repeat("[", depth) + inner + strings.Repeat("]", depth))
}

// poisonBodies are the bodies the hostile tenant sends to be refused.
func poisonBodies() []Poison {
	const step = `{"id":"a","action":{"type":"pass"}}`
	submit := func(name, body string) Poison { return Poison{Name: name, Body: []byte(body)} }
	complete := func(name, body string) Poison { return Poison{Name: name, Complete: true, Body: []byte(body)} }
	return []Poison{
		submit("payload nested 10000 deep", `{"steps":[`+step+`],"payload":`+string(nested(PoisonDepth, ""))+`}`),
		submit("payload nested 64 deep, one past the limit", `{"steps":[`+step+`],"payload":`+string(nested(64, ""))+`}`),
		submit("invalid UTF-8 in the payload", `{"steps":[`+step+`],"payload":{"s":"`+"\xff\xfe"+`"}}`),
		submit("invalid UTF-8 in a member name", `{"steps":[`+step+`],"payload":{"`+"\xc3\x28"+`":1}}`),
		submit("a lone surrogate escaped in the payload", `{"steps":[`+step+`],"payload":{"s":"\ud800"}}`),
		submit("a duplicate payload member", `{"steps":[`+step+`],"payload":{"a":1,"a":2}}`),
		submit("a duplicate member spelt with an escape", `{"steps":[`+step+`],"payload":{"a":1,"\u0061":2}}`),
		submit("steps twice, the second on a colliding queue", `{"steps":[`+step+`],"steps":[{"id":"b","action":{"type":"worker","queue":"0"}}]}`),
		submit("STEPS in capitals", `{"STEPS":[`+step+`]}`),
		submit("step members in other case", `{"steps":[{"ID":"a","Action":"pass"}]}`),
		complete("output nested 10000 deep", `{"output":{"poison":`+string(nested(PoisonDepth, ""))+`}}`),
		complete("a duplicate output member", `{"output":{"poison":true,"a":1,"a":2}}`),
		complete("invalid UTF-8 in the output", `{"output":{"poison":"`+"\xff"+`"}}`),
		complete("OUTPUT in capitals", `{"OUTPUT":{"poison":true}}`),
	}
}
