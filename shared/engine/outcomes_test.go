package engine_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// A batch of outcomes records each as Complete or Fail would: a refused
// one (a lost lease, a bad class, a lease that names nothing) is answered
// on its own and stops no other, and the messages of the leases ended are
// deleted in one AckAll, not one Ack each.
func TestOutcomesRecordEachAndDeleteTheirMessagesTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counter := &settleCounter{Queue: b.lossy}
	b.e.Configure(func(c *engine.Config) { c.Queue = counter })
	var ids []string
	for range 4 {
		ids = append(ids, b.submit(t, tenantA, workerJob).ID)
	}
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 4)
	byJob := map[string]engine.ClaimedLease{}
	for _, l := range ls {
		byJob[l.JobID] = l
	}
	_, err := b.e.Cancel(b.ctx, tenantA, ids[3])
	require.NoError(t, err)
	stateOf2 := b.job(t, tenantA, ids[2]).Steps[0].State
	acks, ackAlls := counter.acks, counter.ackAlls

	res := b.e.Outcomes(b.ctx, tenantA, []engine.LeaseOutcome{
		{LeaseID: byJob[ids[0]].LeaseID, Output: json.RawMessage(`{"ok":0}`)},
		{LeaseID: byJob[ids[1]].LeaseID, Failure: &engine.Outcome{Class: "fatal", Message: "bad frame"}},
		{LeaseID: byJob[ids[2]].LeaseID, Failure: &engine.Outcome{Class: "sideways"}},
		{LeaseID: byJob[ids[3]].LeaseID, Output: json.RawMessage(`{"ok":3}`)},
		{LeaseID: "not-a-lease", Output: json.RawMessage(`{}`)},
		{LeaseID: byJob[ids[0]].LeaseID, Output: json.RawMessage(`{"ok":0}`)},
	})
	require.Len(t, res, 6)
	require.NoError(t, res[0].Err)
	require.Equal(t, domain.JobCompleted, res[0].Result.JobState)
	require.NoError(t, res[1].Err)
	require.Equal(t, domain.JobFailed, res[1].Result.JobState)
	require.Equal(t, domain.CodeInvalid, domain.CodeOf(res[2].Err), "a bad class is refused before anything is stored")
	require.ErrorContains(t, res[2].Err, "class")
	require.ErrorIs(t, res[3].Err, domain.ErrLeaseLost, "the job was cancelled under the lease")
	require.ErrorIs(t, res[4].Err, domain.ErrNotFound, "a lease id that names nothing, as /complete answers it")
	require.NoError(t, res[5].Err, "a repeat of a recorded outcome is answered again")
	require.Equal(t, domain.JobCompleted, res[5].Result.JobState)

	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, ids[0]).State)
	require.JSONEq(t, `{"ok":0}`, string(b.job(t, tenantA, ids[0]).Steps[0].Output))
	require.Equal(t, domain.JobFailed, b.job(t, tenantA, ids[1]).State)
	require.Equal(t, stateOf2, b.job(t, tenantA, ids[2]).Steps[0].State, "the refused outcome changed nothing")
	require.Equal(t, acks, counter.acks, "no message deleted alone")
	require.Equal(t, ackAlls+1, counter.ackAlls, "the two ended leases' messages deleted together")
	require.Equal(t, 1, b.queue.Len(tenantA, "gpu"), "only the refused outcome's message is left, hidden for its lease")
}

// The outcomes of one job's branches in one batch are recorded one after
// another on one read of the job: no race between them, and the fan-in
// runs.
func TestOutcomesOfOneJobAreRecordedOnOneRead(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j, left, right := b.twoBranches(t)
	gets, saves := st.gets.Load(), st.saves.Load()
	res := b.e.Outcomes(b.ctx, tenantA, []engine.LeaseOutcome{
		{LeaseID: left.LeaseID, Output: json.RawMessage(`"l"`)},
		{LeaseID: right.LeaseID, Output: json.RawMessage(`"r"`)},
	})
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	require.Equal(t, int64(1), st.gets.Load()-gets, "one read for both outcomes")
	require.Equal(t, int64(2), st.saves.Load()-saves, "one write each")
	require.Equal(t, domain.StepSucceeded, b.job(t, tenantA, j.ID).Steps[1].State)
	b.drain(t)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

// A new job's worker message carries the job as written: its first claim
// leases without reading it. A job that moved on since (here cancelled)
// refuses that lease's write; the claim then reads it and drops the
// message.
func TestAClaimOfANewJobsMessageLeasesWithoutARead(t *testing.T) {
	t.Parallel()
	b, st := counted(t)
	j := b.submit(t, tenantA, workerJob)
	gets := st.gets.Load()
	ls := b.claim(t, tenantA, "gpu")
	require.Len(t, ls, 1)
	require.Equal(t, j.ID, ls[0].JobID)
	require.Equal(t, gets, st.gets.Load(), "no read for the lease")
	require.Equal(t, ls[0].LeaseID, b.job(t, tenantA, j.ID).Steps[0].Lease.ID, "the lease is written")

	other := b.submit(t, tenantA, workerJob)
	_, err := b.e.Cancel(b.ctx, tenantA, other.ID)
	require.NoError(t, err)
	require.Empty(t, b.claim(t, tenantA, "gpu"), "the cancelled job's message leases nothing")
	require.Equal(t, domain.JobCancelled, b.job(t, tenantA, other.ID).State)
	require.Equal(t, 1, b.queue.Len(tenantA, "gpu"), "and is dropped: the one left is the leased step's")
}
