package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// countingStore counts the job reads and writes the engine makes, and
// fails the writes failSave names (by their count from 1) as a lost
// connection would.
type countingStore struct {
	engine.Store
	gets, saves atomic.Int64
	failSave    int64
	crashSave   int64 // the write whose process dies before it is made
	afterSave   func(n int64)
}

func (s *countingStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, tenant, id)
}

func (s *countingStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	switch n := s.saves.Add(1); n {
	case s.failSave:
		return fmt.Errorf("injected: connection reset")
	case s.crashSave:
		panic("injected: the invocation died")
	}
	err := s.Store.Save(ctx, j, loaded)
	if s.afterSave != nil {
		s.afterSave(s.saves.Load())
	}
	return err
}

func counted(t *testing.T) (*bundle, *countingStore) {
	t.Helper()
	b := setup(t)
	st := &countingStore{Store: b.store}
	b.e.Configure(func(c *engine.Config) { c.Store, c.Queue = st, contextQueue{c.Queue} })
	return b, st
}

// contextQueue refuses a send under a context that is done, as the SDK
// does.
type contextQueue struct{ engine.Queue }

func (q contextQueue) Dispatch(ctx context.Context, j *domain.Job, ss []engine.Send) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.Queue.Dispatch(ctx, j, ss)
}

func stepStates(j *domain.Job) []domain.StepState {
	var out []domain.StepState
	for _, s := range j.Steps {
		out = append(out, s.State)
	}
	return out
}

func passSteps(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"pass"}}`, i)
	}
	return `{"payload":{"n":1},"steps":[` + strings.Join(steps, ",") + `]}`
}

// A pass step is leased and its outcome recorded in one write, and its
// first message carries the job, so there is no read: one write, and its
// events as two writes would have made them.
func TestAnInstantStepIsOneWrite(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, `{"payload":{"n":1},"steps":[{"id":"hello","action":{"type":"pass"}}]}`)
	gets, saves := st.gets.Load(), st.saves.Load()
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.EqualValues(t, 0, st.gets.Load()-gets, "the message carries the job")
	require.EqualValues(t, 1, st.saves.Load()-saves)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_running", "step_succeeded", "job_completed"}, eventTypes(got))
	require.JSONEq(t, `{"n":1}`, string(got.Steps[0].Output))

	// A fail step too: its failure is recorded in the write that leased it.
	f := b.submit(t, tenantA, `{"steps":[{"id":"boom","action":{"type":"fail","class":"fatal","message":"bad input"}}]}`)
	saves = st.saves.Load()
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.EqualValues(t, 1, st.saves.Load()-saves)
	got = b.job(t, tenantA, f.ID)
	require.Equal(t, domain.JobFailed, got.State)
	require.Equal(t, "bad input", got.Steps[0].Error.Message)
}

// The steps a write makes runnable are run in the same invocation, on the
// job as it was saved: one read for the whole chain, one write per step,
// no message between them.
func TestAChainRunsEachStepInOneWriteWithoutARead(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(5))
	gets, saves := st.gets.Load(), st.saves.Load()
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.EqualValues(t, 1, st.gets.Load()-gets, "the first step's read only")
	require.EqualValues(t, 5, st.saves.Load()-saves, "one write per step")
	require.Empty(t, b.queue.TakeReady(10))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	for _, s := range got.Steps {
		require.JSONEq(t, `{"n":1}`, string(s.Output))
	}
}

// A chain runs at most ChainSteps steps after the delivered one; the next
// goes through the ready queue, where other work takes its turn.
func TestAChainYieldsAfterItsBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const budget = 4
	b.e.Configure(func(c *engine.Config) { c.ChainSteps = budget })
	n := 2*(budget+1) + 3
	j := b.submit(t, tenantA, passSteps(n))
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	states := stepStates(got)
	require.Equal(t, domain.StepSucceeded, states[budget])
	require.NotEqual(t, domain.StepSucceeded, states[budget+1], "past the budget")
	next := b.takeOne(t)
	require.Equal(t, fmt.Sprintf("s%d", budget+1), next.Message.Step, "sent, not run")
	require.Equal(t, engine.Executed, b.execute(t, next))
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t), "three deliveries for the whole job")
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// A chained step whose lease cannot be written is sent as it would have
// been without the chain; the job goes on from the queue.
func TestAChainedStepThatFailsToRunIsSent(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(3))
	st.failSave = st.saves.Load() + 2 // the second step's write
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepPending, domain.StepWaitingDeps}, stepStates(got))
	d := b.takeOne(t)
	require.Equal(t, "s1", d.Message.Step)
	require.Equal(t, engine.Executed, b.execute(t, d))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// Work for a worker or after a delay is never chained: a worker step is
// sent to its queue, a backoff waits its time.
func TestAChainRunsOnlyBuiltInStepsDueNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepPending}, stepStates(b.job(t, tenantA, j.ID)))
	require.Len(t, b.claim(t, tenantA, "q"), 1)

	r := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"flaky","action":{"type":"fail","class":"retryable","message":"busy"},
		"retry":{"max_attempts":2,"backoff":"fixed","initial_delay_ms":10000}}]}`)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, r.ID)
	require.Equal(t, domain.JobRetrying, got.State, "flaky ran in the chain and waits out its backoff")
	require.Equal(t, 1, got.Steps[1].Attempt)
	require.Empty(t, b.queue.TakeReady(10), "its retry is not due")
}

