package engine

import (
	"context"
	"errors"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// MaxBatchJobs is the most jobs one batch submission takes (POST
// /v1/jobs:batch).
const MaxBatchJobs = 25

// BatchItem is one job of a batch submission: its body as POST /v1/jobs
// takes it, and its idempotency key ("" for none).
type BatchItem struct {
	Body    []byte
	IdemKey string
}

// BatchResult answers one item of a batch: its job (Created as Submit
// answers it), or why it was refused.
type BatchResult struct {
	Job     *domain.Job
	Created bool
	Err     error
}

// batchFirstDelay holds back the first messages a batch sends before its
// writes, so that they come after all of them: sent at once, most came
// before their job was written, and waited out an early delivery's 4 s.
const batchFirstDelay = time.Second

// BatchKeyField names an item's idempotency key in its errors.
const BatchKeyField = "idempotency_key"

// SubmitBatch submits each item as Submit does, independently and in
// order: a refused item writes nothing and does not stop the others. The
// first messages of every job that may send them before its write
// (sendFirst) go out together, in one DispatchJobs, before the writes;
// those of the others together after them.
func (e *Engine) SubmitBatch(ctx context.Context, tenant string, items []BatchItem) []BatchResult {
	out := make([]BatchResult, len(items))
	jobs := make([]*domain.Job, len(items))
	if err := e.CheckDailyBudget(ctx, tenant); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	ctx = retab(ctx, domain.Usage{}, 1/float64(max(len(items), 1)))
	var first []JobSends
	for i, it := range items {
		j, err := e.build(ctx, tenant, "", it.Body, it.IdemKey, BatchKeyField)
		if err != nil {
			out[i] = BatchResult{Err: err}
			continue
		}
		jobs[i] = j
		e.chargeSubmit(ctx, j, true)
		if ds := e.sendFirst(j); len(ds) > 0 && j.SentBeforeWrite(ds) {
			e.touchDispatched(ctx, j, ds)
			for k := range ds {
				ds[k].Delay = max(ds[k].Delay, batchFirstDelay)
			}
			first = append(first, JobSends{Job: j, Sends: carrying(j, Route(j, ds))})
		}
	}
	sentFirst := map[*domain.Job]bool{}
	if len(first) > 0 {
		if err := e.cfg.Queue.DispatchJobs(ctx, first); err != nil {
			// Which went out is not known: all are written in the due
			// index and sent again after (a duplicate finds nothing to do).
			e.cfg.Log.WarnContext(ctx, "first messages not sent before the writes; they are sent after them", "jobs", len(first), "err", err)
			for _, js := range first {
				js.Job.Resweep()
			}
		} else {
			for _, js := range first {
				sentFirst[js.Job] = true
			}
		}
	}
	// The jobs without a key are written together (one BatchWriteItem on
	// DynamoDB, where each alone is a request): their first messages,
	// held back a second, then come after their writes on a busy table
	// too. A job with a key is written alone, as its key's record is.
	var plain []*domain.Job
	for _, j := range jobs {
		if j != nil && j.IdempotencyKey == "" {
			plain = append(plain, j)
		}
	}
	createErr := map[*domain.Job]error{}
	if len(plain) > 1 {
		for k, err := range e.cfg.Store.CreateAll(ctx, plain, e.now()) {
			createErr[plain[k]] = err
		}
	}
	var batch []JobSends
	queued := map[string]bool{} // one item repeating another's key sends nothing twice
	var made []creation
	for i, it := range items {
		j := jobs[i]
		if j == nil {
			continue
		}
		var c creation
		var err error
		if cerr, ok := createErr[j]; !ok {
			c, err = e.write(ctx, j, it.Body, sentFirst[j])
		} else if err = cerr; err == nil {
			c = e.written(ctx, j, true, sentFirst[j])
		}
		if err == nil {
			made = append(made, c)
		}
		if errors.Is(err, domain.ErrIdempotencyMismatch) {
			err = &domain.Error{Code: domain.CodeIdempotencyMismatch, Field: BatchKeyField, Message: "was already used with a different request body"}
		}
		out[i] = BatchResult{Job: c.job, Created: c.created, Err: err}
		if err != nil || len(c.dispatches) == 0 || queued[c.job.ID] {
			continue
		}
		queued[c.job.ID] = true
		e.touchDispatched(ctx, c.job, c.dispatches)
		batch = append(batch, JobSends{Job: c.job, Sends: newSends(c)})
	}
	if len(batch) > 0 {
		if err := e.cfg.Queue.DispatchJobs(ctx, batch); err != nil {
			e.cfg.Log.WarnContext(ctx, "dispatch failed; the sweep will re-send", "jobs", len(batch), "err", err)
		}
	}
	// Published once every job's first steps are sent, as submit does.
	for _, c := range made {
		e.publish(ctx, c.job, c.states)
	}
	return out
}
