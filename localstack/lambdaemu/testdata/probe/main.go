// Command probe is a test function for the local Lambda service: it
// answers what the Runtime API told it, and fails, panics, exits or
// sleeps when its event asks.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type event struct {
	Fail    string `json:"fail"`     // return an error with this message
	Panic   string `json:"panic"`    // panic with this value
	Exit    int    `json:"exit"`     // exit with this status, answering nothing
	SleepMS int    `json:"sleep_ms"` // sleep this long first
}

type answer struct {
	PID            int             `json:"pid"`
	RequestID      string          `json:"request_id"`
	FunctionARN    string          `json:"function_arn"`
	FunctionName   string          `json:"function_name"`
	DeadlineMS     int64           `json:"deadline_ms"`
	IdempotencyKey string          `json:"idempotency_key"`
	Tenant         string          `json:"tenant"`
	Event          json.RawMessage `json:"event"`
}

func handle(ctx context.Context, raw json.RawMessage) (answer, error) {
	var ev event
	_ = json.Unmarshal(raw, &ev)
	if ev.SleepMS > 0 {
		time.Sleep(time.Duration(ev.SleepMS) * time.Millisecond)
	}
	switch {
	case ev.Fail != "":
		return answer{}, errors.New(ev.Fail)
	case ev.Panic != "":
		panic(ev.Panic)
	case ev.Exit != 0:
		os.Exit(ev.Exit)
	}
	lc, _ := lambdacontext.FromContext(ctx)
	deadline, _ := ctx.Deadline()
	return answer{
		PID: os.Getpid(), RequestID: lc.AwsRequestID, FunctionARN: lc.InvokedFunctionArn,
		FunctionName: lambdacontext.FunctionName, DeadlineMS: deadline.UnixMilli(),
		IdempotencyKey: lc.ClientContext.Custom["idempotency_key"], Tenant: lc.ClientContext.Custom["tenant"], Event: raw,
	}, nil
}

func main() {
	lambda.Start(handle)
}
