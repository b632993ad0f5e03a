package engine

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// ChangeMessage is the message of the log record every saved change of a
// job writes (one per write, at ChangeLevel), its attributes the Change.
const ChangeMessage = "job changed"

// ChangeLevel is the change record's level: Debug, so that on Lambda,
// whose logger is at the function's ApplicationLogLevel (INFO unless the
// template's LogLevel says otherwise), a job's transitions cost no log
// ingestion; `make dev`'s logger shows them whatever its level
// (docs/costs.md#logs).
const ChangeLevel = slog.LevelDebug

// publishTimeout bounds one publish: a change is saved already, and a
// slow bus must not hold its request much longer.
const publishTimeout = 5 * time.Second

// Change is what one saved write did to a job, read from the events the
// write appended. The log record of the write and the Job State Change
// events it publishes are both made from it, so the two never disagree.
type Change struct {
	Tenant   string
	Job      string
	Schedule string
	From, To domain.JobState // the job's state before and after the write
	Events   []domain.Event  // what the write appended to the job's log
	Steps    []StepChange    // each step the write moved, in the order it first moved
	States   []JobStateChange
}

// StepChange is where one write left a step.
type StepChange struct {
	Step    string           `json:"step"`
	State   domain.StepState `json:"state"`
	Attempt int              `json:"attempt,omitempty"`
	Lease   string           `json:"lease,omitempty"`  // a held lease's id
	Worker  string           `json:"worker,omitempty"` // who holds it
	// Error is the step's failure when the write left it failed,
	// retrying, switching resource or waiting on a person after a failure.
	Error *domain.StepError `json:"error,omitempty"`
	// Detail is the last note the write logged for the step (a timeout,
	// a decision, "another step failed"), when it has no Error.
	Detail string `json:"detail,omitempty"`
}

// NewChange reads the change a write made to j: from is j's state before
// it, loaded how many events j had. Each job event is a transition of the
// job table from the state before it, as Replay folds them.
func NewChange(j *domain.Job, from domain.JobState, loaded int) Change {
	c := Change{Tenant: j.Tenant, Job: j.ID, Schedule: j.ScheduleID, From: from, To: j.State}
	if loaded < len(j.Events) {
		c.Events = j.Events[loaded:]
	}
	at := map[string]int{}
	state := from
	for _, ev := range c.Events {
		if st, ok := strings.CutPrefix(ev.Type, "step_"); ok {
			i, seen := at[ev.Step]
			if !seen {
				i = len(c.Steps)
				at[ev.Step] = i
				c.Steps = append(c.Steps, StepChange{Step: ev.Step})
			}
			sc := &c.Steps[i]
			sc.State, sc.Attempt = domain.StepState(strings.ToUpper(st)), ev.Attempt
			if ev.Detail != "" && sc.State != domain.StepLeased { // a lease's detail is its worker
				sc.Detail = ev.Detail
			}
			continue
		}
		if domain.IsNote(ev.Type) {
			continue
		}
		to, err := domain.NextJobState(state, domain.JobEvent(ev.Type))
		if err != nil {
			continue // not reached: the write was decided through the same table
		}
		c.States = append(c.States, JobStateChange{
			Tenant: j.Tenant, JobID: j.ID, From: state, To: to, At: ev.At,
			Event: ev.Type, Seq: ev.Seq, ScheduleID: j.ScheduleID,
		})
		state = to
	}
	for i := range c.Steps {
		sc := &c.Steps[i]
		s, _, err := j.Step(sc.Step)
		if err != nil {
			continue
		}
		if s.Lease != nil && (sc.State == domain.StepLeased || sc.State == domain.StepRunning) {
			sc.Lease, sc.Worker = s.Lease.ID, s.Lease.Worker
		}
		switch sc.State {
		case domain.StepRetrying, domain.StepFailed, domain.StepSwitchingResource, domain.StepNeedsUser:
			if s.Error != nil {
				sc.Error, sc.Detail = s.Error, ""
			}
		}
	}
	for i := range c.States {
		if c.States[i].To == domain.JobFailed {
			c.States[i].Step, c.States[i].Error = failedBy(j, c.Events)
		}
	}
	return c
}

