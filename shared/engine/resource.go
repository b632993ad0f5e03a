package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Resources keeps a tenant's resources. SaveResource writes r only if the
// stored one is still at r.Version (0: none stored yet), so of two writers
// racing on a slot exactly one wins (domain.ErrVersionConflict for the
// other); it bumps r.Version on success.
type Resources interface {
	GetResource(ctx context.Context, tenant, id string) (*domain.Resource, error)
	// ListResources answers all of a tenant's resources (at most
	// domain.MaxResourcesPerTenant), by id.
	ListResources(ctx context.Context, tenant string) ([]*domain.Resource, error)
	SaveResource(ctx context.Context, r *domain.Resource) error
	DeleteResource(ctx context.Context, tenant, id string, version int64) error
	// ExtendHolder moves a held slot's expiry to until (a heartbeat); it
	// bumps the version so no racing write puts back the old expiry. A
	// slot no longer held answers domain.ErrLeaseLost (nothing is made).
	ExtendHolder(ctx context.Context, tenant, id, key string, until time.Time) error
}

// PutResource creates or changes a resource; the slots held stay held.
func (e *Engine) PutResource(ctx context.Context, tenant, id string, body []byte) (*domain.Resource, bool, error) {
	if err := domain.CheckResourceID(id); err != nil {
		return nil, false, err
	}
	spec, err := domain.ParseResourceSpec(body)
	if err != nil {
		return nil, false, err
	}
	var woken []domain.Waiter
	created := false
	r, err := e.changeResource(ctx, tenant, id, true, func(r *domain.Resource, now time.Time) error {
		created = r.Version == 0
		if created {
			n, err := e.cfg.Resources.ListResources(ctx, tenant)
			if err != nil {
				return err
			}
			if len(n) >= domain.MaxResourcesPerTenant {
				return domain.Invalid("id", "tenant %s already has %d resources, the limit", tenant, len(n))
			}
		}
		r.Apply(spec, now)
		woken = r.Wake(now) // a raised capacity frees slots
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	e.wake(ctx, tenant, r.ID, woken)
	return r, created, nil
}

// GetResource answers one of tenant's resources.
func (e *Engine) GetResource(ctx context.Context, tenant, id string) (*domain.Resource, error) {
	if !domain.ValidResourceID(id) {
		return nil, fmt.Errorf("resource %.64q: %w", id, domain.ErrNotFound)
	}
	return e.cfg.Resources.GetResource(ctx, tenant, id)
}

// ListResources answers tenant's resources.
func (e *Engine) ListResources(ctx context.Context, tenant string) ([]*domain.Resource, error) {
	return e.cfg.Resources.ListResources(ctx, tenant)
}

// DeleteResource removes a resource no lease holds a slot of: one still
// held answers a conflict naming the leases, so no running step loses the
// resource it runs on.
func (e *Engine) DeleteResource(ctx context.Context, tenant, id string) error {
	r, err := e.GetResource(ctx, tenant, id)
	if err != nil {
		return err
	}
	now := e.now()
	if n := r.Live(now); n > 0 {
		var leases []string
		for _, h := range r.Holders {
			if now.Before(h.ExpiresAt) {
				leases = append(leases, h.Lease)
			}
		}
		slices.Sort(leases)
		return &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf("resource %s has %d slots in use (leases %v); delete it when they end", id, n, leases)}
	}
	err = e.cfg.Resources.DeleteResource(ctx, tenant, id, r.Version)
	if !errors.Is(err, domain.ErrVersionConflict) {
		return err
	}
	if _, gerr := e.cfg.Resources.GetResource(ctx, tenant, id); errors.Is(gerr, domain.ErrNotFound) {
		return nil // gone: this delete's own write retried after its answer was lost, or a concurrent delete
	}
	return &domain.Error{Code: domain.CodeConflict, Message: fmt.Sprintf("resource %s changed while being deleted; try again", id)}
}

// changeResource reads a resource (a new one when create and none is
// stored), lets change decide and saves it conditionally, again on a lost
// race.
func (e *Engine) changeResource(ctx context.Context, tenant, id string, create bool, change func(r *domain.Resource, now time.Time) error) (*domain.Resource, error) {
	for race := range maxRaces {
		if race > 0 && !lostRace(ctx, race-1) {
			return nil, ctx.Err()
		}
		r, err := e.cfg.Resources.GetResource(ctx, tenant, id)
		if errors.Is(err, domain.ErrNotFound) && create {
			r, err = &domain.Resource{Tenant: tenant, ID: id}, nil
		}
		if err != nil {
			return nil, err
		}
		if err := change(r, e.now()); err != nil {
			return nil, err
		}
		err = e.cfg.Resources.SaveResource(ctx, r)
		if errors.Is(err, domain.ErrVersionConflict) {
			continue
		}
		return r, err
	}
	return nil, fmt.Errorf("resource %s: gave up after %d lost races: %w: %w", id, maxRaces, domain.ErrContended, domain.ErrVersionConflict)
}

// slotRequest is a step's ask for a slot for its next attempt.
type slotRequest struct {
	tenant, job, step string
	key               string // the id the lease will have: the slot's holder key
	req               *domain.Requirements
	avoid             []string
	expires           time.Time
	waiter            domain.Waiter
}

func newSlotRequest(j *domain.Job, s *domain.Step, i int, nonce string, expires, now time.Time) slotRequest {
	w := domain.Waiter{Job: j.ID, Step: s.ID(), Since: now, Priority: j.Priority}
	if s.Spec.Action.Type == domain.ActionWorker {
		w.Queue = s.Spec.Action.Queue
	}
	return slotRequest{
		tenant: j.Tenant, job: j.ID, step: s.ID(), key: domain.LeaseRef{JobID: j.ID, StepIndex: i, Attempt: s.Attempt + 1, Nonce: nonce}.String(),
		req: s.Spec.Requires, avoid: s.Avoid, expires: expires, waiter: w,
	}
}

// candidates answers the resources a step may run on, those with the most
// free slots first.
func candidates(all []*domain.Resource, req *domain.Requirements, avoid []string, now time.Time) []*domain.Resource {
	var out []*domain.Resource
	for _, r := range all {
		if r.Matches(req) && !slices.Contains(avoid, r.ID) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b *domain.Resource) int { return cmp.Compare(b.Free(now), a.Free(now)) })
	return out
}

