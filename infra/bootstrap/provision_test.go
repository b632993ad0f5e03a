package bootstrap

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	stypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

func TestProvisionRealTemplate(t *testing.T) {
	t.Parallel()
	db, sq := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)

	st, err := Provision(ctx, db, sq, tpl, "stepflow")
	require.NoError(t, err)
	require.Equal(t, "stepflow", st.Name)

	// Table: keys, both GSIs with their projections, billing, TTL, PITR.
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
	require.Equal(t, "KEYS_ONLY ", projectionString(gsis["due"].Projection))

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
		attrs := queueAttributes(t, sq, st.QueueURLs[id])
		require.Equal(t, "1800", attrs["VisibilityTimeout"], id)
		require.Equal(t, "1209600", attrs["MessageRetentionPeriod"], id)
		var rp struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     any    `json:"maxReceiveCount"`
		}
		require.NoError(t, json.Unmarshal([]byte(attrs["RedrivePolicy"]), &rp), attrs["RedrivePolicy"])
		require.Equal(t, st.QueueARNs["DeadLetterQueue"], rp.DeadLetterTargetArn)
		require.EqualValues(t, "5", toString(rp.MaxReceiveCount))
	}
	dlq := queueAttributes(t, sq, st.QueueURLs["DeadLetterQueue"])
	require.Equal(t, "1209600", dlq["MessageRetentionPeriod"])
	require.Empty(t, dlq["RedrivePolicy"])

	// Environment: every reference resolved.
	acct := arnAccount(st.QueueARNs["DeadLetterQueue"])
	require.NotEmpty(t, acct)
	want := map[string]string{
		"STEPFLOW_TABLE":               "stepflow-JobsTable",
		"STEPFLOW_QUEUE_P0":            st.QueueURLs["ReadyQueueP0"],
		"STEPFLOW_QUEUE_P1":            st.QueueURLs["ReadyQueueP1"],
		"STEPFLOW_QUEUE_P2":            st.QueueURLs["ReadyQueueP2"],
		"STEPFLOW_DLQ_ARN":             "arn:aws:sqs:us-east-1:" + acct + ":stepflow-DeadLetterQueue",
		"STEPFLOW_WORKER_QUEUE_PREFIX": "stepflow-w-",
		"STEPFLOW_LEASE_SECONDS":       "1800",
		"STEPFLOW_P0_TENANTS":          "*",
		"STEPFLOW_MAX_WORKER_QUEUES":   "50",
		"STEPFLOW_HTTP_ALLOW":          "",
	}
	require.Equal(t, want, st.Env)
	require.True(t, strings.HasPrefix(st.Env["STEPFLOW_QUEUE_P0"], "http://127.0.0.1:"), st.Env["STEPFLOW_QUEUE_P0"])
	require.Len(t, st.FuncEnv, 4)
	for id, env := range st.FuncEnv {
		require.Equal(t, want, env, id)
	}

	// Functions carry their queue URLs; the template's own copy is untouched.
	require.Len(t, st.Functions, 4)
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
}

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	db, sq := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)

	first, err := Provision(ctx, db, sq, tpl, "idem")
	require.NoError(t, err)
	// Drift on an existing queue is put back to the template's value.
	_, err = sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(first.QueueURLs["ReadyQueueP2"]),
		Attributes: map[string]string{"VisibilityTimeout": "7"},
	})
	require.NoError(t, err)

	second, err := Provision(ctx, db, sq, tpl, "idem")
	require.NoError(t, err)
	require.Equal(t, first, second)
	require.Equal(t, "1800", queueAttributes(t, sq, second.QueueURLs["ReadyQueueP2"])["VisibilityTimeout"])

	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	require.Equal(t, []string{"idem-JobsTable"}, tables.TableNames)
	queues, err := sq.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String("idem-")})
	require.NoError(t, err)
	require.Len(t, queues.QueueUrls, 4)
}

