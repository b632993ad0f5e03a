package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// ResourceResult is what the resource jobs did, and their checks; their
// failures count in Lost, Duplicated and Mismatched by job.
type ResourceResult struct {
	Jobs       int
	Kinds      map[string]int
	Registered int64
	// Attempts on a slot; Ran those a worker was handed or the built-in
	// executor ran to an outcome (whose slots must not overlap beyond
	// capacity); Unobserved those of them whose slot's taking no write
	// showed (their start is the attempt's).
	Attempts, Ran, Unobserved int
	// Late are attempts whose slot was taken only after their lease had
	// run out (a change slower than the lease): they held nothing.
	Late int
	// Leases handed to workers on a slot, of them Killed (gone silent) and
	// Held (heartbeats answered 2xx).
	Leases, Killed, Held int
	// ResourceFailures are attempts failed with class resource, Switches
	// those after which the step switched resource.
	ResourceFailures, Switches int
	// Samples of the pool; in them the most slots in use per resource, the
	// longest line, and how many found every slot in use.
	Samples, FullSamples, PeakWaiting int
	Waited                            int // steps seen in line in a sample
	PeakInUse                         map[string]int
	// Writes of the pool's items by the engine, and those that lost a
	// race (their condition failed); heartbeats' slot extensions by how
	// they ended.
	Writes, Raced int64
	Extends       map[string]int
	Checks        []*Check
	Notes         []string
}

// Failed counts the failed checks.
func (r *ResourceResult) Failed() int {
	if r == nil {
		return 0
	}
	n := 0
	for _, c := range r.Checks {
		n += c.Failed
	}
	return n
}

func (r *ResourceResult) brief() string {
	if r == nil {
		return "none"
	}
	var pool, peak, kinds []string
	for _, res := range ResourcePool {
		pool = append(pool, fmt.Sprintf("%s %d", res.ID, res.Capacity))
		peak = append(peak, fmt.Sprintf("%s %d/%d", res.ID, r.PeakInUse[res.ID], res.Capacity))
	}
	for _, k := range resourceKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k.kind, r.Kinds[k.kind]))
	}
	ext := []string{"none"}
	if len(r.Extends) > 0 {
		ext = ext[:0]
	}
	for _, k := range sortedKeys(r.Extends) {
		ext = append(ext, fmt.Sprintf("%s %d", k, r.Extends[k]))
	}
	return fmt.Sprintf("pool %s (%d registered); %d jobs (%s); %d attempts on a slot, %d run (%d slots taken unobserved), %d slots taken after their lease ran out; "+
		"%d leases to workers (%d killed, %d held by heartbeats; slot extensions %s); %d resource failures, %d switches; "+
		"%d samples: peak in use %s, %d with every slot in use, longest line %d, %d steps seen in line; %d slot writes, %d lost a race",
		strings.Join(pool, ", "), r.Registered, r.Jobs, strings.Join(kinds, ", "), r.Attempts, r.Ran, r.Unobserved, r.Late,
		r.Leases, r.Killed, r.Held, strings.Join(ext, ", "), r.ResourceFailures, r.Switches,
		r.Samples, strings.Join(peak, ", "), r.FullSamples, r.PeakWaiting, r.Waited, r.Writes, r.Raced)
}

// poolResources are the pool as the domain sees it, to match steps.
func poolResources() map[string]*domain.Resource {
	out := map[string]*domain.Resource{}
	for _, r := range ResourcePool {
		out[r.ID] = &domain.Resource{ID: r.ID, Capabilities: []string{ResourceCapability}, Labels: map[string]string{"zone": r.Zone}, Capacity: r.Capacity}
	}
	return out
}

