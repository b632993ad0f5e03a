package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const threshold = DefaultTimerThreshold

// requireUnsent requires step s's message to wait for the sweep until the
// arm time (its instant less the threshold), the job's due time: nothing
// to send before, one message with the rest of the delay then, and
// nothing again after, when the job is due only if that message never
// comes (instant + DispatchGrace).
func requireUnsent(t *testing.T, j *Job, s *Step, instant time.Time) {
	t.Helper()
	arm := instant.Add(-threshold)
	require.True(t, s.AwaitsArm(), s.ID())
	require.Equal(t, &instant, s.Unsent)
	require.NotContains(t, dispatched(j.Outstanding(t0)), s.ID(), "not sent at submit")
	requireDue(t, j, arm)

	require.Empty(t, j.Arm(arm.Add(-time.Nanosecond)), "not within reach yet")
	require.Equal(t, []Dispatch{{Step: s, Delay: threshold}}, j.Arm(arm))
	replayOK(t, j)
	require.False(t, s.AwaitsArm())
	require.Nil(t, s.Unsent)
	require.Empty(t, j.Arm(arm), "sent once")
	require.Equal(t, instant.Add(DispatchGrace), *j.DueAt, "then due as a message sent at once is")
	redispatch, _ := j.NeedsSweep(s, arm)
	require.False(t, redispatch)
}

func TestLongSleepIsArmedWithinReach(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}}]}`)
	require.Equal(t, JobParked, j.State)
	requireUnsent(t, j, j.Steps[0], at(2*time.Hour))
	require.Equal(t, JobParked, j.State, "armed, still parked: nothing else polls it")
}

func TestRunAtFarOffIsArmedWithinReach(t *testing.T) {
	t.Parallel()
	runAt := at(2 * time.Hour)
	j := newJob(t, `{"run_at":"`+runAt.Format(time.RFC3339)+`","steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"}}]}`)
	requireUnsent(t, j, j.Steps[0], runAt)
	_, err := j.Lease("a", builtin("n"), runAt.Add(-time.Second))
	var early *NotYetError
	require.ErrorAs(t, err, &early, "the armed message opens it no earlier")
	mustLease(t, j, "a", builtin("n"), runAt)
}

func TestLongBackoffIsArmedWithinReach(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", builtin("n"), t0)
	ds, err := j.Fail("a", l.ID, Failure{Class: ClassRetryable, RetryAfter: time.Hour}, t0, rng())
	require.NoError(t, err)
	require.Empty(t, ds, "the retry is not sent at once")
	require.Equal(t, JobRetrying, j.State)
	requireUnsent(t, j, s, at(time.Hour))
	// The armed message lost: re-dispatched as any other, after the grace.
	redispatch, _ := j.NeedsSweep(s, at(time.Hour).Add(DispatchGrace))
	require.True(t, redispatch)
}

func TestGateDeadlineFarOffIsArmedWithinReach(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"g","action":{"type":"approval","timeout_seconds":7200}}]}`)
	require.Equal(t, StepNeedsUser, j.Steps[0].State)
	requireUnsent(t, j, j.Steps[0], at(2*time.Hour))
}

func TestWaitDeadlineFarOffIsArmedWithinReach(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":7200}}]}`)
	require.Equal(t, JobParked, j.State)
	requireUnsent(t, j, j.Steps[0], at(2*time.Hour))
}

// Up to the threshold a message is sent at once, as before; the threshold
// is the job's own (tests shorten it).
func TestDelayWithinTheThresholdIsSentAtOnce(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":900}}]}`)
	require.Nil(t, j.Steps[0].Unsent)
	require.Equal(t, []Dispatch{{Step: j.Steps[0], Delay: threshold}}, j.Outstanding(t0))
	requireDue(t, j, at(threshold+DispatchGrace))

	spec, err := ParseJobSpec([]byte(`{"steps":[{"id":"nap","action":{"type":"sleep","seconds":120}}]}`))
	require.NoError(t, err)
	spec.ParkAfter = time.Minute
	j, err = NewJob("tenant1", "job2", spec, "", t0)
	require.NoError(t, err)
	nap := j.Steps[0]
	require.True(t, nap.AwaitsArm())
	requireDue(t, j, at(time.Minute))
	require.Equal(t, []Dispatch{{Step: nap, Delay: time.Minute}}, j.Arm(at(time.Minute)))
}

// A sweep that comes late sends the message without delay; a runnable
// step's is then counted as re-dispatched now, so the re-dispatch rule
// does not send it again in the same pass.
func TestArmedLateSendsAtOnce(t *testing.T) {
	t.Parallel()
	j := newJob(t, workerJob)
	s := j.Steps[0]
	l := mustLease(t, j, "a", builtin("n"), t0)
	_, err := j.Fail("a", l.ID, Failure{Class: ClassRetryable, RetryAfter: time.Hour}, t0, rng())
	require.NoError(t, err)
	late := at(2 * time.Hour)
	require.Equal(t, []Dispatch{{Step: s, Delay: 0}}, j.Arm(late))
	require.Equal(t, &late, s.ReadyAt)
	redispatch, _ := j.NeedsSweep(s, late)
	require.False(t, redispatch)
	requireDue(t, j, late.Add(DispatchGrace))
}

// Where the queue holds long delays itself, every unsent message is sent
// at once, with its whole delay.
func TestArmAllSendsEveryUnsentMessage(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}},{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":86400}},{"id":"after","action":{"type":"pass"},"depends_on":["nap","w"]}]}`)
	require.Equal(t, []Dispatch{{Step: j.Steps[0], Delay: 2 * time.Hour}, {Step: j.Steps[1], Delay: 24 * time.Hour}}, j.ArmAll(t0))
	require.Empty(t, j.ArmAll(t0))
	requireDue(t, j, at(2*time.Hour+DispatchGrace))
	require.Len(t, j.Outstanding(t0), 2, "a replay of the submission sends them again")
}

// A wait whose signal came before its deadline's message was sent leaves
// nothing to send: the sweep that finds the job due early (at the old arm
// time) sends nothing for it and moves the job on.
func TestUnsentMessageOfAFinishedWaitIsDropped(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go","timeout_seconds":7200}},{"id":"nap","action":{"type":"sleep","seconds":10800}}]}`)
	_, _, err := j.Signal(SignalRequest{Name: "go"}, at(time.Minute))
	require.NoError(t, err)
	replayOK(t, j)
	require.Nil(t, j.Steps[0].Unsent)
	require.Equal(t, at(2*time.Hour-threshold), *j.DueAt, "the due time only moves earlier on a change")
	require.Empty(t, j.Arm(at(2*time.Hour-threshold)))
	require.True(t, j.Resweep())
	requireDue(t, j, at(time.Minute+3*time.Hour-threshold))
}
