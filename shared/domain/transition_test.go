package domain

import (
	"errors"
	"os"
	"path/filepath"
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
	StepEvResourceWaitExpired, StepEvSkip,
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

// formalTable reads the formal job machine's state x event table from the
// seed document's own text (testdata/formal_job_table.md): state -> event
// -> next state, "—" pairs absent.
func formalTable(t *testing.T) map[JobState]map[JobEvent]JobState {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "formal_job_table.md"))
	require.NoError(t, err)
	states := map[string]JobState{
		"(初始)": JobInitial, "Queued": JobQueued, "Running": JobRunning, "Waiting": JobWaiting, "Parked": JobParked,
		"Retrying": JobRetrying, "Completed": JobCompleted, "Failed": JobFailed, "Cancelled": JobCancelled,
	}
	cells := func(line string) []string {
		parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range parts {
			parts[i] = strings.Trim(strings.TrimSpace(parts[i]), "*")
		}
		return parts
	}
	var events []JobEvent
	out := map[JobState]map[JobEvent]JobState{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|--") {
			continue
		}
		c := cells(line)
		if events == nil {
			for _, e := range c[1:] {
				events = append(events, JobEvent(e))
			}
			continue
		}
		from, ok := states[c[0]]
		require.True(t, ok, "state %q", c[0])
		out[from] = map[JobEvent]JobState{}
		for i, cell := range c[1:] {
			if cell == "—" {
				continue
			}
			to, ok := states[cell]
			require.True(t, ok, "state %q", cell)
			out[from][events[i]] = to
		}
	}
	require.Len(t, out, 9)
	return out
}

// The formal table in the code is the seed's, pair for pair; the
// canonical job table is it plus exactly the documented widenings, each
// a pair the formal table forbids, with the lifecycle row that needs it.
func TestJobTableAgainstSeed002(t *testing.T) {
	t.Parallel()
	seed := formalTable(t)
	states := append([]JobState{JobInitial}, AllJobStates()...)
	lifecycles := []string{"formal job machine", "event-sourced job status", "quality-platform tasks", "approval-gated runs", "agent platform"}
	for _, w := range jobWidenings {
		_, formal := seed[w.From][w.Event]
		require.False(t, formal, "widening %q --%s--> is in the formal table", w.From, w.Event)
		require.Contains(t, lifecycles, w.Lifecycle, "widening %q --%s-->", w.From, w.Event)
		require.NotEmpty(t, w.Row, "widening %q --%s--> names no row", w.From, w.Event)
		require.NotEmpty(t, w.Why, "widening %q --%s-->", w.From, w.Event)
	}
	for _, state := range states {
		for _, event := range allJobEvents {
			want, ok := seed[state][event]
			got, err := next(formalJobTransitions, "job", state, event)
			if ok {
				require.NoError(t, err, "the formal job table allows %q --%s-->", state, event)
				require.Equal(t, want, got)
			} else {
				require.Error(t, err, "the formal job table forbids %q --%s-->", state, event)
			}
			i := slices.IndexFunc(jobWidenings, func(w JobWidening) bool { return w.From == state && w.Event == event })
			if i >= 0 {
				want, ok = jobWidenings[i].To, true
			}
			got, err = NextJobState(state, event)
			if !ok {
				require.Error(t, err, "%q --%s--> is neither formal nor a documented widening", state, event)
				continue
			}
			require.NoError(t, err, "%q --%s-->", state, event)
			require.Equal(t, want, got, "%q --%s-->", state, event)
		}
	}
}

// CheckFormal names the first job event the formal table and its
// documented widenings do not allow, passing over step events and notes.
func TestCheckFormal(t *testing.T) {
	t.Parallel()
	log := func(types ...string) []Event {
		var out []Event
		for i, typ := range types {
			ev := Event{Seq: i + 1, Type: typ}
			if strings.HasPrefix(typ, "step_") {
				ev.Step = "a"
			}
			out = append(out, ev)
		}
		return out
	}
	for _, ok := range [][]string{
		{"job_created", "job_running", "step_running", "job_waiting", "signal_received", "job_parked", "wait_completed", "job_running", "job_completed"},
		{"job_created", "job_cancelled"},
		{"job_created", "job_leased", "job_retrying", "job_requeued", "job_cancelled"},
		{"job_created", "job_running", "job_waiting", "job_failed", "job_requeued", "job_replanned", "job_leased", "job_retrying", "job_running", "job_completed"},
	} {
		require.NoError(t, CheckFormal(log(ok...)), "%v", ok)
	}
	for _, bad := range []struct {
		types []string
		want  string
	}{
		// What the widened table let the engine write before.
		{[]string{"job_created", "step_needs_user", "job_waiting"}, "event 3: QUEUED --job_waiting--> is neither in the formal job table nor a documented widening"},
		{[]string{"job_created", "job_running", "job_waiting", "job_running"}, "event 4: WAITING --job_running-->"},
		{[]string{"job_created", "job_running", "job_waiting", "job_leased"}, "event 4: WAITING --job_leased-->"},
		{[]string{"job_created", "job_running", "job_waiting", "job_parked", "job_completed"}, "event 5: PARKED --job_completed-->"},
		{[]string{"job_created", "job_running", "job_waiting", "job_parked", "job_failed"}, "event 5: PARKED --job_failed-->"},
		{[]string{"job_created", "job_running", "job_retrying", "job_cancelled"}, "event 4: RETRYING --job_cancelled-->"},
		{[]string{"job_created", "job_running", "job_retrying", "job_failed"}, "event 4: RETRYING --job_failed-->"},
		{[]string{"job_running"}, "event 1: (initial) --job_running-->"},
		{[]string{"job_created", "job_cancelled", "job_requeued"}, "event 3: CANCELLED --job_requeued-->"},
	} {
		require.ErrorContains(t, CheckFormal(log(bad.types...)), bad.want, "%v", bad.types)
	}
}

