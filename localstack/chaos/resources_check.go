package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

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
	if len(p.plan.Waves) == 0 {
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
	res, job, step string
	attempt        int
	lease          string // the attempt's lease: its slot's key
	from, to       time.Time
	held           *holding // the stretch its slot was held, as the writes showed it; nil if none did
	late           bool     // its slot was taken only after its lease had ended
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
	sp := span{res: a.Resource, job: j.ID, step: s.ID(), attempt: a.N, lease: a.Lease, from: *a.StartedAt}
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
	d := fmt.Sprintf("%s/%s/%d (lease %s) on %s [%s, %s)", sp.job, sp.step, sp.attempt, sp.lease, sp.res, p.at(sp.from), p.at(sp.to))
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
