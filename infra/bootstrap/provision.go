package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	stypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// Stack is what Provision created and resolved for one stack name.
type Stack struct {
	Name      string
	Env       map[string]string            // resolved Globals env (what every function gets)
	FuncEnv   map[string]map[string]string // per function logical id: Globals merged with its own
	Tables    map[string]string            // logical id -> table name
	QueueURLs map[string]string            // logical id -> url
	QueueARNs map[string]string            // logical id -> arn
	Functions []Function                   // as Functions(), with SQSSource.QueueURL filled
}

// DefaultAccountID stands for ${AWS::AccountId} until a queue ARN tells the
// emulator's account.
const DefaultAccountID = "000000000000"

// activeTimeout bounds the wait for a table (and its indexes) to become ACTIVE.
const activeTimeout = 2 * time.Minute

var stackNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,127}$`)

// Provision creates every AWS::DynamoDB::Table and AWS::SQS::Queue of the
// template through the given clients (pointed at a local emulator), named
// "<stack>-<LogicalId>" (".fifo" appended to FIFO queues). It is idempotent:
// an existing table is reused (missing GSIs are added, a different key schema
// is an error), an existing queue is reused and its attributes set to the
// template's. It then resolves the functions' environments.
func Provision(ctx context.Context, db *dynamodb.Client, sq *sqs.Client, t *Template, stack string) (*Stack, error) {
	if !stackNameRE.MatchString(stack) {
		return nil, fmt.Errorf("provision: stack name %q must match %s (CloudFormation's rule)", stack, stackNameRE)
	}
	region := db.Options().Region
	if region == "" {
		region = "us-east-1"
	}
	r := &resolver{
		t: t, stack: stack, region: region, account: DefaultAccountID,
		partition: "aws", urlSuffix: "amazonaws.com",
		tables: map[string]*tableInfo{}, queues: map[string]*queueInfo{},
	}
	if err := t.checkFunctionRefs(); err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}

	var tableIDs, queueIDs []string
	for _, id := range sortedKeys(t.Resources) {
		switch t.Resources[id].Type {
		case typeTable:
			tableIDs = append(tableIDs, id)
		case typeQueue:
			queueIDs = append(queueIDs, id)
		}
	}
	order, err := queueOrder(t, queueIDs) // refuse a cycle before creating anything
	if err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	for _, id := range tableIDs {
		info, err := provisionTable(ctx, db, r, id, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision table %s: %w", id, err)
		}
		r.tables[id] = info
	}
	for _, id := range order {
		info, err := provisionQueue(ctx, sq, r, id, t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("provision queue %s: %w", id, err)
		}
		r.queues[id] = info
		if acct := arnAccount(info.arn); acct != "" && r.account == DefaultAccountID {
			r.account = acct
		}
	}

	s := &Stack{
		Name:      stack,
		FuncEnv:   map[string]map[string]string{},
		Tables:    map[string]string{},
		QueueURLs: map[string]string{},
		QueueARNs: map[string]string{},
	}
	for id, ti := range r.tables {
		s.Tables[id] = ti.name
	}
	for id, qi := range r.queues {
		s.QueueURLs[id] = qi.url
		s.QueueARNs[id] = qi.arn
	}
	if s.Env, err = r.env(envVars(t.globalFn)); err != nil {
		return nil, fmt.Errorf("provision: Globals.Function environment: %w", err)
	}
	for _, fn := range t.Functions() {
		own, err := r.env(envVars(t.Resources[fn.LogicalID].Properties))
		if err != nil {
			return nil, fmt.Errorf("provision: function %s environment: %w", fn.LogicalID, err)
		}
		merged := make(map[string]string, len(s.Env)+len(own))
		for k, v := range s.Env {
			merged[k] = v
		}
		for k, v := range own {
			merged[k] = v
		}
		s.FuncEnv[fn.LogicalID] = merged
		for i := range fn.SQS {
			fn.SQS[i].QueueURL = s.QueueURLs[fn.SQS[i].QueueLogicalID]
		}
		s.Functions = append(s.Functions, fn)
	}
	return s, nil
}

// checkFunctionRefs refuses, before anything is created, a function
// environment or event that refers to a resource Provision cannot create.
func (t *Template) checkFunctionRefs() error {
	check := func(where string, v any) error {
		for _, id := range refs(v) {
			if _, isParam := t.params[id]; isParam {
				continue
			}
			res, ok := t.Resources[id]
			if !ok {
				return fmt.Errorf("%s refers to %s, which is neither a parameter nor a resource", where, id)
			}
			if res.Type != typeTable && res.Type != typeQueue {
				return fmt.Errorf("%s: %w", where, &notProvisionedError{id, res.Type})
			}
		}
		return nil
	}
	if err := check("Globals.Function.Environment", envVars(t.globalFn)); err != nil {
		return err
	}
	for _, fn := range t.functions {
		if err := check("function "+fn.LogicalID+" Environment", envVars(t.Resources[fn.LogicalID].Properties)); err != nil {
			return err
		}
	}
	return nil
}

func envVars(props map[string]any) map[string]any {
	env, _ := props["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	return vars
}

func (r *resolver) env(vars map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(vars))
	for _, k := range sortedKeys(vars) {
		s, err := r.str(vars[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}

// ---------------------------------------------------------------- tables

// cfnTable mirrors the AWS::DynamoDB::Table properties Provision translates.
type cfnTable struct {
	AttributeDefinitions []struct {
		AttributeName string
		AttributeType string
	}
	KeySchema               []cfnKey
	BillingMode             string
	ProvisionedThroughput   *cfnThroughput
	GlobalSecondaryIndexes  []cfnIndex
	LocalSecondaryIndexes   []cfnIndex
	StreamSpecification     *struct{ StreamViewType string }
	TimeToLiveSpecification *struct {
		AttributeName string
		Enabled       flexBool
	}
	PointInTimeRecoverySpecification *struct{ PointInTimeRecoveryEnabled flexBool }
}

type cfnKey struct{ AttributeName, KeyType string }

type cfnThroughput struct{ ReadCapacityUnits, WriteCapacityUnits flexInt }

type cfnIndex struct {
	IndexName  string
	KeySchema  []cfnKey
	Projection struct {
		ProjectionType   string
		NonKeyAttributes []string
	}
	ProvisionedThroughput *cfnThroughput
}

var tableKeys = []string{
	"AttributeDefinitions", "KeySchema", "BillingMode", "ProvisionedThroughput",
	"GlobalSecondaryIndexes", "LocalSecondaryIndexes", "StreamSpecification",
	"TimeToLiveSpecification", "PointInTimeRecoverySpecification",
}

func provisionTable(ctx context.Context, db *dynamodb.Client, r *resolver, id string, props map[string]any) (*tableInfo, error) {
	var spec cfnTable
	if err := r.decode(props, tableKeys, &spec); err != nil {
		return nil, err
	}
	name := r.stack + "-" + id
	in := spec.createInput(name)

	desc, err := describeTable(ctx, db, name)
	if err != nil {
		return nil, err
	}
	if desc == nil {
		_, err := db.CreateTable(ctx, in)
		var inUse *dtypes.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: created meanwhile, reuse it
			return nil, fmt.Errorf("create: %w", err)
		}
	} else {
		if !sameKeys(desc.KeySchema, in.KeySchema) {
			return nil, fmt.Errorf("existing table %s has key schema %s, the template wants %s: delete it to recreate",
				name, keysString(desc.KeySchema), keysString(in.KeySchema))
		}
		if err := addMissingIndexes(ctx, db, name, desc, in); err != nil {
			return nil, err
		}
	}
	if desc, err = waitActive(ctx, db, name); err != nil {
		return nil, err
	}

	if ttl := spec.TimeToLiveSpecification; ttl != nil && bool(ttl.Enabled) {
		if err := enableTTL(ctx, db, name, ttl.AttributeName); err != nil {
			return nil, err
		}
	}
	if pitr := spec.PointInTimeRecoverySpecification; pitr != nil && bool(pitr.PointInTimeRecoveryEnabled) {
		if err := enablePITR(ctx, db, name); err != nil {
			return nil, err
		}
	}
	return &tableInfo{name: name, arn: aws.ToString(desc.TableArn), streamARN: aws.ToString(desc.LatestStreamArn)}, nil
}

func (spec *cfnTable) createInput(name string) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: dtypes.BillingModeProvisioned, // CloudFormation's default
	}
	if spec.BillingMode != "" {
		in.BillingMode = dtypes.BillingMode(spec.BillingMode)
	}
	provisioned := in.BillingMode == dtypes.BillingModeProvisioned
	for _, a := range spec.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, dtypes.AttributeDefinition{
			AttributeName: aws.String(a.AttributeName),
			AttributeType: dtypes.ScalarAttributeType(a.AttributeType),
		})
	}
	in.KeySchema = keySchema(spec.KeySchema)
	if provisioned {
		in.ProvisionedThroughput = spec.ProvisionedThroughput.sdk()
	}
	for _, g := range spec.GlobalSecondaryIndexes {
		gsi := dtypes.GlobalSecondaryIndex{
			IndexName:  aws.String(g.IndexName),
			KeySchema:  keySchema(g.KeySchema),
			Projection: g.projection(),
		}
		if provisioned {
			gsi.ProvisionedThroughput = g.ProvisionedThroughput.sdk()
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, gsi)
	}
	for _, l := range spec.LocalSecondaryIndexes {
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, dtypes.LocalSecondaryIndex{
			IndexName:  aws.String(l.IndexName),
			KeySchema:  keySchema(l.KeySchema),
			Projection: l.projection(),
		})
	}
	if s := spec.StreamSpecification; s != nil && s.StreamViewType != "" {
		in.StreamSpecification = &dtypes.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: dtypes.StreamViewType(s.StreamViewType),
		}
	}
	return in
}

func keySchema(ks []cfnKey) []dtypes.KeySchemaElement {
	out := make([]dtypes.KeySchemaElement, 0, len(ks))
	for _, k := range ks {
		out = append(out, dtypes.KeySchemaElement{AttributeName: aws.String(k.AttributeName), KeyType: dtypes.KeyType(k.KeyType)})
	}
	return out
}

func (ix cfnIndex) projection() *dtypes.Projection {
	p := &dtypes.Projection{ProjectionType: dtypes.ProjectionType(ix.Projection.ProjectionType)}
	if p.ProjectionType == "" {
		p.ProjectionType = dtypes.ProjectionTypeKeysOnly
	}
	if len(ix.Projection.NonKeyAttributes) > 0 {
		p.NonKeyAttributes = append([]string(nil), ix.Projection.NonKeyAttributes...)
	}
	return p
}

func (p *cfnThroughput) sdk() *dtypes.ProvisionedThroughput {
	if p == nil {
		return nil
	}
	return &dtypes.ProvisionedThroughput{
		ReadCapacityUnits:  aws.Int64(int64(p.ReadCapacityUnits)),
		WriteCapacityUnits: aws.Int64(int64(p.WriteCapacityUnits)),
	}
}

// describeTable returns nil, nil when the table does not exist.
func describeTable(ctx context.Context, db *dynamodb.Client, name string) (*dtypes.TableDescription, error) {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var nf *dtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	return out.Table, nil
}

func sameKeys(a, b []dtypes.KeySchemaElement) bool {
	return keysString(a) == keysString(b)
}

func keysString(ks []dtypes.KeySchemaElement) string {
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func projectionString(p *dtypes.Projection) string {
	if p == nil {
		return ""
	}
	attrs := append([]string(nil), p.NonKeyAttributes...)
	sort.Strings(attrs)
	return string(p.ProjectionType) + " " + strings.Join(attrs, ",")
}

// addMissingIndexes creates, one at a time as DynamoDB requires, the GSIs the
// template declares and the existing table lacks. A GSI that exists with a
// different key schema or projection is an error.
func addMissingIndexes(ctx context.Context, db *dynamodb.Client, name string, desc *dtypes.TableDescription, in *dynamodb.CreateTableInput) error {
	have := map[string]dtypes.GlobalSecondaryIndexDescription{}
	for _, g := range desc.GlobalSecondaryIndexes {
		have[aws.ToString(g.IndexName)] = g
	}
	for _, want := range in.GlobalSecondaryIndexes {
		ix := aws.ToString(want.IndexName)
		if got, ok := have[ix]; ok {
			if !sameKeys(got.KeySchema, want.KeySchema) || projectionString(got.Projection) != projectionString(want.Projection) {
				return fmt.Errorf("existing table %s: index %s is %s %s, the template wants %s %s: delete the table to recreate",
					name, ix, keysString(got.KeySchema), projectionString(got.Projection),
					keysString(want.KeySchema), projectionString(want.Projection))
			}
			continue
		}
		if _, err := waitActive(ctx, db, name); err != nil {
			return err
		}
		_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:            aws.String(name),
			AttributeDefinitions: in.AttributeDefinitions,
			GlobalSecondaryIndexUpdates: []dtypes.GlobalSecondaryIndexUpdate{{
				Create: &dtypes.CreateGlobalSecondaryIndexAction{
					IndexName:             want.IndexName,
					KeySchema:             want.KeySchema,
					Projection:            want.Projection,
					ProvisionedThroughput: want.ProvisionedThroughput,
				},
			}},
		})
		if err != nil {
			return fmt.Errorf("add index %s: %w", ix, err)
		}
	}
	return nil
}

// waitActive polls until the table and all its GSIs are ACTIVE (moto is
// immediate, LocalStack takes a moment, AWS minutes).
func waitActive(ctx context.Context, db *dynamodb.Client, name string) (*dtypes.TableDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, activeTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		desc, err := describeTable(ctx, db, name)
		if err != nil {
			return nil, err
		}
		if desc != nil && desc.TableStatus == dtypes.TableStatusActive && indexesActive(desc) {
			return desc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for table %s to be ACTIVE: %w", name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func indexesActive(desc *dtypes.TableDescription) bool {
	for _, g := range desc.GlobalSecondaryIndexes {
		if g.IndexStatus != "" && g.IndexStatus != dtypes.IndexStatusActive {
			return false
		}
	}
	return true
}

func enableTTL(ctx context.Context, db *dynamodb.Client, name, attr string) error {
	out, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("describe TTL: %w", err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case dtypes.TimeToLiveStatusEnabled, dtypes.TimeToLiveStatusEnabling:
			if got := aws.ToString(d.AttributeName); got != attr {
				return fmt.Errorf("TTL is enabled on attribute %q, the template wants %q: disable it first", got, attr)
			}
			return nil
		}
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &dtypes.TimeToLiveSpecification{
			AttributeName: aws.String(attr),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("enable TTL on %s: %w", attr, err)
	}
	return nil
}

// enablePITR turns point-in-time recovery on. An emulator that does not
// implement the call is tolerated; any other error is not.
func enablePITR(ctx context.Context, db *dynamodb.Client, name string) error {
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		_, err := db.UpdateContinuousBackups(ctx, &dynamodb.UpdateContinuousBackupsInput{
			TableName: aws.String(name),
			PointInTimeRecoverySpecification: &dtypes.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: aws.Bool(true),
			},
		})
		if err == nil || notSupported(err) {
			return nil
		}
		// AWS answers this for a moment after the table is created.
		var unavailable *dtypes.ContinuousBackupsUnavailableException
		if !errors.As(err, &unavailable) || attempt >= 10 {
			return fmt.Errorf("enable point-in-time recovery: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enable point-in-time recovery: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// notSupported reports an emulator's "this operation is not implemented".
func notSupported(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "UnknownOperationException", "NotImplemented", "NotImplementedException",
			"InvalidAction", "UnsupportedOperation", "UnsupportedOperationException":
			return true
		}
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == 501
}

// ---------------------------------------------------------------- queues

// queueAttrs maps the AWS::SQS::Queue properties Provision translates to
// queue attributes. FifoQueue is only given at creation.
var queueAttrs = []string{
	"VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds",
	"ReceiveMessageWaitTimeSeconds", "MaximumMessageSize",
	"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit",
	"RedrivePolicy", "RedriveAllowPolicy",
}

func provisionQueue(ctx context.Context, sq *sqs.Client, r *resolver, id string, props map[string]any) (*queueInfo, error) {
	attrs := map[string]string{}
	for _, k := range queueAttrs {
		v, ok := props[k]
		if !ok {
			continue
		}
		var s string
		var err error
		if k == "RedrivePolicy" || k == "RedriveAllowPolicy" {
			s, err = r.jsonAttr(v)
		} else {
			s, err = r.str(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		attrs[k] = s
	}
	fifo := false
	if v, ok := props["FifoQueue"]; ok {
		s, err := r.str(v)
		if err != nil {
			return nil, fmt.Errorf("FifoQueue: %w", err)
		}
		fifo, _ = strconv.ParseBool(s)
	}
	name := r.stack + "-" + id
	if fifo {
		name += ".fifo"
	}
	if len(name) > 80 {
		return nil, fmt.Errorf("queue name %s is longer than SQS's 80 characters: use a shorter stack name", name)
	}

	var url string
	got, err := sq.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	switch {
	case err == nil:
		url = aws.ToString(got.QueueUrl)
		if len(attrs) > 0 {
			if _, err := sq.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs}); err != nil {
				return nil, fmt.Errorf("set attributes of existing %s: %w", name, err)
			}
		}
	case queueMissing(err):
		create := map[string]string{}
		for k, v := range attrs {
			create[k] = v
		}
		if fifo {
			create["FifoQueue"] = "true"
		}
		out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: create})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		url = aws.ToString(out.QueueUrl)
	default:
		return nil, fmt.Errorf("get url of %s: %w", name, err)
	}

	qa, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []stypes.QueueAttributeName{stypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return nil, fmt.Errorf("get ARN of %s: %w", name, err)
	}
	arn := qa.Attributes[string(stypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		return nil, fmt.Errorf("get ARN of %s: emulator returned no QueueArn", name)
	}
	return &queueInfo{name: name, url: url, arn: arn}, nil
}

func queueMissing(err error) bool {
	var qne *stypes.QueueDoesNotExist
	if errors.As(err, &qne) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) &&
		(ae.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || ae.ErrorCode() == "QueueDoesNotExist")
}

// queueOrder sorts queues so that a queue comes after the queues its
// properties refer to (a RedrivePolicy's dead-letter queue first).
func queueOrder(t *Template, ids []string) ([]string, error) {
	isQueue := map[string]bool{}
	for _, id := range ids {
		isQueue[id] = true
	}
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var order []string
	var visit func(id string, path []string) error
	visit = func(id string, path []string) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("queues refer to each other in a cycle: %s", strings.Join(append(path, id), " -> "))
		}
		state[id] = visiting
		props := t.Resources[id].Properties
		used := map[string]any{}
		for _, k := range queueAttrs {
			if v, ok := props[k]; ok {
				used[k] = v
			}
		}
		for _, dep := range refs(used) {
			if isQueue[dep] {
				if err := visit(dep, append(path, id)); err != nil {
					return err
				}
			}
		}
		state[id] = done
		order = append(order, id)
		return nil
	}
	for _, id := range ids {
		if err := visit(id, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// arnAccount returns the account field of an ARN ("" if it has none).
func arnAccount(arn string) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) < 6 {
		return ""
	}
	return parts[4]
}

// ---------------------------------------------------------------- decoding

// decode resolves the listed properties and decodes them into out (a struct
// whose field names are CloudFormation's property names).
func (r *resolver) decode(props map[string]any, keys []string, out any) error {
	picked := map[string]any{}
	for _, k := range keys {
		v, ok := props[k]
		if !ok {
			continue
		}
		rv, err := r.resolve(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		picked[k] = rv
	}
	b, err := json.Marshal(picked)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("properties: %w", err)
	}
	return nil
}

// flexInt accepts 5 and "5", as CloudFormation does.
type flexInt int

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	*f = flexInt(n)
	return nil
}

// flexBool accepts true and "true", as CloudFormation does.
type flexBool bool

func (f *flexBool) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseBool(strings.Trim(string(b), `"`))
	if err != nil {
		return fmt.Errorf("want a boolean, got %s", b)
	}
	*f = flexBool(v)
	return nil
}
