package domain

import "math"

// Usage is the AWS usage a job has caused so far, counted as it goes on
// the writes the engine makes of it anyway (docs/model.md#what-a-job-cost).
// Each count is in the unit AWS bills, so a job's cost is its counts at
// list prices (Prices). Shared requests are counted as shares: a receive
// of ten messages is a tenth of a request to each of their jobs.
type Usage struct {
	// DynamoDB request units: each write of the job's items (the larger of
	// the old and new item, per KB; a transaction's at twice that; a move
	// of its due index entry), each read (per 4 KB), lost races included.
	WriteUnits float64 `json:"dynamodb_write_units,omitempty"`
	ReadUnits  float64 `json:"dynamodb_read_units,omitempty"`
	// SQS requests: sends, and its shares of receives, deletes and
	// visibility changes.
	SQSRequests float64 `json:"sqs_requests,omitempty"`
	// LambdaRequests are its shares of the functions' invocations;
	// LambdaGBSeconds the time functions spent on it, at their memory.
	LambdaRequests  float64 `json:"lambda_requests,omitempty"`
	LambdaGBSeconds float64 `json:"lambda_gb_seconds,omitempty"`
	// APIRequests are its shares of the API Gateway requests made for it
	// (a submit, a claim, a heartbeat, an outcome, a signal...).
	APIRequests float64 `json:"api_requests,omitempty"`
	// S3 requests of its large data: class A (PUT, LIST) and class B
	// (GET, a worker's read of a presigned URL included).
	S3Writes float64 `json:"s3_write_requests,omitempty"`
	S3Reads  float64 `json:"s3_read_requests,omitempty"`
	// Events are the Job State Change events put on the bus for it.
	Events float64 `json:"events,omitempty"`
	// SFNTransitions are the Step Functions Standard transitions made for
	// it: its long timers' (LongTimers StepFunctions) and the executions
	// its stepfunctions steps ran.
	SFNTransitions float64 `json:"sfn_transitions,omitempty"`
	// Storage for the job's retention once it ended: its items in the
	// table (backed up too) and its data in S3, in GB-months.
	TableGBMonths float64 `json:"table_gb_months,omitempty"`
	S3GBMonths    float64 `json:"s3_gb_months,omitempty"`
	// ReportedUSD is what its steps said they spent themselves (a
	// worker's or a lambda function's cost: an LLM call's tokens, say).
	ReportedUSD float64 `json:"reported_usd,omitempty"`
	// ChildrenUSD is what the child jobs its steps waited on cost, all
	// told (each counts its own usage).
	ChildrenUSD float64 `json:"children_usd,omitempty"`
}

// Add sums o into u, every count (a test checks that each field is).
func (u *Usage) Add(o Usage) {
	u.WriteUnits += o.WriteUnits
	u.ReadUnits += o.ReadUnits
	u.SQSRequests += o.SQSRequests
	u.LambdaRequests += o.LambdaRequests
	u.LambdaGBSeconds += o.LambdaGBSeconds
	u.APIRequests += o.APIRequests
	u.S3Writes += o.S3Writes
	u.S3Reads += o.S3Reads
	u.Events += o.Events
	u.SFNTransitions += o.SFNTransitions
	u.TableGBMonths += o.TableGBMonths
	u.S3GBMonths += o.S3GBMonths
	u.ReportedUSD += o.ReportedUSD
	u.ChildrenUSD += o.ChildrenUSD
}

// Scaled answers u with each count multiplied by f.
func (u Usage) Scaled(f float64) Usage {
	return Usage{WriteUnits: u.WriteUnits * f, ReadUnits: u.ReadUnits * f, SQSRequests: u.SQSRequests * f,
		LambdaRequests: u.LambdaRequests * f, LambdaGBSeconds: u.LambdaGBSeconds * f, APIRequests: u.APIRequests * f,
		S3Writes: u.S3Writes * f, S3Reads: u.S3Reads * f, Events: u.Events * f, SFNTransitions: u.SFNTransitions * f,
		TableGBMonths: u.TableGBMonths * f, S3GBMonths: u.S3GBMonths * f, ReportedUSD: u.ReportedUSD * f, ChildrenUSD: u.ChildrenUSD * f}
}

// Zero reports whether u counts nothing.
func (u Usage) Zero() bool { return u == Usage{} }

// Prices are the list prices a job's usage is priced at, USD per unit:
// docs/costs.md's table (us-east-1, on demand, no free tier), which a
// test holds this copy to. The functions read no file at run time.
var Prices = struct {
	WriteUnit, ReadUnit, SQSRequest, LambdaRequest, LambdaGBSecond, APIRequest,
	S3Write, S3Read, Event, SFNTransition, TableGBMonth, BackupGBMonth, S3GBMonth float64
}{
	WriteUnit:      0.625 / 1e6,  // dynamodb_wru
	ReadUnit:       0.125 / 1e6,  // dynamodb_rru
	SQSRequest:     0.40 / 1e6,   // sqs_request
	LambdaRequest:  0.20 / 1e6,   // lambda_request
	LambdaGBSecond: 0.0000133334, // lambda_gb_second_arm
	APIRequest:     1.00 / 1e6,   // apigw_http_request
	S3Write:        0.005 / 1e3,  // s3_put_request
	S3Read:         0.0004 / 1e3, // s3_get_request
	Event:          1.00 / 1e6,   // eventbridge_event
	SFNTransition:  25.00 / 1e6,  // sfn_standard_transition
	TableGBMonth:   0.25,         // dynamodb_storage_gb_month
	BackupGBMonth:  0.20,         // dynamodb_pitr_gb_month
	S3GBMonth:      0.023,        // s3_storage_gb_month
}

