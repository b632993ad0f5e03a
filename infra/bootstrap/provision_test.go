package bootstrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	ftypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	stypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

func TestProvisionRealTemplate(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)

	st, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "stepflow")
	require.NoError(t, err)
	require.Equal(t, "stepflow", st.Name)

	// Table: keys, the GSI with its projection, billing, TTL, PITR.
	require.Equal(t, map[string]string{"JobsTable": "stepflow-JobsTable"}, st.Tables)
	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("stepflow-JobsTable")})
	require.NoError(t, err)
	tbl := desc.Table
	require.Equal(t, "[pk HASH, sk RANGE]", keysString(tbl.KeySchema))
	require.NotNil(t, tbl.BillingModeSummary)
	require.Equal(t, dtypes.BillingModePayPerRequest, tbl.BillingModeSummary.BillingMode)
	gsis := map[string]dtypes.GlobalSecondaryIndexDescription{}
	for _, g := range tbl.GlobalSecondaryIndexes {
		gsis[aws.ToString(g.IndexName)] = g
	}
	require.Len(t, gsis, 1)
	require.Equal(t, "[gsi2pk HASH, gsi2sk RANGE]", keysString(gsis["due"].KeySchema))
	require.Equal(t, dtypes.ProjectionTypeKeysOnly, gsis["due"].Projection.ProjectionType)

	ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("stepflow-JobsTable")})
	require.NoError(t, err)
	require.Equal(t, "ttl", aws.ToString(ttl.TimeToLiveDescription.AttributeName))
	require.Equal(t, dtypes.TimeToLiveStatusEnabled, ttl.TimeToLiveDescription.TimeToLiveStatus)

	cb, err := db.DescribeContinuousBackups(ctx, &dynamodb.DescribeContinuousBackupsInput{TableName: aws.String("stepflow-JobsTable")})
	require.NoError(t, err)
	require.Equal(t, dtypes.PointInTimeRecoveryStatusEnabled,
		cb.ContinuousBackupsDescription.PointInTimeRecoveryDescription.PointInTimeRecoveryStatus)

	// Queues: names, attributes, redrive to the DLQ.
	require.Len(t, st.QueueURLs, 4)
	for _, id := range []string{"ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2", "DeadLetterQueue"} {
		require.True(t, strings.HasSuffix(st.QueueURLs[id], "/stepflow-"+id), st.QueueURLs[id])
		require.True(t, strings.HasSuffix(st.QueueARNs[id], ":stepflow-"+id), st.QueueARNs[id])
	}
	for _, id := range []string{"ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2"} {
		attrs := sqsAttributes(t, sq, st.QueueURLs[id])
		require.Equal(t, "1800", attrs["VisibilityTimeout"], id)
		require.Equal(t, "1209600", attrs["MessageRetentionPeriod"], id)
		var rp struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     any    `json:"maxReceiveCount"`
		}
		require.NoError(t, json.Unmarshal([]byte(attrs["RedrivePolicy"]), &rp), attrs["RedrivePolicy"])
		require.Equal(t, st.QueueARNs["DeadLetterQueue"], rp.DeadLetterTargetArn)
		require.Equal(t, "5", fmt.Sprint(rp.MaxReceiveCount))
	}
	dlq := sqsAttributes(t, sq, st.QueueURLs["DeadLetterQueue"])
	require.Equal(t, "1209600", dlq["MessageRetentionPeriod"])
	require.Empty(t, dlq["RedrivePolicy"])

	// No state machine by default (LongTimers Sweep): the sweep sends long
	// delays.
	require.Empty(t, st.StateMachines)
	machines, err := sf.ListStateMachines(ctx, &sfn.ListStateMachinesInput{})
	require.NoError(t, err)
	require.Empty(t, machines.StateMachines)

	// Bucket: named after the stack, lower-cased as S3 wants.
	require.Equal(t, map[string]string{"DataBucket": "stepflow-databucket"}, st.Buckets)
	_, err = s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("stepflow-databucket")})
	require.NoError(t, err)

	// Event bus: under the template's Name.
	require.Equal(t, map[string]string{"StepflowBus": "stepflow-StepflowBus"}, st.EventBuses)
	bus, err := eb.DescribeEventBus(ctx, &eventbridge.DescribeEventBusInput{Name: aws.String("stepflow-StepflowBus")})
	require.NoError(t, err)
	require.Regexp(t, `^arn:aws:events:us-east-1:\d{12}:event-bus/stepflow-StepflowBus$`, aws.ToString(bus.Arn))

	// Environment: every reference resolved.
	want := map[string]string{
		"STEPFLOW_TABLE":                            "stepflow-JobsTable",
		"STEPFLOW_QUEUE_P0":                         st.QueueURLs["ReadyQueueP0"],
		"STEPFLOW_QUEUE_P1":                         st.QueueURLs["ReadyQueueP1"],
		"STEPFLOW_QUEUE_P2":                         st.QueueURLs["ReadyQueueP2"],
		"STEPFLOW_DLQ_ARN":                          st.QueueARNs["DeadLetterQueue"],
		"STEPFLOW_DLQ_URL":                          st.QueueURLs["DeadLetterQueue"],
		"STEPFLOW_WORKER_QUEUE_PREFIX":              "stepflow-w-",
		"STEPFLOW_LEASE_SECONDS":                    "1800",
		"STEPFLOW_P0_TENANTS":                       "*",
		"STEPFLOW_MAX_WORKER_QUEUES":                "50",
		"STEPFLOW_MAX_LONG_POLLS":                   "20",
		"STEPFLOW_WORKER_QUEUE_IDLE_SECONDS":        "604800",
		"STEPFLOW_HTTP_ALLOW":                       "",
		"STEPFLOW_TIMER_STATE_MACHINE":              "",
		"STEPFLOW_TIMER_THRESHOLD":                  "900",
		"STEPFLOW_RESOURCE_WAIT_SECONDS":            "86400",
		"STEPFLOW_LAMBDA_ALLOW":                     "stepflow-fn-",
		"STEPFLOW_AWS_ACCOUNT":                      "123456789012", // the emulator's, read from the ARNs of what it made
		"STEPFLOW_AWS_PARTITION":                    "aws",
		"STEPFLOW_RETENTION_COMPLETED_DAYS":         "30",
		"STEPFLOW_RETENTION_FAILED_DAYS":            "14",
		"STEPFLOW_SFN_ALLOW":                        "stepflow-sm-",
		"STEPFLOW_RETENTION_CANCELLED_DAYS":         "7",
		"STEPFLOW_DATA_BUCKET":                      "stepflow-databucket",
		"AWS_ENDPOINT_URL":                          "", // declared for sam local invoke --env-vars; empty on AWS
		"STEPFLOW_EVENT_BUS":                        "stepflow-StepflowBus",
		"STEPFLOW_JOB_STATE_EVENTS":                 "Disabled",
		"STEPFLOW_HEALTH_SUCCESS_OK_PERCENT":        "95",
		"STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT": "80",
		"STEPFLOW_HEALTH_SUCCESS_MIN_JOBS":          "20",
		"STEPFLOW_HEALTH_BACKLOG_DEGRADED":          "10",
		"STEPFLOW_HEALTH_BACKLOG_UNHEALTHY":         "50",
		"STEPFLOW_HEALTH_BLOCKED_DEGRADED":          "3",
		"STEPFLOW_HEALTH_BLOCKED_UNHEALTHY":         "10",
		"STEPFLOW_HEALTH_AVG_DURATION_SECONDS":      "300",
		"STEPFLOW_HEALTH_FAILURES_24H":              "5",
		"STEPFLOW_HEARTBEAT_SECONDS":                "60",
		"STEPFLOW_METRICS_NAMESPACE":                "stepflow/stepflow",
		"STEPFLOW_OPERATOR_KEY_HASHES":              "", // no operator key unless a deploy names one
		"STEPFLOW_TENANT_BUDGETS":                   "", // no daily budget unless a deploy sets one
	}
	require.Equal(t, want, st.Env)
	require.Regexp(t, `^arn:aws:sqs:us-east-1:\d{12}:stepflow-DeadLetterQueue$`, st.Env["STEPFLOW_DLQ_ARN"])
	require.True(t, strings.HasPrefix(st.Env["STEPFLOW_QUEUE_P0"], "http://127.0.0.1:"), st.Env["STEPFLOW_QUEUE_P0"])

	// Functions carry their queue URLs; the template's own copy is untouched.
	require.Len(t, st.Functions, 4) // stepflow's four: the examples only with DeployExamples=true
	for _, f := range st.Functions {
		for _, s := range f.SQS {
			require.Equal(t, st.QueueURLs[s.QueueLogicalID], s.QueueURL)
		}
	}
	exec := st.Functions[2]
	require.Equal(t, "ExecuteFunction", exec.LogicalID)
	require.Len(t, exec.SQS, 3)
	require.Equal(t, st.QueueURLs["ReadyQueueP1"], exec.SQS[1].QueueURL)
	require.Empty(t, tpl.Functions()[2].SQS[0].QueueURL)

	// LongTimers StepFunctions adds the timer state machine, which the
	// functions are told of: the ASL file as written, STANDARD, a role of
	// the stack's. Nothing else changes.
	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions"))
	again, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "stepflow")
	require.NoError(t, err)
	require.Len(t, again.StateMachines, 1)
	timer := again.StateMachines["TimerStateMachine"]
	require.Regexp(t, `^arn:aws:states:us-east-1:\d{12}:stateMachine:stepflow-TimerStateMachine$`, timer)
	sm, err := sf.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(timer)})
	require.NoError(t, err)
	require.Equal(t, "stepflow-TimerStateMachine", aws.ToString(sm.Name))
	require.Equal(t, ftypes.StateMachineTypeStandard, sm.Type)
	require.Equal(t, readFile(t, "../../statemachine/timer.asl.json"), aws.ToString(sm.Definition))
	require.Regexp(t, `^arn:aws:iam::\d{12}:role/stepflow-TimerStateMachineRole$`, aws.ToString(sm.RoleArn))
	want["STEPFLOW_TIMER_STATE_MACHINE"] = timer
	require.Equal(t, want, again.Env)
	again.StateMachines, again.Env = st.StateMachines, st.Env
	require.Equal(t, st, again)
}

