package domain

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const quantumJob = `{"steps":[{"id":"q","action":{"type":"worker","queue":"lab"},"requires":{"capabilities":["quantum"],"labels":{"site":"eu"}},"resource_wait_seconds":120}]}`

// resource_wait_seconds is checked like every field: it needs a step
// that requires a resource, and a bound within a year.
func TestResourceWaitSecondsIsValidated(t *testing.T) {
	t.Parallel()
	for body, field := range map[string]string{
		`{"steps":[{"id":"a","action":{"type":"pass"},"resource_wait_seconds":5}]}`:                                                                "steps[0].resource_wait_seconds",
		`{"steps":[{"id":"a","action":{"type":"sleep","seconds":1},"resource_wait_seconds":5}]}`:                                                   "steps[0].resource_wait_seconds",
		`{"steps":[{"id":"a","action":{"type":"pass"},"requires":{"capabilities":["gpu"]},"resource_wait_seconds":-1}]}`:                           "steps[0].resource_wait_seconds",
		`{"steps":[{"id":"a","action":{"type":"pass"},"requires":{"capabilities":["gpu"]},"resource_wait_seconds":31536001}]}`:                     "steps[0].resource_wait_seconds",
		`{"steps":[{"id":"a","action":{"type":"pass"},"requires":{"capabilities":["gpu"]},"resource_wait_seconds":"soon"}]}`:                       "steps[0].resource_wait_seconds",
		`{"steps":[{"id":"a","action":{"type":"fail","class":"replan","steps":[{"id":"b","action":{"type":"pass"},"resource_wait_seconds":3}]}}]}`: "steps[0].action.steps[0].resource_wait_seconds",
	} {
		_, err := ParseJobSpec([]byte(body))
		var de *Error
		require.ErrorAs(t, err, &de, body)
		require.Equal(t, field, de.Field, body)
	}
	spec, err := ParseJobSpec([]byte(quantumJob))
	require.NoError(t, err)
	require.Equal(t, 120, spec.Steps[0].ResourceWaitSeconds)
}