// A fan-out of instant steps and its fan-in run in the invocation that
// ran the step before them, the branches in one write (runTogether),
// rather than as parallel writers racing on the job; a branch that does
// I/O is sent, so those run in parallel elsewhere.
func TestAFanOutOfInstantStepsRunsInOneInvocation(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	const width = 97
	steps := []string{`{"id":"root","action":{"type":"pass"}}`}
	var deps []string
	for i := range width {
		steps = append(steps, fmt.Sprintf(`{"id":"b%d","action":{"type":"pass"},"depends_on":["root"]}`, i))
		deps = append(deps, fmt.Sprintf(`"b%d"`, i))
	}
	steps = append(steps, `{"id":"join","action":{"type":"pass"},"depends_on":[`+strings.Join(deps, ",")+`]}`)
	j := b.submit(t, tenantA, `{"payload":{"n":1},"steps":[`+strings.Join(steps, ",")+`]}`)
	gets, saves := st.gets.Load(), st.saves.Load()
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.EqualValues(t, 1, st.gets.Load()-gets)
	require.EqualValues(t, 3, st.saves.Load()-saves, "the root, the branches together, the fan-in: no lost race")
	require.Empty(t, b.queue.TakeReady(10))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Len(t, got.Steps[width+1].Attempts, 1)

	// Branches that call out: one runs here, the others are sent.
	io := b.submit(t, tenantA, `{"steps":[{"id":"root","action":{"type":"pass"}},
		{"id":"x","action":{"type":"http","url":"https://example.com/x"},"depends_on":["root"]},
		{"id":"y","action":{"type":"http","url":"https://example.com/y"},"depends_on":["root"]},
		{"id":"z","action":{"type":"pass"},"depends_on":["root"]}]}`)
	b.e.Configure(func(c *engine.Config) { c.Runner = answering{} })
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got = b.job(t, tenantA, io.ID)
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepSucceeded, domain.StepPending, domain.StepSucceeded}, stepStates(got))
	sent := b.takeOne(t)
	require.Equal(t, "y", sent.Message.Step)
	require.Equal(t, engine.Executed, b.execute(t, sent))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, io.ID).State)
}

// answering answers {} for any step it runs, as a callee would.
type answering struct{ engine.Actions }

func (answering) Run(context.Context, engine.ActionCall) (json.RawMessage, *domain.Failure) {
	return json.RawMessage(`{}`), nil
}