// A parameter takes only a value its AllowedValues name, and only a
// parameter the template declares.
func TestSetParameter(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.ErrorContains(t, tpl.SetParameter("LongTimers", "Cron"), `parameter LongTimers: "Cron" is not one of its AllowedValues [Sweep StepFunctions]`)
	require.ErrorContains(t, tpl.SetParameter("NoSuch", "x"), "parameter NoSuch: the template declares no such parameter")
	require.True(t, tpl.included("JobsTable"))
	require.False(t, tpl.included("TimerStateMachine"))
	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions"))
	require.True(t, tpl.included("TimerStateMachine"))
	require.NoError(t, tpl.checkSupport())
	require.ErrorContains(t, tpl.SetParameter("DeployExamples", "yes"), `parameter DeployExamples: "yes" is not one of its AllowedValues [true false]`)
	require.False(t, tpl.included("EchoFunction"))
	require.NoError(t, tpl.SetParameter("DeployExamples", "true"))
	require.True(t, tpl.included("EchoFunction") && tpl.included("FlakyFunction") && tpl.included("FlakyLogGroup"))
	require.NoError(t, tpl.checkSupport())
}

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions")) // with the state machine

	first, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "idem")
	require.NoError(t, err)
	// Drift on an existing queue or state machine is put back to the
	// template's value.
	_, err = sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(first.QueueURLs["ReadyQueueP2"]),
		Attributes: map[string]string{"VisibilityTimeout": "7"},
	})
	require.NoError(t, err)
	timer := first.StateMachines["TimerStateMachine"]
	_, err = sf.UpdateStateMachine(ctx, &sfn.UpdateStateMachineInput{
		StateMachineArn: aws.String(timer),
		Definition:      aws.String(`{"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}`),
	})
	require.NoError(t, err)

	second, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "idem")
	require.NoError(t, err)
	require.Equal(t, first, second)
	require.Equal(t, "1800", sqsAttributes(t, sq, second.QueueURLs["ReadyQueueP2"])["VisibilityTimeout"])
	sm, err := sf.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(timer)})
	require.NoError(t, err)
	require.Equal(t, readFile(t, "../../statemachine/timer.asl.json"), aws.ToString(sm.Definition))

	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	require.Equal(t, []string{"idem-JobsTable"}, tables.TableNames)
	queues, err := sq.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("idem-")})
	require.NoError(t, err)
	require.Len(t, queues.QueueUrls, 4)
	machines, err := sf.ListStateMachines(ctx, &sfn.ListStateMachinesInput{})
	require.NoError(t, err)
	require.Len(t, machines.StateMachines, 1)
	buckets, err := s3c.ListBuckets(ctx, &s3.ListBucketsInput{})
	require.NoError(t, err)
	require.Len(t, buckets.Buckets, 1)
	require.Equal(t, "idem-databucket", aws.ToString(buckets.Buckets[0].Name))
	buses, err := eb.ListEventBuses(ctx, &eventbridge.ListEventBusesInput{NamePrefix: aws.String("idem-")})
	require.NoError(t, err)
	require.Len(t, buses.EventBuses, 1)
}

