package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// busBundle is a bundle whose engine publishes to an in-memory bus.
func busBundle(t *testing.T) (*bundle, *memory.Bus) {
	b := setup(t)
	bus := memory.NewBus()
	b.e.Configure(func(c *engine.Config) { c.Publisher = bus })
	return b, bus
}

// transitions renders a job's published changes as "FROM>TO".
func transitions(bus *memory.Bus, job string) []string {
	var out []string
	for _, c := range bus.Changes() {
		if c.JobID == job {
			out = append(out, string(c.From)+">"+string(c.To))
		}
	}
	return out
}

// requireLogged requires every published change of j to be a job event of
// its log, with that event's seq, time and type, each once.
func requireLogged(t *testing.T, bus *memory.Bus, j *domain.Job) {
	t.Helper()
	seen := map[int]bool{}
	for _, c := range bus.Changes() {
		if c.JobID != j.ID {
			continue
		}
		require.False(t, seen[c.Seq], "seq %d published twice", c.Seq)
		seen[c.Seq] = true
		ev := j.Events[c.Seq-1]
		require.Equal(t, ev.Type, c.Event)
		require.True(t, ev.At.Equal(c.At))
		require.Equal(t, j.Tenant, c.Tenant)
	}
	var jobEvents int
	for _, ev := range j.Events {
		if !strings.HasPrefix(ev.Type, "step_") && !domain.IsNote(ev.Type) {
			jobEvents++
		}
	}
	require.Equal(t, jobEvents, len(seen), "every job-level transition of the log is published")
}

func TestEachJobTransitionIsPublishedOnce(t *testing.T) {
	t.Parallel()
	b, bus := busBundle(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"hello","action":{"type":"pass"}}]}`)
	require.Equal(t, []string{">QUEUED"}, transitions(bus, j.ID), "published after the create's write")
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, []string{">QUEUED", "QUEUED>RUNNING", "RUNNING>COMPLETED"}, transitions(bus, j.ID))
	require.Equal(t, 2, bus.Calls(), "one publish per change that moved the job (a pass step is leased and done in one)")
	requireLogged(t, bus, got)

	// A replay of an idempotent submission writes nothing and publishes
	// nothing; nor does a write that moves no job state.
	_, created, err := b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"s","action":{"type":"worker","queue":"q"}}]}`), "k-1")
	require.NoError(t, err)
	require.True(t, created)
	_, created, err = b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"s","action":{"type":"worker","queue":"q"}}]}`), "k-1")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 3, bus.Calls())
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err = b.e.Heartbeat(b.ctx, tenantA, ls[0].LeaseID, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{">QUEUED", "QUEUED>RUNNING"}, transitions(bus, ls[0].JobID))
}

func TestSeveralTransitionsOfOneWriteArePublishedTogether(t *testing.T) {
	t.Parallel()
	b, bus := busBundle(t)
	// QUEUED -> RUNNING -> WAITING -> PARKED in the one write that leases
	// and ends the first step: the sleep after it is further off than the
	// timer threshold.
	j := b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"nap","action":{"type":"sleep","seconds":86400}}]}`)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobParked, got.State)
	require.Equal(t, []string{">QUEUED", "QUEUED>RUNNING", "RUNNING>WAITING", "WAITING>PARKED"}, transitions(bus, j.ID))
	require.Equal(t, 2, bus.Calls(), "the three transitions of the step's one write are one publish")
	requireLogged(t, bus, got)
}

