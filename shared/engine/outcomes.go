package engine

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/stepflow/stepflow/shared/domain"
)

// MaxBatchOutcomes is the most outcomes one batch takes (POST
// /v1/leases/batch), as a jobs batch takes jobs.
const MaxBatchOutcomes = 25

// outcomeJobs is how many jobs' outcomes a batch records at once.
const outcomeJobs = 4

// LeaseOutcome is a worker's outcome in a batch: a success and its Output,
// or, when Failure is set, that failure.
type LeaseOutcome struct {
	LeaseID string
	Output  json.RawMessage
	Failure *Outcome
	// CostUSD is what a success reported it spent (a failure's is
	// Failure.CostUSD).
	CostUSD float64
}

// OutcomeAnswer answers one outcome of a batch, as Complete or Fail
// would have answered it alone.
type OutcomeAnswer struct {
	Result OutcomeResult
	Err    error
}

// Outcomes records a batch of workers' outcomes, each as Complete or Fail
// would, and answers each in order; a refused one (a lost lease, a bad
// class) changes nothing and does not stop the others. A worker that runs
// many tasks pays one request for ten outcomes instead of ten (River's
// completer batches its completions the same way), and:
//
//   - the outcomes of one job are recorded one after another, each on the
//     job as the one before saved it: one read for all of them, and no
//     race between them (a worker ending several branches of a fan-out);
//   - the messages of the leases they end are deleted together, one
//     DeleteMessageBatch per ten of a queue, after every outcome is
//     recorded. A message whose deletion is lost comes back when its lease
//     would have ended and finds its outcome recorded.
func (e *Engine) Outcomes(ctx context.Context, tenant string, batch []LeaseOutcome) []OutcomeAnswer {
	out := make([]OutcomeAnswer, len(batch))
	prepared := make([]attemptOutcome, len(batch))
	byJob := map[string][]int{}
	var order []string
	for i, o := range batch {
		var err error
		if o.Failure != nil {
			prepared[i], err = failureOf(o.LeaseID, *o.Failure)
		} else {
			prepared[i], err = e.success(o.LeaseID, o.Output, o.CostUSD)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		job := "?" + o.LeaseID // a malformed lease id: finish answers why, alone
		if ref, err := domain.ParseLeaseID(o.LeaseID); err == nil {
			job = ref.JobID
		}
		if _, seen := byJob[job]; !seen {
			order = append(order, job)
		}
		byJob[job] = append(byJob[job], i)
	}
	var (
		mu      sync.Mutex
		settle  settlements
		wg      sync.WaitGroup
		slots   = make(chan struct{}, outcomeJobs)
		crashed crash
	)
	for _, job := range order {
		wg.Add(1)
		slots <- struct{}{}
		go func(idx []int) {
			defer wg.Done()
			defer func() { <-slots }()
			defer crashed.catch()
			var mine settlements
			var from *domain.Job
			ctx := retab(ctx, domain.Usage{}, float64(len(idx))/float64(len(batch)))
			for _, i := range idx {
				j, res, err := e.finishOn(ctx, tenant, prepared[i], from, nil, &mine)
				out[i] = OutcomeAnswer{Result: res, Err: err}
				from = j // nil after an error: the next reads the job
			}
			mu.Lock()
			settle.acks = append(settle.acks, mine.acks...)
			settle.hides = append(settle.hides, mine.hides...)
			mu.Unlock()
		}(byJob[job])
	}
	wg.Wait()
	// Its undeleted messages come back and find their outcomes recorded.
	crashed.rethrow()
	settle.make(ctx, e)
	return out
}

// crash keeps the first panic of the goroutines an invocation starts for
// one request, to raise it again on the invocation's own: the invocation
// dies as it would have on the goroutine that panicked (on Lambda a panic
// anywhere ends the process; the local stack recovers only the handler's).
type crash struct {
	mu    sync.Mutex
	first any
}

// catch recovers a goroutine's panic: deferred first thing in it.
func (c *crash) catch() {
	if p := recover(); p != nil {
		c.mu.Lock()
		if c.first == nil {
			c.first = p
		}
		c.mu.Unlock()
	}
}

// rethrow raises the panic caught, if any, once the goroutines are done.
func (c *crash) rethrow() {
	if c.first != nil {
		panic(c.first)
	}
}