func TestProvisionStacksDoNotCollide(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.NoError(t, tpl.SetParameter("LongTimers", "StepFunctions")) // with the state machine

	a, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "alpha")
	require.NoError(t, err)
	b, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "beta")
	require.NoError(t, err)

	require.Equal(t, "alpha-JobsTable", a.Env["STEPFLOW_TABLE"])
	require.Equal(t, "beta-JobsTable", b.Env["STEPFLOW_TABLE"])
	require.Equal(t, "alpha-w-", a.Env["STEPFLOW_WORKER_QUEUE_PREFIX"])
	require.Equal(t, "beta-w-", b.Env["STEPFLOW_WORKER_QUEUE_PREFIX"])
	for id := range a.QueueURLs {
		require.NotEqual(t, a.QueueURLs[id], b.QueueURLs[id], id)
		require.NotEqual(t, a.QueueARNs[id], b.QueueARNs[id], id)
	}
	require.NotEqual(t, a.Env["STEPFLOW_TIMER_STATE_MACHINE"], b.Env["STEPFLOW_TIMER_STATE_MACHINE"])
	// Each stack's redrive points at its own DLQ.
	for _, st := range []*Stack{a, b} {
		rp := sqsAttributes(t, sq, st.QueueURLs["ReadyQueueP0"])["RedrivePolicy"]
		require.Contains(t, rp, st.QueueARNs["DeadLetterQueue"])
	}

	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	names := append([]string(nil), tables.TableNames...)
	sort.Strings(names)
	require.Equal(t, []string{"alpha-JobsTable", "beta-JobsTable"}, names)
}

