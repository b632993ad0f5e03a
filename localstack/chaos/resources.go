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
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// Resource pools under chaos. At start the run's tenant registers
// ResourcePool (four slots on three resources), and beside the plan a
// batch of resource jobs, drawn from StreamPool, whose worker and
// built-in steps require them, so more steps compete than there are
// slots. The jobs come in waves, each submitted at once and met by a
// storm of extra claimers (KindSlotRace). A resource job's worker step
// carries a script the chaos workers follow attempt by attempt: go silent
// while holding the slot (KindSlotHolderKilled), fail with class resource
// (KindResourceFailed, as does a built-in fail step that switches through
// every matching resource), hold the slot over heartbeats, or complete.
// The faults of the rest of the run apply to every call these make.
//
// What the checks (resources_check.go) rely on is observed, not assumed:
// a middleware beside the fault layer sees every write of a resource item
// the engine makes that was applied (in version order), so when each slot
// was taken (its holder's since) and given back is known exactly; the
// workers note every lease they were handed on a resource and every
// answer under it.

// ResourceConfig sizes a run's resource jobs.
type ResourceConfig struct {
	Off  bool // no resources, no resource jobs
	Jobs int  // resource jobs beside Config.Jobs; 0 means 8
}

func (c *ResourceConfig) defaults() { c.Jobs = cmp.Or(c.Jobs, 8) }

// ResourceCapability is the capability every pool resource has.
const ResourceCapability = "gpu"

// ResourcePool is what the run registers: zone a has three slots on two
// resources, zone b one.
var ResourcePool = []*domain.Resource{poolResource("gpu-1", "a", 1), poolResource("gpu-2", "a", 2), poolResource("gpu-3", "b", 1)}

func poolResource(id, zone string, capacity int) *domain.Resource {
	return &domain.Resource{ID: id, Capabilities: []string{ResourceCapability}, Labels: map[string]string{"zone": zone}, Capacity: capacity}
}

// WorkerResource is the WorkerMarker of a resource job: the workers follow
// the script in its ScriptMember, one entry per attempt (complete beyond
// its end).
const (
	WorkerResource = "resource"
	ScriptMember   = "chaos_script"
)

// What a worker does with an attempt of a resource job's worker step.
const (
	ScriptKill     = "kill"     // hold the slot and go silent: no heartbeat, no outcome
	ScriptResource = "resource" // fail with class resource: the step switches
	ScriptHold     = "hold"     // heartbeat with half the lease left, then complete
	ScriptComplete = "complete"
)

// resourceKinds are the resource jobs' kinds with their weights:
// res-worker a worker step (between built-in steps, some), res-pass
// built-in steps only, res-switch a built-in step that fails with class
// resource on every resource it is given.
var resourceKinds = weightedKinds{{"res-worker", 6}, {"res-pass", 3}, {"res-switch", 1}}

// resourceWave is a group of resource jobs submitted at once, After the
// first wave, then met by Claimers extra claimers per worker queue.
type resourceWave struct {
	After    time.Duration
	Jobs     []JobPlan
	Claimers int
}

// resourcePlan is what a run does with resources.
type resourcePlan struct{ Waves []resourceWave }

// all answers the resource jobs' plans in order.
func (p *resourcePlan) all() []JobPlan {
	var out []JobPlan
	for _, w := range p.Waves {
		out = append(out, w.Jobs...)
	}
	return out
}

// requirements are what a step may require of the pool.
var requirements = []*domain.Requirements{
	{Capabilities: []string{ResourceCapability}},
	{Capabilities: []string{ResourceCapability}, Labels: map[string]string{"zone": "a"}},
	{Labels: map[string]string{"zone": "b"}},
}

// matching answers how many of the pool's resources match req.
func matching(req *domain.Requirements) int {
	n := 0
	for _, r := range ResourcePool {
		n += btoi(r.Matches(req))
	}
	return n
}

