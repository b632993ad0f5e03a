package devstack_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/shared/domain"
)

// sqsSends counts the engine's SQS sends: calls and messages.
type sqsSends struct {
	mu                     sync.Mutex
	single, batch, entries int
}

func (s *sqsSends) option() stacktest.Option {
	return stacktest.WithAPIOptions(awsfault.Around("SQS", "", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		s.mu.Lock()
		switch in := in.(type) {
		case *sqs.SendMessageInput:
			s.single++
			s.entries++
		case *sqs.SendMessageBatchInput:
			s.batch++
			s.entries += len(in.Entries)
		}
		s.mu.Unlock()
		return call()
	}))
}

func (s *sqsSends) counts() (single, batch, entries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.single, s.batch, s.entries
}

// A batch of 25 one-step jobs is one request, and its first steps go to
// the ready queue in SendMessageBatch calls of ten (three for 25), not a
// send each; every job completes.
func TestBatchOf25Completes(t *testing.T) {
	t.Parallel()
	var sends sqsSends
	h := stacktest.New(t, sends.option())
	c, err := client.New(client.Config{BaseURL: h.URL, APIKey: keyA, HTTPClient: &http.Client{}})
	require.NoError(t, err)

	jobs := make([]client.BatchJob, 25)
	for i := range jobs {
		jobs[i] = client.BatchJob{JobRequest: client.JobRequest{Steps: []client.StepSpec{{ID: "p", Action: client.Pass()}}, Payload: map[string]int{"n": i}}}
	}
	res, err := c.SubmitBatch(t.Context(), jobs)
	require.NoError(t, err)
	single, batch, entries := sends.counts()
	require.Zero(t, single, "no send of one message")
	require.Equal(t, 3, batch, "25 messages in SendMessageBatch calls of ten")
	require.Equal(t, 25, entries)
	for i, r := range res {
		require.Nil(t, r.Err, "job %d", i)
		h.AwaitState(t, keyA, r.Job.ID, domain.JobCompleted)
	}
	t.Logf("SQS sends for 25 jobs' first steps: %d SendMessageBatch, %d SendMessage", batch, single)
}
