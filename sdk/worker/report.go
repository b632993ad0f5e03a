package worker

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
)

// maxBatchedOutput is the largest output reported in a batch; a larger one
// goes alone by /complete (a batch's body is bounded at 1 MiB).
const maxBatchedOutput = 128 << 10

// reportTimeout bounds the reporting of an outcome, or of a batch.
const reportTimeout = 30 * time.Second

// reporter reports finished tasks' outcomes, several in one request (POST
// /v1/leases/batch) when they finish together: a worker running many tasks
// pays one request for up to 25 outcomes instead of one each, as River's
// completer batches completions. An outcome waits at most Options.
// OutcomeWait for others, and none once no other task is running (the
// last one to finish sends them all).
type reporter struct {
	c    *client.Client
	wait time.Duration // < 0: each outcome is reported alone

	mu      sync.Mutex
	running int // tasks whose outcome may come yet
	pending []*report
	timer   *time.Timer
}

// report is one outcome waiting to be sent, and its answer.
type report struct {
	o      client.LeaseOutcome
	result *client.OutcomeResult
	err    error
	done   chan struct{}
}

// started counts a task whose outcome is to come.
func (r *reporter) started() {
	r.mu.Lock()
	r.running++
	r.mu.Unlock()
}

// skipped counts off a task that ends without an outcome (its job was
// cancelled, its lease lost): the others need not wait for it.
func (r *reporter) skipped(ctx context.Context) {
	r.mu.Lock()
	r.running--
	batch := r.due()
	r.mu.Unlock()
	r.send(ctx, batch)
}

// report reports o and answers what the API said of it.
func (r *reporter) report(ctx context.Context, o client.LeaseOutcome) (*client.OutcomeResult, error) {
	p := &report{o: o, done: make(chan struct{})}
	alone := r.wait < 0
	if !alone && o.Failure == nil {
		b, err := json.Marshal(o.Output)
		alone = err != nil || len(b) > maxBatchedOutput
		if err == nil {
			p.o.Output = json.RawMessage(b) // sent as encoded here, not encoded again
		}
	}
	r.mu.Lock()
	r.running--
	var batch []*report
	if alone {
		batch = r.due()
	} else {
		r.pending = append(r.pending, p)
		batch = r.due()
		if batch == nil && len(r.pending) == 1 {
			r.timer = time.AfterFunc(r.wait, func() { r.flush(ctx) })
		}
	}
	r.mu.Unlock()
	if alone {
		r.send(ctx, []*report{p})
	}
	r.send(ctx, batch)
	<-p.done
	return p.result, p.err
}

// due takes the pending outcomes when they are to be sent now: as many as
// a batch takes, or no task left that might add to them. Called locked.
func (r *reporter) due() []*report {
	if len(r.pending) == 0 || r.running > 0 && len(r.pending) < client.MaxBatchOutcomes {
		return nil
	}
	return r.take()
}

// take empties the pending outcomes. Called locked.
func (r *reporter) take() []*report {
	batch := r.pending
	r.pending = nil
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	return batch
}

// flush sends what is pending once the oldest has waited OutcomeWait.
func (r *reporter) flush(ctx context.Context) {
	r.mu.Lock()
	batch := r.take()
	r.mu.Unlock()
	r.send(ctx, batch)
}

// send reports a batch: one outcome by /complete or /fail, several in one
// POST /v1/leases/batch.
func (r *reporter) send(ctx context.Context, batch []*report) {
	if len(batch) == 0 {
		return
	}
	// The batch may carry outcomes of tasks other than the one whose
	// context this is, which may end first: it gets a bound of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	switch len(batch) {
	case 1:
		p := batch[0]
		if p.o.Failure != nil {
			f := *p.o.Failure
			if p.o.Cost != nil {
				f.Cost = p.o.Cost
			}
			p.result, p.err = r.c.Fail(ctx, p.o.LeaseID, f)
		} else {
			var usd float64
			if p.o.Cost != nil {
				usd = p.o.Cost.USD
			}
			p.result, p.err = r.c.CompleteReporting(ctx, p.o.LeaseID, p.o.Output, usd)
		}
		close(p.done)
		return
	}
	os := make([]client.LeaseOutcome, len(batch))
	for i, p := range batch {
		os[i] = p.o
	}
	answers, err := r.c.ReportOutcomes(ctx, os)
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		case answers[i].Err != nil:
			p.err = answers[i].Err
		default:
			p.result = answers[i].Result
		}
		close(p.done)
	}
}