// ResourcePlan draws a run's resource jobs from StreamPool, numbered
// from first (after the plan's): the same seed, the same jobs, and the
// rest of the plan is not changed by them.
func (f *Faults) ResourcePlan(first int, c ResourceConfig) *resourcePlan {
	p := &resourcePlan{}
	if c.Off || c.Jobs <= 0 {
		return p
	}
	waves := 2 - btoi(c.Jobs < 4)
	f.Draw(StreamPool, func(r *rand.Rand) {
		for w := range waves {
			wave := resourceWave{Claimers: 2 + r.IntN(3)}
			if w > 0 {
				wave.After = time.Duration(500+r.IntN(1000)) * time.Millisecond
			}
			p.Waves = append(p.Waves, wave)
		}
	})
	for i := range c.Jobs {
		w := &p.Waves[i*waves/c.Jobs]
		f.Draw(StreamPool, func(r *rand.Rand) { w.Jobs = append(w.Jobs, planResourceJob(r, f.Seed, first+i)) })
	}
	return p
}

func planResourceJob(r *rand.Rand, seed uint64, n int) JobPlan {
	kind := resourceKinds.pick(r)
	payload := map[string]any{"seed": seed, "n": n}
	requiring := func(req int, s map[string]any) map[string]any { return with(s, "requires", requirements[req]) }
	pass := func(id string) map[string]any { return requiring(r.IntN(len(requirements)), step(id, "pass")) }
	var steps []map[string]any
	switch kind {
	case "res-worker":
		req := r.IntN(2) // any GPU, or zone a: two resources or more to switch between
		script := planScript(r, matching(requirements[req])-1)
		payload[WorkerMarker], payload[ScriptMember] = WorkerResource, script
		// Two-second leases: a silent holder's slot comes back soon, and a
		// claim's answer still reaches its worker in time on a machine
		// loaded as `make test` loads it (with one second, a short run
		// under -race saw every lease end before its worker had it). Two
		// attempts beyond the script, for leases other faults lose.
		worker := requiring(req, step("train", "worker", "queue", WorkerQueues[r.IntN(len(WorkerQueues))], "lease_seconds", 2))
		worker["retry"] = fixedRetry(len(script)+2, 100)
		if r.IntN(2) == 0 {
			steps = append(steps, pass("prep"))
		}
		steps = append(steps, worker)
		if r.IntN(2) == 0 {
			steps = append(steps, pass("post"))
		}
	case "res-pass":
		for s := range 2 + r.IntN(2) {
			steps = append(steps, pass(fmt.Sprintf("p%d", s+1)))
		}
	case "res-switch":
		// Fails with class resource on every resource it is given: it
		// switches until none that matches is left, then fails.
		sw := requiring(r.IntN(2), step("flaky", "fail", "class", "resource", "message", "chaos: the GPU faulted"))
		steps = append(steps, with(sw, "retry", fixedRetry(5, 100)))
	}
	var cancel time.Duration
	if r.Float64() < 0.1 {
		cancel = time.Duration(300+r.IntN(1700)) * time.Millisecond
	}
	return JobPlan{N: n, Kind: kind, Key: fmt.Sprintf("chaos-%d-%d", seed, n), Body: spec(steps, payload, r.IntN(3)), CancelAfter: cancel}
}

// planScript draws a worker step's script: up to two attempts that end
// without success (at most switches resource failures, so a resource is
// always left to switch to), then one that succeeds.
func planScript(r *rand.Rand, switches int) []string {
	var out []string
	for range r.IntN(3) {
		switch x := r.IntN(10); {
		case x < 3:
			out = append(out, ScriptKill)
		case x < 7 && switches > 0:
			switches--
			out = append(out, ScriptResource)
		default:
			out = append(out, ScriptHold)
		}
	}
	if len(out) > 0 && out[len(out)-1] == ScriptHold {
		return out // a hold completes
	}
	if r.IntN(2) == 0 {
		return append(out, ScriptHold)
	}
	return append(out, ScriptComplete)
}

