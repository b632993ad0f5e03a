package views

import (
	"github.com/stepflow/stepflow/shared/domain"
)

// canonical is the model itself: shared/domain's job and step tables and
// the attempt machine. Its document is the API's job document.
var canonical = vocabulary{
	tables: func() []Table {
		never := map[Pair]string{
			{string(domain.StepWaitingDeps), string(domain.StepLeased)}:     "Job.Lease refuses a step whose dependencies have not succeeded; deps_met makes it PENDING first",
			{string(domain.StepLeased), string(domain.StepLeaseTimeout)}:    "a lease is taken and started in one write: a stored step is never LEASED",
			{string(domain.StepNeedsUser), string(domain.StepRunning)}:      "a person's resume makes the step PENDING; it runs only under a new lease",
			{string(domain.StepFailedRetryable), string(domain.StepFailed)}: "a retryable failure with no attempt left goes FAILED_FATAL -> FAILED, as the agent platform's retry does with its retries spent",
		}
		// A cancel is a change of its own: it finds steps at rest, never in
		// a state a step passes through inside one change.
		for _, s := range []domain.StepState{domain.StepLeased, domain.StepFailedRetryable, domain.StepFailedResource, domain.StepFailedFatal, domain.StepLeaseTimeout, domain.StepTimedOut} {
			never[Pair{string(s), string(domain.StepCancelled)}] = "a step passes through " + string(s) + " inside one change; a cancel never finds it there"
		}
		return []Table{
			{Vocabulary: Canonical, Level: "job", States: strs(domain.AllJobStates()), Allowed: canonicalJobPairs(), Never: canonicalJobNever},
			{Vocabulary: Canonical, Level: "step", States: strs(domain.AllStepStates()), Allowed: canonicalStepPairs(), Never: never},
			{Vocabulary: Canonical, Level: "attempt", States: strs(domain.AllAttemptStates()), Allowed: attemptPairs()},
		}
	},
	moves: func(j *domain.Job, h *history) []Move {
		out := jobMoves(j, h, "job", func(i int) string { return string(h.job[i].state) })
		out = append(out, stepMoves(h, "step", func(s domain.StepState) string { return string(s) })...)
		return append(out, runMoves(h, "attempt")...)
	},
	consistent: func(j *domain.Job, h *history) error {
		if err := domain.CheckReplay(j); err != nil {
			return err
		}
		return consistentRuns(j, h)
	},
	stepWord: func(s domain.StepState) string { return string(s) },
	// No project or summarize: the API answers a canonical job in its own documents.
	filter: wordFilter(func(s domain.JobState) string { return string(s) }),
}

// canonicalJobNever: moves of the job table the engine never writes.
var canonicalJobNever = map[Pair]string{}

// attemptPairs: an attempt starts running when its lease is taken and
// ends once. queued is in the state set but never stored.
func attemptPairs() []Pair {
	return pairs(
		[]string{Initial, string(domain.AttemptRunning)},
		[]string{string(domain.AttemptRunning), string(domain.AttemptSucceeded), string(domain.AttemptFailed), string(domain.AttemptTimeout), string(domain.AttemptCancelled)},
	)
}
