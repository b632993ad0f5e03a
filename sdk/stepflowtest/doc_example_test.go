package stepflowtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/stepflowtest"
	"github.com/stepflow/stepflow/shared/domain"
)

// The example of docs/testing.md, as written there.
func TestChargeIsRetried(t *testing.T) {
	t.Parallel()
	env := stepflowtest.New(t)
	env.HandleQueue("payments", func(ctx context.Context, task *stepflowtest.Task) (any, error) {
		if task.Attempt < 3 {
			return nil, stepflowtest.Fail("retryable", "gateway busy")
		}
		return map[string]string{"charge_id": task.IdempotencyKey}, nil
	})
	job := env.Submit(`{"steps":[{"id":"charge","action":{"type":"worker","queue":"payments"},
		"retry":{"max_attempts":4,"initial_delay_ms":2000}}]}`)

	job = env.AwaitState(job.ID, domain.JobCompleted)
	require.Len(t, job.Steps[0].Attempts, 3)
	require.Equal(t, stepflowtest.DefaultStart.Add(6*time.Second), env.Now()) // 2 s, then 4 s
}
