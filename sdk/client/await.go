package client

import (
	"context"
	"fmt"
	"time"
)

// Await follows job id's event log by long-poll and answers the job once
// cond holds for it; a job that finishes without cond holding is an error
// naming its state. Bound it with ctx.
func (c *Client) Await(ctx context.Context, id string, cond func(*Job) bool) (*Job, error) {
	seq := 0
	for {
		evs, err := c.Events(ctx, id, EventsOptions{After: seq, Wait: 10 * time.Second})
		if err != nil {
			return nil, err
		}
		seq = max(seq, evs.LastSeq)
		j, err := c.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if cond(j) {
			return j, nil
		}
		if j.State.Finished() {
			return nil, fmt.Errorf("job %s ended %s", id, j.State)
		}
	}
}