// resourcePool is a run's resource coverage: the plan, what the observer
// and the workers saw.
type resourcePool struct {
	plan  *resourcePlan
	clock *Clock
	t0    time.Time // the stack's clock when the run started

	mu      sync.Mutex
	applied []poolWrite     // the writes of pool resources that were applied
	leases  map[string]bool // the leases of resource jobs' steps workers were handed
	*notes

	registered atomic.Int64
}

func newResourcePool(plan *resourcePlan, clock *Clock, n *notes) *resourcePool {
	return &resourcePool{plan: plan, clock: clock, t0: clock.Now(), leases: map[string]bool{}, notes: n}
}

// Observe is an APIOptions entry: beside the fault layer it reads every
// resource item of the run's tenant the engine puts. It looks at each
// HTTP attempt right at the transport, inside the fault layer's attempt
// faults, so a write applied whose answer an ambiguous fault replaced is
// seen applied, and a call a crash stopped before it is not seen at all.
func (p *resourcePool) Observe(s *middleware.Stack) error {
	if err := s.Initialize.Add(middleware.InitializeMiddlewareFunc("chaos.ResourcesCall", p.observeCall), middleware.After); err != nil {
		return err
	}
	return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("chaos.ResourcesAttempt", p.observeAttempt), middleware.After)
}

type poolCallKey struct{}

// poolWrite is a PutItem of a pool resource that was applied.
type poolWrite struct {
	Res        string
	Version    int64
	Start, End time.Time // the attempt, on the stack's clock
	Holders    map[string]domain.Holder
}

// observeCall notes a PutItem of a pool resource in its call's context.
func (p *resourcePool) observeCall(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	if put, ok := in.Parameters.(*dynamodb.PutItemInput); ok && poolItem(put.Item) != "" {
		var r domain.Resource
		if err := attributevalue.UnmarshalMap(put.Item, &r); err != nil {
			p.note("a write of a resource is unreadable: %v", err)
		} else {
			r.ID = poolItem(put.Item)
			ctx = context.WithValue(ctx, poolCallKey{}, &r)
		}
	}
	return next.HandleInitialize(ctx, in)
}

// observeAttempt notes each attempt of such a PutItem that was applied.
func (p *resourcePool) observeAttempt(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	r, _ := ctx.Value(poolCallKey{}).(*domain.Resource)
	if r == nil {
		return next.HandleDeserialize(ctx, in)
	}
	start := p.clock.Now()
	out, md, err := next.HandleDeserialize(ctx, in)
	if res, ok := out.RawResponse.(*smithyhttp.Response); ok && res.StatusCode == http.StatusOK {
		p.mu.Lock()
		p.applied = append(p.applied, poolWrite{Res: r.ID, Version: r.Version, Start: start, End: p.clock.Now(), Holders: r.Holders})
		p.mu.Unlock()
	}
	return out, md, err
}

// poolItem answers the resource id of an item of the run's tenant's
// resources, "" for any other item.
func poolItem(it map[string]ddb.AttributeValue) string {
	pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
	sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
	if pk == nil || sk == nil || pk.Value != "R#"+Tenant {
		return ""
	}
	return sk.Value
}

// holding is the last stretch a holder key held a slot on a resource, as
// the applied writes show it: from the write that took it (with its since)
// to the write that dropped it, if one did.
type holding struct {
	since   time.Time
	added   int64 // the version of the write that took it
	dropped *poolWrite
}

// holdings answers, per resource and holder key, the last stretch each
// slot was held, from the applied writes in version order.
func (p *resourcePool) holdings() map[string]map[string]*holding {
	p.mu.Lock()
	writes := slices.Clone(p.applied)
	p.mu.Unlock()
	slices.SortStableFunc(writes, func(a, b poolWrite) int {
		return cmp.Or(strings.Compare(a.Res, b.Res), cmp.Compare(a.Version, b.Version))
	})
	out := map[string]map[string]*holding{}
	for _, w := range writes {
		if out[w.Res] == nil {
			out[w.Res] = map[string]*holding{}
		}
		for key, h := range out[w.Res] {
			if _, still := w.Holders[key]; !still && h.dropped == nil {
				h.dropped = &w
			}
		}
		for key, hd := range w.Holders {
			// Taken again (after a drop, or with a new since in one write): a new stretch.
			if h := out[w.Res][key]; h == nil || h.dropped != nil || !h.since.Equal(hd.Since) {
				out[w.Res][key] = &holding{since: hd.Since, added: w.Version}
			}
		}
	}
	return out
}

