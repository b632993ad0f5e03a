// Command claim is the Lambda function external workers talk to: claim,
// heartbeat, complete and fail leases.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/httpapi"
)

func main() {
	app := config.MustFromLambdaEnv()
	lambda.StartHandlerFunc(httpapi.New(app.Engine, app.Log, httpapi.ClaimFunction).Handle)
}
