package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/memory"
)

// Jobs of thousands of steps: every transition of one costs about the
// same whatever the job's length or width (the domain's indexes), so a
// job runs in time linear in its steps, but for the store's own
// encoding of the whole job on every write.

// dependsOnChain is a job of n pass steps, each depending on the one
// before it. Run, it is no small job: a DAG step's input is {"payload",
// "deps"}, which a pass step answers as its output, so each output holds
// all those before it.
func dependsOnChain(n int) string {
	steps := make([]string, n)
	steps[0] = `{"id":"s0","action":{"type":"pass"}}`
	for i := 1; i < n; i++ {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"pass"},"depends_on":["s%d"]}`, i, i-1)
	}
	return `{"payload":{"n":1},"steps":[` + strings.Join(steps, ",") + `]}`
}

// fanOutSteps is a job of width pass steps that depend on nothing and a
// fan-in step that depends on all of them.
func fanOutSteps(width int) string {
	steps := make([]string, 0, width+1)
	deps := make([]string, width)
	for i := range width {
		steps = append(steps, fmt.Sprintf(`{"id":"b%d","action":{"type":"pass"}}`, i))
		deps[i] = fmt.Sprintf(`"b%d"`, i)
	}
	steps = append(steps, `{"id":"join","action":{"type":"pass"},"depends_on":[`+strings.Join(deps, ",")+`]}`)
	return `{"payload":{"n":1},"steps":[` + strings.Join(steps, ",") + `]}`
}

// unbounded gives the bundle a store with no bound on a job's size: a
// job of thousands of steps passes DynamoDB's 400 KB item, which is the
// store's to lay out, not the engine's.
func (b *bundle) unbounded() {
	b.store = memory.NewStore(memory.WithMaxItemBytes(0))
	b.e.Configure(func(c *engine.Config) { c.Store = b.store })
}

// runToEnd executes what the ready path holds, delivery after delivery,
// until it is empty, and answers the job as stored.
func (b *bundle) runToEnd(t testing.TB, tenant, id string) *domain.Job {
	t.Helper()
	for {
		ds := b.queue.TakeReady(10)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			b.execute(t, d)
		}
	}
	j, err := b.store.Get(b.ctx, tenant, id)
	require.NoError(t, err)
	return j
}

func requireCompleted(t *testing.T, j *domain.Job, n int) {
	t.Helper()
	require.Equal(t, domain.JobCompleted, j.State, "%v", j.Error)
	require.Len(t, j.Steps, n)
	for _, s := range j.Steps {
		require.Equal(t, domain.StepSucceeded, s.State, s.ID())
		require.Len(t, s.Attempts, 1, s.ID())
	}
}

// The memory store encodes the whole job on every write and decodes it
// on every read, as the DynamoDB item of today does: O(steps) a
// transition, O(steps²) a job, whatever the engine does. A job of a
// thousand steps takes seconds here for that alone.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("every write of a job of thousands of steps encodes all of it")
	}
}

func TestALongChainCompletes(t *testing.T) {
	skipShort(t)
	t.Parallel()
	b := setup(t)
	b.unbounded()
	n := 1000
	if raceDetector {
		n = 300 // a decision is some ten times slower there
	}
	j := b.submit(t, tenantA, passSteps(n))
	got := b.runToEnd(t, tenantA, j.ID)
	requireCompleted(t, got, n)
	require.JSONEq(t, `{"n":1}`, string(got.Steps[n-1].Output), "each step ran on the output before it")
}

func TestAWideFanOutAndItsFanInComplete(t *testing.T) {
	skipShort(t)
	t.Parallel()
	b := setup(t)
	b.unbounded()
	// Past the chain's budget (100 steps) each branch is a delivery that
	// reads the whole job: the test's cost grows with the square of its
	// width, 27 s at 1,000 without the race detector, minutes with it.
	width := 1000
	if raceDetector {
		width = 200
	}
	j := b.submit(t, tenantA, fanOutSteps(width))
	got := b.runToEnd(t, tenantA, j.ID)
	requireCompleted(t, got, width+1)
	join := got.Steps[width]
	require.Equal(t, "join", join.ID())
	var in struct {
		Deps map[string]map[string]int `json:"deps"`
	}
	require.NoError(t, json.Unmarshal(got.Input(width), &in))
	require.Len(t, in.Deps, width, "the fan-in ran on every branch's output")
}

// A spec of MaxSteps steps parses, and a job of that many is submitted
// with its first step sent. Running it to its end (10,000 writes, each
// fingerprinting every step) takes two minutes: that runs only with
// STEPFLOW_BIG_JOBS set.
func TestAJobOfMaxSteps(t *testing.T) {
	t.Parallel()
	spec, err := domain.ParseJobSpec([]byte(dependsOnChain(domain.MaxSteps)))
	require.NoError(t, err)
	require.Len(t, spec.Steps, domain.MaxSteps)

	b := setup(t)
	b.unbounded()
	j := b.submit(t, tenantA, passSteps(domain.MaxSteps))
	require.Len(t, j.Steps, domain.MaxSteps)
	first := b.takeOne(t)
	require.Equal(t, "s0", first.Message.Step)
	if os.Getenv("STEPFLOW_BIG_JOBS") == "" {
		return
	}
	require.NoError(t, b.queue.Release(b.ctx, first.Token))
	requireCompleted(t, b.runToEnd(t, tenantA, j.ID), domain.MaxSteps)
}

// timedStore adds up the time the engine spends in the store.
type timedStore struct {
	engine.Store
	took time.Duration
}

func (s *timedStore) Create(ctx context.Context, j *domain.Job, hash string, now time.Time) (*domain.Job, bool, error) {
	defer s.add(time.Now())
	return s.Store.Create(ctx, j, hash, now)
}

func (s *timedStore) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	defer s.add(time.Now())
	return s.Store.Get(ctx, tenant, id)
}

func (s *timedStore) Save(ctx context.Context, j *domain.Job, loaded int) error {
	defer s.add(time.Now())
	return s.Store.Save(ctx, j, loaded)
}

func (s *timedStore) add(start time.Time) { s.took += time.Since(start) }

// BenchmarkSequentialJob runs jobs of n pass steps in order to their end
// on the in-memory adapters and reports the time a step, all of it and
// without the store's (which encodes and decodes the whole job on every
// write and read, so grows with n).
func BenchmarkSequentialJob(bm *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		bm.Run(fmt.Sprintf("n=%d", n), func(bm *testing.B) {
			b := setup(bm)
			b.unbounded()
			st := &timedStore{Store: b.store}
			b.e.Configure(func(c *engine.Config) { c.Store = st })
			body := passSteps(n)
			bm.ResetTimer()
			for range bm.N {
				j := b.submit(bm, tenantA, body)
				if got := b.runToEnd(bm, tenantA, j.ID); got.State != domain.JobCompleted {
					bm.Fatalf("job %s is %s", j.ID, got.State)
				}
			}
			steps := float64(bm.N * n)
			bm.ReportMetric(float64(bm.Elapsed().Microseconds())/steps, "µs/step")
			bm.ReportMetric(float64((bm.Elapsed()-st.took).Microseconds())/steps, "µs/step-without-store")
		})
	}
}
