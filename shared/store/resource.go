package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Resources live beside jobs: pk R#<tenant>, sk <resource id>, one item
// each with its slots (holders) and its line of waiters, so taking a slot
// is one conditional write on the item's version, and a tenant's
// resources are one Query of one partition.

var _ engine.Resources = (*Store)(nil)

func resourcePartition(tenant string) string { return "R#" + tenant }

func resourceKey(tenant, id string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: resourcePartition(tenant)},
		"sk": &ddb.AttributeValueMemberS{Value: id},
	}
}

var resourceDecoder = attributevalue.NewDecoder()

func decodeResource(it map[string]ddb.AttributeValue) (*domain.Resource, error) {
	var r domain.Resource
	if err := resourceDecoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &r); err != nil {
		return nil, fmt.Errorf("decode resource: %w", err)
	}
	return &r, nil
}

// GetResource reads a resource with a strongly consistent read.
func (s *Store) GetResource(ctx context.Context, tenant, id string) (*domain.Resource, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, ConsistentRead: aws.Bool(true), Key: resourceKey(tenant, id)})
	if err != nil {
		return nil, fmt.Errorf("get resource %s: %w", id, err)
	}
	if out.Item == nil {
		return nil, fmt.Errorf("resource %s: %w", id, domain.ErrNotFound)
	}
	return decodeResource(out.Item)
}

// ListResources queries the tenant's partition (strongly consistent: a
// slot is chosen from it).
func (s *Store) ListResources(ctx context.Context, tenant string) ([]*domain.Resource, error) {
	kc := expression.Key("pk").Equal(expression.Value(resourcePartition(tenant)))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, fmt.Errorf("list resources: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(domain.MaxResourcesPerTenant),
		KeyConditionExpression: expr.KeyCondition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}
	var out []*domain.Resource
	for len(out) < domain.MaxResourcesPerTenant {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list resources of tenant %s: %w", tenant, err)
		}
		for _, it := range page.Items {
			r, err := decodeResource(it)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		if page.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	return out[:min(len(out), domain.MaxResourcesPerTenant)], nil
}

// SaveResource writes r if the stored one is still at r.Version (none
// stored for version 0), and bumps r.Version.
func (s *Store) SaveResource(ctx context.Context, r *domain.Resource) error {
	cond := expression.Name("version").Equal(expression.Value(r.Version))
	if r.Version == 0 {
		cond = expression.AttributeNotExists(expression.Name("pk"))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("save resource %s: %w", r.ID, err)
	}
	r.Version++
	it, err := attributevalue.MarshalMap(r)
	if err != nil {
		r.Version--
		return fmt.Errorf("encode resource %s: %w", r.ID, err)
	}
	for k, v := range resourceKey(r.Tenant, r.ID) {
		it[k] = v
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: it, ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if err != nil {
		r.Version--
		var ccf *ddb.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return fmt.Errorf("save resource %s at version %d: %w", r.ID, r.Version, domain.ErrVersionConflict)
		}
		return fmt.Errorf("save resource %s: %w", r.ID, err)
	}
	return nil
}

// DeleteResource deletes a resource still at version.
func (s *Store) DeleteResource(ctx context.Context, tenant, id string, version int64) error {
	expr, err := expression.NewBuilder().WithCondition(expression.Name("version").Equal(expression.Value(version))).Build()
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", id, err)
	}
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: resourceKey(tenant, id), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *ddb.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("delete resource %s: %w", id, domain.ErrVersionConflict)
	}
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", id, err)
	}
	return nil
}

// ExtendHolder moves a held slot's expiry in one update that reads
// nothing; a slot no longer held answers domain.ErrLeaseLost.
func (s *Store) ExtendHolder(ctx context.Context, tenant, id, key string, until time.Time) error {
	at, err := attributevalue.Marshal(until)
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: resourceKey(tenant, id),
		UpdateExpression:          aws.String("SET holders.#k.expires_at = :t, version = version + :one"),
		ConditionExpression:       aws.String("attribute_exists(holders.#k)"),
		ExpressionAttributeNames:  map[string]string{"#k": key},
		ExpressionAttributeValues: map[string]ddb.AttributeValue{":t": at, ":one": &ddb.AttributeValueMemberN{Value: "1"}},
	})
	if ccf := (*ddb.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		return fmt.Errorf("%w: its slot of resource %s is no longer held (it ran out, and another attempt may hold it now); stop this attempt's work", domain.ErrLeaseLost, id)
	}
	if err != nil {
		return fmt.Errorf("extend slot %s of resource %s: %w", key, id, err)
	}
	return nil
}