// A chain whose invocation dies leaves its next step runnable with no
// message: the delivered message, which comes back since its invocation
// never answered, takes that step up again rather than leaving it to the
// sweep.
func TestTheMessageOfAChainThatDiedResumesIt(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(3))
	st.crashSave = st.saves.Load() + 2 // dies before the second step's write
	d := b.takeOne(t)
	require.Panics(t, func() { _, _ = b.e.Execute(b.ctx, d) })
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepPending, domain.StepWaitingDeps}, stepStates(got))
	require.Empty(t, b.queue.TakeReady(10), "no message for s1: the chain was to run it")

	// The chain carried s1 out of the due index: only the message brings
	// it back.
	require.Nil(t, got.DueAt)
	require.True(t, got.Stranded())
	due, err := b.store.Due(b.ctx, b.clock.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, due)

	// Its message comes back (SQS hands it out again at the visibility
	// the chain gave it), and takes s1 up at once.
	require.NoError(t, b.queue.Release(b.ctx, d.Token))
	again := b.takeOne(t)
	require.Equal(t, engine.Stale, b.execute(t, again), "its own step is done")
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State, "the rest ran")
}

// dueSpy records, for each write of a job, whether it put the job in the
// due index, and how long the engine hid each delivery for.
type dueSpy struct {
	engine.Store
	mu      sync.Mutex
	indexed []bool
}

func (s *dueSpy) Save(ctx context.Context, j *domain.Job, loaded int) error {
	s.mu.Lock()
	s.indexed = append(s.indexed, j.DueAt != nil)
	s.mu.Unlock()
	return s.Store.Save(ctx, j, loaded)
}

type hideSpy struct {
	engine.Queue
	mu    sync.Mutex
	hides []time.Duration
}

func (q *hideSpy) Extend(ctx context.Context, token string, d time.Duration) error {
	q.mu.Lock()
	q.hides = append(q.hides, d)
	q.mu.Unlock()
	return q.Queue.Extend(ctx, token, d)
}

// A chain's steps are carried by its delivered message, hidden once for
// CarryVisibility, not by the due index: a five-step job run by one
// delivery is never in the index (no index write as it starts, none as it
// ends). A delivery no message carries (no token) keeps them in it.
func TestAChainCarriesItsStepsOutOfTheDueIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st, q := &dueSpy{Store: b.store}, &hideSpy{Queue: b.queue}
	b.e.Configure(func(c *engine.Config) { c.Store, c.Queue = st, q })
	j := b.submit(t, tenantA, passSteps(5))
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	require.Equal(t, []bool{false, false, false, false, false}, st.indexed, "no write indexed the job")
	require.Equal(t, []time.Duration{engine.CarryVisibility}, q.hides, "its message hidden once")

	st.indexed, q.hides = nil, nil
	k := b.submit(t, tenantA, passSteps(3))
	d := b.takeOne(t)
	token := d.Token
	d.Token = ""
	res, err := b.e.Execute(b.ctx, d)
	require.NoError(t, err)
	require.Equal(t, engine.Executed, res)
	require.NoError(t, b.queue.Ack(b.ctx, token))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, k.ID).State)
	require.Equal(t, []bool{true, true, false}, st.indexed, "with no message to carry them, the steps are indexed until the job ends")
	require.Empty(t, q.hides)
}

// failingSends refuses every send, as an unreachable queue would.
type failingSends struct{ engine.Queue }

func (q failingSends) Dispatch(context.Context, *domain.Job, []engine.Send) error {
	return fmt.Errorf("injected: queue unreachable")
}

