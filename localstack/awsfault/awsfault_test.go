package awsfault_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
)

// client answers a DynamoDB client whose requests never leave the process:
// each is counted in sent and answered with an empty item.
func client(sent *atomic.Int64, opts ...func(*middleware.Stack) error) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: aws.AnonymousCredentials{}, Retryer: aws.NopRetryer{},
		HTTPClient: doFunc(func(*http.Request) (*http.Response, error) {
			sent.Add(1)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`))}, nil
		}),
		APIOptions: opts,
	})
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

func get(t *testing.T, db *dynamodb.Client, table string) (*dynamodb.GetItemOutput, error) {
	t.Helper()
	return db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "a"},
	}})
}

func TestFailOperationFailsMatchingCallsBeforeTheyAreSent(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	injected := errors.New("injected")
	f := awsfault.FailOperation("DynamoDB", "GetItem", 2, func(in any) bool {
		return aws.ToString(in.(*dynamodb.GetItemInput).TableName) == "bad"
	}, injected)
	db := client(&sent, f.Install)

	_, err := get(t, db, "good")
	require.NoError(t, err)
	for range 2 {
		_, err = get(t, db, "bad")
		require.ErrorIs(t, err, injected)
		var oe *smithy.OperationError
		require.ErrorAs(t, err, &oe, "the client wraps it as its own")
		require.Equal(t, "GetItem", oe.Operation())
	}
	_, err = get(t, db, "bad")
	require.NoError(t, err, "two calls were due to fail")
	require.EqualValues(t, 2, f.Failed())
	require.EqualValues(t, 2, sent.Load(), "a failed call sends nothing")

	f.Arm(-1)
	for range 3 {
		_, err = get(t, db, "bad")
		require.ErrorIs(t, err, injected)
	}
	_, err = db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("bad"), Item: map[string]ddb.AttributeValue{}})
	require.NoError(t, err, "another operation")
	require.EqualValues(t, 5, f.Failed())
}

func TestAroundSeesTypedInputAndOutputAndCaptureInputReachesTheAttempt(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	var seen atomic.Value
	rewrite := awsfault.Around("DynamoDB", "GetItem", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		out, err := call()
		require.IsType(t, &dynamodb.GetItemOutput{}, out)
		return &dynamodb.GetItemOutput{Item: in.(*dynamodb.GetItemInput).Key}, err
	})
	attempt := func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("test.Attempt",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				service, op := awsfault.Call(ctx)
				seen.Store(service + "." + op + " " + aws.ToString(awsfault.Input(ctx).(*dynamodb.GetItemInput).TableName))
				return next.HandleFinalize(ctx, in)
			}), "Retry", middleware.After)
	}
	db := client(&sent, rewrite, awsfault.CaptureInput, awsfault.CaptureInput, attempt)
	out, err := get(t, db, "t")
	require.NoError(t, err)
	require.Equal(t, "a", out.Item["pk"].(*ddb.AttributeValueMemberS).Value, "the output fn answered")
	require.Equal(t, "DynamoDB.GetItem t", seen.Load())
	require.EqualValues(t, 1, sent.Load())
}
