package devstack_test

// Contention over HTTP: writers racing on one job are answered honestly
// (a lost race is a 503 contended with Retry-After, never a 500), and the
// SDK retries that answer to success.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/sdk/client"
)

// wireLog records every answer a client got on the wire, before the SDK
// retries it.
type wireLog struct {
	mu      sync.Mutex
	answers []wireAnswer
}

type wireAnswer struct {
	status     int
	retryAfter string
}

func (w *wireLog) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		w.mu.Lock()
		w.answers = append(w.answers, wireAnswer{res.StatusCode, res.Header.Get("Retry-After")})
		w.mu.Unlock()
	}
	return res, err
}

// loseJobSaves answers an APIOptions entry that makes the next n
// conditional saves of a job lose their race (as if another writer had
// just written it), without calling DynamoDB: nothing is written.
func loseJobSaves(n *atomic.Int64) stacktest.Option {
	return stacktest.WithAPIOptions(awsfault.Around("DynamoDB", "PutItem", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		p := in.(*dynamodb.PutItemInput)
		pk, _ := p.Item["pk"].(*ddb.AttributeValueMemberS)
		if pk != nil && strings.HasPrefix(pk.Value, "J#") && p.ConditionExpression != nil && n.Add(-1) >= 0 {
			return nil, &ddb.ConditionalCheckFailedException{Message: aws.String("the conditional request failed")}
		}
		return call()
	}))
}

// 16 goroutines sending 12 signals each to one job get no 5xx: every
// answer is 2xx, a 409 (a signal the job cannot keep), or a 503 contended
// with Retry-After, which the SDK retries to success. The first signal
// loses every race it is allowed (injected), so the 503 is certain.
func TestSignalStormIsNeverAServerFault(t *testing.T) {
	t.Parallel()
	var lose atomic.Int64
	h := stacktest.New(t, loseJobSaves(&lose))
	const goroutines, each = 16, 12
	// A wait no signal names holds the job running; the waits behind it
	// take the storm's names, so every signal is kept for one of them: a
	// write racing the others, until the job keeps as many as it may
	// (then a 409 that writes nothing).
	steps := []any{map[string]any{"id": "hold", "action": map[string]any{"type": "wait", "signal": "never", "timeout_seconds": 3600}}}
	for g := range goroutines {
		steps = append(steps, map[string]any{"id": fmt.Sprintf("w%d", g), "depends_on": []string{"hold"}, "action": map[string]any{"type": "wait", "signal": fmt.Sprintf("s%d", g), "timeout_seconds": 3600}})
	}
	j := h.Submit(t, stacktest.KeyA, map[string]any{"steps": steps})

	wire := &wireLog{}
	c, err := client.New(client.Config{BaseURL: h.URL, APIKey: stacktest.KeyA, HTTPClient: &http.Client{Transport: wire}, MaxRetries: 8})
	require.NoError(t, err)
	ctx := context.Background()

	lose.Store(12) // more than a change may lose (8): the first signal gives up
	_, err = c.Signal(ctx, j.ID, client.SignalRequest{Name: "s0"})
	require.NoError(t, err, "the SDK retried the lost race to success")
	require.NotEmpty(t, wire.answers)
	first := wire.answers[0]
	require.Equal(t, http.StatusServiceUnavailable, first.status, "a change that lost every race answers 503, not 500")
	require.NotEmpty(t, first.retryAfter, "with Retry-After")
	lose.Store(0)

	errs := make(chan error, goroutines*each)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				_, err := c.Signal(ctx, j.ID, client.SignalRequest{Name: fmt.Sprintf("s%d", (g+i)%goroutines)})
				if err != nil && !client.IsConflict(err) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var apiErr *client.Error
		if errors.As(err, &apiErr) {
			require.Less(t, apiErr.Status, 500, "no signal ends in a server fault: %v", err)
		}
		require.NoError(t, err)
	}
	wire.mu.Lock()
	defer wire.mu.Unlock()
	for _, a := range wire.answers {
		require.NotEqual(t, http.StatusInternalServerError, a.status, "contention is never a 500")
		if a.status >= 500 {
			require.Equal(t, http.StatusServiceUnavailable, a.status)
			require.NotEmpty(t, a.retryAfter, "a 503 says when to come back")
		}
	}
	ok := 0
	for _, a := range wire.answers {
		if a.status == http.StatusOK {
			ok++
		}
	}
	require.Greater(t, ok, goroutines, "the storm was taken, not refused")
}
