package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Blobs keeps data too large for a job's item: payloads, outputs and the
// inputs handed to workers, under the keys the domain names (all of a
// job's under domain.JobDataPrefix). S3 implements it (shared/blobstore),
// and so does shared/memory; shared/enginetest holds their contract.
type Blobs interface {
	// Put writes data under key, replacing what was there.
	Put(ctx context.Context, key string, data []byte) error
	// Get answers the data under key, or domain.ErrNotFound (wrapped).
	Get(ctx context.Context, key string) ([]byte, error)
	// URL answers a URL that GETs the data under key without credentials
	// for at least ttl (S3: a presigned GET).
	URL(ctx context.Context, key string, ttl time.Duration) (string, error)
	// DeletePrefix deletes every key under prefix (a job's data once it
	// expires) and answers how many there were; none is no error.
	DeletePrefix(ctx context.Context, prefix string) (int, error)
}

// Limits on data passing through the engine.
const (
	// MaxOutputBytes is the largest output a worker may complete with when
	// a blob store is wired: Lambda takes at most 6 MB in a synchronous
	// request, and the request's envelope needs some of it. It is also the
	// largest output GET .../output answers in its body.
	MaxOutputBytes = 5<<20 + 512<<10
	// MaxComposedInputBytes bounds an input the engine composes from data
	// it fetches (a built-in step's, a DAG worker step's): the function
	// holds it whole in memory.
	MaxComposedInputBytes = 16 << 20
	// OutputURLTTL is how long the URL GET .../output redirects to stays
	// valid.
	OutputURLTTL = 15 * time.Minute
)

func (e *Engine) inlineLimit() int {
	if e.cfg.InlineLimit > 0 {
		return e.cfg.InlineLimit
	}
	return domain.DefaultInlineLimit
}

// dataError is data a step needs that can never be had: gone, corrupt or
// too large. The attempt fails fatal rather than trying again.
type dataError struct {
	msg  string
	gone bool // deleted, or expired by the bucket's lifecycle rule
}

func (e *dataError) Error() string { return e.msg }

// dataCache is what one change fetched and stored, kept across the races
// it decides again, so a lost race repeats no transfer.
type dataCache struct {
	fetched     map[string][]byte
	stored      map[string]domain.DataRef
	unfetchable map[string]string // by key: why it can never be fetched
}

// put writes data under key (once per change) and answers its reference.
func (e *Engine) put(ctx context.Context, c *dataCache, key string, data []byte) (domain.DataRef, error) {
	ref := domain.NewDataRef(key, data)
	if prev, ok := c.stored[key]; ok && prev == ref {
		return ref, nil
	}
	e.spendPending(ctx, domain.Usage{S3Writes: 1}, len(data))
	if err := e.cfg.Blobs.Put(ctx, key, data); err != nil {
		return ref, fmt.Errorf("store data %s: %w", key, err)
	}
	if c.stored == nil {
		c.stored = map[string]domain.DataRef{}
	}
	c.stored[key] = ref
	return ref, nil
}

// keepOutput decides where an attempt's output goes: inline when it is
// small and the job's inline data allows it, else the blob store under the
// attempt's key, written before the job is (an object whose job write is
// then lost is harmless garbage under the job's prefix).
func (e *Engine) keepOutput(ctx context.Context, c *dataCache, j *domain.Job, stepID string, attempt int, output json.RawMessage) (json.RawMessage, *domain.DataRef, error) {
	if e.cfg.Blobs == nil || j.KeepsInline(len(output), e.inlineLimit()) {
		return output, nil, nil
	}
	ref, err := e.put(ctx, c, domain.OutputKey(j.Tenant, j.ID, stepID, attempt), output)
	if err != nil {
		return nil, nil, err
	}
	return nil, &ref, nil
}

// compose makes d whole, fetching what it references and checking each
// against its reference. A *dataError says it can never be made; any other
// error may pass.
func (e *Engine) compose(ctx context.Context, c *dataCache, d domain.Data) (json.RawMessage, error) {
	raw, err := e.composeData(ctx, c, d)
	if se := (*domain.ShapeError)(nil); errors.As(err, &se) {
		return nil, &dataError{msg: se.Error()} // the same data makes the same error
	}
	return raw, err
}

func (e *Engine) composeData(ctx context.Context, c *dataCache, d domain.Data) (json.RawMessage, error) {
	refs := d.Refs()
	if len(refs) == 0 {
		return d.Compose(nil)
	}
	if n := d.Size(); n > MaxComposedInputBytes {
		return nil, &dataError{msg: fmt.Sprintf("it is %d bytes composed; the limit is %d: fan in fewer large outputs, or pass references", n, MaxComposedInputBytes)}
	}
	for _, r := range refs {
		if err := e.fetch(ctx, c, r); err != nil {
			return nil, err
		}
	}
	return d.Compose(c.fetched)
}

// fetch gets r's data into c, checked against r, once per change. A
// *dataError says it can never be had; any other error may pass.
func (e *Engine) fetch(ctx context.Context, c *dataCache, r domain.DataRef) error {
	if _, ok := c.fetched[r.Key]; ok {
		return nil
	}
	if e.cfg.Blobs == nil {
		return &dataError{msg: "it references data in a blob store, and none is configured (STEPFLOW_DATA_BUCKET)"}
	}
	e.spendPending(ctx, domain.Usage{S3Reads: 1}, 0)
	b, err := e.cfg.Blobs.Get(ctx, r.Key)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return &dataError{msg: fmt.Sprintf("its data %s is gone", r.Key), gone: true}
	case err != nil:
		return fmt.Errorf("fetch data %s: %w", r.Key, err)
	}
	if err := r.Verify(b); err != nil {
		return &dataError{msg: "its data is corrupt: " + err.Error()}
	}
	if c.fetched == nil {
		c.fetched = map[string][]byte{}
	}
	c.fetched[r.Key] = b
	return nil
}