// EngineUSD is what the counts of u cost at Prices: all but what steps
// reported.
func (u Usage) EngineUSD() float64 {
	p := Prices
	return u.WriteUnits*p.WriteUnit + u.ReadUnits*p.ReadUnit + u.SQSRequests*p.SQSRequest +
		u.LambdaRequests*p.LambdaRequest + u.LambdaGBSeconds*p.LambdaGBSecond + u.APIRequests*p.APIRequest +
		u.S3Writes*p.S3Write + u.S3Reads*p.S3Read + u.Events*p.Event + u.SFNTransitions*p.SFNTransition +
		u.TableGBMonths*(p.TableGBMonth+p.BackupGBMonth) + u.S3GBMonths*p.S3GBMonth
}

// Cost is a job's usage priced: what the engine's work for it cost, what
// its steps reported, what its child jobs cost, and their sum.
type Cost struct {
	USD         float64 `json:"usd"`
	EngineUSD   float64 `json:"engine_usd"`
	ReportedUSD float64 `json:"reported_usd"`
	ChildrenUSD float64 `json:"children_usd,omitempty"`
	Units       Usage   `json:"units"`
}

// Cost answers the job's cost as saved (what a read of it spent is saved
// by its next write).
func (j *Job) Cost() Cost { return j.Usage.Cost() }

// Cost prices u.
func (u Usage) Cost() Cost {
	units := u
	units.ReportedUSD, units.ChildrenUSD = 0, 0
	eng, rep, kids := roundUSD(u.EngineUSD()), roundUSD(u.ReportedUSD), roundUSD(u.ChildrenUSD)
	return Cost{USD: roundUSD(eng + rep + kids), EngineUSD: eng, ReportedUSD: rep, ChildrenUSD: kids, Units: units}
}

// CostUSD is the job's cost so far, engine and reported, what it has
// spent since it was read included: what a budget is held to.
func (j *Job) CostUSD() float64 {
	u := j.Usage
	u.Add(j.Spent)
	return u.Cost().USD
}

// roundUSD rounds to a billionth of a dollar: a job's engine cost is some
// millionths, and float sums should not show 17 digits.
func roundUSD(v float64) float64 { return math.Round(v*1e9) / 1e9 }

// Spend adds u to what the job has spent and not yet saved: the store
// and the engine count each request they make for it, and the next write
// of the job saves the sum with it.
func (j *Job) Spend(u Usage) { j.Spent.Add(u) }

// SettleSpent moves what was spent into the job's usage: the write that
// saves it is made.
func (j *Job) SettleSpent() {
	j.Usage.Add(j.Spent)
	j.Spent = Usage{}
}

// MaxReportedUSD bounds what one outcome may report: a typo of a million
// dollars should be refused, not waited on behind a budget.
const MaxReportedUSD = 1e6

// CheckReported checks a step's reported cost, naming field.
func CheckReported(field string, usd float64) error {
	if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 || usd > MaxReportedUSD {
		return Invalid(field, "must be a number of US dollars from 0 to %g", float64(MaxReportedUSD))
	}
	return nil
}

// ReportCost records what attempt n of step id said it spent, and adds it
// to the job's reported cost.
func (j *Job) ReportCost(id string, n int, usd float64) {
	if usd <= 0 {
		return
	}
	s, _, err := j.Step(id)
	if err != nil {
		return
	}
	for i := range s.Attempts {
		if s.Attempts[i].N == n {
			s.Attempts[i].CostUSD += usd
		}
	}
	j.Usage.ReportedUSD += usd
}

// ReportedUSD is what the step's attempts said they spent.
func (s *Step) ReportedUSD() float64 {
	var sum float64
	for _, a := range s.Attempts {
		sum += a.CostUSD
	}
	return roundUSD(sum)
}

// WriteUnitsOf and ReadUnitsOf are DynamoDB's units of a put of an item of
// n bytes (per KB) and of its strongly consistent read (per 4 KB).
func WriteUnitsOf(n int) float64 { return math.Max(1, math.Ceil(float64(n)/1024)) }
func ReadUnitsOf(n int) float64  { return math.Max(1, math.Ceil(float64(n)/4096)) }

// DueMoveUnits are the index write units of a job's due index entry moving
// from old to new ("" for none): a moved entry is a delete and a put.
func DueMoveUnits(old, new string) float64 {
	if old == new {
		return 0
	}
	var w float64
	if old != "" {
		w++
	}
	if new != "" {
		w++
	}
	return w
}

// KeptGBMonths is what keeping a finished job stored in bytes costs until
// it expires, in GB-months; 0 for a job not finished.
func (j *Job) KeptGBMonths(bytes int) float64 {
	if !j.State.Terminal() || j.ExpiresAt == nil || j.EndedAt == nil {
		return 0
	}
	return float64(bytes) / (1 << 30) * max(j.ExpiresAt.Sub(*j.EndedAt).Hours()/730, 0)
}
