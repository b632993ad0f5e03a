package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// workerJob answers a one-step worker job whose step has run under a
// lease that completed with output.
func workerJob(t *testing.T, output string) *domain.Job {
	t.Helper()
	spec, err := domain.ParseJobSpec([]byte(`{"steps":[{"id":"w","action":{"type":"worker","queue":"q","lease_seconds":1}}]}`))
	require.NoError(t, err)
	j, err := domain.NewJob("t", "j1", spec, "k", t0)
	require.NoError(t, err)
	l, err := j.Lease("w", domain.LeaseRequest{Worker: "w1", ViaWorker: true, Nonce: "n1", Duration: time.Second}, t0)
	require.NoError(t, err)
	_, err = j.Complete("w", l.ID, json.RawMessage(output), t0.Add(100*time.Millisecond))
	require.NoError(t, err)
	return j
}

func TestChecksPassAFinishedJob(t *testing.T) {
	t.Parallel()
	j := workerJob(t, `{"worker":"w1"}`)
	require.Equal(t, domain.JobCompleted, j.State)
	require.Empty(t, checkRuns(j))
	require.Empty(t, checkFencing(j, nil))
	require.Empty(t, checkReplay(j))
}

func TestCheckTerminalOnceFindsASecondTerminalEvent(t *testing.T) {
	t.Parallel()
	j := workerJob(t, `{}`)
	j.Events = append(j.Events, domain.Event{Seq: len(j.Events) + 1, Type: string(domain.JobEvCompleted), At: t0})
	require.Contains(t, checkRuns(j), "2 terminal events")

	j = workerJob(t, `{}`)
	j.Events = append(j.Events, domain.Event{Seq: len(j.Events) + 1, Type: "step_running", Step: "w", At: t0})
	require.Contains(t, checkRuns(j), "its last event is step_running")
}

func TestCheckFencingFindsZombieOutcomes(t *testing.T) {
	t.Parallel()
	j := workerJob(t, `{"worker":"w1","zombie":true}`)
	require.NotEmpty(t, checkFencing(j, nil), "a zombie's output was applied")

	j = workerJob(t, `{"worker":"w1","zombie":false,"note":"zombie"}`)
	require.Empty(t, checkFencing(j, nil), "only the tag counts")

	j = workerJob(t, `{}`)
	j.Steps[0].Attempts = append(j.Steps[0].Attempts, domain.Attempt{N: 2, State: domain.AttemptFailed,
		Error: &domain.StepError{Class: domain.ClassRetryable, Message: "[zombie] worker w1 reports retryable"}})
	msgs := checkFencing(j, nil)
	require.Len(t, msgs, 2, "a zombie's failure was applied, and the succeeded attempt is no longer the last: %v", msgs)

	j = workerJob(t, `{}`)
	late := []string{"heartbeat of lease l sent 1s after it expired was answered 200"}
	require.Len(t, checkFencing(j, late), 1, "a request sent after the lease expired was accepted")
}

func TestCheckReplayFindsDrift(t *testing.T) {
	t.Parallel()
	j := workerJob(t, `{}`)
	j.State = domain.JobRunning
	require.NotEmpty(t, checkReplay(j))

	j = workerJob(t, `{}`)
	j.Events[2].Seq = 7
	require.Contains(t, checkReplay(j), "seq")

	j = workerJob(t, `{}`)
	due := t0
	j.DueAt = &due
	require.Contains(t, checkReplay(j), "still due")
}

func TestPlanIsValidAndMixed(t *testing.T) {
	t.Parallel()
	f := New(9, DefaultProbabilities())
	kinds := map[string]int{}
	cancels := 0
	for _, p := range f.Plan(300) {
		_, err := domain.ParseJobSpec(p.Body)
		require.NoError(t, err, "%s", p.Body)
		kinds[p.Kind]++
		if p.CancelAfter > 0 {
			cancels++
		}
	}
	for _, k := range planKinds {
		require.Positive(t, kinds[k.kind], "kind %s never planned", k.kind)
	}
	require.Positive(t, cancels)
	require.Equal(t, PlanDigest(New(9, DefaultProbabilities()).Plan(300)), PlanDigest(New(9, Probabilities{}).Plan(300)),
		"the plan depends on the seed alone")
	require.NotEqual(t, PlanDigest(New(9, DefaultProbabilities()).Plan(30)), PlanDigest(New(10, DefaultProbabilities()).Plan(30)))
}

func TestReplanPlanIsValid(t *testing.T) {
	t.Parallel()
	plan := New(9, DefaultProbabilities()).ReplanPlan(40)
	require.Equal(t, plan, New(9, Probabilities{}).ReplanPlan(40), "the plan depends on the seed alone")
	for i, p := range plan {
		require.Equal(t, 40+i, p.N)
		_, err := domain.ParseJobSpec(p.Body)
		require.NoError(t, err, "%s", p.Body)
		require.Contains(t, rows, p.Kind)
		require.Equal(t, p.Kind == "replan-fail", p.Refused != nil)
		require.Equal(t, p.Kind == "flood", p.Race != nil && p.Race.Junk >= 60)
	}
}

func TestSummaryLine(t *testing.T) {
	t.Parallel()
	rs := []*Result{
		{Jobs: 30, Faults: map[Kind]int64{KindCrashBefore: 3, KindZombie: 1}},
		{Jobs: 30, Faults: map[Kind]int64{KindDuplicate: 2}, Lost: 1, Mismatched: 2},
	}
	require.Equal(t, "chaos: 2 runs, 6 faults injected, 60 jobs, lost 1, duplicated 0, mismatched 2", Summary(rs))
	require.Equal(t, "chaos faults by kind: crash_before 3, duplicate 2, zombie 1", FaultSummary(rs))
	require.True(t, rs[0].Passed())
	require.False(t, rs[1].Passed())
}
