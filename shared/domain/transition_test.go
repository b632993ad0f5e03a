package domain

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allStepEvents is every StepEvent constant, written out by hand so that a
// constant missing from the table is caught.
var allStepEvents = []StepEvent{
	StepEvWaitDeps, StepEvDepsMet, StepEvLease, StepEvStart, StepEvSucceed, StepEvFailRetryable,
	StepEvRetry, StepEvFailResource, StepEvSwitchResource, StepEvFailFatal, StepEvFail,
	StepEvNeedsUser, StepEvApprove, StepEvReject, StepEvLeaseTimeout, StepEvRequeue,
	StepEvTimeOut, StepEvCancel, StepEvResume, StepEvWait, StepEvWake, StepEvRedrive,
	StepEvResourceWaitExpired,
}

// allJobEvents is every JobEvent constant, written out by hand.
var allJobEvents = []JobEvent{
	JobEvCreated, JobEvQueued, JobEvRequeued, JobEvLeased, JobEvRunning, JobEvWaiting,
	JobEvParked, JobEvRetrying, JobEvWaitCompleted, JobEvCompleted, JobEvFailed, JobEvCancelled,
}

// tableEvents lists the events of a table, in order, and fails on a repeat:
// next stops at the first row naming an event, so a second row is dead.
func tableEvents[S ~string, E ~string](t *testing.T, table []Transition[S, E]) []E {
	t.Helper()
	var out []E
	for _, row := range table {
		require.NotContains(t, out, row.Event, "event %s has two rows", row.Event)
		require.NotEmpty(t, row.Sources, "event %s has no sources", row.Event)
		out = append(out, row.Event)
	}
	return out
}

// lookup answers the row's destination for (state, event), if any.
func lookup[S ~string, E ~string](table []Transition[S, E], state S, event E) (S, bool) {
	for _, row := range table {
		if row.Event == event && slices.Contains(row.Sources, state) {
			return row.Destination, true
		}
	}
	return state, false
}

func TestStepTableCoversEveryEventOnce(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, allStepEvents, tableEvents(t, stepTransitions))
	for _, row := range stepTransitions {
		require.Contains(t, AllStepStates(), row.Destination, "event %s", row.Event)
		for _, s := range row.Sources {
			require.Contains(t, AllStepStates(), s, "event %s", row.Event)
		}
	}
}

func TestJobTableCoversEveryEventOnce(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, allJobEvents, tableEvents(t, jobTransitions))
	states := append([]JobState{JobInitial}, AllJobStates()...)
	for _, row := range jobTransitions {
		require.Contains(t, AllJobStates(), row.Destination, "event %s", row.Event)
		for _, s := range row.Sources {
			require.Contains(t, states, s, "event %s", row.Event)
		}
	}
}

func TestNextStepStateEveryPair(t *testing.T) {
	t.Parallel()
	for _, state := range AllStepStates() {
		for _, event := range allStepEvents {
			want, allowed := lookup(stepTransitions, state, event)
			got, err := NextStepState(state, event)
			if allowed {
				require.NoError(t, err, "%s --%s-->", state, event)
				require.Equal(t, want, got, "%s --%s-->", state, event)
				continue
			}
			var ie *IllegalTransitionError
			require.True(t, errors.As(err, &ie), "%s --%s--> should be refused, got %v", state, event, err)
			require.Equal(t, "step", ie.Kind)
			require.Equal(t, string(state), ie.From)
			require.Equal(t, string(event), ie.Event)
			require.Equal(t, state, got, "a refused event leaves the state unchanged")
			require.Contains(t, err.Error(), string(state))
			require.Contains(t, err.Error(), string(event))
			require.Equal(t, CodeConflict, CodeOf(err))
		}
	}
}

func TestNextJobStateEveryPair(t *testing.T) {
	t.Parallel()
	states := append([]JobState{JobInitial}, AllJobStates()...)
	for _, state := range states {
		for _, event := range allJobEvents {
			want, allowed := lookup(jobTransitions, state, event)
			got, err := NextJobState(state, event)
			if allowed {
				require.NoError(t, err, "%q --%s-->", state, event)
				require.Equal(t, want, got, "%q --%s-->", state, event)
				require.Contains(t, JobSources(event), state)
				continue
			}
			var ie *IllegalTransitionError
			require.True(t, errors.As(err, &ie), "%q --%s--> should be refused, got %v", state, event, err)
			require.Equal(t, "job", ie.Kind)
			require.Equal(t, string(state), ie.From)
			require.Equal(t, string(event), ie.Event)
			require.Equal(t, state, got, "a refused event leaves the state unchanged")
			require.Contains(t, err.Error(), string(event))
			require.NotContains(t, JobSources(event), state)
			require.Equal(t, CodeConflict, CodeOf(err))
		}
	}
}

