package memory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Queue = (*Queue)(nil)

// Limits of SQS the queue keeps.
const (
	MaxDelay      = 900 * time.Second // longest DelaySeconds; a longer delay is sent at this one
	MaxVisibility = 12 * time.Hour    // longest visibility timeout
	MaxReceive    = 10                // most messages one receive answers
)

// Defaults, as template.yaml and shared/queue set them.
const (
	DefaultWorkerVisibility  = 30 * time.Second // a worker queue's visibility before a claim sets the lease's
	DefaultReadyVisibility   = 1800 * time.Second
	DefaultMaxWorkerQueues   = 50
	DefaultReadyMaxReceives  = 5   // the ready queues' maxReceiveCount
	DefaultWorkerMaxReceives = 100 // the worker queues' maxReceiveCount
)

type message struct {
	id        int64
	body      engine.Message
	q         *fifo
	visibleAt time.Time
	sentAt    time.Time
	receives  int // receives so far; receipt n is the token of the n-th
}

// fifo is one queue: messages in the order they were sent.
type fifo struct {
	name        string
	visibility  time.Duration
	maxReceives int
	msgs        []*message
}

type workerKey struct{ tenant, name string }

// Queue is the in-memory queue: three ready queues (one per priority) and a
// worker queue per tenant and name, on the Clock it was given.
//
// Tokens are "mem/<message>/<receipt>", a new one for each receive, and
// handled as moto handles receipt handles: any token ever issued for a
// message acks it (and acking it again, once deleted, is no error); Extend
// and Release with any of its tokens act on the message as it is now, and
// answer an error once it is deleted. Real SQS may refuse or ignore a
// receipt handle older than the message's last receive; the engine does
// not rely on either.
type Queue struct {
	now func() time.Time

	mu              sync.Mutex
	ready           [domain.MaxPriority + 1]*fifo
	workers         map[workerKey]*fifo
	live            map[int64]*message
	deleted         map[int64]bool
	dead            []engine.Message
	nextID          int64
	maxWorkerQueues int
	workerVis       time.Duration
	workerMax       int
	// lanes are a worker queue's P0 and P2 messages (its P1 ones are in
	// workers), made when a job of that priority first names the queue.
	lanes map[laneKey]*fifo
	// forgotten: every message id up to it that is not live was deleted
	// before a Restore, which keeps no list of them (snapshot.go).
	forgotten int64
	changes   changes
}

type laneKey struct {
	workerKey
	priority int
}

// QueueOption configures a Queue.
type QueueOption func(*Queue)

// WithMaxWorkerQueues bounds the worker queues one tenant may have
// (DefaultMaxWorkerQueues).
func WithMaxWorkerQueues(n int) QueueOption { return func(q *Queue) { q.maxWorkerQueues = n } }

// WithWorkerVisibility sets the worker queues' visibility timeout
// (DefaultWorkerVisibility).
func WithWorkerVisibility(d time.Duration) QueueOption { return func(q *Queue) { q.workerVis = d } }

// WithReadyVisibility sets the ready queues' visibility timeout
// (DefaultReadyVisibility, the template's; it is the engine's BuiltinLease).
func WithReadyVisibility(d time.Duration) QueueOption {
	return func(q *Queue) {
		for _, f := range q.ready {
			f.visibility = d
		}
	}
}

// WithMaxReceives sets how often a message may be received before the next
// receive moves it to the dead letters (0: never), for the ready queues and
// the worker queues.
func WithMaxReceives(ready, worker int) QueueOption {
	return func(q *Queue) {
		for _, f := range q.ready {
			f.maxReceives = ready
		}
		q.workerMax = worker
	}
}

// NewQueue answers an empty queue on the clock now.
func NewQueue(now func() time.Time, opts ...QueueOption) *Queue {
	q := &Queue{
		now: now, workers: map[workerKey]*fifo{}, live: map[int64]*message{}, deleted: map[int64]bool{},
		maxWorkerQueues: DefaultMaxWorkerQueues, workerVis: DefaultWorkerVisibility, workerMax: DefaultWorkerMaxReceives,
	}
	for p := range q.ready {
		q.ready[p] = &fifo{name: "ready-p" + strconv.Itoa(p), visibility: DefaultReadyVisibility, maxReceives: DefaultReadyMaxReceives}
	}
	for _, o := range opts {
		o(q)
	}
	return q
}

// EnsureWorkerQueue makes tenant's worker queue name exist, unless the
// tenant already has its bound of them (an *domain.Error, CodeInvalid).
func (q *Queue) EnsureWorkerQueue(_ context.Context, tenant, name string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, err := q.ensureLocked(tenant, name)
	return err
}

func (q *Queue) ensureLocked(tenant, name string) (*fifo, error) {
	k := workerKey{tenant, name}
	if f, ok := q.workers[k]; ok {
		return f, nil
	}
	n := 0
	for wk := range q.workers {
		if wk.tenant == tenant {
			n++
		}
	}
	if n >= q.maxWorkerQueues {
		return nil, &domain.Error{Code: domain.CodeInvalid, Message: fmt.Sprintf(
			"tenant %s already has %d worker queues, the limit; use one of them or raise STEPFLOW_MAX_WORKER_QUEUES", tenant, n)}
	}
	return q.makeLocked(k), nil
}

