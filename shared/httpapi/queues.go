package httpapi

import (
	"context"
	"net/http"

	"github.com/stepflow/stepflow/shared/engine"
)

// listQueues answers the calling tenant's worker queues, each with its
// depth (per priority lane and in all) and when a job last named it.
func (a *API) listQueues(ctx context.Context, tenant string, _ *request) (int, any, error) {
	qs, err := a.Engine.ListWorkerQueues(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, struct {
		Queues []engine.WorkerQueue `json:"queues"`
	}{Queues: qs}, nil
}
