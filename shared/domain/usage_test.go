package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A job's budget: checked at submit, naming the field; the gate comes
// when its cost passes it, with a message a person reads; a budget set
// must be above what it cost, and sends its runnable steps again.
func TestABudgetHoldsTheJobAtItsGate(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"usd":0}`, `{"usd":-1}`, `{"usd":2000000}`} {
		_, err := ParseJobSpec([]byte(`{"budget":` + body + `,"steps":[{"id":"a","action":{"type":"pass"}}]}`))
		var de *Error
		require.ErrorAs(t, err, &de, body)
		require.Equal(t, "budget.usd", de.Field, body)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	spec, err := ParseJobSpec([]byte(`{"budget":{"usd":0.5},"steps":[{"id":"a","action":{"type":"worker","queue":"q"}},{"id":"b","action":{"type":"pass"}}]}`))
	require.NoError(t, err)
	j, err := NewJob("t", "01JBUDGET00000000000000000", spec, "", now)
	require.NoError(t, err)
	held, _, err := j.HoldIfOverBudget(now)
	require.NoError(t, err)
	require.False(t, held, "within its budget")

	l, err := j.Lease("a", LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Minute}, now)
	require.NoError(t, err)
	_, err = j.Complete("a", l.ID, []byte(`{}`), now)
	require.NoError(t, err)
	j.ReportCost("a", 1, 0.75)
	held, changed, err := j.HoldIfOverBudget(now)
	require.NoError(t, err)
	require.True(t, held && changed)
	require.Equal(t, JobWaiting, j.State)
	require.True(t, j.WaitsOnPerson())
	require.Equal(t, "budget exceeded: $0.75 of $0.5", j.Budget.Message())
	require.Nil(t, j.Steps[1].ReadyAt, "nothing is sent, and the sweep does not look")
	require.Nil(t, j.due())
	require.NoError(t, CheckReplay(j))

	_, err = j.SetBudget(0.6, "ana", now)
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "usd", de.Field)
	ds, err := j.SetBudget(1, "ana", now)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "b", ds[0].Step.ID())
	require.Equal(t, JobQueued, j.State)
	require.False(t, j.BudgetHeld())
	var set []string
	for _, e := range j.Events {
		if e.Type == NoteBudgetSet {
			set = append(set, e.Detail)
		}
	}
	require.Equal(t, []string{"budget set to $1 by ana"}, set)
	require.NoError(t, CheckReplay(j))
}