// makeLocked makes worker queue k, whatever the bound.
func (q *Queue) makeLocked(k workerKey) *fifo {
	f := &fifo{name: "worker " + k.tenant + "/" + k.name, visibility: q.workerVis, maxReceives: q.workerMax}
	q.workers[k] = f
	q.changes.add()
	return f
}

// Dispatch sends one message per send, visible after its delay (rounded
// up to whole seconds, at most MaxDelay), to the list of its destination:
// a ready queue, or a lane of the tenant's worker queue (made if it is
// missing, within the bound). Nothing is sent if any send has nowhere to
// go.
func (q *Queue) Dispatch(ctx context.Context, j *domain.Job, ds []engine.Send) error {
	return q.DispatchJobs(ctx, []engine.JobSends{{Job: j, Sends: ds}})
}

// DispatchJobs is Dispatch of each job, under one lock: a job with a
// send that has nowhere to go sends nothing and is named in the error,
// and the others are sent.
func (q *Queue) DispatchJobs(_ context.Context, batch []engine.JobSends) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var errs []error
jobs:
	for _, js := range batch {
		j := js.Job
		dest := make([]*fifo, len(js.Sends))
		for i, d := range js.Sends {
			f, err := q.listLocked(j.Tenant, d.To)
			if err != nil {
				errs = append(errs, fmt.Errorf("dispatch job %s step %s: %w", j.ID, d.Step.ID(), err))
				continue jobs
			}
			dest[i] = f
		}
		for i, d := range js.Sends {
			delay := (min(max(d.Delay, 0), MaxDelay) + time.Second - 1).Truncate(time.Second)
			q.nextID++
			m := &message{id: q.nextID, q: dest[i], visibleAt: now.Add(delay), sentAt: now,
				body: engine.Message{Tenant: j.Tenant, Job: j.ID, Step: d.Step.ID(), Wake: d.Wake, Doc: d.Doc}}
			dest[i].msgs = append(dest[i].msgs, m)
			q.live[m.id] = m
			q.changes.add()
		}
	}
	return errors.Join(errs...)
}

// listLocked answers the list a destination names: the ready queue of its
// lane, or its lane of tenant's worker queue, made if missing (the queue
// within the bound).
func (q *Queue) listLocked(tenant string, to engine.Destination) (*fifo, error) {
	if to.Lane < 0 || to.Lane > domain.MaxPriority {
		return nil, fmt.Errorf("no lane %d", to.Lane)
	}
	if to.Kind != engine.ToWorker {
		return q.ready[to.Lane], nil
	}
	f, err := q.ensureLocked(tenant, to.Queue)
	if err != nil || to.Lane == domain.DefaultPriority {
		return f, err
	}
	return q.laneLocked(laneKey{workerKey{tenant, to.Queue}, to.Lane}, f), nil
}

// laneLocked answers lane k of worker queue f, made if missing.
func (q *Queue) laneLocked(k laneKey, f *fifo) *fifo {
	if q.lanes == nil {
		q.lanes = map[laneKey]*fifo{}
	}
	if q.lanes[k] == nil {
		q.lanes[k] = &fifo{name: f.name + " P" + strconv.Itoa(k.priority), visibility: q.workerVis, maxReceives: q.workerMax}
		q.changes.add()
	}
	return q.lanes[k]
}

// Take answers up to max (1 to MaxReceive) visible messages of tenant's
// worker queue name, from its lanes in the order given, each hidden for
// the queue's visibility timeout from now; engine.ErrNoWorkerQueue if no
// job ever named it. It never waits: time is the clock's, so wait is
// ignored.
func (q *Queue) Take(_ context.Context, tenant, name string, lanes []int, max int, _ time.Duration) ([]engine.Delivery, error) {
	if max < 1 || max > MaxReceive {
		return nil, &domain.Error{Code: domain.CodeInvalid, Field: "max", Message: fmt.Sprintf("must be between 1 and %d", MaxReceive)}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	wk := workerKey{tenant, name}
	f, ok := q.workers[wk]
	if !ok {
		return nil, fmt.Errorf("worker queue %q of tenant %s: %w", name, tenant, engine.ErrNoWorkerQueue)
	}
	now := q.now()
	var out []engine.Delivery
	for _, p := range lanes {
		lane := f
		if p != domain.DefaultPriority {
			if lane = q.lanes[laneKey{wk, p}]; lane == nil {
				continue
			}
		}
		if len(out) < max {
			out = append(out, q.receiveLocked(lane, max-len(out), now)...)
		}
	}
	return out, nil
}

// TakeReady plays the SQS event source mapping for tests: it receives up
// to max visible messages from the ready queues, P0 first, then P1, then
// P2, each hidden for the ready queues' visibility timeout. The caller
// acks what the execute handler would have the mapping delete.
func (q *Queue) TakeReady(max int) []engine.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var out []engine.Delivery
	for _, f := range q.ready {
		if len(out) >= max {
			break
		}
		out = append(out, q.receiveLocked(f, max-len(out), now)...)
	}
	return out
}

