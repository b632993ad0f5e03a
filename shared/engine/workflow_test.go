package engine_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Durable time: a sleep holds no function, and one further off than an
// SQS delay reaches (the timer threshold, 900 s) sends nothing at first:
// the job waits in the due index until its wake time is within the
// threshold, when the heartbeat's sweep sends the message, once, with the
// rest of the delay. It wakes the step on time.
func TestLongSleepIsSentByTheSweepWithinReach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := b.clock.Now()
	wake := start.Add(2 * time.Hour)
	arm := wake.Add(-domain.DefaultTimerThreshold)
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[{"id":"nap","action":{"type":"sleep","seconds":7200}},{"id":"after","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobParked, j.State, "beyond the timer threshold: parked")
	require.Zero(t, b.queue.Len("", ""), "no message sent at submit")
	require.Equal(t, arm, *b.job(t, tenantA, j.ID).DueAt, "due when the wake time comes within the threshold")

	b.clock.Advance(arm.Sub(start) - time.Second)
	require.Equal(t, engine.SweepReport{}, b.sweep(t), "not yet within reach")
	require.Zero(t, b.queue.Len("", ""))

	// Two sweeps at once find it due. Each sends the message before its
	// write (a crash between the two then loses nothing), one writes, and
	// the other's message, if it sent one, finds the timer fired.
	b.clock.Advance(time.Second)
	var wg sync.WaitGroup
	reps := make([]engine.SweepReport, 2)
	for i := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i] = b.sweep(t)
		}()
	}
	wg.Wait()
	sent := b.queue.Len("", "")
	require.Contains(t, []int{1, 2}, sent, "reports %+v", reps)
	got := b.job(t, tenantA, j.ID)
	require.Nil(t, got.DueAt, "out of the due index: its message, sent before the write, runs it")
	require.Equal(t, domain.JobParked, got.State)
	require.Equal(t, engine.SweepReport{}, b.sweep(t), "the next sweep sends nothing again")
	require.Equal(t, sent, b.queue.Len("", ""))

	b.clock.Advance(wake.Sub(b.clock.Now()) - time.Millisecond)
	require.Empty(t, b.drain(t), "not before the wake time")
	b.clock.Advance(time.Millisecond)
	woke := b.drain(t)
	require.Equal(t, engine.Executed, woke[0], "wakes, and the next step runs in the same invocation")
	require.Equal(t, slices.Repeat([]engine.ExecuteResult{engine.Stale}, sent-1), woke[1:], "a second sweep's message finds nothing to do")
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"p":1}`, string(got.Steps[1].Output))
	require.Empty(t, got.Steps[0].Attempts, "no executor ever ran the sleep")
	for _, e := range got.Events {
		if e.Step == "nap" && e.Type == "step_succeeded" {
			require.Equal(t, wake, e.At, "woke on time")
		}
	}
}

// Where the queue holds long delays itself (Config.TimerService: the Step
// Functions timer), the message is sent at once. The in-memory queue caps
// it at 900 s, as SQS without the timer does, so it comes back early, is
// deferred for the rest, and wakes the step at its time.
func TestLongSleepIsDeferredUntilItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *engine.Config) { c.TimerService = true })
	j := b.submit(t, tenantA, `{"payload":{"p":1},"steps":[{"id":"nap","action":{"type":"sleep","seconds":3600}},{"id":"after","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobParked, j.State, "beyond the timer threshold: parked")
	require.Empty(t, b.queue.TakeReady(10), "nothing runs while it sleeps")
	require.Equal(t, 1, b.queue.Len("", ""), "sent at once")

	b.clock.Advance(900 * time.Second)
	require.Equal(t, []engine.ExecuteResult{engine.Deferred}, b.drain(t))
	b.clock.Advance(2700 * time.Second)
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t), "wakes, and the next step runs in the same invocation")
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"p":1}`, string(got.Steps[1].Output))
	require.Empty(t, got.Steps[0].Attempts, "no executor ever ran the sleep")
}

// A worker step's retry after an hour's backoff waits in the due index as
// a long sleep does: the sweep sends it to the worker queue within reach,
// and it is claimed when the backoff has run out.
func TestLongBackoffIsSentByTheSweepWithinReach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"},"retry":{"max_attempts":2}}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "retryable", Message: "rate limited", RetryAfterSeconds: 3600})
	require.NoError(t, err)
	ready := *b.job(t, tenantA, j.ID).Steps[0].ReadyAt
	require.Zero(t, b.queue.Len(tenantA, "q"), "the retry is not sent yet")

	b.clock.Advance(ready.Sub(b.clock.Now()) - domain.DefaultTimerThreshold)
	require.Equal(t, 1, b.sweep(t).Due)
	require.Equal(t, 1, b.queue.Len(tenantA, "q"), "sent within reach")
	require.Equal(t, engine.SweepReport{}, b.sweep(t))
	require.Empty(t, b.claim(t, tenantA, "q"), "not visible before the backoff ends")

	b.clock.Advance(ready.Sub(b.clock.Now()))
	ls = b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Attempt)
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, json.RawMessage(`"ok"`))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

func TestSweepFiresATimerWhoseMessageWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lossy.drop.Store(2) // the send before the write, and the one after it
	j := b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":30}}]}`)
	b.clock.Advance(30 * time.Second)
	require.Empty(t, b.queue.TakeReady(10), "the timer's message was lost")
	require.Zero(t, b.sweep(t).Due, "not due before the grace")
	b.clock.Advance(domain.DispatchGrace)
	require.Equal(t, 1, b.sweep(t).Due)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}