func TestUnknownEventsAreRefused(t *testing.T) {
	t.Parallel()
	s, err := NextStepState(StepRunning, StepEvent("explode"))
	var ie *IllegalTransitionError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, StepRunning, s)
	require.Equal(t, "explode", ie.Event)

	j, err := NextJobState(JobRunning, JobEvent("job_exploded"))
	require.ErrorAs(t, err, &ie)
	require.Equal(t, JobRunning, j)
	require.Nil(t, JobSources(JobEvent("job_exploded")))
}

func TestIllegalTransitionErrorMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  IllegalTransitionError
		want string
	}{
		{IllegalTransitionError{Kind: "job", From: "", Event: "job_completed"}, "job in state (initial): job_completed is not allowed"},
		{IllegalTransitionError{Kind: "step", From: "RUNNING", Event: "lease"}, "step in state RUNNING: lease is not allowed"},
		{IllegalTransitionError{Kind: "job", ID: "j1", From: "COMPLETED", Event: "job_cancelled"}, "job j1 is COMPLETED: job_cancelled is not allowed"},
	} {
		require.Equal(t, tc.want, tc.err.Error())
	}
}

func TestEveryStateIsReachable(t *testing.T) {
	t.Parallel()
	for _, s := range AllStepStates() {
		// Steps are created PENDING; every other state must be a destination.
		reached := s == StepPending
		for _, row := range stepTransitions {
			reached = reached || row.Destination == s
		}
		require.True(t, reached, "step state %s is unreachable", s)
	}
	for _, s := range AllJobStates() {
		reached := false
		for _, row := range jobTransitions {
			reached = reached || (row.Destination == s && !(len(row.Sources) == 1 && row.Sources[0] == s))
		}
		require.True(t, reached, "job state %s is unreachable", s)
	}
}

func TestTerminalStatesHaveNoWayOut(t *testing.T) {
	t.Parallel()
	stepOut := func(s StepState) (evs []StepEvent) {
		for _, row := range stepTransitions {
			if slices.Contains(row.Sources, s) {
				evs = append(evs, row.Event)
			}
		}
		return evs
	}
	jobOut := func(s JobState) (evs []JobEvent) {
		for _, row := range jobTransitions {
			if slices.Contains(row.Sources, s) {
				evs = append(evs, row.Event)
			}
		}
		return evs
	}
	// Within a run nothing leaves a terminal step; only a redrive of the
	// failed job reopens its failed and cancelled steps.
	for _, s := range []StepState{StepSucceeded, StepFailed, StepCancelled} {
		require.True(t, s.Terminal())
		require.Empty(t, slices.DeleteFunc(stepOut(s), func(e StepEvent) bool { return e == StepEvRedrive }), "terminal step state %s", s)
	}
	require.Empty(t, stepOut(StepSucceeded))
	// Terminal() is exactly "no outgoing row but redrive" for steps.
	for _, s := range AllStepStates() {
		out := slices.DeleteFunc(stepOut(s), func(e StepEvent) bool { return e == StepEvRedrive })
		require.Equal(t, s.Terminal(), len(out) == 0, "step state %s", s)
	}
	for _, s := range []JobState{JobCompleted, JobCancelled} {
		require.True(t, s.Terminal())
		require.Empty(t, jobOut(s), "terminal job state %s", s)
	}
	// The formal job table (docs/model.md#formal-job-machine): a FAILED job
	// may only be requeued.
	require.True(t, JobFailed.Terminal())
	require.Equal(t, []JobEvent{JobEvRequeued}, jobOut(JobFailed))
	for _, s := range AllJobStates() {
		if !s.Terminal() {
			require.NotEmpty(t, jobOut(s), "non-terminal job state %s", s)
		}
	}
	require.False(t, JobInitial.Terminal())
}

