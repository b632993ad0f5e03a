package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// p0First is the lane order of most takes: P0, P1, P2 (engine.PriorityOrder).
var p0First = engine.PriorityOrder(1)

// TestAWaitingTakeSeesWorkArrivingOnAnotherLane: SQS long-polls one queue
// at a time. A claim long-polling a worker queue's P2 lane must still take
// P0 work that arrives meanwhile, within its wait, not answer empty.
func TestAWaitingTakeSeesWorkArrivingOnAnotherLane(t *testing.T) {
	t.Parallel()
	longPolls := make(chan struct{}, 16)
	q, _, _ := newQueue(t, awsfault.Around("SQS", "ReceiveMessage", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		if in.(*sqs.ReceiveMessageInput).WaitTimeSeconds > 0 {
			longPolls <- struct{}{}
		}
		return call()
	}))
	ctx := context.Background()
	const tenant, name = "t1", "lanes"
	job := func(priority int) *domain.Job {
		s, err := domain.ParseJobSpec(fmt.Appendf(nil, `{"priority":%d,"steps":[{"id":"w","action":{"type":"worker","queue":%q}}]}`, priority, name))
		require.NoError(t, err)
		j, err := domain.NewJob(tenant, ulid.Make().String(), s, "", time.Now().UTC())
		require.NoError(t, err)
		return j
	}
	send := func(j *domain.Job) {
		require.NoError(t, q.Dispatch(ctx, j, engine.Route(j, []domain.Dispatch{{Step: j.Steps[0]}})))
	}
	// A job of each priority makes the three lanes; the claimer takes them.
	for p := range domain.MaxPriority + 1 {
		send(job(p))
	}
	var taken int
	for taken < 3 {
		ds, err := q.Take(ctx, tenant, name, p0First, 10, time.Second)
		require.NoError(t, err)
		for _, d := range ds {
			require.NoError(t, q.Ack(ctx, d.Token))
		}
		taken += len(ds)
	}
	for len(longPolls) > 0 {
		<-longPolls
	}

	var wg sync.WaitGroup
	var got []engine.Delivery
	var takeErr error
	wg.Go(func() { got, takeErr = q.Take(ctx, tenant, name, p0First, 1, 20*time.Second) })
	<-longPolls // the take is long-polling a lane, all of them empty
	urgent := job(0)
	send(urgent)
	wg.Wait()
	require.NoError(t, takeErr)
	require.Len(t, got, 1, "the P0 job sent while the take waited")
	require.Equal(t, urgent.ID, got[0].Message.Job)
}
