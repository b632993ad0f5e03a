package costmeter_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/blobstore"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

func TestPricesComeFromTheCostsTable(t *testing.T) {
	t.Parallel()
	p, err := costmeter.LoadPrices(filepath.Join("..", "..", "docs", "costs.md"))
	require.NoError(t, err)
	require.InDelta(t, 0.625e-6, p["dynamodb_wru"], 1e-12)
	require.InDelta(t, 0.40e-6, p["sqs_request"], 1e-12)
	require.InDelta(t, 25e-6, p["sfn_standard_transition"], 1e-12)
}

// TestUnitsFollowTheItems meters a job's writes on the real table: one unit
// per KB of item, plus the due index's own writes when its entry appears,
// and nothing more when a change leaves the index alone.
func TestUnitsFollowTheItems(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	m := costmeter.New()
	db := dynamodb.New(h.DynamoDB.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, m.Middleware) })
	st := store.New(db, h.Resources.Tables["JobsTable"])
	ctx := context.Background()
	now := time.Now().UTC()

	spec, err := domain.ParseJobSpec([]byte(`{"steps":[{"id":"a","action":{"type":"pass"}}]}`))
	require.NoError(t, err)
	j, err := domain.NewJob(stacktest.TenantA, ulid.Make().String(), spec, "", now)
	require.NoError(t, err)
	_, _, err = st.Create(ctx, j, "", now)
	require.NoError(t, err)
	require.Equal(t, costmeter.Units{WRU: 2}, m.Units(), "a small item (1) and its due index entry (1)")

	j, err = st.Get(ctx, stacktest.TenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, costmeter.Units{WRU: 2, RRU: 1}, m.Units(), "a consistent read of under 4 KB")

	// A lease leaves the due time where it is: one write, no index write.
	// Made under a tag, it is also billed apart, with its request.
	n := len(j.Events)
	_, err = j.Lease("a", domain.LeaseRequest{Nonce: "n", Duration: time.Hour}, now)
	require.NoError(t, err)
	require.NoError(t, st.Save(costmeter.Tag(ctx, "lease"), j, n))
	require.Equal(t, costmeter.Units{WRU: 3, RRU: 1}, m.Units())
	require.Equal(t, costmeter.Tagged{Units: costmeter.Units{WRU: 1}, Requests: map[string]int64{"DynamoDB.PutItem": 1}}, m.Tagged("lease"))
	require.Equal(t, costmeter.Tagged{Requests: map[string]int64{}}, m.Tagged("other"))

	// A batch of creates: each item its units, each due entry one more.
	var batch []*domain.Job
	for range 3 {
		b, err := domain.NewJob(stacktest.TenantA, ulid.Make().String(), spec, "", now)
		require.NoError(t, err)
		batch = append(batch, b)
	}
	for _, err := range st.CreateAll(ctx, batch, now) {
		require.NoError(t, err)
	}
	require.Equal(t, costmeter.Units{WRU: 9, RRU: 1}, m.Units(), "three small items and their due entries")
}

// TestBillsEachAttemptThatReachedTheService: the meter sits below the
// SDK's retry loop. An attempt throttled in front of the service (a
// Finalize middleware after "Retry", as chaos's) is billed nothing; the
// retry that reaches the table is billed once; a write that fails its
// condition is billed its units without changing what the meter knows of
// the item.
func TestBillsEachAttemptThatReachedTheService(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	table := h.Resources.Tables["JobsTable"]
	m := costmeter.New()
	var throttleNext, attempts atomic.Int64
	throttle := func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("test.Throttle",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				attempts.Add(1)
				if throttleNext.Add(-1) >= 0 {
					return middleware.FinalizeOutput{}, middleware.Metadata{}, &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
						Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 400, Header: http.Header{}}},
						Err:      &ddb.ProvisionedThroughputExceededException{Message: aws.String("test: throttled")},
					}}
				}
				return next.HandleFinalize(ctx, in)
			}), "Retry", middleware.After)
	}
	db := dynamodb.New(h.DynamoDB.Options(), func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
		o.APIOptions = append(o.APIOptions, m.Middleware, throttle)
	})
	ctx := context.Background()
	put := &dynamodb.PutItemInput{TableName: &table, ConditionExpression: aws.String("attribute_not_exists(pk)"), Item: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "meter-" + ulid.Make().String()}, "sk": &ddb.AttributeValueMemberS{Value: "x"},
	}}

	throttleNext.Store(1)
	_, err := db.PutItem(ctx, put)
	require.NoError(t, err)
	require.EqualValues(t, 2, attempts.Load(), "the SDK retried the throttled attempt")
	require.Equal(t, costmeter.Units{WRU: 1}, m.Units(), "one attempt reached the table")

	throttleNext.Store(3)
	_, err = db.PutItem(ctx, put)
	var pte *ddb.ProvisionedThroughputExceededException
	require.ErrorAs(t, err, &pte)
	require.Equal(t, costmeter.Units{WRU: 1}, m.Units(), "no attempt reached the table: nothing billed")

	_, err = db.PutItem(ctx, put)
	var ccf *ddb.ConditionalCheckFailedException
	require.ErrorAs(t, err, &ccf)
	require.Equal(t, costmeter.Units{WRU: 2}, m.Units(), "a failed condition is billed")
}

// TestS3RequestsAreMetered: each answered S3 request is one of its class,
// a GET of a missing key included (S3 bills it); no DynamoDB units.
func TestS3RequestsAreMetered(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
	m := costmeter.New()
	c := s3.New(h.S3.Options(), func(o *s3.Options) { o.APIOptions = append(o.APIOptions, m.Middleware) })
	bs := blobstore.New(c, h.Resources.Buckets["DataBucket"])
	ctx := context.Background()
	require.NoError(t, bs.Put(ctx, "t/j/s/1", []byte(`{"big":true}`)))
	_, err := bs.Get(ctx, "t/j/s/1")
	require.NoError(t, err)
	_, err = bs.Get(ctx, "t/j/s/2")
	require.ErrorIs(t, err, domain.ErrNotFound)
	_, err = bs.URL(ctx, "t/j/s/1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, costmeter.Units{S3Writes: 1, S3Reads: 2}, m.Units(), "a presign is no request")

	// A job's data at expiry: a list (class A) and a delete (free).
	n, err := bs.DeletePrefix(ctx, "t/j/")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, costmeter.Units{S3Writes: 2, S3Reads: 2, S3Deletes: 1}, m.Units())

	p, err := costmeter.LoadPrices(filepath.Join("..", "..", "docs", "costs.md"))
	require.NoError(t, err)
	require.InDelta(t, 5e-6, p["s3_put_request"], 1e-12)
	require.InDelta(t, 0.4e-6, p["s3_get_request"], 1e-12)
	require.Zero(t, p["s3_delete_request"])
}