// seed002 is the formal job machine's state x event table, verbatim ("" is
// the initial pseudo-state; docs/model.md#formal-job-machine); absent pairs
// are "—".
var seed002 = map[JobState]map[JobEvent]JobState{
	JobInitial:   {JobEvCreated: JobQueued, JobEvQueued: JobQueued, JobEvRequeued: JobQueued},
	JobQueued:    {JobEvRequeued: JobQueued, JobEvLeased: JobRunning, JobEvRunning: JobRunning, JobEvWaitCompleted: JobQueued},
	JobRunning:   {JobEvRequeued: JobQueued, JobEvWaiting: JobWaiting, JobEvWaitCompleted: JobQueued, JobEvCompleted: JobCompleted, JobEvFailed: JobFailed, JobEvCancelled: JobCancelled},
	JobWaiting:   {JobEvWaitCompleted: JobQueued, JobEvCancelled: JobCancelled},
	JobParked:    {JobEvWaitCompleted: JobQueued, JobEvCancelled: JobCancelled},
	JobRetrying:  {JobEvRequeued: JobQueued, JobEvLeased: JobRunning, JobEvRunning: JobRunning, JobEvWaitCompleted: JobQueued},
	JobCompleted: {},
	JobFailed:    {JobEvRequeued: JobQueued},
	JobCancelled: {},
}

// widened are the pairs the canonical job table adds to the formal job table
// on purpose (docs/model.md#formal-job-machine).
var widened = map[JobState][]JobEvent{
	JobQueued:   {JobEvCancelled, JobEvWaiting},                                        // approval-gated runs cancel a PENDING run; a gate opens first
	JobRetrying: {JobEvCancelled, JobEvFailed},                                         // cancel while backing off
	JobRunning:  {JobEvRetrying},                                                       // explicit RETRYING
	JobWaiting:  {JobEvParked, JobEvCompleted, JobEvFailed, JobEvLeased, JobEvRunning}, // approval gate approved / rejected; a DAG branch runs while another waits
	JobParked:   {JobEvCompleted, JobEvFailed},                                         // a signal satisfies the last wait; a parked wait's deadline passes
}

func TestJobTableAgainstSeed002(t *testing.T) {
	t.Parallel()
	states := append([]JobState{JobInitial}, AllJobStates()...)
	for _, state := range states {
		for _, event := range allJobEvents {
			got, err := NextJobState(state, event)
			if want, ok := seed002[state][event]; ok {
				require.NoError(t, err, "the formal job table allows %q --%s-->", state, event)
				require.Equal(t, want, got)
				continue
			}
			if slices.Contains(widened[state], event) {
				require.NoError(t, err, "deliberate widening %q --%s-->", state, event)
				continue
			}
			require.Error(t, err, "the formal job table forbids %q --%s-->", state, event)
		}
	}
}

func TestStepEventTypes(t *testing.T) {
	t.Parallel()
	for _, s := range AllStepStates() {
		want := "step_" + strings.ToLower(string(s))
		require.Equal(t, want, s.EventType())
		// Replay reads it back.
		back, ok := strings.CutPrefix(s.EventType(), "step_")
		require.True(t, ok)
		require.Equal(t, s, StepState(strings.ToUpper(back)))
	}
	require.Equal(t, "step_failed_retryable", StepFailedRetryable.EventType())
	// No job event may be mistaken for a step event by Replay.
	for _, e := range allJobEvents {
		require.False(t, strings.HasPrefix(string(e), "step_"), "job event %s", e)
	}
}

func TestStateListsAreComplete(t *testing.T) {
	t.Parallel()
	require.Len(t, AllStepStates(), 16)
	require.Len(t, AllJobStates(), 8)
	require.Len(t, AllAttemptStates(), 6)
	for _, lists := range [][]string{
		toStrings(AllStepStates()), toStrings(AllJobStates()), toStrings(AllAttemptStates()),
	} {
		sorted := slices.Clone(lists)
		slices.Sort(sorted)
		require.Len(t, slices.Compact(sorted), len(lists), "duplicate in %v", lists)
	}
	for _, a := range AllAttemptStates() {
		require.Equal(t, a != AttemptQueued && a != AttemptRunning, a.Terminal(), "attempt %s", a)
	}
}

func toStrings[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}
