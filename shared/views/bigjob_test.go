package views

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// bigJob is a completed job of n worker steps in order.
func bigJob(tb testing.TB, n int) *domain.Job {
	tb.Helper()
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"worker"}}`, i)
	}
	spec, err := domain.ParseJobSpec([]byte(`{"steps":[` + strings.Join(steps, ",") + `]}`))
	require.NoError(tb, err)
	j, err := domain.NewJob("tenant", "big", spec, "", t0)
	require.NoError(tb, err)
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		now := t0.Add(time.Duration(i) * time.Second)
		l, err := j.Lease(id, domain.LeaseRequest{Worker: "w1", ViaWorker: true, Nonce: "n", Duration: time.Minute}, now)
		require.NoError(tb, err)
		_, err = j.Complete(id, l.ID, json.RawMessage(`{"ok":true}`), now)
		require.NoError(tb, err)
	}
	require.Equal(tb, domain.JobCompleted, j.State)
	return j
}

// Every vocabulary checks and projects a job of thousands of steps.
func TestABigJobInEveryView(t *testing.T) {
	t.Parallel()
	j := bigJob(t, 3000)
	require.NoError(t, CheckAll(j))
	for _, v := range Names() {
		if v == Canonical {
			continue // the job as it is
		}
		_, err := Project(v, j)
		require.NoError(t, err, v)
	}
}

// BenchmarkCheckAll checks completed jobs of n steps in every
// vocabulary, per step.
func BenchmarkCheckAll(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		j := bigJob(b, n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for range b.N {
				if err := CheckAll(j); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/step")
		})
	}
}
