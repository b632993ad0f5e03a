package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Decision is a person's answer at an approval gate; Key is the id of the
// API key that sent it.
type Decision struct {
	By      string
	Comment string
	Key     string
}

// Validate checks a decision's fields.
func (d Decision) Validate() error {
	switch {
	case len(d.By) > 256:
		return domain.Invalid("by", "is longer than 256 characters")
	case len(d.Comment) > 4096:
		return domain.Invalid("comment", "is longer than 4096 characters")
	}
	return nil
}

// Approve closes an open approval gate and runs what comes after it. A
// second approve answers the job as it is (changed false) and writes
// nothing; approve after a reject, or of a step that is not an open gate,
// is a conflict; an unknown step is not found.
func (e *Engine) Approve(ctx context.Context, tenant, id, stepID string, d Decision) (*domain.Job, bool, error) {
	return e.decide(ctx, tenant, id, stepID, d, true)
}

// Reject closes an open approval gate, failing the step and its job.
func (e *Engine) Reject(ctx context.Context, tenant, id, stepID string, d Decision) (*domain.Job, bool, error) {
	return e.decide(ctx, tenant, id, stepID, d, false)
}

func (e *Engine) decide(ctx context.Context, tenant, id, stepID string, d Decision, approve bool) (*domain.Job, bool, error) {
	if err := checkID(id); err != nil {
		return nil, false, err
	}
	if err := d.Validate(); err != nil {
		return nil, false, err
	}
	changed := false
	j, err := e.commit(ctx, tenant, id, nil, change{decide: func(j *domain.Job, now time.Time, fx *effects) error {
		dd := domain.Decision{By: d.By, Comment: d.Comment, Key: d.Key}
		var err error
		if approve {
			fx.dispatch, changed, err = j.Approve(stepID, dd, now)
		} else {
			changed, err = j.Reject(stepID, dd, now)
		}
		if err == nil && !changed {
			return errNoChange
		}
		return err
	}})
	if err != nil {
		verb := map[bool]string{true: "approve", false: "reject"}[approve]
		return nil, false, fmt.Errorf("%s step %q of job %s: %w", verb, stepID, id, err)
	}
	return j, changed, nil
}
