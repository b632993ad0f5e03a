package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// slowCreateStore runs before each job's write what a queue poller does
// meanwhile: a job's first messages go out before its write.
type slowCreateStore struct {
	*memory.Store
	before func()
	fail   bool
}

func (s *slowCreateStore) Create(ctx context.Context, j *domain.Job, h string, now time.Time) (*domain.Job, bool, error) {
	if s.before != nil {
		s.before()
	}
	if s.fail {
		return nil, false, errors.New("injected: the write failed")
	}
	return s.Store.Create(ctx, j, h, now)
}

// A one-step job's message goes out before its write, and the job stays
// out of the due index: two writes in all, no index entry to add or
// remove.
func TestAJobWhoseFirstMessageWentOutFirstIsNotInTheDueIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	require.Nil(t, j.DueAt)
	due, err := b.store.Due(b.ctx, b.clock.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, due)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)

	// Written first, as before: a job with an idempotency key (a replay
	// would leave a message for a job never written) and one whose first
	// step is a worker's (a claim is no execute delivery).
	k, _, err := b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"only","action":{"type":"pass"}}]}`), "key-1")
	require.NoError(t, err)
	require.NotNil(t, k.DueAt)
	w := b.submit(t, tenantA, workerJob)
	require.NotNil(t, w.DueAt)
	// And a job too large for its message to carry: its write takes
	// longer than its message takes to come.
	var steps []string
	for i := range 40 {
		steps = append(steps, fmt.Sprintf(`{"id":"step-%02d","action":{"type":"pass"}}`, i))
	}
	large := b.submit(t, tenantA, `{"steps":[`+strings.Join(steps, ",")+`]}`)
	require.NotNil(t, large.DueAt)
}

// A message that comes before its job's write is hidden a moment, and
// runs the job once it is written.
func TestAFirstMessageThatComesBeforeItsJobWaitsForIt(t *testing.T) {
	t.Parallel()
	var s *slowCreateStore
	b := setup(t, withStore(&s, func(m *memory.Store) *slowCreateStore { return &slowCreateStore{Store: m} }))
	var early engine.ExecuteResult
	s.before = func() {
		d := b.takeOne(t)
		require.Equal(t, 1, d.Receives)
		early = b.execute(t, d)
	}
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	require.Equal(t, engine.Early, early)
	require.Empty(t, b.queue.TakeReady(10), "hidden for a moment")

	b.clock.Advance(4 * time.Second)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// missedStore tells when a read finds no job.
type missedStore struct {
	slowCreateStore
	missed chan struct{}
}

func (s *missedStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	j, err := s.slowCreateStore.Get(ctx, tenant, id)
	if errors.Is(err, domain.ErrNotFound) {
		select {
		case s.missed <- struct{}{}:
		default:
		}
	}
	return j, err
}

// A first message that comes while its job's write is in flight looks
// again a moment later, and runs the job then rather than seconds later.
func TestAFirstMessageLooksAgainForAJobBeingWritten(t *testing.T) {
	t.Parallel()
	var s *missedStore
	b := setup(t, withStore(&s, func(m *memory.Store) *missedStore {
		return &missedStore{slowCreateStore: slowCreateStore{Store: m}, missed: make(chan struct{}, 1)}
	}))
	got := make(chan engine.ExecuteResult, 1)
	s.before = func() {
		d := b.takeOne(t)
		go func() { got <- b.execute(t, d) }()
		<-s.missed // it found no job: the write goes on now
	}
	j := b.submit(t, tenantA, `{"payload":{"big":"`+strings.Repeat("x", 3000)+`"},"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	require.Equal(t, engine.Executed, <-got, "not early: the job was written while it looked again")
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// A job whose write failed after its first message went out: the request
// fails, and the message is dropped a minute after it was sent, on its
// fifth receive, before the queue would dead-letter it.
func TestAFirstMessageWhoseJobIsNeverWrittenIsDropped(t *testing.T) {
	t.Parallel()
	var s *slowCreateStore
	b := setup(t, withStore(&s, func(m *memory.Store) *slowCreateStore { return &slowCreateStore{Store: m} }))
	s.fail = true
	_, _, err := b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"only","action":{"type":"pass"}}]}`), "")
	require.Error(t, err)

	var got []engine.ExecuteResult
	for b.queue.Len("", "") > 0 {
		b.clock.Advance(time.Second)
		if ds := b.queue.TakeReady(10); len(ds) > 0 {
			got = append(got, b.execute(t, ds[0]))
		}
	}
	require.Equal(t, []engine.ExecuteResult{engine.Early, engine.Early, engine.Early, engine.Early, engine.Stale}, got)
	require.Empty(t, b.queue.DeadLetters())
}

// failingLeaseStore refuses every write of a job that leases a step: an
// execute that dies before its first write, on every delivery.
type failingLeaseStore struct{ *memory.Store }

func (s *failingLeaseStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	for _, st := range j.Steps {
		if st.Lease != nil || st.State.Terminal() {
			return errors.New("injected: the execute died before its write")
		}
	}
	return s.Store.Save(ctx, j, loaded)
}

// A message received for the third time puts its job in the due index
// before anything else: if its handler keeps dying before its first
// write, the queue dead-letters the message, and the sweep sends the step
// again, as it would a lost message.
func TestARedeliveredFirstMessagePutsItsJobInTheDueIndex(t *testing.T) {
	t.Parallel()
	var fs *failingLeaseStore
	b := setup(t, withStore(&fs, func(m *memory.Store) *failingLeaseStore { return &failingLeaseStore{Store: m} }))
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	for receive := 1; receive <= 3; receive++ {
		d := b.takeOne(t)
		require.Equal(t, receive, d.Receives)
		_, err := b.e.Execute(b.ctx, d)
		require.Error(t, err, "the message comes back")
		if receive < 3 {
			require.Nil(t, b.job(t, tenantA, j.ID).DueAt)
		}
		b.clock.Advance(builtinLease)
	}
	got := b.job(t, tenantA, j.ID)
	require.NotNil(t, got.DueAt, "in the due index")
	require.Equal(t, 1, b.sweep(t).Due)
}

// The sweep sends a long timer that came within reach before its write,
// which takes the job out of the due index; when that send fails, the
// job is written in the index and the message sent after, as before.
func TestALongTimerIsArmedBeforeTheSweepsWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wake := b.clock.Now().Add(2 * time.Hour)
	armAt := wake.Add(-domain.DefaultTimerThreshold)
	spec := `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}}]}`
	var jobs []*domain.Job
	for range 12 {
		jobs = append(jobs, b.submit(t, tenantA, spec))
	}
	require.Equal(t, armAt, *jobs[0].DueAt)

	// The sweep reads ten due jobs before it writes any, and sends their
	// timers together: one batch of sends for ten jobs, then the other
	// two, whose batch is lost (the process died before its send). Each
	// of those two is sent again before its own write, and the first of
	// those sends is lost too: that one goes after its write.
	b.clock.Advance(armAt.Sub(b.clock.Now()))
	batches := b.lossy.batches.Load()
	b.lossy.dropBatch.Store(batches + 2)
	b.lossy.drop.Store(1)
	require.Equal(t, engine.SweepReport{Due: 12}, b.sweep(t))
	require.EqualValues(t, 2, b.lossy.batches.Load()-batches, "two batches of sends for twelve jobs")
	require.Equal(t, 12, b.queue.Len("", ""), "each timer sent once")
	var out, in int
	for _, j := range jobs {
		got := b.job(t, tenantA, j.ID)
		if got.DueAt == nil {
			out++ // sent before its write: out of the due index
			continue
		}
		in++
		require.Equal(t, wake.Add(domain.DispatchGrace), *got.DueAt, "sent after its write: due if its message never comes")
	}
	require.Equal(t, []int{11, 1}, []int{out, in})

	b.clock.Advance(wake.Sub(b.clock.Now()))
	require.Len(t, b.drain(t), 12)
	for _, j := range jobs {
		require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	}
}

// A first message carries its job as written: its delivery needs no
// read. Once the job has moved on (cancelled here), the write on the
// carried job fails its condition, the job is read, and nothing runs.
func TestACarriedJobThatMovedOnIsRead(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"only","action":{"type":"pass"}}]}`)
	_, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	d := b.takeOne(t)
	require.NotEmpty(t, d.Message.Doc)
	gets := st.gets.Load()
	require.Equal(t, engine.Stale, b.execute(t, d))
	require.EqualValues(t, 1, st.gets.Load()-gets, "read once its write lost")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCancelled, got.State)
	require.Equal(t, domain.StepCancelled, got.Steps[0].State)
}

