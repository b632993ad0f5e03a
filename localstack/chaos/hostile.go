package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/queue"
)

// The hostile tenant is a second tenant in every run, with its own API
// key, that behaves as an attacker would, over the HTTP API, while the
// run's own jobs go through their faults. Its name is the run's tenant
// followed by "-wq": under the worker queue names of old
// (<prefix><tenant>-<queue>), its queues "0" and "1" were the SQS queues
// of the run's tenant's "wq-0" and "wq-1", and it claims those names over
// and over until the run stops its workers. Meanwhile it floods pass jobs
// of its own, claims names no job named, sends poison bodies and reaches
// for the run's jobs; once the run's jobs are done and the faults paused,
// it sends every poison body again and reaches for every job of the run,
// the first answer counting. Every request whose answer is known in
// advance is an exchange of the check it counts in. (What it would meet
// with the faults paused anyway, the long-poll bound, each tenant's
// health, a huge failure message, is devstack's hostile_test.go and
// longpoll_e2e_test.go.)
const (
	HostileTenant = Tenant + "-wq"
	HostileKey    = "chaos-wq-key"
	// PoisonDepth is how deeply its deepest poison bodies nest.
	PoisonDepth = 10000

	// HostileCategory is what a failed check of the hostile tenant counts as.
	HostileCategory Category = "hostile"

	claimColliding = "colliding"
	claimUnknown   = "unknown"

	checkNothing  = "claims on colliding or unknown names hand out nothing"
	checkPoison   = "every poison body answers 400"
	checkIsolated = "the run's jobs answer it 404"
)

// HostileConfig sizes the hostile tenant; a zero field takes its default.
type HostileConfig struct {
	Off     bool // no hostile tenant in the run
	Pass    int  // pass jobs in its flood (40)
	Unknown int  // claims on queue names no job ever named (20)
}

func (c *HostileConfig) defaults() { c.Pass, c.Unknown = cmp.Or(c.Pass, 40), cmp.Or(c.Unknown, 20) }

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

// Poison is a body the API must refuse with 400, and write nothing for:
// a submit, or (Complete) a worker's complete, whose body is read before
// its lease.
type Poison struct {
	Name     string
	Complete bool
	Body     []byte
}

// HostilePlan is what the hostile tenant sends in a run, drawn from
// StreamHostile: the same seed, the same bodies, byte for byte.
type HostilePlan struct {
	Flood   []JobPlan // pass jobs, the first with a payload nested as deep as a submit may
	Unknown []string  // queue names no job names, each claimed once
	Poison  []Poison
}

