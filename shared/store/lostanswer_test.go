package store_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

// loseAnswers lets the first n PutItem attempts reach DynamoDB and then
// answers each with a read timeout, as a connection lost after the write
// was applied: it sits right after the SDK's Retry middleware, so the SDK
// retries the write as it would on AWS.
func loseAnswers(n int64) func(*middleware.Stack) error {
	var lost atomic.Int64
	return func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("loseAnswers", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if _, op := awsfault.Call(ctx); op == "PutItem" && err == nil && lost.Add(1) <= n {
				return middleware.FinalizeOutput{}, md, &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}}
			}
			return out, md, err
		}), "Retry", middleware.After)
	}
}

// TestASaveWhoseAnswerWasLostIsItsOwn: the SDK's retry of a write that was
// applied meets the write itself and fails its condition; Save knows its
// own write and answers it saved (it answered a version conflict, and the
// engine then refused its own change: a redrive answered 409 yet ran), and
// a create whose answer was lost is created (it answered an error).
func TestASaveWhoseAnswerWasLostIsItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, `{"steps":[{"id":"s","action":{"type":"worker"}}]}`)
	st := store.New(b.client(loseAnswers(1)), b.table)

	loaded, n := b.load(t, tenantA, j.ID)
	_, err := loaded.Cancel(b.now)
	require.NoError(t, err)
	require.NoError(t, st.Save(ctx, loaded, n), "the retry met this write")
	stored, _ := b.load(t, tenantA, j.ID)
	require.Equal(t, domain.JobCancelled, stored.State)
	require.Equal(t, loaded.Version, stored.Version, "one write, at the version Save answered")

	// A create whose answer was lost is created, once.
	created := newJob(t, tenantA, simpleSpec, "", b.now)
	_, ok, err := store.New(b.client(loseAnswers(1)), b.table).Create(ctx, created, "", b.now)
	require.NoError(t, err, "the retry met this create")
	require.True(t, ok)
	got, _ := b.load(t, tenantA, created.ID)
	require.Equal(t, int64(1), got.Version)

	// Another writer's change is still a conflict.
	other, n := b.load(t, tenantA, j.ID)
	stale, _ := b.load(t, tenantA, j.ID)
	require.NoError(t, b.st.Save(ctx, other, n))
	require.ErrorIs(t, st.Save(ctx, stale, n), domain.ErrVersionConflict)
}
