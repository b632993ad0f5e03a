package engine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// A job the executor moves on after its due time (behind a burst) gets
// its true due time in the same write: the sweep does not load it while
// the message that write sent is still expected.
func TestAJobMovedOnAfterItsDueTimeIsNotSwept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runAt := b.clock.Now().Add(5 * time.Minute)
	j := b.submit(t, tenantA, `{"run_at":"`+runAt.Format(time.RFC3339)+`","steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}}]}`)
	require.True(t, j.DueAt.Equal(runAt.Add(domain.DispatchGrace)), "due once run_at's message had its grace: %s", j.DueAt)

	b.clock.Advance(runAt.Add(90 * time.Second).Sub(b.clock.Now())) // the executor is 90 s behind
	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	j = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.StepPending, j.Steps[1].State)
	require.True(t, j.DueAt.Equal(b.clock.Now().Add(domain.DispatchGrace)), "due when b's message has had its grace: %s", j.DueAt)
	b.clock.Advance(time.Second)
	require.Equal(t, engine.SweepReport{}, b.sweep(t), "b's message is still expected")

	require.Equal(t, engine.Executed, b.execute(t, b.takeOne(t)))
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}
