// Command enqueue is the Lambda function behind the job routes of the HTTP
// API: submit, get, list, events, cancel, health.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
)

func main() {
	app := config.MustFromLambdaEnv()
	api := httpapi.New(app.Engine, app.Log, httpapi.EnqueueFunction)
	api.MetricsText = prometheus.Exposition
	api.OperatorText, api.OperatorKeyHashes = prometheus.OperatorExposition, app.Settings.OperatorKeyHashes
	lambda.StartHandlerFunc(api.Handle)
}
