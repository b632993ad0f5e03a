package bootstrap

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fails when template.yaml starts using something bootstrap neither handles
// nor declares ignored: a resource type, a property, an event type or
// property, a Globals or top-level key, an intrinsic function, or a
// reference bootstrap cannot resolve.
func TestTemplateUsesOnlyWhatBootstrapHandles(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.Empty(t, tpl.survey().problems, "template.yaml uses what infra/bootstrap does not handle")
	require.NoError(t, tpl.checkSupport())
}

// Fails when bootstrap declares something template.yaml no longer uses:
// support for it is dead code (or a dead declaration) to remove.
func TestBootstrapHandlesOnlyWhatTemplateUses(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	used := tpl.survey().used
	var unused []string
	for name, keys := range keySets() {
		if !used[name] {
			unused = append(unused, name)
		}
		for k := range keys {
			if !used[name+": "+k] {
				unused = append(unused, name+": "+k)
			}
		}
	}
	sort.Strings(unused)
	require.Empty(t, unused, "declared in infra/bootstrap but not used by template.yaml")
}

// Every ignored key says why.
func TestIgnoredKeysGiveAReason(t *testing.T) {
	t.Parallel()
	for name, keys := range keySets() {
		for k, reason := range keys {
			if reason != handled {
				require.Greater(t, len(reason), 8, "%s: %s", name, k)
			}
		}
	}
}

