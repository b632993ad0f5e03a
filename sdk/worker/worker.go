// Package worker runs stepflow worker steps: it claims leases from a worker
// queue, runs a handler on each with a concurrency limit, heartbeats while
// the handler runs, and completes or fails the lease with what the handler
// answers.
//
// The handler's context is cancelled when the step's job was cancelled
// (the heartbeat answered cancel_requested), when the lease was lost (409
// lease_lost, or no heartbeat got through before it expired), when the
// step's timeout_seconds ran out, and when a shutdown's drain time ran out;
// context.Cause tells which (ErrCancelRequested, ErrLeaseLost,
// context.DeadlineExceeded, ErrShutdown). Nothing is reported for a
// cancelled job or a lost lease: the API would refuse it.
//
// Shutdown: cancelling Run's context stops claiming (a claim in flight is
// abandoned; a lease it took comes back when it expires) and waits for the
// running handlers up to Options.DrainTimeout; then their contexts are
// cancelled and what they answer is reported.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
)

// Causes of a handler context's end (context.Cause).
var (
	ErrCancelRequested = errors.New("stepflow worker: the job was cancelled")
	ErrLeaseLost       = errors.New("stepflow worker: the lease was lost")
	ErrShutdown        = errors.New("stepflow worker: shutting down, the drain time ran out")
)

// Task is one claimed step.
type Task struct {
	// Lease is the claim's answer: job, step, attempt, idempotency key,
	// deadline, resource.
	*client.Lease
	// Input is the step's input: inline, or fetched from the lease's
	// input_url and checked against its input_ref.
	Input json.RawMessage

	mu      sync.Mutex
	costUSD float64
}

// ReportCost adds usd (US dollars) to what the attempt spent itself, an
// LLM call's tokens say; the sum is reported with the task's outcome,
// success or failure, and added to its job's cost. It is safe to call
// from the handler's own goroutines. Nothing is reported for a task that
// ends without an outcome (its job cancelled, its lease lost).
func (t *Task) ReportCost(usd float64) {
	t.mu.Lock()
	t.costUSD += usd
	t.mu.Unlock()
}

// cost answers what the task reported it spent, nil for nothing.
func (t *Task) cost() *client.ReportedCost {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.costUSD == 0 {
		return nil
	}
	return &client.ReportedCost{USD: t.costUSD}
}

// Decode decodes the task's input into v.
func (t *Task) Decode(v any) error {
	if err := json.Unmarshal(t.Input, v); err != nil {
		return fmt.Errorf("decode input of %s/%s: %w", t.JobID, t.StepID, err)
	}
	return nil
}

// Handler runs one task. Its output (any JSON value; a json.RawMessage as
// it is) completes the lease; an error fails it, with the class a
// *FailError names (Fail) and retryable otherwise.
type Handler func(ctx context.Context, t *Task) (output any, err error)

// FailError is a handler's failure with its class.
type FailError struct {
	Class   string // client.ClassRetryable, ClassFatal, ClassBlocked...
	Message string
	// RetryAfter asks for the next attempt no sooner (whole seconds).
	RetryAfter time.Duration
	// Prompt is what a needs_user failure asks of a person.
	Prompt string
	// Steps are what a replan failure puts in the step's place.
	Steps []client.StepSpec
}

func (e *FailError) Error() string { return e.Class + ": " + e.Message }

// Fail answers a failure of a class: return it from a handler.
func Fail(class, message string) error { return &FailError{Class: class, Message: message} }

// Options configure a Worker.
type Options struct {
	Queue       string // the worker queue to claim from (required)
	Concurrency int    // handlers running at once (default 1)
	// Name is shown on the attempts it runs (default host-pid).
	Name string
	// ClaimWait is how long one claim long-polls (default 20 s, the most).
	ClaimWait time.Duration
	// HeartbeatFraction of the lease passes between heartbeats (default
	// 1/3: two chances before it expires).
	HeartbeatFraction float64
	// DrainTimeout is how long a shutdown waits for running handlers
	// (default 30 s).
	DrainTimeout time.Duration
	// OutcomeWait is how long a finished task's outcome may wait for
	// others' to be reported with it, in one request (POST
	// /v1/leases/batch) rather than one each (default 50 ms). It waits
	// not at all once no other task runs. Negative: each outcome is
	// reported alone, by /complete or /fail.
	OutcomeWait time.Duration
	Log         *slog.Logger
}

