// Command execute is the Lambda function on the ready queues' SQS event
// source mapping: it leases, runs and records built-in steps, answering
// partial batch failures.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/stepflow/stepflow/shared/actions/lambdaclient"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/handlers"
)

func main() {
	// The one function that runs steps links the lambda action's client.
	app := config.MustFromLambdaEnv(config.LambdaActions(lambdaclient.FromConfig))
	lambda.StartHandlerFunc(handlers.Execute(app.Engine, app.ReadyTokens(), app.Log))
}