// Each unsupported use is refused, naming what it is and where.
func TestSupportCheckNamesWhatIsUnsupported(t *testing.T) {
	t.Parallel()
	// A small template within what bootstrap handles; each case adds to it.
	const base = `
Parameters:
  NoDefault: {Type: String}
Globals:
  Function:
    Timeout: 10
    Environment:
      Variables:
        TABLE: !Ref T
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Policies: [{Statement: [{Effect: Allow, Action: "*", Resource: !Sub "${T.Arn}", Condition: {Bool: {x: y}}}]}]
      Events:
        Get: {Type: HttpApi, Properties: {ApiId: !Ref Api, Method: GET, Path: /x}}
        Q: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn}}
  Q:
    Type: AWS::SQS::Queue
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
`
	tpl, err := Parse(writeTemplate(t, base))
	require.NoError(t, err)
	require.NoError(t, tpl.checkSupport(), "the base template is within what bootstrap handles")

	// Each case replaces old, a piece of base, with new; the error must say want.
	const (
		env     = "        TABLE: !Ref T\n"
		billing = "      BillingMode: PAY_PER_REQUEST\n"
		events  = "      Events:\n"
	)
	for name, c := range map[string]struct{ old, new, want string }{
		"Fn::Join": {env, env + `        JOINED: !Join ["|", [a, b]]` + "\n",
			"Globals.Function.Environment.Variables.JOINED: intrinsic function Fn::Join"},
		"intrinsic under an ignored key": {"Policies: [", `Policies: [{"Fn::Select": [0, [a]]}, `,
			"Resources.Fn.Properties.Policies[0]: intrinsic function Fn::Select"},
		"Fn::If of no condition": {env, env + "        IF: !If [c, a, b]\n",
			"Globals.Function.Environment.Variables: IF: Fn::If: condition c is not declared in Conditions"},
		"condition not of two values": {"Resources:\n", "Conditions:\n  C: !Equals [a]\nResources:\n  Q2: {Type: AWS::SQS::Queue, Condition: C}\n",
			"Resources.Q2.Condition: condition C: only Fn::Equals of two values is handled"},
		"reference to a resource its condition leaves out": {"Resources:\n", "Conditions:\n  Never: !Equals [a, b]\nResources:\n" +
			"  Q2: {Type: AWS::SQS::Queue, Condition: Never}\n" +
			"  Q3: {Type: AWS::SQS::Queue, Properties: {RedrivePolicy: {deadLetterTargetArn: !GetAtt Q2.Arn, maxReceiveCount: 5}}}\n",
			"Resources.Q3.Properties: RedrivePolicy: deadLetterTargetArn: Fn::GetAtt Q2.Arn: Q2 is not created: its condition Never does not hold"},
		"FIFO queue": {"    Type: AWS::SQS::Queue\n", "    Type: AWS::SQS::Queue\n    Properties: {FifoQueue: true}\n",
			"Resources.Q.Properties.FifoQueue: AWS::SQS::Queue key FifoQueue"},
		"Kinesis stream": {billing, billing + "      KinesisStreamSpecification: {StreamArn: x}\n",
			"Resources.T.Properties.KinesisStreamSpecification: AWS::DynamoDB::Table key KinesisStreamSpecification"},
		"DynamoDB stream": {billing, billing + "      StreamSpecification: {StreamViewType: NEW_IMAGE}\n",
			"Resources.T.Properties.StreamSpecification: AWS::DynamoDB::Table key StreamSpecification"},
		"LSI": {billing, billing + "      LocalSecondaryIndexes: []\n",
			"Resources.T.Properties.LocalSecondaryIndexes: AWS::DynamoDB::Table key LocalSecondaryIndexes"},
		"provisioned throughput": {billing, billing + "      ProvisionedThroughput: {ReadCapacityUnits: 1, WriteCapacityUnits: 1}\n",
			"Resources.T.Properties.ProvisionedThroughput: AWS::DynamoDB::Table key ProvisionedThroughput"},
		"nested key": {billing, billing + "      GlobalSecondaryIndexes: [{IndexName: g, KeySchema: [{AttributeName: pk, KeyType: HASH}], " +
			"Projection: {ProjectionType: INCLUDE, NonKeyAttributes: [a]}}]\n",
			"Resources.T.Properties.GlobalSecondaryIndexes[0].Projection.NonKeyAttributes: " +
				"AWS::DynamoDB::Table key GlobalSecondaryIndexes.Projection.NonKeyAttributes"},
		"provisioned billing": {billing, "", // CloudFormation's default is PROVISIONED
			`Resources.T.Properties: BillingMode "": only PAY_PER_REQUEST is handled`},
		"resource type": {"Resources:\n", "Resources:\n  Topic: {Type: AWS::SNS::Topic}\n",
			"Resources.Topic.Type: resource type AWS::SNS::Topic"},
		"resource attribute": {"    Type: AWS::SQS::Queue\n", "    Type: AWS::SQS::Queue\n    DependsOn: T\n",
			"Resources.Q.DependsOn: template key Resources.*.DependsOn"},
		"top-level key": {"Resources:\n", "Mappings: {}\nResources:\n",
			"Mappings: template key Mappings"},
		"Globals section": {"Globals:\n", "Globals:\n  HttpApi: {}\n",
			"Globals.HttpApi: template key Globals.HttpApi"},
		"Globals.Function key": {"    Timeout: 10\n", "    Timeout: 10\n    Layers: [x]\n",
			"Globals.Function.Layers: Globals.Function key Layers"},
		"function environment": {events, "      Environment: {Variables: {A: b}}\n" + events,
			"Resources.Fn.Properties.Environment: AWS::Serverless::Function key Environment"},
		"event type": {events, events + "        S: {Type: DynamoDB, Properties: {Stream: x}}\n",
			"Resources.Fn.Properties.Events.S.Type: event type DynamoDB"},
		"REST API event": {events, events + "        R: {Type: Api, Properties: {Path: /r, Method: get}}\n",
			"Resources.Fn.Properties.Events.R.Type: event type Api"},
		"event property": {events, events + "        Off: {Type: Schedule, Properties: {Schedule: rate(1 minute), Enabled: false}}\n",
			"Resources.Fn.Properties.Events.Off.Properties.Enabled: Schedule event key Enabled"},
		"pseudo parameter": {env, env + "        REGION: !Ref AWS::Region\n",
			"Globals.Function.Environment.Variables: REGION: Ref AWS::Region: the pseudo parameters handled are AWS::StackName, AWS::AccountId and AWS::Partition"},
		"attribute": {env, env + "        URL: !GetAtt Q.QueueUrl\n",
			"Globals.Function.Environment.Variables: URL: Fn::GetAtt Q.QueueUrl: the attributes handled are Arn, and a state machine's Name"},
		"Name of a queue": {env, env + "        NAME: !GetAtt Q.Name\n",
			"NAME: Fn::GetAtt Q.Name: the attributes handled are Arn, and a state machine's Name"},
		"Sub variables": {env, env + "        V: !Sub [\"${a}\", {a: b}]\n",
			"V: Fn::Sub: want a string (the [string, {vars}] form is not handled)"},
		"reference to the API": {env, env + "        API: !Ref Api\n",
			"API: Ref Api: Api is a AWS::Serverless::HttpApi, which is not created locally"},
		"parameter without Default": {env, env + "        P: !Ref NoDefault\n",
			"P: Ref NoDefault: parameter has no Default"},
	} {
		require.Equal(t, 1, strings.Count(base, c.old), name)
		tpl, err := Parse(writeTemplate(t, strings.Replace(base, c.old, c.new, 1)))
		require.NoError(t, err, name)
		err = tpl.checkSupport()
		require.ErrorContains(t, err, c.want, name)
		require.ErrorContains(t, err, "does not handle", name)
	}
}

