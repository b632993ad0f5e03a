package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

// TestABatchOfCreatesWhoseAnswerWasLostIsItsOwn: a BatchWriteItem that was
// applied but whose answer was lost is not retried as it is (it could put
// a job back over a change already made to it); each of its jobs is
// created alone, meets its own write and answers created.
func TestABatchOfCreatesWhoseAnswerWasLostIsItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var jobs []*domain.Job
	for range 3 {
		jobs = append(jobs, newJob(t, tenantA, simpleSpec, "", b.now))
	}
	st := store.New(b.client(loseAnswersOf("BatchWriteItem", 1)), b.table)
	for i, err := range st.CreateAll(ctx, jobs, b.now) {
		require.NoError(t, err, "job %d: its own batch write", i)
		got, _ := b.load(t, tenantA, jobs[i].ID)
		require.Equal(t, int64(1), got.Version)
	}
}

// loseAnswers lets the first n PutItem attempts reach DynamoDB and then
// answers each with a read timeout, as a connection lost after the write
// was applied: it sits right after the SDK's Retry middleware, so the SDK
// retries the write as it would on AWS.
func loseAnswers(n int64) func(*middleware.Stack) error { return loseAnswersOf("PutItem", n) }

// loseAnswersOf is loseAnswers of operation op's attempts.
func loseAnswersOf(op string, n int64) func(*middleware.Stack) error {
	var lost atomic.Int64
	return func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("loseAnswers", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if _, called := awsfault.Call(ctx); called == op && err == nil && lost.Add(1) <= n {
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

// TestPartsOfAWriteBuiltOnAfterItsAnswerWasLostStay: a header write that
// was applied, whose answer was lost, and on which another writer built
// before the SDK's retry, fails its condition on the other's header. The
// parts it put are named by that header (it was built on them): Save must
// not delete them, or the job can never be read again.
func TestPartsOfAWriteBuiltOnAfterItsAnswerWasLostStay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.create(t, tenantA, lineSpec(60))
	var header, armed bool
	var other func()
	// Retried at once (and with no retry quota): the test is about what
	// the retry meets.
	retryAtOnce := func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
			so.RateLimiter = ratelimit.None
		})
	}
	st := store.New(dynamodb.New(b.db.Options(), retryAtOnce, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			if err := s.Initialize.Add(middleware.InitializeMiddlewareFunc("isHeader", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				p, ok := in.Parameters.(*dynamodb.PutItemInput)
				header = ok && p.Item["hdoc"] != nil
				return next.HandleInitialize(ctx, in)
			}), middleware.Before); err != nil {
				return err
			}
			return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("buildOnLostAnswer", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				if header && armed && err == nil {
					armed = false
					other() // another writer builds on the write just applied
					return middleware.FinalizeOutput{}, md, &smithyhttp.RequestSendError{Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}}
				}
				return out, md, err
			}), "Retry", middleware.After)
		})
	}), b.table)

	sealed := len(b.parts(t, j))
	for i := range 60 {
		loaded, n := b.load(t, tenantA, j.ID)
		id := loaded.Steps[i].ID()
		now := b.now.Add(time.Duration(i+1) * time.Second)
		l, err := loaded.Lease(id, domain.LeaseRequest{Nonce: id, Duration: time.Minute}, now)
		require.NoError(t, err)
		other = func() {
			theirs, n := b.load(t, tenantA, j.ID)
			_, err := theirs.Complete(id, l.ID, json.RawMessage(`{}`), now)
			require.NoError(t, err, "the other writer reads this write")
			require.NoError(t, b.st.Save(ctx, theirs, n))
		}
		armed = true
		require.ErrorIs(t, st.Save(ctx, loaded, n), domain.ErrVersionConflict, "step %d: the retry met the other's header", i)
	}
	require.Greater(t, len(b.parts(t, j)), sealed, "some of those writes put parts")
	got, err := store.New(b.db, b.table).Get(ctx, tenantA, j.ID) // one that kept no part
	require.NoError(t, err, "every part a header names is there")
	require.Equal(t, domain.JobCompleted, got.State)
	require.NoError(t, domain.CheckReplay(got))
}