// submit registers the pool (each resource again on a 5xx or no answer),
// then submits each wave at once, each job from its own goroutine, and
// sends the wave's claim storm: extra claimers of one claim each, their
// leases handled as any worker's. ctx bounds the submits, work the
// storm's claimers.
func (p *resourcePool) submit(ctx, work context.Context, r *run, deadline time.Time) {
	if len(p.plan.Waves) == 0 {
		return
	}
	for _, res := range ResourcePool {
		body, _ := json.Marshal(map[string]any{"capabilities": res.Capabilities, "labels": res.Labels, "capacity": res.Capacity})
		as := r.c.retry(ctx, deadline, http.MethodPut, "/v1/resources/"+res.ID, body)
		if a := as[len(as)-1]; a.ok() {
			p.registered.Add(1)
		} else {
			p.note("resource %s not registered: %d %s %v", res.ID, a.status, truncate(a.body, 160), a.err)
		}
	}
	start := time.Now()
	for _, wave := range p.plan.Waves {
		sleep(ctx, time.Until(start.Add(wave.After)))
		var wg sync.WaitGroup
		for _, jp := range wave.Jobs {
			wg.Go(func() { r.submit(ctx, jp.N, deadline) })
		}
		wg.Wait()
		r.f.Count(KindSlotRace)
		for _, q := range WorkerQueues {
			for i := range wave.Claimers {
				r.w.wg.Go(func() { r.w.claim(work, fmt.Sprintf("%s-storm%d", q, i), q) })
			}
		}
	}
}

// script answers what a resource job's worker does with attempt n.
func script(input json.RawMessage, n int) string {
	var v struct {
		S []string `json:"chaos_script"`
	}
	_ = json.Unmarshal(input, &v)
	if n >= 1 && n <= len(v.S) {
		return v.S[n-1]
	}
	return ScriptComplete
}

// resource handles a lease of a resource job's worker step by its script.
func (w *workers) resource(ctx context.Context, name string, l wire.ClaimedLease) {
	do := script(l.Input, l.Attempt)
	if p := w.pool; p != nil {
		p.mu.Lock()
		p.leases[l.LeaseID] = true
		p.mu.Unlock()
	}
	expires := l.ExpiresAt
	switch do {
	case ScriptKill:
		w.f.Count(KindSlotHolderKilled)
		return // the slot comes back when the lease expires
	case ScriptHold:
		// With half the lease left, by the stack's clock, the worker
		// extends it, and goes on past where it would have ended: the
		// slot's expiry must follow the lease's.
		half := time.Duration(l.LeaseSeconds) * time.Second / 2
		w.waitUntil(ctx, func() bool { return !w.clock.Now().Before(expires.Add(-half)) })
		a := w.send(ctx, l, "heartbeat", &expires, func(bool) []byte { return []byte(`{}`) })
		var hb wire.HeartbeatResult
		if !a.ok() || json.Unmarshal(a.body, &hb) != nil || hb.CancelRequested || hb.ExpiresAt == nil {
			return // lost, or cancelled: stop working
		}
		expires = *hb.ExpiresAt
		w.waitUntil(ctx, func() bool { return !w.clock.Now().Before(l.ExpiresAt.Add(100 * time.Millisecond)) })
	default:
		sleep(ctx, 100*time.Millisecond) // holding the slot meanwhile
	}
	class, msg := "", ""
	if do == ScriptResource && l.Resource != nil {
		class, msg = "resource", fmt.Sprintf("worker %s: resource %s failed", name, l.Resource.ID)
	}
	if ctx.Err() == nil {
		w.report(ctx, l, &expires, class, msg, name)
	}
}