// A sweep that comes after a long timer's instant (its tenant's jobs
// were many) sends the timer's message for at once, before its write, as
// one in time would have, rather than firing the timer itself: the write
// takes the job out of the due index (one unit) instead of moving it
// there (two), and the message fires the timer and runs what follows.
func TestALateSweepSendsALongTimersMessageForAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wake := b.clock.Now().Add(2 * time.Hour)
	j := b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}},{"id":"after","action":{"type":"pass"}}]}`)
	b.clock.Advance(wake.Sub(b.clock.Now()) + time.Second)
	require.Equal(t, 1, b.sweep(t).Due)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepWaiting, got.Steps[0].State, "not fired by the sweep")
	require.Nil(t, got.DueAt, "out of the due index: its message runs it")
	ds := b.queue.TakeReady(10)
	require.Len(t, ds, 1, "the timer's message alone")
	require.Equal(t, "nap", ds[0].Message.Step)
	require.Equal(t, engine.Executed, b.execute(t, ds[0]))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// A batch's first messages go out before its writes, held back a second
// so that they come after all of them: each then runs its job without a
// read, and the batch's jobs are out of the due index.
func TestABatchSendsFirstAndItsMessagesComeAfterItsWrites(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	items := make([]engine.BatchItem, 10)
	for i := range items {
		items[i] = engine.BatchItem{Body: []byte(`{"steps":[{"id":"only","action":{"type":"pass"}}]}`)}
	}
	res := b.e.SubmitBatch(b.ctx, tenantA, items)
	for _, r := range res {
		require.NoError(t, r.Err)
		require.Nil(t, r.Job.DueAt)
	}
	require.Empty(t, b.queue.TakeReady(10), "held back a second")
	b.clock.Advance(time.Second)
	gets := st.gets.Load()
	got := b.drain(t)
	require.Len(t, got, 10)
	for _, r := range got {
		require.Equal(t, engine.Executed, r)
	}
	require.EqualValues(t, 0, st.gets.Load()-gets, "each message carries its job")
	for _, r := range res {
		require.Equal(t, domain.JobCompleted, b.job(t, tenantA, r.Job.ID).State)
	}
}

// eagerStore runs every visible ready message before each save, as an
// executor that receives a message sent before a write may run it before
// that write lands.
type eagerStore struct {
	*memory.Store
	run func()
}

func (s *eagerStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	if s.run != nil {
		run := s.run
		s.run = nil // not within its own saves
		run()
		s.run = run
	}
	return s.Store.Save(ctx, j, loaded)
}

// A late timer's message, sent before the sweep's write, may run before
// that write lands: it fires the timer and runs what follows, and the
// sweep's write, refused, finds the job finished and does nothing more.
// Nothing runs twice.
func TestALateTimersMessageMayRunBeforeTheSweepsWrite(t *testing.T) {
	t.Parallel()
	var es *eagerStore
	b := setup(t, withStore(&es, func(m *memory.Store) *eagerStore { return &eagerStore{Store: m} }))
	wake := b.clock.Now().Add(2 * time.Hour)
	j := b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}},{"id":"after","action":{"type":"pass"}}]}`)
	b.clock.Advance(wake.Sub(b.clock.Now()) + time.Second)
	var early []engine.ExecuteResult
	es.run = func() {
		for _, d := range b.queue.TakeReady(10) {
			early = append(early, b.execute(t, d))
		}
	}
	require.Equal(t, 1, b.sweep(t).Due)
	es.run = nil
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, early, "the timer's message ran before the sweep's write")
	require.Empty(t, b.drain(t), "and nothing is left to run")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.NoError(t, domain.CheckReplay(got))
}