// settle takes the formal machine's own way where the table has no direct
// event, all in one change.
func TestJobPathsGoTheFormalWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to JobState
		worker   bool
		want     []JobEvent
	}{
		{JobQueued, JobWaiting, false, []JobEvent{JobEvRunning, JobEvWaiting}},
		{JobQueued, JobParked, false, []JobEvent{JobEvRunning, JobEvWaiting, JobEvParked}},
		{JobWaiting, JobRunning, true, []JobEvent{JobEvWaitCompleted, JobEvLeased}},
		{JobWaiting, JobRunning, false, []JobEvent{JobEvWaitCompleted, JobEvRunning}},
		{JobParked, JobCompleted, false, []JobEvent{JobEvWaitCompleted, JobEvRunning, JobEvCompleted}},
		{JobParked, JobFailed, false, []JobEvent{JobEvWaitCompleted, JobEvRunning, JobEvFailed}},
		{JobRetrying, JobCancelled, false, []JobEvent{JobEvRequeued, JobEvCancelled}},
		{JobRetrying, JobRunning, true, []JobEvent{JobEvLeased}},
		{JobWaiting, JobCompleted, false, []JobEvent{JobEvCompleted}},
		{JobRunning, JobParked, false, []JobEvent{JobEvWaiting, JobEvParked}},
	} {
		path, ok := settlePath(tc.from, tc.to, tc.worker)
		require.True(t, ok, "%s to %s", tc.from, tc.to)
		require.Equal(t, tc.want, path, "%s to %s", tc.from, tc.to)
	}
}

// Every declared settle path is legal in the job table and ends where it
// says, and every non-terminal state reaches every state a settle or a
// cancel may want. A finished job is never settled: no path starts at one.
func TestSettlePathsWalkTheJobTable(t *testing.T) {
	t.Parallel()
	for move := range settlePaths {
		require.False(t, move.from.Terminal() || move.from == JobInitial, "%s to %s: a finished job is never settled", move.from, move.to)
		require.NotEqual(t, move.from, move.to)
	}
	for _, worker := range []bool{false, true} {
		for _, from := range []JobState{JobQueued, JobRunning, JobWaiting, JobParked, JobRetrying} {
			for _, to := range AllJobStates() {
				path, ok := settlePath(from, to, worker)
				require.True(t, ok, "%s to %s: settle has no path", from, to)
				state := from
				for _, ev := range path {
					require.NotEqual(t, jobEvRun, ev, "%s to %s: the placeholder is replaced", from, to)
					var err error
					state, err = NextJobState(state, ev)
					require.NoError(t, err, "%s to %s (worker %v)", from, to, worker)
				}
				require.Equal(t, to, state, "%s to %s (worker %v)", from, to, worker)
			}
		}
	}
}

// The declared paths are exactly the ones settle found by searching the job
// table before they were written out, so stored event logs read as they
// did: the search is kept here as the oracle. Where the table has no way,
// there is no declared path either; a terminal state has none at all.
func TestSettlePathsAreTheSearchedOnes(t *testing.T) {
	t.Parallel()
	declared := 0
	for _, worker := range []bool{false, true} {
		for _, from := range append([]JobState{JobInitial}, AllJobStates()...) {
			for _, to := range AllJobStates() {
				want, reachable := searchJobPath(from, to, worker)
				got, ok := settlePath(from, to, worker)
				if !reachable {
					require.False(t, ok, "%s to %s: the table has no way, so settle has none", from, to)
					continue
				}
				if from.Terminal() || from == JobInitial {
					require.Equal(t, from == to, ok, "%s to %s: a finished job is never settled", from, to)
					continue
				}
				require.True(t, ok, "%s to %s", from, to)
				require.Equal(t, want, got, "%s to %s (worker %v)", from, to, worker)
				if from != to && !worker {
					declared++
				}
			}
		}
	}
	require.Len(t, settlePaths, declared, "a declared path no settle can take")
}

// searchJobPath is how settle found its job events before settlePaths: the
// shortest way through the job table, trying the job events in this order
// and the one that starts the job running last, so a path passes through RUNNING
// only when no other way of the same length exists.
func searchJobPath(from, to JobState, viaWorker bool) ([]JobEvent, bool) {
	if from == to {
		return nil, true
	}
	run := JobEvRunning
	if viaWorker {
		run = JobEvLeased
	}
	events := []JobEvent{JobEvCompleted, JobEvFailed, JobEvWaiting, JobEvParked, JobEvRetrying, JobEvRequeued, JobEvWaitCompleted, JobEvCancelled, run}
	type node struct {
		state JobState
		path  []JobEvent
	}
	seen := map[JobState]bool{from: true}
	queue := []node{{from, nil}}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, ev := range events {
			next, err := NextJobState(n.state, ev)
			if err != nil || seen[next] {
				continue
			}
			path := append(slices.Clone(n.path), ev)
			if next == to {
				return path, true
			}
			seen[next] = true
			queue = append(queue, node{next, path})
		}
	}
	return nil, false
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
	require.Len(t, AllStepStates(), 17)
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