func TestWaitAndSignal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"wait","signal":"paid","timeout_seconds":600}},{"id":"ship","action":{"type":"pass"}}]}`)
	require.Equal(t, domain.JobWaiting, j.State)
	b.clock.Advance(time.Minute)
	require.Zero(t, b.sweep(t).Due, "the sweep never touches a waiting job before its deadline")

	_, _, err := b.e.Signal(b.ctx, tenantB, j.ID, domain.SignalRequest{Name: "paid"})
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's job is not found")
	_, _, err = b.e.Signal(b.ctx, tenantA, j.ID, domain.SignalRequest{Name: "no such"})
	require.Equal(t, domain.CodeInvalid, domain.CodeOf(err))

	got, outcome, err := b.e.Signal(b.ctx, tenantA, j.ID, domain.SignalRequest{Name: "paid", Payload: json.RawMessage(`{"amount":5}`), ID: "pay-1"})
	require.NoError(t, err)
	require.True(t, outcome.Written())
	require.Equal(t, domain.JobQueued, got.State)
	_, outcome, err = b.e.Signal(b.ctx, tenantA, j.ID, domain.SignalRequest{Name: "paid", ID: "pay-1"})
	require.NoError(t, err)
	require.False(t, outcome.Written(), "a repeated id writes nothing")
	require.Equal(t, domain.SignalOutcome{Outcome: domain.SignalDelivered, Step: "w", Repeat: true, Reason: "a repeat: step w took this signal already"}, outcome)

	b.drain(t)
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"amount":5}`, string(got.Steps[1].Output), "the payload is the wait's output, the next step's input")
	_, _, err = b.e.Signal(b.ctx, tenantA, j.ID, domain.SignalRequest{Name: "paid"})
	require.Equal(t, domain.CodeConflict, domain.CodeOf(err), "a finished job takes no signal")

	b.clock.Advance(time.Hour)
	require.Equal(t, []engine.ExecuteResult{engine.Stale}, b.drain(t), "the deadline's timer finds nothing to do")
}

func TestRedriveRerunsOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"prep","action":{"type":"pass"}},{"id":"work","action":{"type":"worker","queue":"q"},"retry":{"max_attempts":1}}]}`)
	b.drain(t)
	_, err := b.e.Redrive(b.ctx, tenantA, j.ID)
	require.Equal(t, domain.CodeConflict, domain.CodeOf(err), "only a FAILED job is redriven")

	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	_, err = b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "fatal", Message: "disk full"})
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, b.job(t, tenantA, j.ID).State)

	_, err = b.e.Redrive(b.ctx, tenantB, j.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
	got, err := b.e.Redrive(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobQueued, got.State)
	ls = b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Attempt, "attempts number on")
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, json.RawMessage(`"ok"`))
	require.NoError(t, err)
	got = b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Len(t, got.Steps[0].Attempts, 1, "prep never ran again")
	require.Contains(t, eventTypes(got), "job_requeued")
}

func TestWorkerReplan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"plan","action":{"type":"worker","queue":"q"}},{"id":"report","action":{"type":"pass"}}]}`)
	ls := b.claim(t, tenantA, "q")
	require.Len(t, ls, 1)

	bad := engine.Outcome{Class: "replan", Steps: []domain.StepSpec{{ID: "report", Action: domain.ActionSpec{Type: "pass"}}}}
	_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, bad)
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "steps[0].id", de.Field)
	require.Equal(t, domain.StepRunning, b.job(t, tenantA, j.ID).Steps[0].State, "a bad replan writes nothing")

	_, err = b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "fatal", Steps: bad.Steps})
	require.ErrorAs(t, err, &de)
	require.Equal(t, "steps", de.Field, "steps only with class replan")

	res, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "replan", Message: "two halves", Steps: []domain.StepSpec{
		{ID: "half-1", Action: domain.ActionSpec{Type: "pass"}},
		{ID: "half-2", Action: domain.ActionSpec{Type: "worker", WorkerAction: domain.WorkerAction{Queue: "q2"}}},
	}})
	require.NoError(t, err)
	require.Equal(t, domain.StepFailed, res.StepState)
	require.NotEqual(t, domain.JobFailed, res.JobState)
	b.drain(t)
	ls = b.claim(t, tenantA, "q2")
	require.Len(t, ls, 1, "a replan's worker queue is made before it is written")
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, nil)
	require.NoError(t, err)
	b.drain(t)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.ElementsMatch(t, []string{"half-1", "half-2"}, got.Steps[1].Spec.DependsOn, "report waits for both halves")
}

func TestCancelEndsAWaitingJobAndItsTimersDoNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":60}},{"id":"g","action":{"type":"approval","timeout_seconds":30}},{"id":"z","action":{"type":"pass"},"depends_on":["nap","g"]}]}`)
	got, err := b.e.Cancel(b.ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCancelled, got.State)
	b.clock.Advance(time.Hour)
	require.Equal(t, []engine.ExecuteResult{engine.Stale, engine.Stale}, b.drain(t))
	require.Zero(t, b.sweep(t).Due)
}

func TestOnlyAPersonBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		b.submit(t, tenantA, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":60}}]}`)
		b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"wait","signal":"s"}}]}`)
	}
	b.submit(t, tenantA, `{"steps":[{"id":"g","action":{"type":"approval"}}]}`)
	h, err := b.e.Health(b.ctx, tenantA)
	require.NoError(t, err)
	require.Equal(t, int64(1), h.Blocked, "sleeps and waits move on by themselves; a gate waits on a person")
}