// failedBy answers the step that failed a job, and why: the last step the
// write failed that no replan replaced, else any such step of the job.
func failedBy(j *domain.Job, events []domain.Event) (string, *domain.StepError) {
	why := func(s *domain.Step, detail string) (string, *domain.StepError) {
		if s.Error != nil {
			return s.ID(), s.Error
		}
		return s.ID(), &domain.StepError{Class: domain.ClassFatal, Message: detail}
	}
	failed := domain.StepFailed.EventType()
	for i := len(events) - 1; i >= 0; i-- {
		if ev := events[i]; ev.Type == failed {
			if s, _, err := j.Step(ev.Step); err == nil && s.ReplacedBy == nil && s.State == domain.StepFailed {
				return why(s, ev.Detail)
			}
		}
	}
	for _, s := range j.Steps {
		if s.State == domain.StepFailed && s.ReplacedBy == nil {
			return why(s, "")
		}
	}
	return "", nil
}

// LogValue is the change as the log record's attributes: the job, its
// state, the events, and the step it moved (step, step_state, attempt,
// lease, worker, error) or, when it moved several, steps.
func (c Change) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("tenant", c.Tenant), slog.String("job", c.Job), slog.String("state", string(c.To))}
	if c.From != c.To {
		attrs = append(attrs, slog.String("from", string(c.From)))
	}
	if c.Schedule != "" {
		attrs = append(attrs, slog.String("schedule_id", c.Schedule))
	}
	types := make([]string, len(c.Events))
	for i, ev := range c.Events {
		types[i] = ev.Type
	}
	attrs = append(attrs, slog.Any("events", types))
	switch len(c.Steps) {
	case 0:
	case 1:
		s := c.Steps[0]
		attrs = append(attrs, slog.String("step", s.Step), slog.String("step_state", string(s.State)))
		if s.Attempt > 0 {
			attrs = append(attrs, slog.Int("attempt", s.Attempt))
		}
		for _, a := range [][2]string{{"lease", s.Lease}, {"worker", s.Worker}, {"detail", s.Detail}} {
			if a[1] != "" {
				attrs = append(attrs, slog.String(a[0], a[1]))
			}
		}
		if s.Error != nil {
			attrs = append(attrs, slog.String("error_class", string(s.Error.Class)), slog.String("error", s.Error.Message))
		}
	default:
		attrs = append(attrs, slog.Any("steps", c.Steps))
	}
	return slog.GroupValue(attrs...)
}

// afterWrite is what every saved change of a job does once its write has
// succeeded: one log record. It answers the job-level transitions to
// publish (Config.JobStateEvents chooses them), which the caller hands to
// publish once the change's dispatches are sent. from is the job's state
// before the write, loaded how many events it had.
func (e *Engine) afterWrite(ctx context.Context, j *domain.Job, from domain.JobState, loaded int) []JobStateChange {
	if loaded >= len(j.Events) {
		return nil // a lease extended, a due time moved: nothing to tell
	}
	c := NewChange(j, from, loaded)
	// An empty key inlines the change's attributes in the record.
	e.cfg.Log.LogAttrs(ctx, ChangeLevel, ChangeMessage, slog.Any("", c))
	if e.cfg.Publisher == nil {
		return nil
	}
	return e.cfg.JobStateEvents.chosen(c.States)
}

// publish puts a saved change's chosen transitions on the bus. It runs
// after the change's dispatches are sent, so the next step is already on
// its way (taken by another invocation) while the put is made: the bus is
// off the critical path, at the cost of order, since the next change may
// be published before this one; Seq orders them. A failed or slow put
// never fails the change, which is saved: it is logged after at most
// publishTimeout and dropped (the job's event log has the transition;
// at-least-once is not promised).
func (e *Engine) publish(ctx context.Context, j *domain.Job, states []JobStateChange) {
	if len(states) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := e.cfg.Publisher.Publish(pctx, states); err != nil {
		e.cfg.Log.WarnContext(ctx, "job state change not published (the job's event log has it)", "job", j.ID, "tenant", j.Tenant, "err", err)
	}
}
