package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Jobs of thousands of steps: parsing one, and each transition of it,
// must cost about the same per step whatever its length or width.

// bigJobShapes are the shapes a large job takes: a chain in order, a
// chain by depends_on, and a fan-out with its fan-in.
var bigJobShapes = []struct {
	name string
	body func(n int) string
}{
	{"in order", func(n int) string {
		steps := make([]string, n)
		for i := range steps {
			steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"worker"}}`, i)
		}
		return `{"steps":[` + strings.Join(steps, ",") + `]}`
	}},
	{"depends_on chain", func(n int) string {
		steps := make([]string, n)
		steps[0] = `{"id":"s0","action":{"type":"worker"}}`
		for i := 1; i < n; i++ {
			steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"worker"},"depends_on":["s%d"]}`, i, i-1)
		}
		return `{"steps":[` + strings.Join(steps, ",") + `]}`
	}},
	{"fan-out and fan-in", func(n int) string {
		steps := make([]string, 0, n)
		deps := make([]string, n-1)
		for i := range n - 1 {
			steps = append(steps, fmt.Sprintf(`{"id":"b%d","action":{"type":"worker"}}`, i))
			deps[i] = fmt.Sprintf(`"b%d"`, i)
		}
		steps = append(steps, `{"id":"join","action":{"type":"worker"},"depends_on":[`+strings.Join(deps, ",")+`]}`)
		return `{"steps":[` + strings.Join(steps, ",") + `]}`
	}},
}

// runEveryStep leases and completes each step as it becomes runnable,
// one at a time, asking what a worker and the engine ask on the way (the
// step's input, whether the job may keep its output inline), until the
// job ends; it answers how many steps ran.
func runEveryStep(tb testing.TB, j *Job, now time.Time) int {
	ran := 0
	queue := j.Outstanding(now)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		l, err := j.Lease(d.Step.ID(), LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Minute}, now)
		if err != nil {
			tb.Fatalf("lease %s: %v", d.Step.ID(), err)
		}
		_, i, _ := j.Step(d.Step.ID())
		_ = j.InputData(i).Size()
		out := json.RawMessage(`{"ok":true}`)
		_ = j.KeepsInline(len(out), DefaultInlineLimit)
		ds, err := j.Complete(d.Step.ID(), l.ID, out, now)
		if err != nil {
			tb.Fatalf("complete %s: %v", d.Step.ID(), err)
		}
		queue = append(queue, ds...)
		ran++
	}
	return ran
}

// Jobs of every shape run to their end; each transition costs O(steps)
// (the scans of settle), so MaxSteps steps of one take seconds and the
// benchmarks below measure them instead.
func TestBigJobsRunToTheirEnd(t *testing.T) {
	t.Parallel()
	const n = 1000
	for _, shape := range bigJobShapes {
		spec, err := ParseJobSpec([]byte(shape.body(n)))
		require.NoError(t, err, shape.name)
		j, err := NewJob("tenant1", "job1", spec, "", t0)
		require.NoError(t, err, shape.name)
		require.Equal(t, n, runEveryStep(t, j, t0), shape.name)
		require.Equal(t, JobCompleted, j.State, shape.name)
		replayOK(t, j)
	}
}

// Specs of MaxSteps steps of every shape parse and make a job.
func TestBigJobSpecsParse(t *testing.T) {
	t.Parallel()
	for _, shape := range bigJobShapes {
		body := shape.body(MaxSteps)
		require.Less(t, len(body), MaxJobSpecBytes, shape.name)
		spec, err := ParseJobSpec([]byte(body))
		require.NoError(t, err, shape.name)
		j, err := NewJob("tenant1", "job1", spec, "", t0)
		require.NoError(t, err, shape.name)
		require.Len(t, j.Steps, MaxSteps, shape.name)
		runnable := 1 // the first step
		if shape.name == "fan-out and fan-in" {
			runnable = MaxSteps - 1 // every branch
		}
		require.Len(t, j.Outstanding(t0), runnable, shape.name)
		replayOK(t, j)
	}
}

// BenchmarkParseBigJob parses and builds jobs of n steps, per step.
func BenchmarkParseBigJob(b *testing.B) {
	for _, shape := range bigJobShapes {
		for _, n := range []int{10, 100, 1000, 10000} {
			body := []byte(shape.body(n))
			b.Run(fmt.Sprintf("%s/n=%d", shape.name, n), func(b *testing.B) {
				for range b.N {
					spec, err := ParseJobSpec(body)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := NewJob("tenant1", "job1", spec, "", t0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/step")
			})
		}
	}
}

// BenchmarkBigJobTransitions runs every step of jobs of n steps (a lease
// and a completion each), per step.
func BenchmarkBigJobTransitions(b *testing.B) {
	for _, shape := range bigJobShapes {
		for _, n := range []int{10, 100, 1000, 10000} {
			spec, err := ParseJobSpec([]byte(shape.body(n)))
			require.NoError(b, err)
			b.Run(fmt.Sprintf("%s/n=%d", shape.name, n), func(b *testing.B) {
				var took time.Duration
				for range b.N {
					j, err := NewJob("tenant1", "job1", spec, "", t0)
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					runEveryStep(b, j, t0)
					took += time.Since(start)
				}
				b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*n), "ns/step")
			})
		}
	}
}

// A job's index of its steps by id is no part of it: a job that built
// one equals one that did not (the store's round trips compare jobs
// whole), and a step appended is found at once.
func TestStepIndexIsNoPartOfTheJob(t *testing.T) {
	t.Parallel()
	spec, err := ParseJobSpec([]byte(`{"steps":[{"id":"a","action":{"type":"worker"}},{"id":"b","action":{"type":"pass"}}]}`))
	require.NoError(t, err)
	indexed, err := NewJob("tenant1", "job1", spec, "", t0)
	require.NoError(t, err)
	plain, err := NewJob("tenant1", "job1", spec, "", t0)
	require.NoError(t, err)
	s, i, err := indexed.Step("b")
	require.NoError(t, err)
	require.Equal(t, 1, i)
	require.Same(t, indexed.Steps[1], s)
	require.Equal(t, plain, indexed)

	indexed.Steps = append(indexed.Steps, &Step{Spec: StepSpec{ID: "c"}, State: StepPending})
	_, i, err = indexed.Step("c")
	require.NoError(t, err)
	require.Equal(t, 2, i)
	_, _, err = indexed.Step("d")
	require.ErrorIs(t, err, ErrNotFound)
}
