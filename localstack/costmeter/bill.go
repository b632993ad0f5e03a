package costmeter

import (
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/store"
)

// Usage is what some jobs used of AWS, all told: the counts a bill is
// made of (docs/costs.md says how each is priced).
type Usage struct {
	Jobs float64
	// Units are the DynamoDB request units, S3 requests and EventBridge
	// events metered (worker GETs of presigned URLs among S3Reads).
	Units       Units
	SQSRequests float64
	// LambdaRequests are invocations; LambdaGBSeconds their billed
	// duration at each function's memory (BilledGBSeconds).
	LambdaRequests, LambdaGBSeconds float64
	// APIRequests are API Gateway HTTP API requests, each counted per
	// 512 KB (APIRequests).
	APIRequests float64
	// TimerExecutions are Standard executions of the timer state machine.
	TimerExecutions float64
	// Arms and ArmSQSRequests are what sending the long timers within
	// reach cost: the sweeps' requests that did it, beyond what sweeps
	// with nothing due cost (LongTimers Sweep, the default). They are in
	// no other line.
	Arms           Units
	ArmSQSRequests float64
	// LogBytes and LogEvents are what the functions wrote to CloudWatch
	// Logs, at the level they keep.
	LogBytes, LogEvents float64
	// StoredItemBytes (StoredBytes of each item the jobs left in the table,
	// priced as stored and as backed up by point-in-time recovery)
	// and StoredObjectBytes (in S3) are kept RetentionDays, until the job
	// expires.
	StoredItemBytes, StoredObjectBytes float64
	RetentionDays                      float64
	// Expiry is the sweep's work as the jobs' stored data expires (a list
	// and a delete of each job's prefix, the job's item read and written).
	Expiry Units
}

// Bill is a workload's charges in USD per million jobs, by line. Total
// is all of them but LambdaDuration and Logs, which are reported beside it:
// the first depends on the actions run (and is the same work on Step
// Functions), the second on the log level chosen.
type Bill struct {
	DynamoDB, SQS, LambdaRequests, APIGateway, Timers, S3Requests, Events, Storage, Expiry float64
	LambdaDuration, Logs                                                                   float64
}

// Total is the bill but Lambda duration and logs.
func (b Bill) Total() float64 {
	return b.DynamoDB + b.SQS + b.LambdaRequests + b.APIGateway + b.Timers + b.S3Requests + b.Events + b.Storage + b.Expiry
}

// TimerTransitions is what one execution of statemachine/timer.asl.json
// is billed: its Wait and Task states, and the end.
const TimerTransitions = 3

// GB is the gigabyte AWS bills storage and log ingestion by.
const GB = 1 << 30

// HoursPerMonth is the month a GB-month is prorated over, by the hour.
const HoursPerMonth = store.HoursPerMonth

// LogEventOverhead is the metadata CloudWatch Logs counts with each log
// event it ingests.
const LogEventOverhead = 26

// Bill prices u in USD per million jobs.
func (p Prices) Bill(u Usage) Bill {
	if u.Jobs <= 0 {
		return Bill{}
	}
	perJob := 1e6 / u.Jobs
	requests := func(x Units) float64 {
		return x.WRU*p["dynamodb_wru"] + x.RRU*p["dynamodb_rru"]
	}
	s3 := func(x Units) float64 {
		return x.S3Writes*p["s3_put_request"] + x.S3Reads*p["s3_get_request"] + x.S3Deletes*p["s3_delete_request"]
	}
	months := u.RetentionDays * 24 / HoursPerMonth
	return Bill{
		DynamoDB:       requests(u.Units) * perJob,
		SQS:            u.SQSRequests * p["sqs_request"] * perJob,
		LambdaRequests: u.LambdaRequests * p["lambda_request"] * perJob,
		APIGateway:     u.APIRequests * p["apigw_http_request"] * perJob,
		// Each execution's transitions, and the SQS send its Task makes
		// (which the emulator's proxy does not see: moto sends it itself);
		// or the sweeps' reads, writes and sends of the long timers.
		Timers: (u.TimerExecutions*(TimerTransitions*p["sfn_standard_transition"]+p["sqs_request"]) +
			requests(u.Arms) + u.ArmSQSRequests*p["sqs_request"]) * perJob,
		S3Requests: s3(u.Units) * perJob,
		Events:     u.Units.Events * p["eventbridge_event"] * perJob,
		// The table's bytes are backed up continuously too (point-in-time
		// recovery, which the template turns on).
		Storage: (u.StoredItemBytes*(p["dynamodb_storage_gb_month"]+p["dynamodb_pitr_gb_month"]) + u.StoredObjectBytes*p["s3_storage_gb_month"]) / GB * months * perJob,
		Expiry:  (requests(u.Expiry) + s3(u.Expiry) + u.Expiry.Events*p["eventbridge_event"]) * perJob,

		LambdaDuration: u.LambdaGBSeconds * p["lambda_gb_second_arm"] * perJob,
		Logs:           (u.LogBytes + LogEventOverhead*u.LogEvents) / GB * p["cloudwatch_logs_gb"] * perJob,
	}
}

// ItemOverhead is what DynamoDB adds to the stored size of each item.
const ItemOverhead = store.ItemOverhead

// StoredBytes answers the bytes an item is billed for as stored
// (store.StoredBytes, which a job's own usage counts by too).
func StoredBytes(it map[string]ddb.AttributeValue) int { return store.StoredBytes(it) }

// FloorBatch is the batch the physical floor shares a receive, a delete
// and an invocation over: SQS's largest, the event source mapping's
// BatchSize.
const FloorBatch = 10

// Floor is the physical floor of durable, leased, exactly-once-recorded
// jobs of steps steps each, submitted perRequest to an API Gateway
// request (docs/costs.md#the-floor): a write of at most 1 KB to create a
// job and one to record each step, the send of its first step (one
// SendMessageBatch for the submits of a request) and of each next one
// (batched with its batch's), and for each step a share of a batched
// receive, delete and execute invocation; one submit invocation and one
// API Gateway request per request. Usage.Jobs is 1.
func Floor(steps, perRequest int) Usage {
	n, share := float64(steps), 1/float64(max(perRequest, 1))
	return Usage{
		Jobs:           1,
		Units:          Units{WRU: n + 1},
		SQSRequests:    share + (n-1)/FloorBatch + 2*n/FloorBatch,
		LambdaRequests: share + n/FloorBatch,
		APIRequests:    share,
	}
}
