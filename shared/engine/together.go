package engine

import (
	"context"
	"sync"
)

// ExecuteTogether handles first deliveries of one job that came in one
// batch (a fan-out's branches, sent together) as one change: their steps
// are leased in one write (takeLeases), an instant step's outcome
// recorded in it too, where each alone is a write; the others then run at
// once, each recording its outcome as Execute does. ok is false when it
// did nothing (a delivery it does not take together, or a decision or the
// write refused): the caller executes each alone, which answers each its
// own way. The steps the write makes runnable are sent, not chained.
func (e *Engine) ExecuteTogether(ctx context.Context, ds []Delivery) (res []ExecuteResult, errs []error, ok bool) {
	if len(ds) < 2 {
		return nil, nil, false
	}
	m := ds[0].Message
	seen := map[string]bool{}
	for _, d := range ds {
		// A delivery that came back may be a dead chain's (Execute takes
		// up what it carried); a wake passes a slot on: each goes alone.
		if d.Message.Tenant != m.Tenant || d.Message.Job != m.Job || d.Receives > 1 || d.Message.Wake != "" || seen[d.Message.Step] {
			return nil, nil, false
		}
		seen[d.Message.Step] = true
	}
	// A new job's message carries it as written: the write needs no read
	// (a job that moved on refuses it, and is read).
	ts, err := e.takeLeasesOn(ctx, ds, readyLane, nil, carriedJob(m), nil)
	if err != nil {
		return nil, nil, false // nothing was written
	}
	res, errs = make([]ExecuteResult, len(ds)), make([]error, len(ds))
	var (
		wg      sync.WaitGroup
		crashed crash
	)
	for i, t := range ts {
		switch t.outcome {
		case leased:
			wg.Go(func() {
				defer crashed.catch()
				// Each reads the job: the one the lease saved is shared.
				res[i], errs[i] = e.runLeased(ctx, ds[i], t, nil, nil)
			})
		case waiting:
			res[i] = Waiting
		case stale:
			res[i] = Stale
		default: // recorded, ended
			res[i] = Executed
		}
	}
	wg.Wait()
	crashed.rethrow()
	return res, errs, true
}