func TestProvisionStacksDoNotCollide(t *testing.T) {
	t.Parallel()
	db, sq := clients(startMoto(t))
	ctx := testContext(t)
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)

	a, err := Provision(ctx, db, sq, tpl, "alpha")
	require.NoError(t, err)
	b, err := Provision(ctx, db, sq, tpl, "beta")
	require.NoError(t, err)

	require.Equal(t, "alpha-JobsTable", a.Env["STEPFLOW_TABLE"])
	require.Equal(t, "beta-JobsTable", b.Env["STEPFLOW_TABLE"])
	require.Equal(t, "alpha-w-", a.Env["STEPFLOW_WORKER_QUEUE_PREFIX"])
	require.Equal(t, "beta-w-", b.Env["STEPFLOW_WORKER_QUEUE_PREFIX"])
	for id := range a.QueueURLs {
		require.NotEqual(t, a.QueueURLs[id], b.QueueURLs[id], id)
		require.NotEqual(t, a.QueueARNs[id], b.QueueARNs[id], id)
	}
	// Each stack's redrive points at its own DLQ.
	for _, st := range []*Stack{a, b} {
		rp := queueAttributes(t, sq, st.QueueURLs["ReadyQueueP0"])["RedrivePolicy"]
		require.Contains(t, rp, st.QueueARNs["DeadLetterQueue"])
	}

	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	names := append([]string(nil), tables.TableNames...)
	sort.Strings(names)
	require.Equal(t, []string{"alpha-JobsTable", "beta-JobsTable"}, names)
}

// A synthetic template exercises what the real one does not: parameters,
// per-function environment, Fn::Sub literals and variables, FIFO queues,
// queue dependency order independent of names, a GSI added to an existing
// table, and refusal of resources that cannot be provisioned.
func TestProvisionSyntheticTemplate(t *testing.T) {
	t.Parallel()
	db, sq := clients(startMoto(t))
	ctx := testContext(t)

	const base = `
Parameters:
  Mode:
    Type: String
    Default: fast
Globals:
  Function:
    Timeout: 10
    Environment:
      Variables:
        TABLE: !Ref T
        MODE: !Ref Mode
        LITERAL: !Sub "${!NotResolved}-${AWS::Region}-${AWS::Partition}.${AWS::URLSuffix}"
        VAR: !Sub ["${A}/${T.Arn}", {A: !GetAtt AQueue.QueueName}]
        JOINED: !Join ["|", [!Ref AWS::StackName, !GetAtt AQueue.QueueUrl]]
        ACCOUNT: !Ref AWS::AccountId
        NUMBER: 42
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          MODE: own
          EXTRA: !GetAtt ZDead.Arn
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt AQueue.Arn, BatchSize: 3}}
  Other:
    Type: AWS::Serverless::Function
  # AQueue sorts before ZDead but depends on it.
  AQueue:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      ContentBasedDeduplication: true
      DelaySeconds: "2"
      ReceiveMessageWaitTimeSeconds: 1
      QueueName: ignored-name
      Tags: [{Key: k, Value: !Ref Unsupported}]
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt ZDead.Arn
        maxReceiveCount: "3"
  ZDead:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: "true"
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: g, AttributeType: N}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
      StreamSpecification: {StreamViewType: NEW_IMAGE}
      TimeToLiveSpecification: {AttributeName: expires, Enabled: "true"}
      GlobalSecondaryIndexes:
        - IndexName: first
          KeySchema: [{AttributeName: g, KeyType: HASH}]
          Projection: {ProjectionType: ALL}
  Unsupported:
    Type: AWS::SNS::Topic
`
	tpl, err := Parse(writeTemplate(t, base))
	require.NoError(t, err)
	st, err := Provision(ctx, db, sq, tpl, "syn")
	require.NoError(t, err)

	acct := arnAccount(st.QueueARNs["ZDead"])
	require.Equal(t, "syn-AQueue.fifo", st.QueueURLs["AQueue"][strings.LastIndex(st.QueueURLs["AQueue"], "/")+1:])
	require.Equal(t, map[string]string{
		"TABLE":   "syn-T",
		"MODE":    "fast",
		"LITERAL": "${NotResolved}-us-east-1-aws.amazonaws.com",
		"VAR":     "syn-AQueue.fifo/arn:aws:dynamodb:us-east-1:" + acct + ":table/syn-T",
		"JOINED":  "syn|" + st.QueueURLs["AQueue"],
		"ACCOUNT": acct,
		"NUMBER":  "42",
	}, st.Env)
	fnEnv := st.FuncEnv["Fn"]
	require.Equal(t, "own", fnEnv["MODE"], "function env wins over Globals")
	require.Equal(t, st.QueueARNs["ZDead"], fnEnv["EXTRA"])
	require.Equal(t, st.Env, st.FuncEnv["Other"])
	require.Equal(t, []SQSSource{{QueueLogicalID: "AQueue", BatchSize: 3, QueueURL: st.QueueURLs["AQueue"]}}, st.Functions[0].SQS)
	require.Equal(t, 10, st.Functions[0].Timeout)

	attrs := queueAttributes(t, sq, st.QueueURLs["AQueue"])
	require.Equal(t, "true", attrs["FifoQueue"])
	require.Equal(t, "true", attrs["ContentBasedDeduplication"])
	require.Equal(t, "2", attrs["DelaySeconds"])
	require.Equal(t, "1", attrs["ReceiveMessageWaitTimeSeconds"])
	require.Contains(t, attrs["RedrivePolicy"], st.QueueARNs["ZDead"])

	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("syn-T")})
	require.NoError(t, err)
	require.NotEmpty(t, aws.ToString(desc.Table.LatestStreamArn))
	ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("syn-T")})
	require.NoError(t, err)
	require.Equal(t, "expires", aws.ToString(ttl.TimeToLiveDescription.AttributeName))

	// The template grows a GSI: re-provisioning adds it to the existing table.
	grown := strings.Replace(base, "      GlobalSecondaryIndexes:\n", `      GlobalSecondaryIndexes:
        - IndexName: second
          KeySchema: [{AttributeName: pk, KeyType: HASH}, {AttributeName: g, KeyType: RANGE}]
          Projection: {ProjectionType: INCLUDE, NonKeyAttributes: [x]}
`, 1)
	tpl2, err := Parse(writeTemplate(t, grown))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, tpl2, "syn")
	require.NoError(t, err)
	desc, err = db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("syn-T")})
	require.NoError(t, err)
	var names []string
	for _, g := range desc.Table.GlobalSecondaryIndexes {
		names = append(names, aws.ToString(g.IndexName))
	}
	sort.Strings(names)
	require.Equal(t, []string{"first", "second"}, names)

	// A changed key schema is refused, naming the table.
	changed := strings.Replace(base, "        - {AttributeName: pk, KeyType: HASH}\n      StreamSpecification",
		"        - {AttributeName: pk, KeyType: HASH}\n        - {AttributeName: g, KeyType: RANGE}\n      StreamSpecification", 1)
	tpl3, err := Parse(writeTemplate(t, changed))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, tpl3, "syn")
	require.ErrorContains(t, err, "provision table T")
	require.ErrorContains(t, err, "key schema")
}

