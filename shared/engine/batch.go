package engine

import (
	"context"
	"errors"

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

// BatchKeyField names an item's idempotency key in its errors.
const BatchKeyField = "idempotency_key"

// SubmitBatch submits each item as Submit does, independently and in
// order: a refused item writes nothing and does not stop the others. The
// first steps of every accepted job are then sent together, in one
// DispatchJobs, rather than one send per job.
func (e *Engine) SubmitBatch(ctx context.Context, tenant string, items []BatchItem) []BatchResult {
	out := make([]BatchResult, len(items))
	var batch []JobSends
	queued := map[string]bool{} // one item repeating another's key sends nothing twice
	var made []creation
	for i, it := range items {
		c, err := e.create(ctx, tenant, "", it.Body, it.IdemKey, BatchKeyField)
		j, ds := c.job, c.dispatches
		if err == nil {
			made = append(made, c)
		}
		if errors.Is(err, domain.ErrIdempotencyMismatch) {
			err = &domain.Error{Code: domain.CodeIdempotencyMismatch, Field: BatchKeyField, Message: "was already used with a different request body"}
		}
		out[i] = BatchResult{Job: j, Created: c.created, Err: err}
		if err != nil || len(ds) == 0 || queued[j.ID] {
			continue
		}
		queued[j.ID] = true
		e.touchDispatched(ctx, j, ds)
		batch = append(batch, JobSends{Job: j, Sends: Route(j, ds)})
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
