package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// tableKeys declares the AWS::DynamoDB::Table properties bootstrap creates.
var tableKeys = keySet{
	"BillingMode":                                                 handled,
	"AttributeDefinitions":                                        handled,
	"AttributeDefinitions.AttributeName":                          handled,
	"AttributeDefinitions.AttributeType":                          handled,
	"KeySchema":                                                   handled,
	"KeySchema.AttributeName":                                     handled,
	"KeySchema.KeyType":                                           handled,
	"GlobalSecondaryIndexes":                                      handled,
	"GlobalSecondaryIndexes.IndexName":                            handled,
	"GlobalSecondaryIndexes.KeySchema":                            handled,
	"GlobalSecondaryIndexes.KeySchema.AttributeName":              handled,
	"GlobalSecondaryIndexes.KeySchema.KeyType":                    handled,
	"GlobalSecondaryIndexes.Projection":                           handled,
	"GlobalSecondaryIndexes.Projection.ProjectionType":            handled,
	"TimeToLiveSpecification":                                     handled,
	"TimeToLiveSpecification.AttributeName":                       handled,
	"TimeToLiveSpecification.Enabled":                             handled,
	"PointInTimeRecoverySpecification":                            handled,
	"PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled": handled,
}

// activeTimeout bounds the wait for a table (and its indexes) to become ACTIVE.
const activeTimeout = 2 * time.Minute

// tableSpec is an AWS::DynamoDB::Table's properties, resolved.
type tableSpec struct {
	BillingMode            string
	AttributeDefinitions   []struct{ AttributeName, AttributeType string }
	KeySchema              []keyElement
	GlobalSecondaryIndexes []struct {
		IndexName  string
		KeySchema  []keyElement
		Projection struct{ ProjectionType string }
	}
	TimeToLiveSpecification *struct {
		AttributeName string
		Enabled       bool
	}
	PointInTimeRecoverySpecification *struct{ PointInTimeRecoveryEnabled bool }
}

type keyElement struct{ AttributeName, KeyType string }

// readTable resolves a table's properties. Only on-demand billing is
// handled: it is the template's, and it leaves no throughput to provision.
func readTable(r *resolver, props map[string]any) (*tableSpec, error) {
	rv, err := r.resolve(props)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(rv)
	if err != nil {
		return nil, err
	}
	var spec tableSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("properties: %w", err)
	}
	if spec.BillingMode != string(dtypes.BillingModePayPerRequest) {
		return nil, fmt.Errorf("BillingMode %q: only PAY_PER_REQUEST is handled", spec.BillingMode)
	}
	return &spec, nil
}

func (spec *tableSpec) createInput(name string) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: dtypes.BillingModePayPerRequest,
		KeySchema:   keySchema(spec.KeySchema),
	}
	for _, a := range spec.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, dtypes.AttributeDefinition{
			AttributeName: aws.String(a.AttributeName),
			AttributeType: dtypes.ScalarAttributeType(a.AttributeType),
		})
	}
	for _, g := range spec.GlobalSecondaryIndexes {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, dtypes.GlobalSecondaryIndex{
			IndexName:  aws.String(g.IndexName),
			KeySchema:  keySchema(g.KeySchema),
			Projection: &dtypes.Projection{ProjectionType: dtypes.ProjectionType(g.Projection.ProjectionType)},
		})
	}
	return in
}

func keySchema(ks []keyElement) []dtypes.KeySchemaElement {
	out := make([]dtypes.KeySchemaElement, 0, len(ks))
	for _, k := range ks {
		out = append(out, dtypes.KeySchemaElement{AttributeName: aws.String(k.AttributeName), KeyType: dtypes.KeyType(k.KeyType)})
	}
	return out
}

// provisionTable creates the table, or reuses an existing one of the same
// key schema and indexes, then turns on TTL and point-in-time recovery.
// It returns the table's ARN.
func provisionTable(ctx context.Context, db *dynamodb.Client, name string, spec *tableSpec) (string, error) {
	in := spec.createInput(name)
	desc, err := describeTable(ctx, db, name)
	if err != nil {
		return "", err
	}
	if desc == nil {
		_, err := db.CreateTable(ctx, in)
		var inUse *dtypes.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: created meanwhile, reuse it
			return "", fmt.Errorf("create: %w", err)
		}
	} else {
		var haveIx, wantIx []string
		for _, g := range desc.GlobalSecondaryIndexes {
			haveIx = append(haveIx, indexString(g.IndexName, g.KeySchema, g.Projection))
		}
		for _, g := range in.GlobalSecondaryIndexes {
			wantIx = append(wantIx, indexString(g.IndexName, g.KeySchema, g.Projection))
		}
		have, want := tableShape(desc.KeySchema, haveIx), tableShape(in.KeySchema, wantIx)
		if have != want {
			return "", fmt.Errorf("existing table %s has %s, the template wants %s: delete it to recreate", name, have, want)
		}
	}
	if desc, err = waitActive(ctx, db, name); err != nil {
		return "", err
	}
	if ttl := spec.TimeToLiveSpecification; ttl != nil && ttl.Enabled {
		if err := enableTTL(ctx, db, name, ttl.AttributeName); err != nil {
			return "", err
		}
	}
	if pitr := spec.PointInTimeRecoverySpecification; pitr != nil && pitr.PointInTimeRecoveryEnabled {
		if err := enablePITR(ctx, db, name); err != nil {
			return "", err
		}
	}
	return aws.ToString(desc.TableArn), nil
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

// tableShape describes what an existing table must share with the template
// to be reused: its key schema, and its indexes' keys and projections.
func tableShape(keys []dtypes.KeySchemaElement, indexes []string) string {
	sort.Strings(indexes)
	return strings.Join(append([]string{"key schema " + keysString(keys)}, indexes...), "; ")
}

func indexString(name *string, keys []dtypes.KeySchemaElement, p *dtypes.Projection) string {
	proj := ""
	if p != nil {
		proj = string(p.ProjectionType)
	}
	return fmt.Sprintf("index %s %s %s", aws.ToString(name), keysString(keys), proj)
}

func keysString(ks []dtypes.KeySchemaElement) string {
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// waitActive polls until the table and all its GSIs are ACTIVE (moto is
// immediate, LocalStack takes a moment).
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

// enableTTL turns TTL on unless it already is: DynamoDB refuses to enable it
// twice, and refuses a second attribute.
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
// implement the call is tolerated: recovery changes nothing a test sees.
func enablePITR(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.UpdateContinuousBackups(ctx, &dynamodb.UpdateContinuousBackupsInput{
		TableName: aws.String(name),
		PointInTimeRecoverySpecification: &dtypes.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: aws.Bool(true),
		},
	})
	if err != nil && !notImplemented(err) {
		return fmt.Errorf("enable point-in-time recovery: %w", err)
	}
	return nil
}

// notImplemented reports an emulator's "this operation is not implemented".
func notImplemented(err error) bool {
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
