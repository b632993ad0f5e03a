package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// DefaultMaxLongPolls bounds one tenant's open long-polls (events with
// wait, claims with wait_seconds) when MaxLongPolls is zero. On AWS each
// open poll holds a Lambda execution for its whole wait, out of the
// account's concurrency that every tenant shares (1,000 by default): 20
// lets a tenant follow a few jobs and keep a dozen idle workers polling,
// while holding at most 2% of it. A claim that finds work at once holds no
// slot, so only idle workers meet the bound, and an idle worker turned away
// loses nothing.
const DefaultMaxLongPolls = 20

// longPollMargin is how long past its wait a poll's slot is held, so that a
// poll answering late keeps its slot to the end; a poll whose process dies
// frees its slot that long after its wait.
const longPollMargin = 10 * time.Second

// maxLongPollRetryAfter bounds the Retry-After of a refused poll.
const maxLongPollRetryAfter = 5 * time.Second

// longPollBound answers the bound in force, 0 for none.
func (e *Engine) longPollBound() int {
	switch {
	case e.cfg.MaxLongPolls < 0:
		return 0
	case e.cfg.MaxLongPolls == 0:
		return DefaultMaxLongPolls
	}
	return e.cfg.MaxLongPolls
}

// HoldLongPoll takes one of tenant's open long-poll slots for a poll that
// waits up to wait, and answers the func that gives it back (call it when
// the poll answers). Past the bound it answers a 429 (CodeThrottled) with
// Retry-After: when the first open poll's slot runs out, at most a few
// seconds.
func (e *Engine) HoldLongPoll(ctx context.Context, tenant string, wait time.Duration) (release func(), err error) {
	bound := e.longPollBound()
	if bound == 0 {
		return func() {}, nil
	}
	if err := e.LongPollRefused(tenant); err != nil {
		return nil, err
	}
	// The wall clock, as the poll's own wait (tests move the engine's).
	now := time.Now()
	lease := nonce()
	retryAt, ok, err := e.cfg.Store.TakePollSlot(ctx, tenant, lease, bound, now.Add(wait+longPollMargin), now)
	if err != nil {
		return nil, err
	}
	if !ok {
		after := min(max(retryAt.Sub(now), time.Second), maxLongPollRetryAfter)
		e.fullTenants.Store(tenant, fullTenant{until: now.Add(knownFullFor), retryAfter: after})
		return nil, throttledPoll(bound, after)
	}
	return func() {
		// Given back even when the request's context ended: a slot not
		// given back is held until it runs out.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := e.cfg.Store.ReleasePollSlot(ctx, tenant, lease); err != nil {
			e.cfg.Log.WarnContext(ctx, "long-poll slot not given back; it frees itself", "tenant", tenant, "err", err)
		}
	}, nil
}

// JobVersion answers a job's version alone (Store.JobVersion): a waiting
// long-poll's cheap look for a change.
func (e *Engine) JobVersion(ctx context.Context, tenant, id string) (int64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	return e.cfg.Store.JobVersion(ctx, tenant, id)
}

// knownFullFor is how long a process refuses a tenant's long-polls by
// itself once its store said the tenant is at its bound: a flood of polls
// past the bound costs no AWS request each, only one a second per process.
const knownFullFor = time.Second

type fullTenant struct {
	until      time.Time
	retryAfter time.Duration
}

// fullTenants remembers tenants found at their bound (tenant -> fullTenant).
type fullTenants = sync.Map

// LongPollRefused answers the 429 of a tenant this process found at its
// long-poll bound within the last knownFullFor, or nil: the events route
// asks it before it reads the job.
func (e *Engine) LongPollRefused(tenant string) error {
	v, ok := e.fullTenants.Load(tenant)
	if !ok {
		return nil
	}
	f := v.(fullTenant)
	if !time.Now().Before(f.until) {
		e.fullTenants.Delete(tenant)
		return nil
	}
	return throttledPoll(e.longPollBound(), f.retryAfter)
}

func throttledPoll(bound int, after time.Duration) error {
	return &domain.Error{Code: domain.CodeThrottled, RetryAfter: after, Message: fmt.Sprintf(
		"this tenant has %d long-polls open, its bound (template parameter MaxLongPollsPerTenant): poll again after Retry-After, or without wait", bound)}
}