// check holds the resource jobs to their plan and the pool to its
// capacity, and adds what fails to the run's result by job.
func (p *resourcePool) check(ctx context.Context, r *run, res *Result, subs []*submission, lost, dup, mis map[int]bool) {
	if len(p.plan.Jobs) == 0 {
		return
	}
	var (
		capacity = &Check{Name: "resources: no resource ran more attempts at once than its slots", Category: Duplicated}
		kept     = &Check{Name: "resources: no slot given back while its lease runs", Category: Duplicated}
		sampled  = &Check{Name: "resources: every sample within capacity", Category: Duplicated}
		matching = &Check{Name: "resources: every attempt on a resource its step matches", Category: Mismatched}
		avoided  = &Check{Name: "resources: never again on a resource that failed the step", Category: Mismatched}
		killed   = &Check{Name: "resources: a silent holder's attempt ends with its lease; the step goes on", Category: Lost}
		outcome  = &Check{Name: "resources: every resource job ends as its plan implies", Category: Mismatched}
		leaked   = &Check{Name: "resources: no slot held once every job finished", Category: Lost}
	)
	rr := &ResourceResult{Kinds: map[string]int{}, PeakInUse: map[string]int{}, Extends: map[string]int{},
		Registered: p.registered.Load(), Writes: p.writes.Load(), Raced: p.raced.Load(),
		Checks: []*Check{capacity, kept, sampled, matching, avoided, killed, outcome, leaked}}
	res.Resources = rr
	mark := func(m map[int]bool, n int, counter *int) {
		if !m[n] {
			m[n] = true
			*counter++
		}
	}

	p.mu.Lock()
	leases := make(map[string]leaseSeen, len(p.leases))
	for id, l := range p.leases {
		leases[id] = *l
	}
	samples := slices.Clone(p.samples)
	for _, byKey := range p.extends {
		for _, hows := range byKey {
			for _, how := range hows {
				rr.Extends[how]++
			}
		}
	}
	rr.Notes = slices.Clone(p.notes)
	p.mu.Unlock()

	pool := poolResources()
	jobs := map[string]*domain.Job{}
	byID := map[string]int{}
	for _, n := range sortedInts(p.plan.Jobs) {
		rj := p.plan.Jobs[n]
		rr.Jobs++
		rr.Kinds[rj.Kind]++
		s := subs[n]
		if s == nil || s.id == "" {
			continue // the run's checks count it lost
		}
		j, err := r.raw.Get(ctx, Tenant, s.id)
		if err != nil {
			continue // the run's checks count it lost
		}
		jobs[j.ID], byID[j.ID] = j, n
		if msgs := checkMatching(j, pool); len(msgs) > 0 {
			for _, m := range msgs {
				matching.fail("job %s (%s): %s", j.ID, rj.Kind, m)
			}
			mark(mis, n, &res.Mismatched)
		} else {
			matching.pass()
		}
		if msgs := checkAvoid(j); len(msgs) > 0 {
			for _, m := range msgs {
				avoided.fail("job %s (%s): %s", j.ID, rj.Kind, m)
			}
			mark(mis, n, &res.Mismatched)
		} else {
			avoided.pass()
		}
		if j.State.Terminal() {
			if msg := resourceOutcome(j, rj, pool); msg != "" {
				outcome.fail("job %s (%s): %s", j.ID, rj.Kind, msg)
				mark(mis, n, &res.Mismatched)
			} else {
				outcome.pass()
			}
		}
		for _, st := range j.Steps {
			rr.Switches += len(st.Avoid)
			for _, a := range st.Attempts {
				if a.Resource != "" {
					rr.Attempts++
				}
				if a.State == domain.AttemptFailed && a.Error != nil && a.Error.Class == domain.ClassResource {
					rr.ResourceFailures++
					r.f.Count(KindResourceFailed)
				}
			}
		}
	}

	// Killed holders: the attempt ended when its lease ran out (or by a
	// cancel), and the step had another attempt unless its job was
	// cancelled.
	for _, id := range sortedKeys(leases) {
		l := leases[id]
		rr.Leases++
		if l.Heartbeats > 0 {
			rr.Held++
		}
		if l.Script != ScriptKill {
			continue
		}
		rr.Killed++
		j := jobs[l.Job]
		if j == nil {
			continue
		}
		if msg := checkKilled(j, l); msg != "" {
			killed.fail("job %s: %s", j.ID, msg)
			mark(lost, byID[j.ID], &res.Lost)
		} else {
			killed.pass()
		}
	}

	// Capacity: the attempts that ran, each from when its slot was taken
	// to when its lease ended, never more at once on a resource than its
	// slots; and no write gave a slot back before its lease ended.
	hs := p.holdings()
	spans := map[string][]span{}
	for _, id := range sortedKeys(jobs) {
		j := jobs[id]
		for _, st := range j.Steps {
			for _, a := range st.Attempts {
				sp, ok := spanOf(j, st, a, leases, hs)
				if !ok {
					if sp.late {
						rr.Late++
					}
					continue
				}
				rr.Ran++
				if sp.held == nil {
					rr.Unobserved++
				} else if d := sp.held.dropped; d != nil && d.Start.Before(sp.to) {
					kept.fail("%s", p.describeDrop(sp))
					mark(dup, byID[sp.job], &res.Duplicated)
				} else {
					kept.pass()
				}
				spans[a.Resource] = append(spans[a.Resource], sp)
			}
		}
	}
	for _, pr := range ResourcePool {
		over := overlaps(spans[pr.ID], pr.Capacity)
		if len(over) == 0 {
			capacity.pass()
			continue
		}
		for _, o := range over {
			capacity.fail("%s", p.describe(pr, o))
			for _, sp := range o.spans {
				mark(dup, byID[sp.job], &res.Duplicated)
			}
		}
	}

	// Samples: what the table said while the run went.
	rr.Samples = len(samples)
	waited := map[string]bool{}
	for _, s := range samples {
		for w := range s.Waiters {
			waited[w] = true
		}
		full := true
		for _, pr := range ResourcePool {
			n := s.InUse[pr.ID]
			rr.PeakInUse[pr.ID] = max(rr.PeakInUse[pr.ID], n)
			rr.PeakWaiting = max(rr.PeakWaiting, s.Waiting[pr.ID])
			if n < pr.Capacity {
				full = false
			}
			if n > pr.Capacity {
				sampled.fail("%s (%d slots) had %d live holders at %s: %v", pr.ID, pr.Capacity, n, p.at(s.At), s.Holders[pr.ID])
				for _, key := range s.Holders[pr.ID] {
					if n, ok := byID[strings.SplitN(key, "/", 2)[0]]; ok {
						mark(dup, n, &res.Duplicated)
					}
				}
			} else {
				sampled.pass()
			}
		}
		if full {
			rr.FullSamples++
		}
	}
	rr.Waited = len(waited)

	// Leaks: once every job finished, no slot is held for long (one whose
	// release a crash lost comes back when its lease would have ended).
	p.checkLeaks(ctx, r, leaked, func(job string) {
		if n, ok := byID[job]; ok {
			mark(lost, n, &res.Lost)
		}
	})
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// checkMatching: every attempt of a step that requires a resource ran on
// one of the pool's that matches it.
func checkMatching(j *domain.Job, pool map[string]*domain.Resource) []string {
	var out []string
	for _, s := range j.Steps {
		if s.Spec.Requires == nil {
			continue
		}
		for _, a := range s.Attempts {
			switch res := pool[a.Resource]; {
			case a.Resource == "":
				out = append(out, fmt.Sprintf("step %s attempt %d ran on no resource", s.ID(), a.N))
			case res == nil:
				out = append(out, fmt.Sprintf("step %s attempt %d ran on %q, no resource of the pool", s.ID(), a.N, a.Resource))
			case !res.Matches(s.Spec.Requires):
				out = append(out, fmt.Sprintf("step %s attempt %d ran on %s, which does not match %+v", s.ID(), a.N, a.Resource, *s.Spec.Requires))
			}
		}
	}
	return out
}

// checkAvoid: no attempt of a step ran on a resource an earlier attempt
// failed with class resource, and the step's avoid list names those, in
// order (but for a last one that failed the step: nothing was switched).
func checkAvoid(j *domain.Job) []string {
	var out []string
	for _, s := range j.Steps {
		if s.Spec.Requires == nil {
			continue
		}
		var failed []string
		lastFailed := false
		for _, a := range s.Attempts {
			if a.Resource != "" && slices.Contains(failed, a.Resource) {
				out = append(out, fmt.Sprintf("step %s attempt %d ran on %s, which failed it before (avoid %v)", s.ID(), a.N, a.Resource, s.Avoid))
			}
			lastFailed = a.State == domain.AttemptFailed && a.Error != nil && a.Error.Class == domain.ClassResource
			if lastFailed && a.Resource != "" {
				failed = append(failed, a.Resource)
			}
		}
		want := failed
		if s.State == domain.StepFailed && lastFailed && len(failed) > 0 {
			want = failed[:len(failed)-1]
		}
		if !slices.Equal(s.Avoid, want) && !(len(s.Avoid) == 0 && len(want) == 0) {
			out = append(out, fmt.Sprintf("step %s avoids %v; its resource failures say %v", s.ID(), s.Avoid, want))
		}
	}
	return out
}

// checkKilled: the attempt a worker went silent on ended as a lost lease
// (or by a cancel), and its step went on to another attempt unless the
// job was cancelled.
func checkKilled(j *domain.Job, l leaseSeen) string {
	s, _, err := j.Step(l.Step)
	if err != nil {
		return err.Error()
	}
	if l.Attempt < 1 || l.Attempt > len(s.Attempts) {
		return fmt.Sprintf("step %s has no attempt %d, the one killed", l.Step, l.Attempt)
	}
	a := s.Attempts[l.Attempt-1]
	switch {
	case a.State == domain.AttemptCancelled && j.State == domain.JobCancelled:
		return ""
	case a.State != domain.AttemptTimeout:
		return fmt.Sprintf("step %s attempt %d, killed on %s, ended %s, not as a lost lease", l.Step, l.Attempt, l.Resource, a.State)
	case j.State != domain.JobCancelled && len(s.Attempts) == l.Attempt && s.State != domain.StepFailed:
		return fmt.Sprintf("step %s is %s with no attempt after the killed one (%d)", l.Step, s.State, l.Attempt)
	case j.State != domain.JobCancelled && len(s.Attempts) == l.Attempt && !exhausted(s):
		return fmt.Sprintf("step %s FAILED on the killed attempt %d with attempts left", l.Step, l.Attempt)
	}
	return ""
}

// exhausted reports whether a step has spent its attempts.
func exhausted(s *domain.Step) bool {
	return len(s.Attempts)-s.AttemptBase >= s.Spec.Retry.MaxAttempts
}

// unplannedLoss reports whether a step lost an attempt's lease that its
// plan did not kill: a fault's doing.
func unplannedLoss(s *domain.Step, rj resourceJob) bool {
	for _, a := range s.Attempts {
		planned := s.Spec.Action.Type == domain.ActionWorker && a.N <= len(rj.Script) && rj.Script[a.N-1] == ScriptKill
		if a.State == domain.AttemptTimeout && !planned {
			return true
		}
	}
	return false
}

// resourceOutcome: a resource job ended as its plan implies. A cancelled
// one is checkOutcome's (its cancel answered 200). Worker and pass jobs
// complete, unless a step spent its attempts and faults lost a lease of
// it; a switch job fails once it failed on every matching resource, or
// spent its attempts with a lease lost.
func resourceOutcome(j *domain.Job, rj resourceJob, pool map[string]*domain.Resource) string {
	if j.State == domain.JobCancelled {
		return ""
	}
	var failed *domain.Step
	for _, s := range j.Steps {
		if s.State == domain.StepFailed {
			failed = s
		}
	}
	lossy := failed != nil && exhausted(failed) && unplannedLoss(failed, rj)
	switch rj.Kind {
	case "res-worker", "res-pass":
		if j.State == domain.JobCompleted || j.State == domain.JobFailed && lossy {
			return ""
		}
		return fmt.Sprintf("is %s, not COMPLETED; steps %s", j.State, stepStates(j))
	case "res-switch":
		s := j.Steps[0]
		if j.State != domain.JobFailed {
			return fmt.Sprintf("is %s, not FAILED; steps %s", j.State, stepStates(j))
		}
		matches, failures := 0, 0
		for _, r := range pool {
			if r.Matches(s.Spec.Requires) {
				matches++
			}
		}
		for _, a := range s.Attempts {
			if a.Error != nil && a.Error.Class == domain.ClassResource {
				failures++
			}
		}
		if failures == matches || lossy {
			return ""
		}
		return fmt.Sprintf("failed after %d resource failures with %d resources matching it; attempts %s", failures, matches, attemptStates(j, s.ID()))
	}
	return ""
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
	how            string   // who ran it
	state          domain.AttemptState
}

// spanOf answers the span of an attempt that ran: one a worker was handed
// (it may hold the slot until its lease ends), or one the built-in
// executor ran to an outcome. An attempt nobody ran (its lease written by
// a change reported failed, so no worker was told of it) holds nothing,
// nor one whose slot was taken only after its lease had run out (a slow
// change: its span is late).
func spanOf(j *domain.Job, s *domain.Step, a domain.Attempt, leases map[string]leaseSeen, hs map[string]map[string][]holding) (span, bool) {
	if a.Resource == "" || a.StartedAt == nil {
		return span{}, false
	}
	sp := span{res: a.Resource, job: j.ID, step: s.ID(), attempt: a.N, lease: a.Lease, state: a.State}
	if s.Spec.Action.Type == domain.ActionWorker {
		l, ok := leases[a.Lease]
		if !ok {
			return span{}, false
		}
		sp.how = fmt.Sprintf("worker %s (%s", l.Worker, l.Script)
		if len(l.Answers) > 0 {
			sp.how += ": " + strings.Join(l.Answers, ", ")
		}
		sp.how += ")"
	} else {
		if a.State != domain.AttemptSucceeded && a.State != domain.AttemptFailed {
			return span{}, false
		}
		sp.how = "built-in"
	}
	switch {
	case a.EndedAt != nil && (a.LeaseUntil == nil || a.EndedAt.Before(*a.LeaseUntil)):
		sp.to = *a.EndedAt
	case a.LeaseUntil != nil:
		sp.to = *a.LeaseUntil
	default:
		return span{}, false
	}
	// The lease's slot is the latest stretch of its key: an earlier one
	// was taken by a decision of the same change that lost its race, and
	// may have expired and been pruned before the decision that wrote the
	// lease took the slot again. When that take began only after the
	// lease had ended (a slow or clock-jumped change), the lease held no
	// slot while it ran: late, not given back.
	held := hs[a.Resource][a.Lease]
	for i := range held {
		if sp.held == nil || held[i].since.After(sp.held.since) {
			sp.held = &held[i]
		}
	}
	if sp.held != nil && !sp.held.since.Before(sp.to) {
		sp.held = nil
	}
	switch {
	case sp.held != nil:
		// No earlier than the attempt's start either: a slot kept from an
		// earlier decision of the change held nothing for this lease
		// before it was written.
		sp.from = sp.held.since
		if a.StartedAt.After(sp.from) {
			sp.from = *a.StartedAt
		}
	case len(held) > 0:
		sp.late = true
		return sp, false
	default:
		sp.from = *a.StartedAt // no write showed it: the attempt's start is no later
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
func (p *resourcePool) at(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(p.t0).Seconds())
}

// describe renders an overlap with what the writes showed of each slot.
func (p *resourcePool) describe(pr PoolResource, o overlap) string {
	var parts []string
	for _, sp := range o.spans {
		parts = append(parts, p.describeSpan(sp))
	}
	return fmt.Sprintf("%s (%d slots) ran %d attempts at once for %s from %s: %s",
		pr.ID, pr.Capacity, len(o.spans), o.until.Sub(o.at).Round(time.Millisecond), p.at(o.at), strings.Join(parts, "; "))
}

// describeSpan renders an attempt's hold: when its slot was taken and
// given back, and how its extensions ended.
func (p *resourcePool) describeSpan(sp span) string {
	key := sp.lease
	d := fmt.Sprintf("%s/%s/%d (lease %s) on %s [%s, %s) %s, %s", sp.job, sp.step, sp.attempt, key, sp.res, p.at(sp.from), p.at(sp.to), sp.how, sp.state)
	switch h := sp.held; {
	case h == nil:
		d += ", slot taken unobserved"
	case h.dropped == nil:
		d += fmt.Sprintf(", slot taken by write v%d", h.added.Version)
	case len(h.took) > 0:
		d += fmt.Sprintf(", slot taken by write v%d, dropped by write v%d [%s, %s] that took %v (the slot then expired at %s)",
			h.added.Version, h.dropped.Version, p.at(h.dropped.Start), p.at(h.dropped.End), h.took, p.at(h.lastSeen.ExpiresAt))
	default:
		d += fmt.Sprintf(", slot taken by write v%d, given back by write v%d [%s, %s] (the slot then expired at %s)",
			h.added.Version, h.dropped.Version, p.at(h.dropped.Start), p.at(h.dropped.End), p.at(h.lastSeen.ExpiresAt))
	}
	p.mu.Lock()
	ext := p.extends[sp.res][key]
	p.mu.Unlock()
	if len(ext) > 0 {
		d += fmt.Sprintf(", slot extensions %v", ext)
	}
	return d
}

// describeDrop renders a slot given back while its lease ran.
func (p *resourcePool) describeDrop(sp span) string {
	return fmt.Sprintf("%s: the lease ran until %s, %s after", p.describeSpan(sp), p.at(sp.to), sp.to.Sub(sp.held.dropped.Start).Round(time.Millisecond))
}

// checkLeaks reads the pool (without faults) until no slot is held, for
// up to leakWait: a slot a crash kept from being released comes back
// within a lease. One still held then is leaked.
func (p *resourcePool) checkLeaks(ctx context.Context, r *run, c *Check, lostJob func(job string)) {
	const leakWait = 6 * time.Second
	deadline := time.Now().Add(leakWait)
	for {
		all, err := r.raw.ListResources(ctx, Tenant)
		if err != nil {
			c.fail("list the resources: %v", err)
			return
		}
		now := p.clock.Now()
		held := 0
		for _, res := range all {
			held += res.Live(now)
		}
		if held == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			for _, res := range all {
				if res.Live(now) == 0 {
					c.pass()
					continue
				}
				var keys []string
				for key, h := range res.Holders {
					if now.Before(h.ExpiresAt) {
						keys = append(keys, fmt.Sprintf("%s until %s", key, p.at(h.ExpiresAt)))
						lostJob(strings.SplitN(key, "/", 2)[0])
					}
				}
				slices.Sort(keys)
				c.fail("%s still holds %v at %s, %s after every job finished", res.ID, keys, p.at(now), leakWait)
			}
			return
		}
		sleep(ctx, 200*time.Millisecond)
	}
}