// fetchForDecision fetches the stored data a decision asked for
// (domain.NeedDataError) into c: what can never be had goes in c.unfetchable
// with why, for the decision to fail its step saying so.
func (e *Engine) fetchForDecision(ctx context.Context, c *dataCache, refs []domain.DataRef) error {
	total := 0
	for _, b := range c.fetched {
		total += len(b)
	}
	for _, r := range refs {
		var err error
		if total += r.Size; total > MaxComposedInputBytes {
			err = &dataError{msg: fmt.Sprintf("the data it reads is over %d bytes", MaxComposedInputBytes)}
		} else {
			err = e.fetch(ctx, c, r)
		}
		if de := (*dataError)(nil); errors.As(err, &de) {
			if c.unfetchable == nil {
				c.unfetchable = map[string]string{}
			}
			c.unfetchable[r.Key] = de.msg
		} else if err != nil {
			return err
		}
	}
	return nil
}

// failUnreadableInput fails a just-leased attempt whose input can never be
// composed, in the same change: fatal, saying why.
func failUnreadableInput(j *domain.Job, stepID, leaseID string, cause *dataError, now time.Time) ([]domain.Dispatch, error) {
	return j.Fail(stepID, leaseID, domain.Failure{Class: domain.ClassFatal, Message: "the step's input cannot be read: " + cause.msg}, now, nil)
}

// attemptInput is what an attempt is handed as its input: inline, or by
// reference with a URL to fetch it from.
type attemptInput struct {
	inline json.RawMessage
	ref    *domain.DataRef
	url    string
}

// workerInput answers step i's input for a worker under a lease of ttl.
// An input that is one stored object is handed on as it is; one composed
// from stored data is made whole, and stored for the attempt when large;
// one the job holds inline stays inline, as the job bounds it.
func (e *Engine) workerInput(ctx context.Context, c *dataCache, j *domain.Job, i, attempt int, ttl time.Duration) (attemptInput, error) {
	d := j.InputData(i)
	ref := d.Ref()
	if ref == nil {
		raw, err := e.compose(ctx, c, d)
		if err != nil || len(d.Refs()) == 0 || len(raw) <= e.inlineLimit() {
			return attemptInput{inline: raw}, err
		}
		r, err := e.put(ctx, c, domain.InputKey(j.Tenant, j.ID, j.Steps[i].ID(), attempt), raw)
		if err != nil {
			return attemptInput{}, err
		}
		ref = &r
	}
	e.spendPending(ctx, domain.Usage{S3Reads: 1}, 0) // the worker's GET of it
	url, err := e.cfg.Blobs.URL(ctx, ref.Key, ttl)
	if err != nil {
		return attemptInput{}, fmt.Errorf("URL of data %s: %w", ref.Key, err)
	}
	return attemptInput{ref: ref, url: url}, nil
}

// StepOutput is a step's whole output, or where to fetch it when it is too
// large to answer in a response.
type StepOutput struct {
	Data json.RawMessage
	Ref  *domain.DataRef // the stored output URL fetches
	URL  string
}

// Output answers one of tenant's steps' whole output: in Data when fits
// says the response can carry it, else a URL valid for OutputURLTTL. A step
// with no output yet is not found.
func (e *Engine) Output(ctx context.Context, tenant, id, stepID string, fits func(json.RawMessage) bool) (StepOutput, error) {
	j, err := e.Get(ctx, tenant, id)
	if err != nil {
		return StepOutput{}, err
	}
	s, k, err := j.Step(stepID)
	if err != nil {
		return StepOutput{}, err
	}
	d, ok := j.OutputData(k)
	if !ok {
		return StepOutput{}, fmt.Errorf("step %q of job %s has no output (it is %s): %w", stepID, id, s.State, domain.ErrNotFound)
	}
	if len(d.Refs()) > 0 && e.cfg.Blobs == nil {
		return StepOutput{}, fmt.Errorf("output of step %q of job %s is stored data, and no blob store is configured (STEPFLOW_DATA_BUCKET)", stepID, id)
	}
	var c dataCache
	ref := d.Ref()
	if ref == nil || ref.Size <= MaxOutputBytes {
		data, err := e.compose(ctx, &c, d)
		var de *dataError
		switch {
		case errors.As(err, &de) && de.gone:
			return StepOutput{}, fmt.Errorf("output of step %q of job %s: %s: %w", stepID, id, de.msg, domain.ErrNotFound)
		case err != nil:
			return StepOutput{}, fmt.Errorf("output of step %q of job %s: %w", stepID, id, err)
		case fits(data):
			return StepOutput{Data: data}, nil
		}
		if ref == nil {
			// A sleep's output composed of stored data: kept whole under
			// its own key, so the URL has an object to fetch.
			r, err := e.put(ctx, &c, domain.OutputKey(j.Tenant, j.ID, stepID, s.Attempt), data)
			if err != nil {
				return StepOutput{}, err
			}
			ref = &r
		}
	}
	url, err := e.cfg.Blobs.URL(ctx, ref.Key, OutputURLTTL)
	if err != nil {
		return StepOutput{}, fmt.Errorf("URL of data %s: %w", ref.Key, err)
	}
	return StepOutput{Ref: ref, URL: url}, nil
}