// A synthetic template exercises, within what template.yaml uses, shapes the
// real one does not have: parameters of both types and Fn::Sub over a
// resource attribute in the environment, a queue whose dead-letter queue
// sorts after it, a state machine of SAM's default type whose Name and Arn
// the environment takes, and an existing table that no longer matches the
// template.
func TestProvisionSyntheticTemplate(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	ctx := testContext(t)

	const base = `
Parameters:
  Mode:
    Type: String
    Default: fast
  Count:
    Type: Number
    Default: 7
Globals:
  Function:
    Timeout: 10
    Environment:
      Variables:
        TABLE: !Ref T
        MODE: !Ref Mode
        COUNT: !Ref Count
        SUB: !Sub "${AWS::StackName}-${Mode}/${T.Arn}"
        QUEUE: !Ref AQueue
        DLQ: !GetAtt ZDead.Arn
        MACHINE: !Ref M
        MACHINE_ARN: !GetAtt M.Arn
        MACHINE_NAME: !GetAtt M.Name
Resources:
  M:
    Type: AWS::Serverless::StateMachine
    Properties:
      DefinitionUri: asl/m.json
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt AQueue.Arn, BatchSize: 3}}
  # AQueue sorts before ZDead but its redrive names ZDead.
  AQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 60
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt ZDead.Arn
        maxReceiveCount: 3
  ZDead:
    Type: AWS::SQS::Queue
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: g, AttributeType: N}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
      TimeToLiveSpecification: {AttributeName: expires, Enabled: true}
      GlobalSecondaryIndexes:
        - IndexName: first
          KeySchema: [{AttributeName: g, KeyType: HASH}]
          Projection: {ProjectionType: ALL}
`
	// The definition lies next to the template, as statemachine/ does.
	const definition = `{"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}`
	write := func(body string) string {
		p := writeTemplate(t, body)
		require.NoError(t, os.Mkdir(filepath.Join(filepath.Dir(p), "asl"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p), "asl", "m.json"), []byte(definition), 0o600))
		return p
	}
	tpl, err := Parse(write(base))
	require.NoError(t, err)
	st, err := Provision(ctx, db, sq, sf, s3c, eb, tpl, "syn")
	require.NoError(t, err)

	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("syn-T")})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"TABLE":        "syn-T",
		"MODE":         "fast",
		"COUNT":        "7",
		"SUB":          "syn-fast/" + aws.ToString(desc.Table.TableArn),
		"QUEUE":        st.QueueURLs["AQueue"],
		"DLQ":          st.QueueARNs["ZDead"],
		"MACHINE":      st.StateMachines["M"],
		"MACHINE_ARN":  st.StateMachines["M"],
		"MACHINE_NAME": "syn-M",
	}, st.Env)
	sm, err := sf.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(st.StateMachines["M"])})
	require.NoError(t, err)
	require.Equal(t, definition, aws.ToString(sm.Definition))
	require.Equal(t, ftypes.StateMachineTypeStandard, sm.Type)
	require.Equal(t, []SQSSource{{QueueLogicalID: "AQueue", BatchSize: 3, QueueURL: st.QueueURLs["AQueue"]}}, st.Functions[0].SQS)
	require.Equal(t, 10, st.Functions[0].Timeout)

	attrs := sqsAttributes(t, sq, st.QueueURLs["AQueue"])
	require.Equal(t, "60", attrs["VisibilityTimeout"])
	require.Contains(t, attrs["RedrivePolicy"], st.QueueARNs["ZDead"])
	ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("syn-T")})
	require.NoError(t, err)
	require.Equal(t, "expires", aws.ToString(ttl.TimeToLiveDescription.AttributeName))

	// An existing table whose keys or indexes differ from the template's is
	// refused, naming the table: bootstrap does not migrate tables.
	for name, changed := range map[string]string{
		"key schema": strings.Replace(base, "        - {AttributeName: pk, KeyType: HASH}\n      TimeToLive",
			"        - {AttributeName: pk, KeyType: HASH}\n        - {AttributeName: g, KeyType: RANGE}\n      TimeToLive", 1),
		"new index": strings.Replace(base, "      GlobalSecondaryIndexes:\n", `      GlobalSecondaryIndexes:
        - IndexName: second
          KeySchema: [{AttributeName: pk, KeyType: HASH}, {AttributeName: g, KeyType: RANGE}]
          Projection: {ProjectionType: KEYS_ONLY}
`, 1),
	} {
		require.NotEqual(t, base, changed, name)
		tpl, err := Parse(write(changed))
		require.NoError(t, err)
		_, err = Provision(ctx, db, sq, sf, s3c, eb, tpl, "syn")
		require.ErrorContains(t, err, "provision table T", name)
		require.ErrorContains(t, err, "delete it to recreate", name)
	}
}

