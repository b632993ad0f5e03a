package domain

// ActionWorker is run by an external worker that claims it from its queue.
const ActionWorker = "worker"

// WorkerAction is the worker action type's parameters.
type WorkerAction struct {
	Queue        string `json:"queue,omitempty"` // the job's queue when none
	LeaseSeconds int    `json:"lease_seconds,omitempty"`
}

func (WorkerAction) Name() string       { return ActionWorker }
func (WorkerAction) Executor() Executor { return ExecutorWorker }

func (WorkerAction) Validate(a *ActionSpec, c ActionCheck) error {
	if a.Queue == "" {
		a.Queue = c.JobQueue
	} else if !namePattern.MatchString(a.Queue) {
		return Invalid(c.Field+".queue", "must match %s", namePattern)
	}
	if a.LeaseSeconds == 0 {
		a.LeaseSeconds = DefaultLeaseSecs
	} else if a.LeaseSeconds < 1 || a.LeaseSeconds > MaxLeaseSeconds {
		return Invalid(c.Field+".lease_seconds", "must be between 1 and %d", MaxLeaseSeconds)
	}
	return nil
}

// AttemptTimeout: an attempt is bounded by its lease unless the step sets
// timeout_seconds, which may be as long as a lease.
func (WorkerAction) AttemptTimeout() (def, max int) { return 0, MaxLeaseSeconds }