func TestFailedCarriesTheStepAndItsError(t *testing.T) {
	t.Parallel()
	b, bus := busBundle(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"ok","action":{"type":"pass"}},{"id":"boom","action":{"type":"fail","class":"fatal","message":"bad input"}},{"id":"never","action":{"type":"pass"}}]}`)
	b.drain(t)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobFailed, got.State)
	cs := bus.Changes()
	last := cs[len(cs)-1]
	require.Equal(t, domain.JobFailed, last.To)
	require.Equal(t, "boom", last.Step)
	require.Equal(t, &domain.StepError{Class: domain.ClassFatal, Message: "bad input"}, last.Error)
	for _, c := range cs[:len(cs)-1] {
		require.Empty(t, c.Step, "only FAILED names a step")
		require.Nil(t, c.Error)
	}
	requireLogged(t, bus, got)

	// A rejected gate fails its job too, with the decision as the error.
	g := b.submit(t, tenantA, `{"steps":[{"id":"gate","action":{"type":"approval"}}]}`)
	_, _, err := b.e.Reject(b.ctx, tenantA, g.ID, "gate", engine.Decision{By: "ana", Comment: "no"})
	require.NoError(t, err)
	cs = bus.Changes()
	last = cs[len(cs)-1]
	require.Equal(t, g.ID, last.JobID)
	require.Equal(t, domain.JobFailed, last.To)
	require.Equal(t, "gate", last.Step)
	require.Contains(t, last.Error.Message, "ana")
}

// racingStore lets another write in just before the next save, once, so
// that save loses its version race.
type racingStore struct {
	*memory.Store
	before    atomic.Pointer[func()]
	conflicts atomic.Int32
}

func (s *racingStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	if f := s.before.Swap(nil); f != nil {
		(*f)()
	}
	err := s.Store.Save(ctx, j, loaded)
	if err != nil {
		s.conflicts.Add(1)
	}
	return err
}

func TestALostRacePublishesNothing(t *testing.T) {
	t.Parallel()
	clock := memory.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	st := &racingStore{Store: memory.NewStore()}
	q := memory.NewQueue(clock.Now)
	var logged bytes.Buffer
	bus := memory.NewBus()
	e := engine.New(engine.Config{Store: st, Queue: q, BuiltinLease: builtinLease, Log: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: engine.ChangeLevel})), Now: clock.Now, Publisher: bus})
	ctx := context.Background()
	// The wait after render keeps an early signal (a job keeps one only for
	// a wait that can take it).
	j, _, err := e.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu"}},{"id":"hold","action":{"type":"wait","signal":"later"}}]}`), "")
	require.NoError(t, err)
	ls, err := e.Claim(ctx, tenantA, engine.ClaimRequest{Queue: "gpu", Max: 1, Worker: "w1"})
	require.NoError(t, err)
	require.Len(t, ls, 1)

	// The complete's first decision loses to a signal kept meanwhile (a
	// note, no job transition); decided again, it wins, and the wait takes
	// the kept signal in the same write.
	race := func() {
		_, _, err := e.Signal(ctx, tenantA, j.ID, domain.SignalRequest{Name: "later"})
		require.NoError(t, err)
	}
	st.before.Store(&race)
	_, err = e.Complete(ctx, tenantA, ls[0].LeaseID, json.RawMessage(`{"ok":true}`))
	require.NoError(t, err)
	require.EqualValues(t, 1, st.conflicts.Load(), "the complete lost one race")

	got, err := st.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Equal(t, []string{">QUEUED", "QUEUED>RUNNING", "RUNNING>COMPLETED"}, transitions(bus, j.ID))
	requireLogged(t, bus, got)

	// One log record per saved write that appended events: submit, claim,
	// signal, complete; none for the decision that lost.
	var records []map[string]any
	dec := json.NewDecoder(&logged)
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		if r["msg"] == engine.ChangeMessage {
			records = append(records, r)
		}
	}
	require.Len(t, records, 4)
	var states []string
	for _, r := range records {
		states = append(states, fmt.Sprint(r["state"]))
	}
	require.Equal(t, []string{"QUEUED", "RUNNING", "RUNNING", "COMPLETED"}, states)
	claim := records[1]
	require.Equal(t, j.ID, claim["job"])
	require.Equal(t, "render", claim["step"])
	require.Equal(t, "RUNNING", claim["step_state"])
	require.EqualValues(t, 1, claim["attempt"])
	require.Equal(t, ls[0].LeaseID, claim["lease"])
	require.Equal(t, "w1", claim["worker"])
	require.Equal(t, "QUEUED", claim["from"])
}

// failingBus refuses every publish.
type failingBus struct{ calls atomic.Int32 }

func (f *failingBus) Publish(context.Context, []engine.JobStateChange) error {
	f.calls.Add(1)
	return fmt.Errorf("injected: bus unreachable")
}

func TestAFailedPublishLeavesTheChangeStanding(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logged bytes.Buffer
	b.e.Configure(func(c *engine.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	bus := &failingBus{}
	b.e.Configure(func(c *engine.Config) { c.Publisher = bus })
	j := b.submit(t, tenantA, `{"steps":[{"id":"hello","action":{"type":"pass"}}]}`)
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
	require.EqualValues(t, 2, bus.calls.Load())
	require.Contains(t, logged.String(), "job state change not published")
	require.Contains(t, logged.String(), j.ID)
}

func TestChangeListsEachStepItMoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[
		{"id":"a","action":{"type":"pass"}},
		{"id":"b","action":{"type":"fail","class":"retryable","message":"busy"},"depends_on":["a"]},
		{"id":"c","action":{"type":"pass"},"depends_on":["a"]}]}`)
	loaded := len(j.Events)
	// a runs, then b in the same invocation (chained): b fails and waits
	// out its backoff, RUNNING -> FAILED_RETRYABLE -> RETRYING in its one
	// write; c is sent, still PENDING.
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	got := b.job(t, tenantA, j.ID)
	c := engine.NewChange(got, domain.JobQueued, loaded)
	var last engine.StepChange
	for _, s := range c.Steps {
		if s.Step == "b" {
			last = s
		}
	}
	require.Equal(t, domain.StepRetrying, last.State)
	require.Equal(t, 1, last.Attempt)
	require.Equal(t, &domain.StepError{Class: domain.ClassRetryable, Message: "busy"}, last.Error)
	require.Empty(t, last.Lease, "the lease ended with the attempt")
}
