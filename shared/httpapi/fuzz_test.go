package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// Run briefly in CI:
//
//	go test -run='^$' -fuzz='^FuzzAPIGatewayEvent$' -fuzztime=10s ./shared/httpapi
//
// Plain `go test` runs it over its committed corpus
// (testdata/fuzz/FuzzAPIGatewayEvent/): real payload 2.0 events for every
// route, and malformed ones.

var errFuzzStub = errors.New("fuzz stub: no AWS here")

// fuzzDB knows one API key ("Bearer fuzz-key" is tenant "t1") and fails
// every other call, so requests get past authentication to the routes'
// own decoding and validation, and no emulator is needed.
type fuzzDB struct{}

func (fuzzDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if pk, ok := in.Key["pk"].(*ddb.AttributeValueMemberS); ok && pk.Value == "K#"+store.HashKey("fuzz-key") {
		return &dynamodb.GetItemOutput{Item: map[string]ddb.AttributeValue{"tenant": &ddb.AttributeValueMemberS{Value: "t1"}}}, nil
	}
	return nil, errFuzzStub
}

func (fuzzDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errFuzzStub
}

func (fuzzDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, errFuzzStub
}

func (fuzzDB) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, errFuzzStub
}

func (fuzzDB) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, errFuzzStub
}

func (fuzzDB) BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return nil, errFuzzStub
}

// fuzzSQS fails every call.
type fuzzSQS struct{}

func (fuzzSQS) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	return nil, errFuzzStub
}

func (fuzzSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return nil, errFuzzStub
}

// FuzzAPIGatewayEvent: any JSON decoded as an API Gateway HTTP API
// payload 2.0 event and handed to the handler never panics, and is
// answered with a real HTTP status and a JSON body; an answer of 400 names
// what was wrong.
func FuzzAPIGatewayEvent(f *testing.F) {
	f.Add([]byte(`{"version":"2.0","routeKey":"GET /v1/health","rawPath":"/v1/health","headers":{"authorization":"Bearer fuzz-key"},"requestContext":{"http":{"method":"GET","path":"/v1/health"}}}`))
	log := slog.New(slog.DiscardHandler)
	eng := engine.New(store.New(fuzzDB{}, "t"), queue.New(fuzzSQS{}, queue.Config{ReadyURLs: [3]string{"http://p0", "http://p1", "http://p2"}}),
		&actions.Runner{}, time.Minute, log)
	api := httpapi.New(eng, log)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev events.APIGatewayV2HTTPRequest
		if json.Unmarshal(raw, &ev) != nil {
			return
		}
		// A claim long-polls up to wait_seconds; the stub fails the poll at
		// once, but bound the call anyway.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := api.Handle(ctx, ev)
		if err != nil {
			t.Fatalf("Handle answered an error (Lambda would answer 502): %v", err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 599 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if resp.IsBase64Encoded || !json.Valid([]byte(resp.Body)) {
			t.Fatalf("status %d: body is not JSON: %q", resp.StatusCode, resp.Body)
		}
		if ct := resp.Headers["content-type"]; !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("status %d: content-type %q", resp.StatusCode, ct)
		}
		if resp.StatusCode >= 400 {
			var body httpapi.ErrorBody
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
				t.Fatalf("status %d: not an error body: %s", resp.StatusCode, resp.Body)
			}
		}
	})
}
