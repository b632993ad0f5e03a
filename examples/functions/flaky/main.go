// Command flaky is an example function for the lambda action: it fails
// the first attempt of each step and succeeds from the second, answering
// {"attempt": n, "input": <its event>}. The README's quickstart uses it to
// show a retry that ends green, deterministically and offline.
// template.yaml deploys it as <LambdaActionPrefix>flaky; `make dev` serves
// it locally under that name and as plain flaky.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// attempt reads the attempt number from the idempotency key the lambda
// action passes in the client context: "<job>/<step>/<attempt>".
func attempt(ctx context.Context) (int, error) {
	lc, ok := lambdacontext.FromContext(ctx)
	if !ok {
		return 0, errors.New("no Lambda context")
	}
	key := lc.ClientContext.Custom["idempotency_key"]
	n, err := strconv.Atoi(key[strings.LastIndex(key, "/")+1:])
	if err != nil {
		return 0, errors.New("no attempt in idempotency key " + strconv.Quote(key) + "; call me from a lambda step")
	}
	return n, nil
}

func handle(ctx context.Context, event json.RawMessage) (map[string]any, error) {
	n, err := attempt(ctx)
	if err != nil {
		return nil, err
	}
	if n == 1 {
		// A function error: the lambda action classes it retryable.
		return nil, errors.New("flaky: attempt 1 fails on purpose; the retry succeeds")
	}
	return map[string]any{"attempt": n, "input": event}, nil
}

func main() {
	lambda.Start(handle)
}
