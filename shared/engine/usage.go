package engine

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// What a job cost is counted where the requests for it are made, and
// saved by the writes of the job the engine makes anyway
// (docs/model.md#what-a-job-cost): the store counts its own requests
// (domain.Job.Spent), and a change counts, before its write, the requests
// its effects will make (acks, hides, sends, events) and the job's share
// of the invocation or API request it is made in (a tab, WithTab). A lost
// race's units are carried to the change decided again.

type tabKey struct{}

// tab is what one invocation, or one API request, costs the jobs it
// serves.
type tab struct {
	mu     sync.Mutex
	share  domain.Usage
	opened time.Time
	last   map[string]time.Time // each job charged: when it last was
	// pending is what requests made for the next job charged cost (its
	// data's S3 requests, made before its write).
	pending domain.Usage
}

// WithTab opens a tab for the request or invocation ctx serves: the first
// write of each job under it is charged share, the job's part of the
// request (an API Gateway request and a function's invocation, a tenth of
// a receive and of a delete for one record of ten), and each write the
// function's time on the job since the last, at the function's memory, in
// the part share.LambdaRequests says (a batch's records run together).
func WithTab(ctx context.Context, share domain.Usage) context.Context {
	return context.WithValue(ctx, tabKey{}, &tab{share: share, opened: time.Now(), last: map[string]time.Time{}})
}

// retab answers ctx with a tab for some of the jobs its request serves:
// the request's share and add, scaled by f (a claim's jobs each take their
// part of it and of its receive), opened when ctx's was. ctx without a tab
// is answered as it is.
func retab(ctx context.Context, add domain.Usage, f float64) context.Context {
	t, _ := ctx.Value(tabKey{}).(*tab)
	if t == nil {
		return ctx
	}
	share := t.share
	share.Add(add)
	return context.WithValue(ctx, tabKey{}, &tab{share: share.Scaled(f), opened: t.opened, last: map[string]time.Time{}, pending: t.takePending()})
}

func (t *tab) takePending() domain.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pending
	t.pending = domain.Usage{}
	return p
}

// spendPending counts on ctx's tab what a request made for a job (for its
// stored data, a visibility change) costs: the next write of a job under
// it saves it. Stored bytes are
// kept for a completed job's retention, which their storage is priced
// for.
func (e *Engine) spendPending(ctx context.Context, u domain.Usage, stored int) {
	t, _ := ctx.Value(tabKey{}).(*tab)
	if t == nil {
		return
	}
	if stored > 0 {
		u.S3GBMonths = float64(stored) / (1 << 30) * e.cfg.Retention.For(domain.JobCompleted).Hours() / 730
	}
	t.mu.Lock()
	t.pending.Add(u)
	t.mu.Unlock()
}

// Part answers u's part for one of n: each count divided by n.
func Part(u domain.Usage, n int) domain.Usage {
	if n <= 1 {
		return u
	}
	return u.Scaled(1 / float64(n))
}

// An API request is one API Gateway request and one invocation of the
// API's function; Request is a job's part of one made for n jobs.
func Request(n int) domain.Usage { return Part(domain.Usage{APIRequests: 1, LambdaRequests: 1}, n) }

// Record is one record's part of an event source mapping's invocation of
// n records: the invocation, the receive that took them and the delete
// of those that succeeded, each shared by the n.
func Record(n int) domain.Usage { return Part(domain.Usage{LambdaRequests: 1, SQSRequests: 2}, n) }

// charge puts j's part of ctx's tab on it.
func (e *Engine) charge(ctx context.Context, j *domain.Job) {
	t, _ := ctx.Value(tabKey{}).(*tab)
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	from, seen := t.last[j.ID]
	t.last[j.ID] = now
	t.mu.Unlock()
	if !seen {
		j.Spend(t.share)
		from = t.opened
	}
	t.mu.Lock()
	j.Spend(t.pending)
	t.pending = domain.Usage{}
	t.mu.Unlock()
	gb := float64(e.cfg.FunctionMemoryMB) / 1024
	j.Spend(domain.Usage{LambdaGBSeconds: now.Sub(from).Seconds() * gb * math.Min(t.share.LambdaRequests, 1)})
}

// sendRequests are the SQS requests sends take: one SendMessageBatch per
// ten to one queue.
func sendRequests(sends []Send) float64 {
	by := map[Destination]int{}
	for _, s := range sends {
		by[s.To]++
	}
	var n float64
	for _, k := range by {
		n += math.Ceil(float64(k) / 10)
	}
	return n
}

// effectsUsage is what a change's effects will cost once it is saved:
// each ack and hide a request (a claim's, settled ten to a request, a
// tenth), its sends, and the Job State Change events it publishes.
func (e *Engine) effectsUsage(j *domain.Job, fx effects, settle *settlements, rest []domain.Dispatch, before loadedJob) domain.Usage {
	var u domain.Usage
	settled := float64(len(fx.ack) + len(fx.hide))
	if settle != nil {
		settled /= 10
	}
	u.SQSRequests = settled + sendRequests(Route(j, e.shortSends(rest, &u)))
	if j.State.Terminal() && !before.state.Terminal() && j.StoresData() {
		// Its data's expiry: a list of its prefix and a delete (free), its
		// item read and written by the sweep.
		u.S3Writes++
		u.ReadUnits++
		u.WriteUnits++
	}
	if e.cfg.Publisher != nil && len(j.Events) > before.loaded {
		u.Events = float64(len(e.cfg.JobStateEvents.chosen(NewChange(j, before.state, before.loaded).States)))
	}
	return u
}

// chargeSubmit puts on a job about to be created its part of the request
// and what its creation's effects will cost: the sends of its first
// steps (a batch's, sent together, a tenth of a request each) and its
// Job State Change events.
func (e *Engine) chargeSubmit(ctx context.Context, j *domain.Job, batched bool) {
	e.charge(ctx, j)
	sends := Route(j, j.Outstanding(e.now()))
	u := domain.Usage{SQSRequests: sendRequests(sends)}
	if batched {
		u.SQSRequests = float64(len(sends)) / 10
	}
	if e.cfg.Publisher != nil {
		u.Events = float64(len(e.cfg.JobStateEvents.chosen(NewChange(j, domain.JobInitial, 0).States)))
	}
	j.Spend(u)
}

// TimerTransitions is what a timer state machine's execution is billed
// (statemachine/timer.asl.json: its Wait and Task states, and the end).
const TimerTransitions = 3

// shortSends answers the dispatches sent as SQS messages, counting in u
// those the timer service holds (Config.TimerService: a Step Functions
// execution a message, whose Task sends it).
func (e *Engine) shortSends(ds []domain.Dispatch, u *domain.Usage) []domain.Dispatch {
	if !e.cfg.TimerService || e.cfg.TimerThreshold <= 0 {
		return ds
	}
	var short []domain.Dispatch
	for _, d := range ds {
		if d.Delay > e.cfg.TimerThreshold {
			u.SFNTransitions += TimerTransitions
			u.SQSRequests++
			continue
		}
		short = append(short, d)
	}
	return short
}