// Worker claims and runs tasks.
type Worker struct {
	c    *client.Client
	o    Options
	h    Handler
	log  *slog.Logger
	sema chan struct{}
	out  *reporter
}

// New answers a worker of queue o.Queue running h.
func New(c *client.Client, o Options, h Handler) (*Worker, error) {
	if o.Queue == "" {
		return nil, errors.New("stepflow worker: Options.Queue is required")
	}
	if c == nil || h == nil {
		return nil, errors.New("stepflow worker: a client and a handler are required")
	}
	o.Concurrency = max(o.Concurrency, 1)
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = cmp.Or(host, "worker") + "-" + strconv.Itoa(os.Getpid())
	}
	if o.ClaimWait <= 0 || o.ClaimWait > 20*time.Second {
		o.ClaimWait = 20 * time.Second
	}
	if o.HeartbeatFraction <= 0 || o.HeartbeatFraction >= 1 {
		o.HeartbeatFraction = 1.0 / 3
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.OutcomeWait == 0 {
		o.OutcomeWait = 50 * time.Millisecond
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("queue", o.Queue, "worker", o.Name)
	return &Worker{c: c, o: o, h: h, log: log, sema: make(chan struct{}, o.Concurrency), out: &reporter{c: c, wait: o.OutcomeWait}}, nil
}

// Run claims and runs tasks until ctx ends, then drains (see the package
// comment). It answers nil after a clean drain, an error when the drain
// ran out of time or claims are refused for good (401, 400).
func (w *Worker) Run(ctx context.Context) error {
	// Handlers run on their own context: a shutdown must not cancel them
	// until the drain time has run out.
	runCtx, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	defer abort(nil)
	var wg sync.WaitGroup
	err := w.claimLoop(ctx, runCtx, &wg)
	w.log.Info("stopped claiming; waiting for running tasks", "running", len(w.sema), "drain", w.o.DrainTimeout)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
		return err
	case <-time.After(w.o.DrainTimeout):
	}
	w.log.Warn("drain time ran out: cancelling running tasks", "drain", w.o.DrainTimeout)
	abort(ErrShutdown)
	<-drained
	return errors.Join(err, fmt.Errorf("stepflow worker: tasks still ran after the drain time (%s) and were cancelled", w.o.DrainTimeout))
}