func TestProvisionRefusesWhatItCannotCreate(t *testing.T) {
	t.Parallel()
	db, sq := clients(startMoto(t))
	ctx := testContext(t)

	tpl, err := Parse(writeTemplate(t, `
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          URL: !Sub "https://${Api}.execute-api.${AWS::Region}.${AWS::URLSuffix}/"
`))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, tpl, "refuse")
	require.ErrorContains(t, err, "Api")
	require.ErrorContains(t, err, "AWS::Serverless::HttpApi")

	tpl, err = Parse(writeTemplate(t, `
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment: {Variables: {X: !Ref Nowhere}}
`))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, tpl, "refuse")
	require.ErrorContains(t, err, "Nowhere")

	tpl, err = Parse(writeTemplate(t, `
Resources:
  A:
    Type: AWS::SQS::Queue
    Properties: {RedrivePolicy: {deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 1}}
  B:
    Type: AWS::SQS::Queue
    Properties: {RedrivePolicy: {deadLetterTargetArn: !GetAtt A.Arn, maxReceiveCount: 1}}
`))
	require.NoError(t, err)
	_, err = Provision(ctx, db, sq, tpl, "refuse")
	require.ErrorContains(t, err, "cycle")

	_, err = Provision(ctx, db, sq, tpl, "bad_name")
	require.ErrorContains(t, err, "stack name")

	// Nothing was created by the refused runs.
	tables, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	require.NoError(t, err)
	require.Empty(t, tables.TableNames)
	queues, err := sq.ListQueues(ctx, &sqs.ListQueuesInput{})
	require.NoError(t, err)
	require.Empty(t, queues.QueueUrls)
}

func queueAttributes(t *testing.T, sq *sqs.Client, url string) map[string]string {
	t.Helper()
	out, err := sq.GetQueueAttributes(testContext(t), &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []stypes.QueueAttributeName{stypes.QueueAttributeNameAll},
	})
	require.NoError(t, err)
	return out.Attributes
}

func toString(v any) string {
	s, err := scalarString(v)
	if err != nil {
		return ""
	}
	return s
}