// Provision refuses, before creating anything, a template that uses what
// bootstrap does not handle, naming each thing and where it is.
func TestProvisionRefusesUnsupportedTemplates(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	ctx := testContext(t)

	tpl, err := Parse(writeTemplate(t, `
Globals:
  Function:
    Environment:
      Variables:
        JOINED: !Join ["|", [a, b]]
Resources:
  Fn:
    Type: AWS::Serverless::Function
  Q:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      KinesisStreamSpecification: {StreamArn: arn:aws:kinesis:us-east-1:000000000000:stream/s}
`))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, sf, s3c, eb, tpl, "refuse")
	require.ErrorContains(t, err, "Globals.Function.Environment.Variables.JOINED: intrinsic function Fn::Join")
	require.ErrorContains(t, err, "Resources.Q.Properties.FifoQueue: AWS::SQS::Queue key FifoQueue")
	require.ErrorContains(t, err, "Resources.T.Properties.KinesisStreamSpecification: AWS::DynamoDB::Table key KinesisStreamSpecification")

	// A reference to a resource bootstrap does not create.
	tpl, err = Parse(writeTemplate(t, `
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
  Q:
    Type: AWS::SQS::Queue
Globals:
  Function:
    Environment:
      Variables:
        URL: !Sub "https://${Api}.execute-api.example.com/"
`))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, sf, s3c, eb, tpl, "refuse")
	require.ErrorContains(t, err, "URL: Fn::Sub: Ref Api: Api is a AWS::Serverless::HttpApi, which is not created locally")

	_, err = Provision(ctx, db, sq, sf, s3c, eb, tpl, "bad_name")
	require.ErrorContains(t, err, "stack name")

	// A stack name CloudFormation takes but S3 would not as a bucket's.
	real, err := Parse(realTemplate)
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, sf, s3c, eb, real, "s"+strings.Repeat("x", 60))
	require.ErrorContains(t, err, "provision bucket DataBucket")
	require.ErrorContains(t, err, "use a shorter stack name")
	buckets, err := s3c.ListBuckets(ctx, &s3.ListBucketsInput{})
	require.NoError(t, err)
	require.Empty(t, buckets.Buckets)

	// Nothing was created by the refused runs.
	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	require.Empty(t, tables.TableNames)
	queues, err := sq.ListQueues(ctx, &sqs.ListQueuesInput{})
	require.NoError(t, err)
	require.Empty(t, queues.QueueUrls)
}

// A definition that is JSON but not a state machine is refused by the
// emulator (moto's executing backend parses it), naming the resource. moto
// answers 400 with no error code the SDK knows ("UnknownError" carrying an
// ASLParserException) where AWS answers InvalidDefinition: only the
// failure is checked.
func TestProvisionRefusesAnInvalidDefinition(t *testing.T) {
	t.Parallel()
	db, sq, sf, s3c, eb := clients(startMoto(t))
	p := writeTemplate(t, `
Resources:
  M:
    Type: AWS::Serverless::StateMachine
    Properties:
      Type: STANDARD
      DefinitionUri: m.asl.json
`)
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p), "m.asl.json"), []byte(`{"StartAt": "Nowhere", "States": {}}`), 0o600))
	tpl, err := Parse(p)
	require.NoError(t, err)
	_, err = Provision(testContext(t), db, sq, sf, s3c, eb, tpl, "bad")
	require.ErrorContains(t, err, "provision state machine M: create bad-M")
}

func sqsAttributes(t *testing.T, sq *sqs.Client, url string) map[string]string {
	t.Helper()
	out, err := sq.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []stypes.QueueAttributeName{stypes.QueueAttributeNameAll},
	})
	require.NoError(t, err)
	return out.Attributes
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(raw)
}
