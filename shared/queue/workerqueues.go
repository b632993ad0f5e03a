package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// tenantLocks serialises count-and-create per tenant within one process.
var tenantLocks sync.Map // tenant -> *sync.Mutex

// EnsureWorkerQueues makes a tenant's worker queues exist, all or none: it
// finds which are new, counts the tenant's queues once (ListQueues), and
// makes the new ones only if they all fit. Within one process the count
// and the making are one step (a lock per tenant); SQS offers no
// conditional create, so requests racing from different processes (Lambda
// execution environments) may each count before the others make theirs:
// a tenant then ends past its bound by at most what the racing requests
// name beyond it together, and each later request is refused until idle
// queues are removed.
func (q *Queue) EnsureWorkerQueues(ctx context.Context, tenant string, names []string) error {
	var fresh []string
	for _, n := range names {
		if slices.Contains(fresh, n) {
			continue
		}
		_, err := q.WorkerQueueURL(ctx, tenant, n)
		switch {
		case errors.Is(err, ErrNoWorkerQueue):
			fresh = append(fresh, n)
		case err != nil:
			return err
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	mu, _ := tenantLocks.LoadOrStore(tenant, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	have, err := q.countWorkerQueues(ctx, tenant)
	if err != nil {
		return err
	}
	if have+len(fresh) > q.cfg.MaxWorkerQueues {
		return engine.NewWorkerQueueBoundError(tenant, fresh, have, q.cfg.MaxWorkerQueues)
	}
	for _, n := range fresh {
		if _, err := q.createWorkerQueue(ctx, tenant, n); err != nil {
			return err
		}
	}
	return nil
}

// depthAttributes are the counts of a queue's messages: visible, in
// flight (received, hidden) and delayed.
var depthAttributes = []sqstypes.QueueAttributeName{
	sqstypes.QueueAttributeNameApproximateNumberOfMessages,
	sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// WorkerQueueDepth answers each lane's counts (one GetQueueAttributes a
// lane that exists).
func (q *Queue) WorkerQueueDepth(ctx context.Context, tenant, name string) ([]engine.LaneDepth, error) {
	lanes, err := q.laneURLs(ctx, tenant, name, false)
	if err != nil {
		return nil, err
	}
	var out []engine.LaneDepth
	for p, url := range lanes {
		if url == "" {
			continue
		}
		d, err := q.depth(ctx, url)
		if missing := (*sqstypes.QueueDoesNotExist)(nil); errors.As(err, &missing) {
			q.forget(url)
			if p == domain.DefaultPriority {
				return nil, fmt.Errorf("worker queue %q of tenant %s: %w", name, tenant, ErrNoWorkerQueue)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		d.Priority = p
		out = append(out, d)
	}
	return out, nil
}

// laneURLs answers the URL of each lane of a worker queue that exists
// ("" for one that does not), by priority; ErrNoWorkerQueue without the
// queue itself. A listing takes the minute-old knowledge that a lane does
// not exist (as a claim does); a deletion asks SQS.
func (q *Queue) laneURLs(ctx context.Context, tenant, name string, fresh bool) ([domain.MaxPriority + 1]string, error) {
	var lanes [domain.MaxPriority + 1]string
	main, err := q.WorkerQueueURL(ctx, tenant, name)
	if err != nil {
		return lanes, err
	}
	for p := range lanes {
		if p == domain.DefaultPriority {
			lanes[p] = main
		} else {
			if fresh {
				q.noLane.Delete(q.LaneName(tenant, name, p))
			}
			lanes[p] = q.laneURL(ctx, tenant, name, p)
		}
	}
	return lanes, nil
}

func (q *Queue) depth(ctx context.Context, url string) (engine.LaneDepth, error) {
	out, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: depthAttributes})
	if err != nil {
		return engine.LaneDepth{}, fmt.Errorf("depth of %s: %w", url, err)
	}
	n := func(a sqstypes.QueueAttributeName) int64 {
		v, _ := strconv.ParseInt(out.Attributes[string(a)], 10, 64)
		return v
	}
	return engine.LaneDepth{
		Visible:  n(sqstypes.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// DeleteIdleWorkerQueue deletes a worker queue and its lanes when none
// holds a message. SQS's counts are approximate (they settle within about
// a minute); the queue was unnamed for the whole idle time, so a message
// sent in the last minute is not expected, and a job whose message a
// deletion lost is sent again by the job's sweep, which makes the queue
// again.
func (q *Queue) DeleteIdleWorkerQueue(ctx context.Context, tenant, name string) (bool, error) {
	lanes, err := q.laneURLs(ctx, tenant, name, true)
	if errors.Is(err, ErrNoWorkerQueue) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	for _, url := range lanes {
		if url == "" {
			continue
		}
		d, err := q.depth(ctx, url)
		if missing := (*sqstypes.QueueDoesNotExist)(nil); errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return false, err
		}
		if d.Visible+d.InFlight+d.Delayed > 0 {
			return false, nil
		}
	}
	// The lanes first: a queue left without its main URL would be found
	// by no one, its lanes would.
	for _, p := range []int{0, 2, domain.DefaultPriority} {
		url := lanes[p]
		if url == "" {
			continue
		}
		_, err := q.api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
		if missing := (*sqstypes.QueueDoesNotExist)(nil); err != nil && !errors.As(err, &missing) {
			return false, fmt.Errorf("delete worker queue %s: %w", url, err)
		}
		q.forget(url)
	}
	return true, nil
}
