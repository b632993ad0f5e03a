package client

import (
	"context"
	"net/http"
	"time"
)

// WorkerQueue is one of the tenant's worker queues: what it holds (SQS's
// approximate counts), in all and per priority lane, and when a job last
// named it.
type WorkerQueue struct {
	Name     string      `json:"name"`
	LastUsed time.Time   `json:"last_used"`
	Visible  int64       `json:"visible"`
	InFlight int64       `json:"in_flight"`
	Delayed  int64       `json:"delayed"`
	Lanes    []LaneDepth `json:"lanes"`
}

// LaneDepth is what one priority lane of a worker queue holds.
type LaneDepth struct {
	Priority int   `json:"priority"`
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"in_flight"`
	Delayed  int64 `json:"delayed"`
}

// ListQueues answers the tenant's worker queues, by name (GET /v1/queues).
func (c *Client) ListQueues(ctx context.Context) ([]WorkerQueue, error) {
	var out struct {
		Queues []WorkerQueue `json:"queues"`
	}
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/queues", out: &out}); err != nil {
		return nil, err
	}
	return out.Queues, nil
}
