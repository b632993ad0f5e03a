package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// choiceBundle is a bundle publishing the transitions events chooses to
// an in-memory bus.
func choiceBundle(t *testing.T, events engine.JobStateEvents) (*bundle, *memory.Bus) {
	b, bus := busBundle(t)
	b.e.Configure(func(c *engine.Config) { c.JobStateEvents = events })
	return b, bus
}

const fiveSteps = `{"steps":[
	{"id":"s1","action":{"type":"pass"}},{"id":"s2","action":{"type":"pass"}},{"id":"s3","action":{"type":"pass"}},
	{"id":"s4","action":{"type":"pass"}},{"id":"s5","action":{"type":"pass"}}]}`

// runMixed runs one job to each end (COMPLETED, FAILED, CANCELLED), then
// redrives the failed one to a second FAILED, and answers the three jobs.
func runMixed(t *testing.T, b *bundle) (done, failed, cancelled *domain.Job) {
	done = b.submit(t, tenantA, fiveSteps)
	failed = b.submit(t, tenantA, `{"steps":[{"id":"boom","action":{"type":"fail","class":"fatal","message":"bad input"}}]}`)
	cancelled = b.submit(t, tenantA, `{"steps":[{"id":"gate","action":{"type":"approval"}}]}`)
	b.drain(t)
	_, err := b.e.Cancel(b.ctx, tenantA, cancelled.ID)
	require.NoError(t, err)
	_, err = b.e.Redrive(b.ctx, tenantA, failed.ID)
	require.NoError(t, err)
	b.drain(t)
	return b.job(t, tenantA, done.ID), b.job(t, tenantA, failed.ID), b.job(t, tenantA, cancelled.ID)
}

func TestDisabledPublishesNothing(t *testing.T) {
	t.Parallel()
	b, bus := choiceBundle(t, engine.JobStateEventsDisabled)
	done, failed, cancelled := runMixed(t, b)
	require.Equal(t, domain.JobCompleted, done.State)
	require.Equal(t, domain.JobFailed, failed.State)
	require.Equal(t, domain.JobCancelled, cancelled.State)
	require.Empty(t, bus.Changes())
	require.Zero(t, bus.Calls(), "not even an empty publish")
}

// Terminal publishes a job's end alone, with the seq of the event that
// ended it; a redrive's new end is one more.
func TestTerminalPublishesEachEndOnce(t *testing.T) {
	t.Parallel()
	b, bus := choiceBundle(t, engine.JobStateEventsTerminal)
	done, failed, cancelled := runMixed(t, b)
	byJob := map[string][]engine.JobStateChange{}
	for _, c := range bus.Changes() {
		require.True(t, c.To.Terminal(), "%s>%s published", c.From, c.To)
		byJob[c.JobID] = append(byJob[c.JobID], c)
	}
	for _, j := range []*domain.Job{done, cancelled} {
		require.Len(t, byJob[j.ID], 1, j.ID)
		end := byJob[j.ID][0]
		require.Equal(t, j.State, end.To)
		require.Equal(t, len(j.Events), end.Seq, "the event that ended the job is its last")
		require.Equal(t, j.Events[end.Seq-1].Type, end.Event)
	}
	ends := byJob[failed.ID]
	require.Len(t, ends, 2, "the first failure and the redrive's")
	require.Less(t, ends[0].Seq, ends[1].Seq)
	for _, end := range ends {
		require.Equal(t, domain.JobFailed, end.To)
		require.Equal(t, "boom", end.Step)
		require.Equal(t, failed.Events[end.Seq-1].Type, end.Event)
	}
}

// All publishes every job-level transition, each job's in the order made,
// its seq growing: eleven for five steps, three for one.
func TestAllPublishesEveryTransitionInOrder(t *testing.T) {
	t.Parallel()
	b, bus := choiceBundle(t, engine.JobStateEventsAll)
	done, failed, cancelled := runMixed(t, b)
	for _, j := range []*domain.Job{done, failed, cancelled} {
		requireLogged(t, bus, j)
		last := 0
		for _, c := range bus.Changes() {
			if c.JobID == j.ID {
				require.Greater(t, c.Seq, last, "job %s", j.ID)
				last = c.Seq
			}
		}
	}
	require.Len(t, transitions(bus, done.ID), 11)

	one := b.submit(t, tenantA, `{"steps":[{"id":"hello","action":{"type":"pass"}}]}`)
	b.drain(t)
	require.Equal(t, []string{">QUEUED", "QUEUED>RUNNING", "RUNNING>COMPLETED"}, transitions(bus, one.ID))
}

// callOrder records, in one list, the dispatches a queue sends and the
// publishes a bus gets.
type callOrder struct {
	mu    sync.Mutex
	calls []string
}

func (o *callOrder) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, s)
}

type orderedQueue struct {
	engine.Queue
	o *callOrder
}

func (q orderedQueue) Dispatch(ctx context.Context, j *domain.Job, ss []engine.Send) error {
	q.o.add(fmt.Sprintf("dispatch %d", len(ss)))
	return q.Queue.Dispatch(ctx, j, ss)
}

type orderedBus struct {
	*memory.Bus
	o *callOrder
}

func (b orderedBus) Publish(ctx context.Context, cs []engine.JobStateChange) error {
	for _, c := range cs {
		b.o.add(fmt.Sprintf("publish %s>%s", c.From, c.To))
	}
	return b.Bus.Publish(ctx, cs)
}

// A change sends its dispatches before it publishes: the next step is on
// its way before the bus is called, so the bus never delays it.
func TestDispatchesGoBeforeThePublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	order := &callOrder{}
	b.e.Configure(func(c *engine.Config) {
		c.Queue = orderedQueue{Queue: c.Queue, o: order}
		c.Publisher, c.JobStateEvents = orderedBus{Bus: memory.NewBus(), o: order}, engine.JobStateEventsAll
	})
	b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"worker","queue":"q"}}]}`)
	b.drain(t)
	require.Equal(t, []string{
		"dispatch 1", "publish >QUEUED", // the submit
		// a leased and done in one write, b sent to its worker queue
		"dispatch 1", "publish QUEUED>RUNNING", "publish RUNNING>QUEUED",
	}, order.calls)
}
