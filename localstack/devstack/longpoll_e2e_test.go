package devstack_test

// Long-polls over HTTP: a tenant's open polls are bounded (429 with
// Retry-After past the bound, another tenant's polls still accepted), and
// a waiting poll reads the job's version, not the whole job.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

const parkedSpec = `{"steps":[{"id":"paid","action":{"type":"wait","signal":"payment"}}]}`

// Tenant a at its bound (2 here) gets 429 with Retry-After on its next
// poll, events and claims alike, while tenant b's polls are accepted; once
// a's polls answer, a polls again.
func TestLongPollsAreBoundedPerTenant(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, withEnv("STEPFLOW_MAX_LONG_POLLS", "2"))
	a := h.Submit(t, stacktest.KeyA, parkedSpec)
	b := h.Submit(t, stacktest.KeyB, parkedSpec)
	h.AwaitState(t, stacktest.KeyA, a.ID, "PARKED")
	h.AwaitState(t, stacktest.KeyB, b.ID, "PARKED")

	poll := func(key, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, h.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := h.HTTP.Do(req)
		if err != nil {
			return 0, ""
		}
		_ = res.Body.Close()
		return res.StatusCode, res.Header.Get("Retry-After")
	}
	events := func(id string, wait int) string {
		return fmt.Sprintf("/v1/jobs/%s/events?after=1000&wait=%d", id, wait)
	}

	// slots counts tenant a's open long-polls as stored.
	slots := func() int {
		out, err := h.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(h.Resources.Tables["JobsTable"]),
			Key: map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: "P#" + stacktest.TenantA}, "sk": &ddb.AttributeValueMemberS{Value: "P"},
			},
		})
		require.NoError(t, err)
		m, _ := out.Item["h"].(*ddb.AttributeValueMemberM)
		if m == nil {
			return 0
		}
		return len(m.Value)
	}
	// Tenant a's two long-polls wait (the job is quiet) until it moves,
	// one after the other holding its slot.
	var held sync.WaitGroup
	var heldStatus [2]atomic.Int64
	for i := range 2 {
		held.Go(func() {
			st, _ := poll(stacktest.KeyA, events(a.ID, 20))
			heldStatus[i].Store(int64(st))
		})
		require.Eventually(t, func() bool { return slots() == i+1 }, 20*time.Second, 20*time.Millisecond, "poll %d holds its slot", i)
	}
	var status int
	var retryAfter string
	require.Eventually(t, func() bool {
		status, retryAfter = poll(stacktest.KeyA, events(a.ID, 1))
		return status == http.StatusTooManyRequests
	}, 20*time.Second, 50*time.Millisecond, "tenant a's third long-poll is refused")
	require.NotEmpty(t, retryAfter, "429 says when to come back")

	code, body := h.Call(t, http.MethodPost, "/v1/claim", stacktest.KeyA, map[string]any{"queue": "q", "worker": "w1", "max": 1, "wait_seconds": 5})
	require.Equal(t, http.StatusTooManyRequests, code, "a waiting claim counts too: %s", body)
	code, body = h.Call(t, http.MethodGet, events(a.ID, 0), stacktest.KeyA, nil)
	require.Equal(t, http.StatusOK, code, "a poll that does not wait holds no slot: %s", body)

	status, _ = poll(stacktest.KeyB, events(b.ID, 1))
	require.Equal(t, http.StatusOK, status, "tenant b's long-poll is accepted")
	code, body = h.Call(t, http.MethodPost, "/v1/claim", stacktest.KeyB, map[string]any{"queue": "q", "worker": "w1", "max": 1, "wait_seconds": 1})
	require.Equal(t, http.StatusOK, code, "and its claims: %s", body)

	// The job moves: a's polls answer and give their slots back.
	code, body = h.Call(t, http.MethodPost, "/v1/jobs/"+a.ID+"/signal", stacktest.KeyA, map[string]any{"name": "payment"})
	require.Equal(t, http.StatusOK, code, "%s", body)
	held.Wait()
	for i := range heldStatus {
		require.Equal(t, int64(http.StatusOK), heldStatus[i].Load(), "held poll %d answered", i)
	}
	a2 := h.Submit(t, stacktest.KeyA, parkedSpec)
	h.AwaitState(t, stacktest.KeyA, a2.ID, "PARKED")
	// A process that found the tenant full refuses it by itself for a
	// moment (no AWS request per refused poll); then the slots are free.
	require.Eventually(t, func() bool {
		status, _ = poll(stacktest.KeyA, events(a2.ID, 1))
		return status == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond, "slots given back are free again")
}

// A waiting events poll reads the job's version (a projection of one
// attribute), and the whole job only when it moved.
func TestEventsLongPollReadsTheVersionWhileItWaits(t *testing.T) {
	t.Parallel()
	var id atomic.Value
	id.Store("")
	var full, small atomic.Int64
	h := stacktest.New(t, stacktest.WithAPIOptions(awsfault.Around("DynamoDB", "GetItem", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		g := in.(*dynamodb.GetItemInput)
		if sk, ok := g.Key["sk"].(*ddb.AttributeValueMemberS); ok && sk.Value == id.Load() {
			if g.ProjectionExpression != nil {
				small.Add(1)
			} else {
				full.Add(1)
			}
		}
		return call()
	})))
	j := h.Submit(t, stacktest.KeyA, parkedSpec)
	h.AwaitState(t, stacktest.KeyA, j.ID, "PARKED")
	id.Store(j.ID)
	code, body := h.Call(t, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/events?after=1000&wait=2", j.ID), stacktest.KeyA, nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Equal(t, int64(1), full.Load(), "the job was read whole once, before the wait")
	require.GreaterOrEqual(t, small.Load(), int64(2), "while it waited, it read the version")
}