// claimLoop claims while there is room, until ctx ends or claims are
// refused for good.
func (w *Worker) claimLoop(ctx, runCtx context.Context, wg *sync.WaitGroup) error {
	backoff := time.Duration(0)
	for {
		// Wait for a free slot, then take every free one.
		select {
		case w.sema <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if ctx.Err() != nil { // both were ready: a stop comes first
			<-w.sema
			return nil
		}
		free := 1
	fill:
		for free < min(cap(w.sema), 10) {
			select {
			case w.sema <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		leases, err := w.c.Claim(ctx, client.ClaimRequest{Queue: w.o.Queue, Max: free, WaitSeconds: int(w.o.ClaimWait / time.Second), Worker: w.o.Name})
		for range free - len(leases) {
			<-w.sema
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if code := client.ErrorCode(err); code == client.CodeUnauthorized || code == client.CodeInvalid {
				return fmt.Errorf("stepflow worker: claims refused: %w", err)
			}
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			w.log.Warn("claim failed; trying again", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		for i := range leases {
			wg.Add(1)
			w.out.started()
			go func(l client.Lease) {
				defer wg.Done()
				defer func() { <-w.sema }()
				w.run(runCtx, &l)
			}(leases[i])
		}
	}
}

// run runs one lease to its outcome.
func (w *Worker) run(runCtx context.Context, l *client.Lease) {
	log := w.log.With("job", l.JobID, "step", l.StepID, "attempt", l.Attempt)
	ctx, cancel := context.WithCancelCause(runCtx)
	defer cancel(nil)
	if l.Deadline != nil {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, *l.Deadline)
		defer stop()
	}
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(ctx, l, cancel, log)
	}()

	task := &Task{Lease: l}
	out, err := w.handle(ctx, task)
	cause := context.Cause(ctx)
	cancel(nil) // stops the heartbeats
	<-hbDone
	// The context that reports the outcome outlives a shutdown's abort.
	rctx, stop := context.WithTimeout(context.WithoutCancel(runCtx), 30*time.Second)
	defer stop()
	switch {
	case errors.Is(cause, ErrCancelRequested) || errors.Is(cause, ErrLeaseLost):
		w.out.skipped(rctx)
		log.Info("task ended without an outcome", "why", cause)
		return
	case err == nil:
		if _, err := w.out.report(rctx, client.LeaseOutcome{LeaseID: l.LeaseID, Output: out, Cost: task.cost()}); err != nil {
			log.Warn("complete failed", "err", err)
			return
		}
		log.Info("task completed")
		return
	}
	f := client.Failure{Class: client.ClassRetryable, Message: err.Error()}
	var fe *FailError
	switch {
	case errors.As(err, &fe):
		f = client.Failure{Class: fe.Class, Message: fe.Message, RetryAfterSeconds: int((fe.RetryAfter + time.Second - 1) / time.Second), Prompt: fe.Prompt, Steps: fe.Steps}
	case errors.Is(cause, context.DeadlineExceeded):
		f.Class = client.ClassTimeout
	}
	if _, rerr := w.out.report(rctx, client.LeaseOutcome{LeaseID: l.LeaseID, Failure: &f, Cost: task.cost()}); rerr != nil {
		log.Warn("fail failed", "err", rerr, "class", f.Class)
		return
	}
	log.Info("task failed", "class", f.Class, "err", err)
}

// handle fetches the task's input and runs the handler on it, a panic
// being a failure.
func (w *Worker) handle(ctx context.Context, t *Task) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	in, err := w.c.FetchInput(ctx, t.Lease)
	if err != nil {
		return nil, fmt.Errorf("fetch the input: %w", err)
	}
	t.Input = in
	return w.h(ctx, t)
}

// heartbeat extends the lease every fraction of it until ctx ends; it
// cancels the task when the job was cancelled or the lease is lost.
func (w *Worker) heartbeat(ctx context.Context, l *client.Lease, cancel context.CancelCauseFunc, log *slog.Logger) {
	lease := time.Duration(l.LeaseSeconds) * time.Second
	if lease <= 0 {
		lease = max(time.Until(l.ExpiresAt), time.Second)
	}
	every := max(time.Duration(float64(lease)*w.o.HeartbeatFraction), 100*time.Millisecond)
	expires := l.ExpiresAt
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		res, err := w.c.Heartbeat(ctx, l.LeaseID, 0)
		switch {
		case ctx.Err() != nil:
			return
		case client.IsLeaseLost(err):
			log.Warn("lease lost", "err", err)
			cancel(ErrLeaseLost)
			return
		case err != nil:
			if !time.Now().Before(expires) {
				log.Warn("no heartbeat got through before the lease expired", "err", err)
				cancel(ErrLeaseLost)
				return
			}
			// Try again sooner, while the lease still runs.
			log.Warn("heartbeat failed; trying again", "err", err)
			t.Reset(max(min(every, time.Until(expires)/2), 100*time.Millisecond))
			continue
		case res.CancelRequested:
			log.Info("cancel requested")
			cancel(ErrCancelRequested)
			return
		}
		if res.ExpiresAt != nil {
			expires = *res.ExpiresAt
		}
		// Paced from when this one was sent: a slow answer does not push
		// the next one towards the lease's end.
		t.Reset(max(every-time.Since(sent), 0))
	}
}
