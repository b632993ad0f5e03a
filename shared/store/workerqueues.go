package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// A worker queue's use is a small item of its own (pk Q#<tenant>, sk the
// queue's name, last_used) with an entry in the sparse due index under a
// partition of its own (gsi2pk DQ, gsi2sk its last use plus the idle
// time): a tenant's queues are one query, and the sweep reads only the
// queues whose idle time ran out. One due partition: a queue's record is
// rewritten at most a few times per idle time, so it is never hot.

var _ engine.WorkerQueueUses = (*Store)(nil)

const queueDuePartition = "DQ"

func queueUsePartition(tenant string) string { return "Q#" + tenant }

func queueUseKey(tenant, name string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: queueUsePartition(tenant)},
		"sk": &ddb.AttributeValueMemberS{Value: name},
	}
}

// PutWorkerQueueUse records u unless a later use is recorded (one
// conditional put of about 100 bytes).
func (s *Store) PutWorkerQueueUse(ctx context.Context, u engine.WorkerQueueUse) error {
	it := queueUseKey(u.Tenant, u.Name)
	lu := u.LastUsed.UTC().Format(dueLayout)
	it["last_used"] = &ddb.AttributeValueMemberS{Value: lu}
	it["gsi2pk"] = &ddb.AttributeValueMemberS{Value: queueDuePartition}
	it["gsi2sk"] = &ddb.AttributeValueMemberS{Value: u.Due.UTC().Format(dueLayout)}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk")).
		Or(expression.Name("last_used").LessThanEqual(expression.Value(lu)))).Build()
	if err != nil {
		return fmt.Errorf("record worker queue %s: %w", u.Name, err)
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: it, ConditionExpression: cond.Condition(),
		ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values(),
	})
	if ccf := (*ddb.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		return nil // a later use stands
	}
	if err != nil {
		return fmt.Errorf("record worker queue %s: %w", u.Name, err)
	}
	return nil
}

func decodeQueueUse(it map[string]ddb.AttributeValue) (engine.WorkerQueueUse, bool) {
	pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
	sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
	if pk == nil || sk == nil || !strings.HasPrefix(pk.Value, "Q#") {
		return engine.WorkerQueueUse{}, false
	}
	u := engine.WorkerQueueUse{Tenant: strings.TrimPrefix(pk.Value, "Q#"), Name: sk.Value}
	if v, ok := it["last_used"].(*ddb.AttributeValueMemberS); ok {
		u.LastUsed, _ = time.Parse(dueLayout, v.Value)
	}
	if v, ok := it["gsi2sk"].(*ddb.AttributeValueMemberS); ok {
		u.Due, _ = time.Parse(dueLayout, v.Value)
	}
	return u, true
}

// WorkerQueueUses answers the tenant's recorded queues, by name (one
// query, paged).
func (s *Store) WorkerQueueUses(ctx context.Context, tenant string) ([]engine.WorkerQueueUse, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(
		expression.Key("pk").Equal(expression.Value(queueUsePartition(tenant)))).Build()
	if err != nil {
		return nil, fmt.Errorf("worker queues of %s: %w", tenant, err)
	}
	in := &dynamodb.QueryInput{
		TableName: &s.table, KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}
	var out []engine.WorkerQueueUse
	for {
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("worker queues of %s: %w", tenant, err)
		}
		for _, it := range page.Items {
			if u, ok := decodeQueueUse(it); ok {
				out = append(out, u)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// IdleWorkerQueues answers up to limit records due at or before now, from
// the due index (keys only: tenant, name and due time).
func (s *Store) IdleWorkerQueues(ctx context.Context, now time.Time, limit int) ([]engine.WorkerQueueUse, error) {
	kc := expression.Key("gsi2pk").Equal(expression.Value(queueDuePartition)).
		And(expression.Key("gsi2sk").LessThanEqual(expression.Value(now.UTC().Format(dueLayout))))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, fmt.Errorf("idle worker queues: %w", err)
	}
	page, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(IndexDue), Limit: aws.Int32(int32(limit)),
		KeyConditionExpression: expr.KeyCondition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if err != nil {
		return nil, fmt.Errorf("idle worker queues: %w", err)
	}
	var out []engine.WorkerQueueUse
	for _, it := range page.Items {
		if u, ok := decodeQueueUse(it); ok {
			out = append(out, u)
		}
	}
	return out, nil
}

// ForgetWorkerQueue deletes u's record if its due time is still u.Due,
// and answers the record as it was.
func (s *Store) ForgetWorkerQueue(ctx context.Context, u engine.WorkerQueueUse) (engine.WorkerQueueUse, error) {
	cond, err := expression.NewBuilder().WithCondition(
		expression.Name("gsi2sk").Equal(expression.Value(u.Due.UTC().Format(dueLayout)))).Build()
	if err != nil {
		return u, fmt.Errorf("forget worker queue %s: %w", u.Name, err)
	}
	out, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: queueUseKey(u.Tenant, u.Name), ReturnValues: ddb.ReturnValueAllOld,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values(),
	})
	if ccf := (*ddb.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		return u, fmt.Errorf("forget worker queue %s: %w", u.Name, domain.ErrVersionConflict)
	}
	if err != nil {
		return u, fmt.Errorf("forget worker queue %s: %w", u.Name, err)
	}
	if old, ok := decodeQueueUse(out.Attributes); ok {
		return old, nil
	}
	return u, nil
}
