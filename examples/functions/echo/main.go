// Command echo is an example function for the lambda action: it answers
// {"echo": <its event>}. template.yaml deploys it as <LambdaActionPrefix>echo;
// `make dev` serves it locally under that name and as plain echo.
package main

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/lambda"
)

func handle(_ context.Context, event json.RawMessage) (map[string]json.RawMessage, error) {
	return map[string]json.RawMessage{"echo": event}, nil
}

func main() {
	lambda.Start(handle)
}
