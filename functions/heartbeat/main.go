// Command heartbeat is the Lambda function the EventBridge schedule runs
// every minute: it reclaims expired leases and re-sends lost dispatches.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/handlers"
)

func main() {
	app := config.MustFromLambdaEnv()
	lambda.StartHandlerFunc(handlers.Heartbeat(app.Engine))
}