// A carried step that neither runs (its write fails) nor goes out (the
// queue is unreachable) keeps the delivered message: the delivery answers
// an error, so the message comes back and runs the rest.
func TestACarriedStepThatIsNeitherRunNorSentKeepsItsMessage(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(3))
	st.failSave = st.saves.Load() + 2 // the second step's write
	queue := b.queue
	b.e.Configure(func(c *engine.Config) { c.Queue = failingSends{c.Queue} })
	d := b.takeOne(t)
	_, err := b.e.Execute(b.ctx, d)
	require.Error(t, err, "the message must come back")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepPending, domain.StepWaitingDeps}, stepStates(got))
	require.True(t, got.Stranded())

	b.e.Configure(func(c *engine.Config) { c.Queue = contextQueue{queue} })
	require.NoError(t, queue.Release(b.ctx, d.Token))
	require.Equal(t, engine.Stale, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// An invocation that reaches its end right after a write still sends what
// the write calls for (here the step its chain kept) rather than leave it
// to the sweep.
func TestAChainAtItsInvocationsEndSendsWhatItKept(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(3))
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	first := st.saves.Load() + 1
	st.afterSave = func(n int64) {
		if n == first {
			cancel() // the invocation's deadline, right after the first step's write
		}
	}
	res, err := b.e.Execute(ctx, b.takeOne(t))
	require.NoError(t, err)
	require.Equal(t, engine.Executed, res)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []domain.StepState{domain.StepSucceeded, domain.StepPending, domain.StepWaitingDeps}, stepStates(got))
	d := b.takeOne(t)
	require.Equal(t, "s1", d.Message.Step, "sent, though the invocation was done")
	require.Equal(t, engine.Executed, b.execute(t, d))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// alwaysLosingStore loses every save's race, as a job whose branches all
// end together can to one writer.
type alwaysLosingStore struct{ *memory.Store }

func (s alwaysLosingStore) Save(context.Context, *domain.Job, int) error {
	return domain.ErrVersionConflict
}

// A delivery whose lease loses every race comes back in a second or two,
// not at the ready queue's visibility timeout.
func TestAContendedDeliveryComesBackSoon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"http","url":"https://example.com"}}]}`)
	d := b.takeOne(t)
	require.Equal(t, j.ID, d.Message.Job)
	b.e.Configure(func(c *engine.Config) { c.Store = alwaysLosingStore{b.store} })
	_, err := b.e.Execute(b.ctx, d)
	require.ErrorIs(t, err, domain.ErrContended)
	next, ok := b.queue.NextVisible(b.clock.Now())
	require.True(t, ok)
	wait := next.Sub(b.clock.Now())
	require.GreaterOrEqual(t, wait, time.Second)
	require.LessOrEqual(t, wait, 2*time.Second, "not the visibility timeout (%s)", builtinLease)
	b.e.Configure(func(c *engine.Config) { c.Store = b.store })
}

// A copy of a message handed out while its first delivery's chain
// carries the job's steps (SQS delivers a message twice now and then)
// finds its step done and the job out of the due index: it keeps the
// message (hidden, not deleted) rather than take from the chain what
// brings its steps back, so when the chain then dies the message still
// comes back and runs them.
func TestACopyOfACarryingChainsMessageKeepsIt(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, passSteps(3))
	d := b.takeOne(t)
	first := st.saves.Load() + 1
	var copyRes engine.ExecuteResult
	st.afterSave = func(n int64) {
		if n == first { // s0 recorded, s1 carried: the copy comes now
			var err error
			copyRes, err = b.e.Execute(b.ctx, d)
			require.NoError(t, err)
			st.crashSave = st.saves.Load() + 1 // then the chain dies before s1's write
		}
	}
	require.Panics(t, func() { _, _ = b.e.Execute(b.ctx, d) })
	require.Equal(t, engine.Held, copyRes, "the copy kept the message")
	got := b.job(t, tenantA, j.ID)
	require.True(t, got.Stranded())

	require.NoError(t, b.queue.Release(b.ctx, d.Token))
	again := b.takeOne(t)
	require.Equal(t, 2, again.Receives)
	require.Equal(t, engine.Stale, b.execute(t, again))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State, "the message came back and ran the rest")
}
