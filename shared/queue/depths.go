package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.QueueGauges = (*Queue)(nil)

// QueueDepths reads what the stack's queues hold, for the sweep's
// readings: a GetQueueAttributes for each ready queue and the dead-letter
// queue (SQS has no batch of it), one ListQueues of the worker queue
// lanes (a page of up to 1,000 names), and a GetQueueAttributes for each
// of the first maxWorkers lanes by name: 5 + maxWorkers requests at most.
// SQS's counts are approximate (they settle within about a minute), and
// the age of a queue's oldest message is not among its attributes
// (CloudWatch's ApproximateAgeOfOldestMessage is; docs/metrics.md).
func (q *Queue) QueueDepths(ctx context.Context, maxWorkers int) (engine.QueueReadings, error) {
	var r engine.QueueReadings
	for p, url := range q.cfg.ReadyURLs {
		if url == "" {
			continue
		}
		d, err := q.stackDepth(ctx, fmt.Sprintf("P%d", p), url)
		if err != nil {
			return r, err
		}
		r.Stack = append(r.Stack, d)
	}
	if q.cfg.DLQURL != "" {
		d, err := q.stackDepth(ctx, "DLQ", q.cfg.DLQURL)
		if err != nil {
			return r, err
		}
		r.Stack = append(r.Stack, d)
	}
	if q.cfg.WorkerQueuePrefix == "" || maxWorkers <= 0 {
		return r, nil
	}
	out, err := q.api.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(q.cfg.WorkerQueuePrefix), MaxResults: aws.Int32(1000)})
	if err != nil {
		return r, fmt.Errorf("list the worker queues: %w", err)
	}
	type lane struct{ name, url string }
	lanes := make([]lane, 0, len(out.QueueUrls))
	for _, url := range out.QueueUrls {
		lanes = append(lanes, lane{url[strings.LastIndex(url, "/")+1:], url})
	}
	slices.SortFunc(lanes, func(a, b lane) int { return strings.Compare(a.name, b.name) })
	r.WorkerLanes = len(lanes)
	for _, l := range lanes[:min(len(lanes), maxWorkers)] {
		d, err := q.depth(ctx, l.url)
		if missing := (*sqstypes.QueueDoesNotExist)(nil); errors.As(err, &missing) {
			continue // removed since the listing
		}
		if err != nil {
			return r, err
		}
		r.Workers = append(r.Workers, engine.QueueDepth{Queue: l.name, Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed})
	}
	return r, nil
}

// stackDepth reads one of the stack's own queues, which must exist.
func (q *Queue) stackDepth(ctx context.Context, name, url string) (engine.QueueDepth, error) {
	d, err := q.depth(ctx, url)
	if err != nil {
		return engine.QueueDepth{}, err
	}
	return engine.QueueDepth{Queue: name, Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}, nil
}