// A state machine is created from a STANDARD definition file next to the
// template; anything else is refused before anything is created.
func TestSupportCheckStateMachines(t *testing.T) {
	t.Parallel()
	const base = `
Globals:
  Function:
    Environment:
      Variables:
        ARN: !Ref M
        NAME: !GetAtt M.Name
Resources:
  M:
    Type: AWS::Serverless::StateMachine
    Properties:
      Type: STANDARD
      DefinitionUri: m.asl.json
      Policies: [{Statement: [{Effect: Allow, Action: sqs:SendMessage, Resource: "*"}]}]
`
	write := func(body, definition string) string {
		p := writeTemplate(t, body)
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p), "m.asl.json"), []byte(definition), 0o600))
		return p
	}
	const pass = `{"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}`
	tpl, err := Parse(write(base, pass))
	require.NoError(t, err)
	require.NoError(t, tpl.checkSupport(), "the base template is within what bootstrap handles")

	const uri = "      DefinitionUri: m.asl.json\n"
	for name, c := range map[string]struct{ old, new, definition, want string }{
		"EXPRESS": {"Type: STANDARD", "Type: EXPRESS", pass,
			"Resources.M.Properties: Type EXPRESS: only STANDARD is handled"},
		"missing file": {uri, "      DefinitionUri: elsewhere.json\n", pass,
			"Resources.M.Properties: DefinitionUri: open "},
		"S3 location": {uri, "      DefinitionUri: {Bucket: b, Key: k}\n", pass,
			"Resources.M.Properties: DefinitionUri: want a path relative to the template"},
		"not JSON": {uri, uri, "StartAt: P",
			"Resources.M.Properties: DefinitionUri m.asl.json: not a JSON document"},
		"inline definition": {uri, "      Definition: {StartAt: P}\n", pass,
			"Resources.M.Properties.Definition: AWS::Serverless::StateMachine key Definition"},
		"substitutions": {uri, uri + "      DefinitionSubstitutions: {A: b}\n", pass,
			"Resources.M.Properties.DefinitionSubstitutions: AWS::Serverless::StateMachine key DefinitionSubstitutions"},
		"logging": {uri, uri + "      Logging: {Level: ALL}\n", pass,
			"Resources.M.Properties.Logging: AWS::Serverless::StateMachine key Logging"},
	} {
		require.Equal(t, 1, strings.Count(base, c.old), name)
		tpl, err := Parse(write(strings.Replace(base, c.old, c.new, 1), c.definition))
		require.NoError(t, err, name)
		err = tpl.checkSupport()
		require.ErrorContains(t, err, c.want, name)
		require.ErrorContains(t, err, "does not handle", name)
	}
}