// takeSlot takes a free slot of a matching resource for a step's next
// attempt, each take one conditional write on the resource. With none
// free it puts the step in line on each matching resource (also
// conditional, so a slot freed in between is seen, not missed) and answers
// the wait. A change decided again after a lost race asks with the same
// key (its lease's id) and keeps the slot it took, with the new expiry,
// unless the resource is no longer one the step may run on (it failed the
// step meanwhile); a slot it does not keep is given back by settle.
func (e *Engine) takeSlot(ctx context.Context, sr slotRequest) (*domain.Resource, *domain.ResourceWait, error) {
	if e.cfg.Resources == nil {
		return nil, nil, errors.New("resources are not configured")
	}
	const maxWaitOn = 4 // resources a step waits on at once
	for race := range maxRaces {
		if race > 0 && !lostRace(ctx, race-1) {
			return nil, nil, ctx.Err()
		}
		all, err := e.cfg.Resources.ListResources(ctx, sr.tenant)
		if err != nil {
			return nil, nil, fmt.Errorf("list resources: %w", err)
		}
		now := e.now()
		cands := candidates(all, sr.req, sr.avoid, now)
		if r, kept, err := e.keepSlot(ctx, cands, sr); err != nil || kept {
			return r, nil, err
		} else if r != nil {
			continue // the resource changed under the kept slot: look again
		}
		raced := false
		for _, r := range cands {
			if r.Free(now) == 0 {
				continue
			}
			h := domain.Holder{Lease: sr.key, Job: sr.job, Step: sr.step, Since: now, ExpiresAt: sr.expires}
			if err := r.Acquire(sr.key, h, now); err != nil {
				continue
			}
			err := e.cfg.Resources.SaveResource(ctx, r)
			if errors.Is(err, domain.ErrVersionConflict) {
				raced = true
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("take a slot of resource %s: %w", r.ID, err)
			}
			return r, nil, nil
		}
		if raced {
			continue
		}
		wait := &domain.ResourceWait{Since: now, On: []string{}}
		for _, r := range cands[:min(len(cands), maxWaitOn)] {
			wait.On = append(wait.On, r.ID)
			if !r.Wait(sr.waiter) {
				continue
			}
			if err := e.cfg.Resources.SaveResource(ctx, r); errors.Is(err, domain.ErrVersionConflict) {
				raced = true // it changed: a slot may have freed; look again
				break
			} else if err != nil {
				return nil, nil, fmt.Errorf("wait on resource %s: %w", r.ID, err)
			}
		}
		if !raced {
			return nil, wait, nil
		}
	}
	return nil, nil, fmt.Errorf("take a slot: gave up after %d lost races: %w: %w", maxRaces, domain.ErrContended, domain.ErrVersionConflict)
}