// A step waiting for a resource no one offers fails once its bound has
// passed since it began to wait, with class resource and a message that
// names what it waited for; the job fails with it. The wait keeps the
// time it began across the looks of each re-send, and the job is due for
// the sweep at the bound.
func TestResourceWaitFailsTheStepAtItsBound(t *testing.T) {
	t.Parallel()
	j := newJob(t, quantumJob)
	require.NoError(t, j.WaitForResource("q", &ResourceWait{Since: t0, On: []string{}}, t0))
	replayOK(t, j)
	s := j.Steps[0]
	require.True(t, at(120*time.Second).Equal(*s.ResourceWait.Until))
	require.Equal(t, JobQueued, j.State)

	require.NoError(t, j.WaitForResource("q", &ResourceWait{Since: at(100 * time.Second), On: []string{}}, at(100*time.Second)))
	require.True(t, t0.Equal(s.ResourceWait.Since), "a later look keeps when the wait began")
	requireDue(t, j, at(120*time.Second))

	n, err := j.ExpireResourceWaits(at(119 * time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "not yet")
	ds, n, err := j.FireDue(at(120*time.Second), nil)
	require.NoError(t, err)
	require.Empty(t, ds)
	require.Equal(t, 1, n)
	replayOK(t, j)
	require.Equal(t, StepFailed, s.State)
	require.Equal(t, ClassResource, s.Error.Class)
	require.Contains(t, s.Error.Message, "quantum")
	require.Contains(t, s.Error.Message, "site=eu")
	require.Contains(t, s.Error.Message, "resource_wait_seconds (120)")
	require.Empty(t, s.Attempts, "no attempt ran")
	require.Nil(t, s.ResourceWait)
	require.Equal(t, JobFailed, j.State)
	require.Equal(t, ClassResource, j.Error.Class)
	require.Contains(t, j.Error.Message, "step q failed: no resource slot")
	last := j.Events[len(j.Events)-1]
	require.Equal(t, string(JobEvFailed), last.Type)
	require.Contains(t, last.Detail, "quantum", "the job's event says why")
	require.Equal(t, []string{"step_failed_resource", "step_failed_fatal", "step_failed"}, stepEvents(j, "q")[len(stepEvents(j, "q"))-3:])

	// Redrive waits again, from scratch.
	_, err = j.Redrive(at(200 * time.Second))
	require.NoError(t, err)
	require.Nil(t, j.Error)
	require.NoError(t, j.WaitForResource("q", &ResourceWait{Since: at(200 * time.Second), On: []string{"r1"}}, at(200*time.Second)))
	require.Equal(t, StepPending, s.State)
	require.True(t, at(320*time.Second).Equal(*s.ResourceWait.Until))
	replayOK(t, j)
}

// A look that finds the wait past its bound (the waiter's own, before the
// sweep's) fails the step then; the message names the resources whose
// slots stayed held. A retrying step's wait and a switching one's are
// bounded alike, and a step with no bound of its own takes the job's.
func TestResourceWaitPastItsBoundFailsAtTheLook(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"worker"},"requires":{"capabilities":["gpu"]}}]}`)
	require.Equal(t, int(DefaultResourceWait/time.Second), j.ResourceWaitSeconds)
	require.Equal(t, DefaultResourceWait, j.ResourceWaitBound(j.Steps[0]))
	l := mustLease(t, j, "a", LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n1", Duration: time.Minute, Resource: "gpu-1"}, t0)
	_, err := j.Fail("a", l.ID, Failure{Class: ClassResource, Message: "lost"}, at(time.Second), nil)
	require.NoError(t, err)
	require.Equal(t, StepSwitchingResource, j.Steps[0].State)
	start := at(2 * time.Second)
	require.NoError(t, j.WaitForResource("a", &ResourceWait{Since: start, On: []string{"gpu-2"}}, start))
	require.NoError(t, j.WaitForResource("a", &ResourceWait{Since: start.Add(DefaultResourceWait), On: []string{"gpu-2"}}, start.Add(DefaultResourceWait)))
	replayOK(t, j)
	s := j.Steps[0]
	require.Equal(t, StepFailed, s.State)
	require.Contains(t, s.Error.Message, "every slot of gpu-2 stayed held (avoiding gpu-1)")
	require.Equal(t, JobFailed, j.State)

	// A wait after a retry's backoff, its job RETRYING.
	j = newJob(t, `{"steps":[{"id":"a","action":{"type":"worker"},"requires":{"capabilities":["gpu"]},"resource_wait_seconds":30,"retry":{"max_attempts":3,"initial_delay_ms":0}}]}`)
	l = mustLease(t, j, "a", LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n1", Duration: time.Minute, Resource: "gpu-1"}, t0)
	_, err = j.Fail("a", l.ID, Failure{Class: ClassRetryable, Message: "flaky"}, at(time.Second), nil)
	require.NoError(t, err)
	require.Equal(t, StepRetrying, j.Steps[0].State)
	require.NoError(t, j.WaitForResource("a", &ResourceWait{Since: at(time.Second), On: []string{}}, at(time.Second)))
	require.Equal(t, JobRetrying, j.State)
	_, n, err := j.FireDue(at(31*time.Second), nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	replayOK(t, j)
	require.Equal(t, StepFailed, j.Steps[0].State)
	require.Equal(t, JobFailed, j.State)
}

func stepEvents(j *Job, step string) []string {
	var out []string
	for _, e := range j.Events {
		if e.Step == step {
			out = append(out, e.Type)
		}
	}
	return out
}

// cycled is a job as one stored before replans were checked could be: b
// and c wait on each other, and a runs.
func cycled(t *testing.T) (*Job, *Lease) {
	t.Helper()
	j := newJob(t, `{"steps":[{"id":"a","action":{"type":"worker"}},{"id":"b","action":{"type":"worker"},"depends_on":["a"]},{"id":"c","action":{"type":"worker"},"depends_on":["b"]}]}`)
	l := mustLease(t, j, "a", viaWorker("w", "n1"), t0)
	j.Steps[1].Spec.DependsOn = []string{"a", "c"}
	return j, l
}

// The write that leaves no step able to run again fails the job in the
// same write, saying why on the job and in its events; the steps that
// could never run end CANCELLED with the same reason.
func TestWriteThatLeavesNoStepRunnableFailsTheJob(t *testing.T) {
	t.Parallel()
	j, l := cycled(t)
	_, err := j.Complete("a", l.ID, nil, at(time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, JobFailed, j.State)
	require.NotNil(t, j.Error)
	require.Equal(t, ClassFatal, j.Error.Class)
	require.Equal(t, "no step can ever run again: b waits on c (WAITING_DEPS); c waits on b (WAITING_DEPS)", j.Error.Message)
	last := j.Events[len(j.Events)-1]
	require.Equal(t, string(JobEvFailed), last.Type)
	require.Equal(t, j.Error.Message, last.Detail)
	for _, s := range j.Steps[1:] {
		require.Equal(t, StepCancelled, s.State)
	}
	require.Nil(t, j.due(), "nothing left for the sweep")

	// Redriving it would stall again: refused, nothing changed.
	before := len(j.Events)
	_, err = j.Redrive(at(2 * time.Second))
	require.Equal(t, CodeConflict, CodeOf(err))
	require.Contains(t, err.Error(), "b waits on c")
	require.Len(t, j.Events[:before], before)
}

// A job stored stalled (no step able to run, due only by a stale due
// time) is failed by the sweep's FailStalled; one with a step that can
// still run is left alone, as is a job parked on a signal with no
// deadline: a person reads PARKED.
func TestFailStalledFailsOnlyAJobNoStepOfCanRun(t *testing.T) {
	t.Parallel()
	j, _ := cycled(t)
	failed, err := j.FailStalled(at(time.Second))
	require.NoError(t, err)
	require.False(t, failed, "a still runs")

	parked := newJob(t, `{"steps":[{"id":"w","action":{"type":"wait","signal":"go"}},{"id":"x","action":{"type":"pass"}}]}`)
	require.Equal(t, JobParked, parked.State)
	failed, err = parked.FailStalled(at(time.Second))
	require.NoError(t, err)
	require.False(t, failed)

	// Stored stalled: b's dependency on the replaced r was never rewired.
	st := newJob(t, `{"steps":[{"id":"r","action":{"type":"worker"}},{"id":"b","action":{"type":"worker"},"depends_on":["r"]}]}`)
	l := mustLease(t, st, "r", viaWorker("w", "n1"), t0)
	_, err = st.Fail("r", l.ID, Failure{Class: ClassReplan, Message: "split", Steps: []StepSpec{{ID: "r2", Action: ActionSpec{Type: ActionPass}}}}, at(time.Second), nil)
	require.NoError(t, err)
	replayOK(t, st)
	require.Equal(t, []string{"r2"}, st.Steps[1].Spec.DependsOn, "rewired")
	st.Steps[1].Spec.DependsOn = []string{"r"} // as a job written before the rewiring was
	st.Steps[2].State, st.Steps[2].ReadyAt = StepCancelled, nil
	st.Events = append(st.Events, Event{Seq: len(st.Events) + 1, Type: "step_cancelled", Step: "r2", At: at(time.Second)})
	replayOK(t, st)
	failed, err = st.FailStalled(at(2 * time.Second))
	require.NoError(t, err)
	require.True(t, failed)
	replayOK(t, st)
	require.Equal(t, JobFailed, st.State)
	require.True(t, strings.HasPrefix(st.Error.Message, "no step can ever run again: b waits on r (FAILED)"), st.Error.Message)
}
