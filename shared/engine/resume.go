package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Resume answers a step waiting on a person (NEEDS_USER, after a worker or
// an action failed it with class needs_user): it runs again, a new attempt,
// with their input in its input as "user_input". An unknown step answers
// not found; a step that is not waiting, or a finished job, a conflict.
func (e *Engine) Resume(ctx context.Context, tenant, id, stepID string, input json.RawMessage) (*domain.Job, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	j, err := e.commit(ctx, tenant, id, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		var err error
		fx.dispatch, err = j.Resume(stepID, input, now)
		return err
	}})
	if err != nil {
		return nil, fmt.Errorf("resume step %q of job %s: %w", stepID, id, err)
	}
	return j, nil
}

// Signal delivers a signal to a job: the first step waiting for its name
// goes on with the payload as its output; with none yet it is kept for the
// first such wait the job reaches, if the job has one (else dropped). The
// outcome says which. A signal whose id was delivered already, or one
// dropped, answers the job as it is and writes nothing; a finished job
// answers a conflict.
func (e *Engine) Signal(ctx context.Context, tenant, id string, r domain.SignalRequest) (*domain.Job, domain.SignalOutcome, error) {
	if err := checkID(id); err != nil {
		return nil, domain.SignalOutcome{}, err
	}
	if err := r.Validate(); err != nil {
		return nil, domain.SignalOutcome{}, err
	}
	var outcome domain.SignalOutcome
	r.Request = nonce() // the same in every decision of this request
	j, err := e.commit(ctx, tenant, id, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		var err error
		fx.dispatch, outcome, err = j.Deliver(r, now)
		if err == nil && !outcome.Written() {
			return errNoChange
		}
		return err
	}})
	if err != nil {
		return nil, domain.SignalOutcome{}, fmt.Errorf("signal %q to job %s: %w", r.Name, id, err)
	}
	return j, outcome, nil
}

// Redrive runs a FAILED job again from its failed and cancelled steps,
// keeping what succeeded; a job that is not FAILED answers a conflict.
func (e *Engine) Redrive(ctx context.Context, tenant, id string) (*domain.Job, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	j, err := e.commit(ctx, tenant, id, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		var err error
		fx.dispatch, err = j.Redrive(now)
		return err
	}})
	if err != nil {
		return nil, fmt.Errorf("redrive job %s: %w", id, err)
	}
	return j, nil
}