// keepSlot keeps the slot an earlier decision of the same change took, if
// it is on a resource the step may still run on, moving its expiry to the
// new decision's lease. kept false with a resource named means the write
// lost a race.
func (e *Engine) keepSlot(ctx context.Context, cands []*domain.Resource, sr slotRequest) (*domain.Resource, bool, error) {
	for _, r := range cands {
		h, held := r.Holders[sr.key]
		if !held {
			continue
		}
		if h.ExpiresAt.Equal(sr.expires) {
			return r, true, nil
		}
		h.ExpiresAt = sr.expires
		r.Holders[sr.key] = h
		err := e.cfg.Resources.SaveResource(ctx, r)
		if errors.Is(err, domain.ErrVersionConflict) {
			return r, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("keep the slot of resource %s: %w", r.ID, err)
		}
		return r, true, nil
	}
	return nil, false, nil
}

// releaseSlot gives back the slot an attempt held and wakes the steps in
// line for it. It runs after the job's own write (an outcome, a cancel, a
// reclaim); one that fails is logged, and the slot still comes back when
// its lease expires.
func (e *Engine) releaseSlot(ctx context.Context, tenant, resource, key string) {
	if resource == "" {
		return
	}
	var woken []domain.Waiter
	_, err := e.changeResource(ctx, tenant, resource, false, func(r *domain.Resource, now time.Time) error {
		woken = r.Release(key, now)
		return nil
	})
	if err != nil {
		if !errors.Is(err, domain.ErrNotFound) {
			e.cfg.Log.WarnContext(ctx, "slot not released; it comes back when its lease expires", "resource", resource, "slot", key, "err", err)
		}
		return
	}
	e.wake(ctx, tenant, resource, woken)
}

// wake sends the message of each step taken out of line: it tries for a
// slot again. A woken step that finds nothing to do passes the wake on
// (passWake), so a stale place in line never strands the others.
func (e *Engine) wake(ctx context.Context, tenant, resource string, woken []domain.Waiter) {
	for _, w := range woken {
		// The waiter says where its message goes: no job is read to wake it.
		j := &domain.Job{Tenant: tenant, ID: w.Job, Priority: w.Priority}
		s := &domain.Step{Spec: domain.StepSpec{ID: w.Step, Action: domain.ActionSpec{Type: domain.ActionPass}}}
		if w.Queue != "" {
			s.Spec.Action = domain.ActionSpec{Type: domain.ActionWorker, WorkerAction: domain.WorkerAction{Queue: w.Queue}}
		}
		if err := e.cfg.Queue.Dispatch(ctx, j, Route(j, []domain.Dispatch{{Step: s, Wake: resource}})); err != nil {
			e.cfg.Log.WarnContext(ctx, "waiter not woken; the sweep sends its step again", "job", w.Job, "step", w.Step, "err", err)
		}
	}
}

// passWake wakes the next step in line on a resource after a woken one
// found nothing to do (it had run, or another slot took it).
func (e *Engine) passWake(ctx context.Context, tenant, resource string) {
	if resource == "" {
		return
	}
	var woken []domain.Waiter
	_, err := e.changeResource(ctx, tenant, resource, false, func(r *domain.Resource, now time.Time) error {
		if woken = r.Wake(now); len(woken) == 0 {
			return errNoChange
		}
		return nil
	})
	if err != nil {
		return
	}
	e.wake(ctx, tenant, resource, woken)
}

// noOtherResource reports, for a resource failure of step s on resource
// failed, whether any matching resource is left off its avoid list.
func (e *Engine) noOtherResource(ctx context.Context, tenant string, s *domain.Step, failed string) (bool, error) {
	all, err := e.cfg.Resources.ListResources(ctx, tenant)
	if err != nil {
		return false, fmt.Errorf("list resources: %w", err)
	}
	return len(candidates(all, s.Spec.Requires, append(slices.Clone(s.Avoid), failed), e.now())) == 0, nil
}
