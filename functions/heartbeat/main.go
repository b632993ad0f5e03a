// Command heartbeat is the Lambda function the EventBridge schedule runs
// every minute: it reclaims expired leases and re-sends lost dispatches.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/handlers"
)

func main() {
	app, err := config.FromLambdaEnv(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(handlers.Heartbeat(app.Engine))
}