// HostilePlan draws the hostile tenant's plan for a run.
func (f *Faults) HostilePlan(c HostileConfig) HostilePlan {
	c.defaults()
	var p HostilePlan
	f.Draw(StreamHostile, func(r *rand.Rand) {
		for n := range c.Pass {
			payload, _ := json.Marshal(map[string]any{"hostile": f.Seed, "n": n, "junk": fmt.Sprintf("%016x", r.Uint64())})
			if n == 0 {
				payload = nested(63, "") // the body around it is one level more (domain.MaxJSONDepth)
			}
			body := fmt.Sprintf(`{"steps":[{"id":"only","action":{"type":"pass"}}],"payload":%s,"priority":%d}`, payload, r.IntN(3))
			p.Flood = append(p.Flood, JobPlan{N: n, Kind: "pass", Key: fmt.Sprintf("hostile-%d-%d", f.Seed, n), Body: []byte(body)})
		}
		// The run's own queue names first (the hostile tenant's own queues
		// of those names were never used), then random ones.
		p.Unknown = append(p.Unknown, WorkerQueues...)
		for len(p.Unknown) < c.Unknown {
			p.Unknown = append(p.Unknown, fmt.Sprintf("u%d-%08x", len(p.Unknown), r.Uint32()))
		}
		p.Unknown = p.Unknown[:c.Unknown]
	})
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

// exchange is one request the hostile tenant made whose answer is known
// in advance: a poison body is refused, another tenant's job is not
// found, a claim on a name no job of its own names hands out nothing.
type exchange struct {
	what     string
	statuses []int // every answer, in order; 0 for none
	want     int
	// strict: sent once with the faults paused, the first answer counts;
	// once: sent once under faults, a 5xx or no answer says nothing.
	strict, once bool
	kind         string   // a claim's: colliding or unknown
	leases       []string // a claim's: the jobs of the leases it handed out
	bad          string   // what else was wrong with the answer, if anything
}

func (x exchange) problem() string {
	if len(x.statuses) == 0 {
		return x.what + ": never sent"
	}
	last := x.statuses[len(x.statuses)-1]
	switch {
	case len(x.leases) > 0:
		return fmt.Sprintf("%s handed out leases for jobs %v", x.what, x.leases)
	case x.bad != "":
		return fmt.Sprintf("%s answered %v: %s", x.what, x.statuses, x.bad)
	case x.want >= 300 && has2xx(x.statuses):
		return fmt.Sprintf("%s was accepted: %v", x.what, x.statuses)
	case x.once && !x.strict && retryableStatus(last):
		return ""
	case x.strict && len(x.statuses) != 1, last != x.want:
		return fmt.Sprintf("%s answered %v, not %d", x.what, x.statuses, x.want)
	}
	return ""
}

// hostile is the hostile tenant of one run.
type hostile struct {
	plan HostilePlan
	r    *run
	c    *client

	colliders sync.WaitGroup // claims on the colliding names, until the run stops its workers
	flood     sync.WaitGroup // the rest of the run-phase work

	mu        sync.Mutex
	exchanges map[string][]exchange // by the check they count in
	subs      []*submission         // by JobPlan.N
}

func newHostile(r *run, plan HostilePlan) *hostile {
	return &hostile{plan: plan, r: r, c: newClient(r.st.URL, HostileKey), subs: make([]*submission, len(plan.Flood)), exchanges: map[string][]exchange{}}
}

func (h *hostile) record(check string, x exchange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exchanges[check] = append(h.exchanges[check], x)
}

// send makes a request whose answer must be want: once, the first answer
// counting (strict), or again after each 5xx or no answer.
func (h *hostile) send(ctx context.Context, check, what, method, path string, body []byte, want int, strict bool, deadline time.Time) {
	as := []answer{h.c.once(ctx, method, path, body)}
	if !strict && as[0].retryable() {
		as = append(as, h.c.retry(ctx, deadline, method, path, body)...)
	}
	h.record(check, exchange{what: what, statuses: statuses(as), want: want, strict: strict})
}

// start sets the hostile tenant going: the colliding claims until work
// ends (waits of 0 and 1 s in turn), the rest until it is done or the
// deadline passes.
func (h *hostile) start(work, ctx context.Context, deadline time.Time) {
	for _, name := range CollidingQueues() {
		h.colliders.Go(func() {
			for i := 0; work.Err() == nil; i++ {
				h.claim(work, name, claimColliding, i%2)
			}
		})
	}
	h.flood.Go(func() { h.runPhase(ctx, deadline) })
}

// claim makes one claim on a name no job of its own names: it must be
// handed nothing.
func (h *hostile) claim(ctx context.Context, name, kind string, wait int) {
	body, _ := json.Marshal(map[string]any{"queue": name, "max": 10, "wait_seconds": wait, "worker": "hostile-" + kind})
	a := h.c.once(ctx, http.MethodPost, "/v1/claim", body)
	if ctx.Err() != nil && a.err != nil {
		return // the run stopped it: not a claim
	}
	x := exchange{what: fmt.Sprintf("claim on %s queue %q", kind, name), statuses: []int{a.status}, want: http.StatusOK, once: true, kind: kind}
	var ca claimAnswer
	if a.ok() && json.Unmarshal(a.body, &ca) != nil {
		x.bad = "unreadable: " + truncate(a.body, 160)
	}
	for _, l := range ca.Leases {
		x.leases = append(x.leases, l.JobID)
	}
	h.record(checkNothing, x)
	if !a.ok() {
		sleep(ctx, 100*time.Millisecond) // a crashed claim: do not spin
	}
}

// runPhase is its work while the run's jobs go: the flood, the unknown
// names, the poison bodies, and reaching for the run's jobs submitted so
// far.
func (h *hostile) runPhase(ctx context.Context, deadline time.Time) {
	var wg sync.WaitGroup
	wg.Go(func() {
		submitAll(ctx, h.plan.Flood, func(p JobPlan) {
			s := &submission{plan: p, ids: map[string]int{}}
			s.send(ctx, h.c, deadline)
			s.raced.Store(true)
			h.mu.Lock()
			h.subs[p.N] = s
			h.mu.Unlock()
		})
	})
	for _, name := range h.plan.Unknown {
		h.claim(ctx, name, claimUnknown, 0)
	}
	h.poison(ctx, false, deadline)
	wg.Wait()
	h.reach(ctx, 5, 2, false, deadline)
}

// poison sends every poison body.
func (h *hostile) poison(ctx context.Context, strict bool, deadline time.Time) {
	for _, p := range h.plan.Poison {
		path := "/v1/jobs"
		if p.Complete {
			path = "/v1/leases/no-lease/complete"
		}
		h.send(ctx, checkPoison, fmt.Sprintf("%s (strict %v)", p.Name, strict), http.MethodPost, path, p.Body, http.StatusBadRequest, strict, deadline)
	}
}

// reach makes requests on the run's jobs answered so far, as if they were
// its own: each must answer 404, as a missing job does.
func (h *hostile) reach(ctx context.Context, gets, more int, strict bool, deadline time.Time) {
	i := 0
	for _, s := range h.r.snapshot() {
		if id := sid(s); id != "" && i < gets {
			h.send(ctx, checkIsolated, "GET "+id, http.MethodGet, "/v1/jobs/"+id, nil, http.StatusNotFound, strict, deadline)
			if i < more {
				h.send(ctx, checkIsolated, "GET events of "+id, http.MethodGet, "/v1/jobs/"+id+"/events", nil, http.StatusNotFound, strict, deadline)
				h.send(ctx, checkIsolated, "cancel "+id, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil, http.StatusNotFound, strict, deadline)
			}
			i++
		}
	}
}

// await waits for the run-phase work, then until its flood is finished or
// the deadline passes.
func (h *hostile) await(ctx context.Context, deadline time.Time) {
	h.flood.Wait()
	await(ctx, h.r.raw, HostileTenant, func() []*submission { return h.subs }, deadline)
}

// endPhase runs with faults paused, once the run's jobs are done.
func (h *hostile) endPhase(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	h.poison(ctx, true, deadline)
	h.reach(ctx, 1<<30, 3, true, deadline)
}

// HostileResult is what the hostile tenant did in a run, and its checks.
// A failed check fails the run as the run's own checks do.
type HostileResult struct {
	Tenant string
	Plan   string // PlanDigest of the jobs it submits
	// Claims counts the claims it made: CollidingClaims on the names that
	// collided under the old queue naming, UnknownClaims on names no job
	// named; ClaimErrors of them answered 5xx or not at all (faults).
	Claims, CollidingClaims, UnknownClaims, ClaimErrors int
	// ForeignLeases it was handed (must be 0: it has no worker step).
	ForeignLeases int
	// Queues are the worker queues under the stack's prefix at the end,
	// QueuesCreated those no job named (must be 0).
	Queues, QueuesCreated int
	// Poison bodies sent, and accepted (must be 0).
	PoisonSent, PoisonAccepted int
	Flood, FloodFinished       int
	Checks                     []*Check
}

// Failed counts the failures of its checks.
func (h *HostileResult) Failed() int {
	n := 0
	for _, c := range h.checks() {
		n += c.Failed
	}
	return n
}

func (h *HostileResult) checks() []*Check {
	if h == nil {
		return nil
	}
	return h.Checks
}

// hostileFacts is what the hostile tenant saw and what the table and the
// queues hold at the end; judgeHostile turns them into its checks.
type hostileFacts struct {
	Plan      HostilePlan
	Exchanges map[string][]exchange
	Subs      []*submission // by JobPlan.N
	Stored    map[string]*domain.Job
	Listed    map[string]bool // its job ids in the table's listing
	ListErr   error
	Prefix    string   // the stack's worker queue prefix
	Queues    []string // the worker queues' names under it
	QueuesErr error
}

// check gathers the facts, once the run has stopped its workers.
func (h *hostile) check(ctx context.Context) *HostileResult {
	h.colliders.Wait()
	raw, prefix := h.r.raw, h.r.st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]
	f := hostileFacts{Plan: h.plan, Exchanges: h.exchanges, Subs: h.subs, Stored: readJobs(ctx, raw, HostileTenant, h.subs), Prefix: prefix}
	f.Listed, f.ListErr = listTenant(ctx, raw, HostileTenant)
	f.Queues, f.QueuesErr = workerQueues(ctx, h.r.st.SQS, prefix)
	return judgeHostile(f)
}

