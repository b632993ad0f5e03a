package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// deadlineRunner answers {} for every step it is handed (an http step's
// call, here) and keeps the context each ran under.
type deadlineRunner struct {
	engine.Actions
	ran context.Context
}

func (r *deadlineRunner) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	r.ran = ctx
	return json.RawMessage(`{}`), nil
}

func TestExecuteRunsAStepUntilItsTimeoutOrTheInvocationsEndLessAMargin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		invocation time.Duration // what the invocation has left
		want       time.Duration // the step's deadline, from now
	}{
		{"the step's timeout first", 10 * time.Minute, 60 * time.Second},
		{"the invocation's end first", 30 * time.Second, 25 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var r *deadlineRunner
			b.e.Configure(func(c *engine.Config) { r = &deadlineRunner{Actions: c.Runner}; c.Runner = r })
			b.submit(t, tenantA, `{"steps":[{"id":"a","action":{"type":"http","url":"https://example.com/a"},"timeout_seconds":60}]}`)
			ctx, cancel := context.WithTimeout(b.ctx, c.invocation)
			defer cancel()
			start := time.Now()
			res, err := b.e.Execute(ctx, b.takeOne(t))
			require.NoError(t, err)
			require.Equal(t, engine.Executed, res)
			dl, ok := r.ran.Deadline()
			require.True(t, ok)
			require.WithinDuration(t, start.Add(c.want), dl, time.Second)
			require.ErrorIs(t, r.ran.Err(), context.Canceled, "the step's context is let go once it ran")
		})
	}
}