func (q *Queue) receiveLocked(f *fifo, max int, now time.Time) []engine.Delivery {
	var out []engine.Delivery
	keep := f.msgs[:0]
	for _, m := range f.msgs {
		switch {
		case len(out) >= max || m.visibleAt.After(now):
			keep = append(keep, m)
		case f.maxReceives > 0 && m.receives >= f.maxReceives:
			// Redrive: received maxReceiveCount times and never deleted.
			q.dead = append(q.dead, m.body)
			delete(q.live, m.id)
			q.deleted[m.id] = true
			q.changes.add()
		default:
			m.receives++
			m.visibleAt = now.Add(f.visibility)
			q.changes.add()
			out = append(out, engine.Delivery{Message: m.body, Token: token(m.id, m.receives), SentAt: m.sentAt, Receives: m.receives})
			keep = append(keep, m)
		}
	}
	clear(f.msgs[len(keep):])
	f.msgs = keep
	return out
}

func token(id int64, receipt int) string {
	return "mem/" + strconv.FormatInt(id, 10) + "/" + strconv.Itoa(receipt)
}

// lookup answers the live message a token names, or whether it names one
// deleted since; an error for a token this queue never issued.
func (q *Queue) lookup(tok string) (m *message, deleted bool, err error) {
	parts := strings.Split(tok, "/")
	if len(parts) != 3 || parts[0] != "mem" {
		return nil, false, fmt.Errorf("delivery token %.40q is not this queue's", tok)
	}
	id, err1 := strconv.ParseInt(parts[1], 10, 64)
	receipt, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || receipt < 1 {
		return nil, false, fmt.Errorf("delivery token %.40q is not this queue's", tok)
	}
	if q.deleted[id] || id <= q.forgotten && q.live[id] == nil {
		return nil, true, nil
	}
	m = q.live[id]
	if m == nil || receipt > m.receives {
		return nil, false, fmt.Errorf("delivery token %.40q was never issued", tok)
	}
	return m, false, nil
}

// Extend hides a delivery until d from now (whole seconds, 0 to
// MaxVisibility). A deleted delivery answers an error, as SQS does.
func (q *Queue) Extend(_ context.Context, tok string, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, deleted, err := q.lookup(tok)
	if err != nil {
		return err
	}
	if deleted {
		return fmt.Errorf("change visibility: delivery %.40q was deleted", tok)
	}
	m.visibleAt = q.now().Add(min(max(d.Round(time.Second), 0), MaxVisibility))
	q.changes.add()
	return nil
}

// Release makes a delivery visible again now.
func (q *Queue) Release(ctx context.Context, tok string) error { return q.Extend(ctx, tok, 0) }

// Ack deletes a delivery for good; acking it again is no error.
func (q *Queue) Ack(_ context.Context, tok string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	m, deleted, err := q.lookup(tok)
	if err != nil || deleted {
		return err
	}
	f := m.q
	for i, x := range f.msgs {
		if x == m {
			f.msgs = append(f.msgs[:i], f.msgs[i+1:]...)
			break
		}
	}
	delete(q.live, m.id)
	q.deleted[m.id] = true
	q.changes.add()
	return nil
}

// ExtendAll extends each delivery as Extend does.
func (q *Queue) ExtendAll(ctx context.Context, es []engine.Extension) []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = q.Extend(ctx, e.Token, e.For)
	}
	return errs
}

// AckAll acks each delivery as Ack does.
func (q *Queue) AckAll(ctx context.Context, tokens []string) []error {
	errs := make([]error, len(tokens))
	for i, t := range tokens {
		errs[i] = q.Ack(ctx, t)
	}
	return errs
}

// DeadLetters answers the messages redriven so far, oldest first.
func (q *Queue) DeadLetters() []engine.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]engine.Message(nil), q.dead...)
}

// NextVisible answers the earliest time after after at which a message of
// any queue (ready, worker or lane) becomes visible, and false when none
// will: a harness on the Clock moves it there rather than step by step.
func (q *Queue) NextVisible(after time.Time) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var next time.Time
	for _, m := range q.live {
		if m.visibleAt.After(after) && (next.IsZero() || m.visibleAt.Before(next)) {
			next = m.visibleAt
		}
	}
	return next, !next.IsZero()
}

// Len answers how many messages tenant's worker queue name holds, visible
// or not (0 for a queue never made); with tenant "" it answers the ready
// queues' total.
func (q *Queue) Len(tenant, name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if tenant == "" {
		n := 0
		for _, f := range q.ready {
			n += len(f.msgs)
		}
		return n
	}
	if f := q.workers[workerKey{tenant, name}]; f != nil {
		return len(f.msgs)
	}
	return 0
}
