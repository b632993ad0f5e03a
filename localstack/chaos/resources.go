package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
// What the checks (check, below) rely on is observed, not assumed: a
// middleware beside the fault layer sees every write of a resource item
// the engine makes that was applied (in version order), so when each slot
// was taken (its holder's since) and given back is known exactly; the
// workers note every lease they were handed on a resource.

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

// resourcePlan is what a run does with resources: its waves.
type resourcePlan []resourceWave

// all answers the resource jobs' plans in order.
func (p resourcePlan) all() []JobPlan {
	var out []JobPlan
	for _, w := range p {
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
func (f *Faults) ResourcePlan(first int, c ResourceConfig) resourcePlan {
	var p resourcePlan
	if c.Off || c.Jobs <= 0 {
		return nil
	}
	waves := 2 - btoi(c.Jobs < 4)
	f.Draw(StreamPool, func(r *rand.Rand) {
		for w := range waves {
			wave := resourceWave{Claimers: 2 + r.IntN(3)}
			if w > 0 {
				wave.After = time.Duration(500+r.IntN(1000)) * time.Millisecond
			}
			p = append(p, wave)
		}
	})
	for i := range c.Jobs {
		w := &p[i*waves/c.Jobs]
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
	plan  resourcePlan
	clock *Clock
	t0    time.Time // the stack's clock when the run started

	mu      sync.Mutex
	applied []poolWrite     // the writes of pool resources that were applied
	leases  map[string]bool // the leases of resource jobs' steps workers were handed
	*notes

	registered atomic.Int64
}

func newResourcePool(plan resourcePlan, clock *Clock, n *notes) *resourcePool {
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

func isPoolItem(it map[string]ddb.AttributeValue) bool {
	pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
	return pk != nil && pk.Value == "R#"+Tenant
}

// poolWrite is a PutItem of a pool resource that was applied.
type poolWrite struct {
	Res        string
	Version    int64
	Start, End time.Time // the attempt, on the stack's clock
	Holders    map[string]domain.Holder
}

// observeCall notes a PutItem of a pool resource in its call's context.
func (p *resourcePool) observeCall(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	if put, ok := in.Parameters.(*dynamodb.PutItemInput); ok && isPoolItem(put.Item) {
		var r domain.Resource
		if err := attributevalue.UnmarshalMap(put.Item, &r); err != nil {
			p.note("a write of a resource is unreadable: %v", err)
		} else {
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
	if len(p.plan) == 0 {
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
	for _, wave := range p.plan {
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
func script(s []string, n int) string {
	if n >= 1 && n <= len(s) {
		return s[n-1]
	}
	return ScriptComplete
}

// resource handles a lease of a resource job's worker step as its script
// says.
func (w *workers) resource(ctx context.Context, name string, l wire.ClaimedLease, do string) {
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

// ResourceResult is what the resource jobs did; their checks are in the
// run's.
type ResourceResult struct {
	Jobs       int
	Registered int64
	// Ran counts the attempts a worker was handed or the built-in executor
	// ran to an outcome on a slot (whose slots must not overlap beyond
	// capacity); Unobserved those of them whose slot's taking no write
	// showed (their start is the attempt's); Late the attempts whose slot
	// was taken only after their lease had run out (they held nothing).
	Ran, Unobserved, Late int
}

// Which resource an attempt runs on, and that a step fails once every
// matching resource failed it, are fixed by the engine's candidates (the
// matching resources off the step's avoid list), whatever the faults:
// shared/domain's TestResourceFailureSwitchesResource and
// TestResourceFailureExhausted, shared/engine's
// TestResourcePoolSlotsSwitchAndWake and
// TestResourceFailureWithNoOtherResourceFails prove them.

// check holds the pool to its capacity: the attempts that ran, each from
// when its slot was taken to when its lease ended, never more at once on
// a resource than its slots; no write gave a slot back before its lease
// ended; no slot held once every job finished.
func (p *resourcePool) check(ctx context.Context, r *run, l *ledger, res *Result, stored map[string]*domain.Job) {
	if len(p.plan) == 0 {
		return
	}
	const capacity, kept, leaked = "resources: no resource ran more attempts at once than its slots", "resources: no slot given back while its lease runs", "resources: no slot held once every job finished"
	rr := &ResourceResult{Jobs: len(p.plan.all()), Registered: p.registered.Load()}
	res.Resources = rr
	p.mu.Lock()
	leases := maps.Clone(p.leases)
	p.mu.Unlock()
	hs := p.holdings()
	spans, keys := map[string][]span{}, map[string]string{}
	for _, jp := range p.plan.all() {
		s := r.subs[jp.N]
		j := stored[s.id]
		if j == nil {
			continue // the run's checks count it lost
		}
		keys[j.ID] = s.key()
		for _, st := range j.Steps {
			for _, a := range st.Attempts {
				if a.State == domain.AttemptFailed && a.Error != nil && a.Error.Class == domain.ClassResource {
					r.f.Count(KindResourceFailed)
				}
				sp, ok := spanOf(j, st, a, leases, hs)
				rr.Late += btoi(sp.late)
				if !ok {
					continue
				}
				rr.Ran++
				rr.Unobserved += btoi(sp.held == nil)
				early := sp.held != nil && sp.held.dropped != nil && sp.held.dropped.Start.Before(sp.to)
				l.judge(kept, Duplicated, keys[j.ID], wrong(early, p.describe(sp)+": its lease ran on")...)
				spans[a.Resource] = append(spans[a.Resource], sp)
			}
		}
	}
	for _, pr := range ResourcePool {
		over := overlaps(spans[pr.ID], pr.Capacity)
		if len(over) == 0 {
			l.judge(capacity, Duplicated, pr.ID)
		}
		for _, o := range over {
			for _, sp := range o.spans {
				l.judge(capacity, Duplicated, keys[sp.job], p.describeOverlap(pr, o))
			}
		}
	}
	held := p.leaks(ctx, r)
	for _, h := range held {
		l.judge(leaked, Lost, cmp.Or(keys[h[0]], "job "+h[0]), h[1])
	}
	if len(held) == 0 {
		l.judge(leaked, Lost, "pool")
	}
}

// span is an attempt's hold on a slot: from when the slot was taken (or
// the attempt started, if later) to when its lease ended (its outcome, a
// cancel, or its expiry). Both ends are bounds a correct engine keeps: a
// slot is taken (its since) only after the slot before it was given back
// or expired, and given back only after the attempt's end was written.
type span struct {
	job, step string
	a         domain.Attempt // its lease is its slot's key
	from, to  time.Time
	held      *holding // the stretch its slot was held, as the writes showed it; nil if none did
	late      bool     // its slot was taken only after its lease had ended
}

// spanOf answers the span of an attempt that ran: one a worker was handed
// (it may hold the slot until its lease ends), or one the built-in
// executor ran to an outcome. An attempt nobody ran (its lease written by
// a change reported failed, so no worker was told of it) holds nothing,
// nor one whose slot was taken only after its lease had run out (a slow
// change: its span is late).
func spanOf(j *domain.Job, s *domain.Step, a domain.Attempt, leases map[string]bool, hs map[string]map[string]*holding) (span, bool) {
	worker := s.Spec.Action.Type == domain.ActionWorker
	if a.Resource == "" || a.StartedAt == nil || worker && !leases[a.Lease] || !worker && a.State != domain.AttemptSucceeded && a.State != domain.AttemptFailed {
		return span{}, false
	}
	sp := span{job: j.ID, step: s.ID(), a: a, from: *a.StartedAt}
	switch {
	case a.EndedAt != nil && (a.LeaseUntil == nil || a.EndedAt.Before(*a.LeaseUntil)):
		sp.to = *a.EndedAt
	case a.LeaseUntil != nil:
		sp.to = *a.LeaseUntil
	default:
		return span{}, false
	}
	// The lease's slot is the last stretch of its key: an earlier one was
	// taken by a decision of the same change that lost its race, and may
	// have expired and been pruned before the decision that wrote the
	// lease took the slot again. When that take began only after the
	// lease had ended (a slow or clock-jumped change), the lease held no
	// slot while it ran: late, not given back. A slot no write showed
	// taken starts no later than the attempt; one kept from an earlier
	// decision of the change held nothing for this lease before the
	// attempt started.
	switch h := hs[a.Resource][a.Lease]; {
	case h != nil && !h.since.Before(sp.to):
		sp.late = true
		return sp, false
	case h != nil:
		sp.held = h
		if h.since.After(sp.from) {
			sp.from = h.since
		}
	}
	return sp, sp.from.Before(sp.to)
}

// overlap is a moment a resource had more attempts at once than slots.
type overlap struct {
	at, until time.Time
	spans     []span
}

// overlaps answers the moments more than capacity spans are open at once:
// each time a span opens over capacity, with the spans open then.
func overlaps(spans []span, capacity int) []overlap {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var open []span
	var out []overlap
	for _, sp := range spans {
		open = slices.DeleteFunc(open, func(o span) bool { return !o.to.After(sp.from) })
		open = append(open, sp)
		if len(open) > capacity {
			o := overlap{at: sp.from, until: sp.to, spans: slices.Clone(open)}
			for _, x := range open {
				if x.to.Before(o.until) {
					o.until = x.to
				}
			}
			out = append(out, o)
		}
	}
	return out
}

// at renders a time of the stack's clock from the run's start.
func (p *resourcePool) at(t time.Time) string { return fmt.Sprintf("+%.3fs", t.Sub(p.t0).Seconds()) }

// describe renders an attempt's hold, with what the writes showed of its
// slot.
func (p *resourcePool) describe(sp span) string {
	d := fmt.Sprintf("%s/%s/%d (lease %s) on %s [%s, %s)", sp.job, sp.step, sp.a.N, sp.a.Lease, sp.a.Resource, p.at(sp.from), p.at(sp.to))
	switch h := sp.held; {
	case h == nil:
		return d + ", slot taken unobserved"
	case h.dropped == nil:
		return d + fmt.Sprintf(", slot taken by write v%d", h.added)
	}
	return d + fmt.Sprintf(", slot taken by write v%d, given back by write v%d [%s, %s]", sp.held.added, sp.held.dropped.Version, p.at(sp.held.dropped.Start), p.at(sp.held.dropped.End))
}

func (p *resourcePool) describeOverlap(pr *domain.Resource, o overlap) string {
	var parts []string
	for _, sp := range o.spans {
		parts = append(parts, p.describe(sp))
	}
	return fmt.Sprintf("%s (%d slots) ran %d attempts at once for %s from %s: %s",
		pr.ID, pr.Capacity, len(o.spans), o.until.Sub(o.at).Round(time.Millisecond), p.at(o.at), strings.Join(parts, "; "))
}

// leaks reads the pool (without faults) until no slot is held, for up to
// six seconds: a slot a crash kept from being released comes back within
// a lease. Each slot still held then is answered as {its job, what}.
func (p *resourcePool) leaks(ctx context.Context, r *run) [][2]string {
	var held [][2]string
	poll(ctx, time.Now().Add(6*time.Second), 200*time.Millisecond, func() bool {
		all, err := r.raw.ListResources(ctx, Tenant)
		if err != nil {
			held = [][2]string{{"", "list the resources: " + err.Error()}}
			return true
		}
		held = nil
		now := p.clock.Now()
		for _, res := range all {
			for key, h := range res.Holders {
				if now.Before(h.ExpiresAt) {
					held = append(held, [2]string{h.Job, fmt.Sprintf("%s holds %s until %s, after every job finished", res.ID, key, p.at(h.ExpiresAt))})
				}
			}
		}
		return len(held) == 0
	})
	return held
}
