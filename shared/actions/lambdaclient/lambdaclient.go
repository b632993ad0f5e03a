// Package lambdaclient is the lambda action's adapter over the SDK's
// Lambda client (actions.LambdaInvoker). It is a package of its own so
// that only the execute function, which runs steps, links the Lambda
// client: the others' bootstraps stay smaller.
package lambdaclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/stepflow/stepflow/shared/actions"
)

// FromConfig is the lambda action's client from cfg, at endpoint when it
// is set (STEPFLOW_LAMBDA_ENDPOINT) rather than cfg's.
func FromConfig(cfg aws.Config, endpoint string) actions.LambdaInvoker {
	return New(lambda.NewFromConfig(cfg, func(o *lambda.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}))
}

// New is the lambda action's client over c.
func New(c *lambda.Client) actions.LambdaInvoker { return invoker{c} }

type invoker struct{ c *lambda.Client }

// Invoke invokes r's function synchronously, with one request.
func (i invoker) Invoke(ctx context.Context, r actions.LambdaRequest) (actions.LambdaResponse, error) {
	in := &lambda.InvokeInput{
		FunctionName:   aws.String(r.Function),
		InvocationType: lambdatypes.InvocationTypeRequestResponse,
		Payload:        r.Payload,
		ClientContext:  r.ClientContext,
	}
	if r.Qualifier != "" {
		in.Qualifier = aws.String(r.Qualifier)
	}
	out, err := i.c.Invoke(ctx, in, func(o *lambda.Options) {
		o.RetryMaxAttempts = 1
		o.HTTPClient = bufferedRequestBody{o.HTTPClient}
	})
	if err != nil {
		return actions.LambdaResponse{}, err
	}
	return actions.LambdaResponse{Payload: out.Payload, FunctionError: aws.ToString(out.FunctionError)}, nil
}

// bufferedRequestBody hands the transport a request body of its own. The
// SDK closes the body it built as soon as the response headers arrive; when
// the transport is still finishing the request write at that moment, the
// close fails the write and the transport closes the connection under the
// response being read (aws/aws-sdk-go-v2#2737). The SDK retries that, but
// an invoke must not be retried unseen, so the race must not happen.
type bufferedRequestBody struct{ next lambda.HTTPClient }

func (b bufferedRequestBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		data, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, fmt.Errorf("buffer the invoke payload: %w", err)
		}
		req.Body = io.NopCloser(bytes.NewReader(data))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	}
	return b.next.Do(req)
}