// judgeHostile turns the facts into the hostile tenant's checks and
// figures: its exchanges, the queues, and its flood's jobs as the run's
// own are judged.
func judgeHostile(f hostileFacts) *HostileResult {
	l := newLedger()
	l.prefix, l.cat = "hostile: ", HostileCategory
	res := &HostileResult{Tenant: HostileTenant, Plan: PlanDigest(f.Plan.Flood)}
	for _, check := range sortedKeys(f.Exchanges) {
		for _, x := range f.Exchanges[check] {
			l.judge(check, HostileCategory, x.what, one(x.problem())...)
			if check == checkNothing {
				res.Claims++
				res.CollidingClaims += btoi(x.kind == claimColliding)
				res.UnknownClaims += btoi(x.kind == claimUnknown)
				res.ClaimErrors += btoi(retryableStatus(x.statuses[0]))
				res.ForeignLeases += len(x.leases)
			}
			if check == checkPoison {
				res.PoisonSent++
				res.PoisonAccepted += btoi(has2xx(x.statuses))
			}
		}
	}
	// A worker queue and its P0 and P2 lanes, once a job of the run names it.
	const queues = "no worker queue but those jobs named"
	names, legit := queue.New(nil, queue.Config{WorkerQueuePrefix: f.Prefix}), map[string]bool{}
	for _, q := range WorkerQueues {
		legit[names.WorkerQueueName(Tenant, q)], legit[names.LaneName(Tenant, q, 0)], legit[names.LaneName(Tenant, q, 2)] = true, true, true
		l.judge(queues, HostileCategory, q, wrong(f.QueuesErr == nil && !slices.Contains(f.Queues, names.WorkerQueueName(Tenant, q)), "the run's jobs name it, yet it is missing")...)
	}
	if f.QueuesErr != nil {
		l.judge(queues, HostileCategory, "list", f.QueuesErr.Error())
	}
	for _, q := range f.Queues {
		res.Queues++
		res.QueuesCreated += btoi(!legit[q])
		l.judge(queues, HostileCategory, q, wrong(!legit[q], "exists, but no job named it")...)
	}
	l.judgeSubmits(f.Subs, f.Listed, f.ListErr, f.Stored, nil)
	for _, s := range f.Subs {
		res.Flood += btoi(sid(s) != "")
		res.FloodFinished += btoi(s != nil && s.finished)
	}
	res.Checks = l.checks
	return res
}

// workerQueues lists the worker queues under the stack's prefix, by name.
func workerQueues(ctx context.Context, api queue.API, prefix string) ([]string, error) {
	var names []string
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)}
	for range 100 {
		out, err := api.ListQueues(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, u := range out.QueueUrls {
			names = append(names, u[strings.LastIndex(u, "/")+1:])
		}
		if in.NextToken = out.NextToken; in.NextToken == nil {
			break
		}
	}
	slices.Sort(names)
	return names, nil
}
