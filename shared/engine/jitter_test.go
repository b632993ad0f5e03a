package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
)

// SeedJitter fixes the jitter's sequence: two engines seeded alike back off
// alike, which a harness on a test clock relies on.
func TestSeedJitterFixesTheBackoff(t *testing.T) {
	t.Parallel()
	retryAt := func() time.Time {
		b := setup(t)
		b.e.SeedJitter(7)
		j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"},
			"retry":{"max_attempts":3,"initial_delay_ms":60000,"jitter":true}}]}`)
		ls := b.claim(t, tenantA, "q")
		require.Len(t, ls, 1)
		_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "retryable"})
		require.NoError(t, err)
		s := b.job(t, tenantA, j.ID).Steps[0]
		require.NotNil(t, s.ReadyAt)
		wait := s.ReadyAt.Sub(b.clock.Now())
		require.True(t, wait >= 30*time.Second && wait <= 60*time.Second, "equal jitter: %s", wait)
		return *s.ReadyAt
	}
	require.Equal(t, retryAt(), retryAt())
}
