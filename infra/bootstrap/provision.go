package bootstrap

import (
	"context"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Stack is what Provision created and resolved for one stack name.
type Stack struct {
	Name          string
	Env           map[string]string // resolved Globals.Function environment (what every function gets)
	Tables        map[string]string // logical id -> table name
	QueueURLs     map[string]string // logical id -> url
	QueueARNs     map[string]string // logical id -> arn
	StateMachines map[string]string // logical id -> arn
	Buckets       map[string]string // logical id -> bucket name
	EventBuses    map[string]string // logical id -> event bus name
	Functions     []Function        // as Functions(), with SQSSource.QueueURL filled
}

var stackNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,127}$`)

// Provision creates the template's AWS::DynamoDB::Table, AWS::SQS::Queue,
// AWS::Serverless::StateMachine, AWS::S3::Bucket and AWS::Events::EventBus
// resources through the given clients (pointed at a local emulator), named
// "<stack>-<LogicalId>" (a bucket's lower-cased; a bus by its Name), and
// resolves
// the functions' environment. It first refuses, before creating anything, a
// template that uses what this package does not handle. It is idempotent: an
// existing table of the same keys and indexes is reused, an existing queue
// is reused and its attributes set to the template's, an existing state
// machine is reused and its definition set to the template's, an existing
// bucket or event bus is reused.
func Provision(ctx context.Context, db *dynamodb.Client, sq *sqs.Client, sf *sfn.Client, s3c *s3.Client, eb *eventbridge.Client, t *Template, stack string) (*Stack, error) {
	if !stackNameRE.MatchString(stack) {
		return nil, fmt.Errorf("provision: stack name %q must match %s (CloudFormation's rule)", stack, stackNameRE)
	}
	if err := t.checkSupport(); err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	r := newResolver(t, stack)
	s := &Stack{
		Name:          stack,
		Tables:        map[string]string{},
		QueueURLs:     map[string]string{},
		QueueARNs:     map[string]string{},
		StateMachines: map[string]string{},
		Buckets:       map[string]string{},
		EventBuses:    map[string]string{},
	}
	// Every bucket name is checked before anything is created.
	for _, id := range t.ids(typeBucket) {
		name, err := bucketName(stack, id)
		if err != nil {
			return nil, fmt.Errorf("provision bucket %s: %w", id, err)
		}
		s.Buckets[id] = name
	}

	for _, id := range t.ids(typeTable) {
		spec, err := readTable(r, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision table %s: %w", id, err)
		}
		name := stack + "-" + id
		arn, err := provisionTable(ctx, db, name, spec)
		if err != nil {
			return nil, fmt.Errorf("provision table %s: %w", id, err)
		}
		r.refs[id], r.arns[id] = name, arn
		s.Tables[id] = name
	}

	queues := t.ids(typeQueue)
	for _, id := range queues {
		url, arn, err := ensureQueue(ctx, sq, stack+"-"+id)
		if err != nil {
			return nil, fmt.Errorf("provision queue %s: %w", id, err)
		}
		r.refs[id], r.arns[id] = url, arn
		s.QueueURLs[id], s.QueueARNs[id] = url, arn
	}
	for _, id := range queues {
		attrs, err := queueAttributes(r, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision queue %s: %w", id, err)
		}
		if len(attrs) == 0 {
			continue
		}
		_, err = sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(s.QueueURLs[id]), Attributes: attrs})
		if err != nil {
			return nil, fmt.Errorf("provision queue %s: set attributes: %w", id, err)
		}
	}

	for _, id := range t.ids(typeBucket) {
		name := s.Buckets[id]
		if err := ensureBucket(ctx, s3c, name); err != nil {
			return nil, fmt.Errorf("provision bucket %s: %w", id, err)
		}
		r.refs[id], r.arns[id] = name, bucketARN(name)
	}

	for _, id := range t.ids(typeEventBus) {
		name, err := eventBusName(r, stack, id, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision event bus %s: %w", id, err)
		}
		arn, err := ensureEventBus(ctx, eb, name)
		if err != nil {
			return nil, fmt.Errorf("provision event bus %s: %w", id, err)
		}
		r.refs[id], r.arns[id] = name, arn
		s.EventBuses[id] = name
	}

	// The queues' ARNs name the emulator's account, which the state
	// machines' role ARN holds.
	account := accountOf(s.QueueARNs)
	for _, id := range t.ids(typeStateMachine) {
		spec, err := readStateMachine(t, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision state machine %s: %w", id, err)
		}
		name := stack + "-" + id
		arn, err := provisionStateMachine(ctx, sf, name, roleARN(account, stack, id), spec)
		if err != nil {
			return nil, fmt.Errorf("provision state machine %s: %w", id, err)
		}
		r.refs[id], r.arns[id], r.names[id] = arn, arn, name
		s.StateMachines[id] = arn
	}

	var err error
	if s.Env, err = r.env(envVars(t.globalFn)); err != nil {
		return nil, fmt.Errorf("provision: Globals.Function environment: %w", err)
	}
	for _, fn := range t.Functions() {
		for i := range fn.SQS {
			fn.SQS[i].QueueURL = s.QueueURLs[fn.SQS[i].QueueLogicalID]
		}
		s.Functions = append(s.Functions, fn)
	}
	return s, nil
}
