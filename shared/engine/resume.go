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
	var ds []domain.Dispatch
	j, err := e.mutate(ctx, tenant, id, func(j *domain.Job, now time.Time) error {
		var err error
		ds, err = j.Resume(stepID, input, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume step %q of job %s: %w", stepID, id, err)
	}
	e.dispatch(ctx, j, ds)
	return j, nil
}
