package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// ScheduleDueShards spreads the schedules' due-index writes (one per
// tick); a sweep queries each once.
const ScheduleDueShards = 4

// Schedules keeps schedules in the jobs' table: a tenant's schedules are
// one partition (pk C#<tenant>, sk the schedule id), so a listing is one
// query, and a running schedule has an entry in the sparse due index
// under partitions of its own (gsi2pk DS#<shard>, gsi2sk its next tick),
// so the sweep reads only what is due. A schedule is its version (the
// conditions') beside its compressed JSON document.
type Schedules struct {
	db    API
	table string
}

var _ engine.Schedules = (*Schedules)(nil)

// NewSchedules answers the schedule store over table.
func NewSchedules(db API, table string) *Schedules { return &Schedules{db: db, table: table} }

func schedulePartition(tenant string) string { return "C#" + tenant }

func scheduleKey(tenant, id string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: schedulePartition(tenant)},
		"sk": &ddb.AttributeValueMemberS{Value: id},
	}
}

func scheduleItem(s *domain.Schedule) (map[string]ddb.AttributeValue, error) {
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode schedule %s: %w", s.ID, err)
	}
	z, err := deflate(doc)
	if err != nil {
		return nil, fmt.Errorf("compress schedule %s: %w", s.ID, err)
	}
	it := scheduleKey(s.Tenant, s.ID)
	it["version"] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(s.Version, 10)}
	it["doc"] = &ddb.AttributeValueMemberB{Value: z}
	if s.NextAt != nil && !s.Paused {
		it["gsi2pk"] = &ddb.AttributeValueMemberS{Value: fmt.Sprintf("DS#%d", shardOf(s.Tenant+"#"+s.ID, ScheduleDueShards))}
		it["gsi2sk"] = &ddb.AttributeValueMemberS{Value: s.NextAt.UTC().Format(dueLayout)}
	}
	return it, nil
}

func decodeSchedule(id string, it map[string]ddb.AttributeValue) (*domain.Schedule, error) {
	doc, ok := it["doc"].(*ddb.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("schedule %s: %w (item has no doc)", id, domain.ErrUnreadable)
	}
	raw, err := inflate(doc.Value)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w (%v)", id, domain.ErrUnreadable, err)
	}
	var s domain.Schedule
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schedule %s: %w (%v)", id, domain.ErrUnreadable, err)
	}
	return &s, nil
}

// versionCondition is the condition of every change: the stored schedule
// is still the version it was decided at (a deleted one is not).
func versionCondition(v int64) (expression.Expression, error) {
	return expression.NewBuilder().WithCondition(expression.Name("version").Equal(expression.Value(v))).Build()
}

// Create writes a new schedule at version 1, or answers
// engine.ErrScheduleExists.
func (st *Schedules) Create(ctx context.Context, s *domain.Schedule) error {
	s.Version = 1
	it, err := scheduleItem(s)
	if err != nil {
		return err
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
	if err != nil {
		return fmt.Errorf("create schedule %s: %w", s.ID, err)
	}
	_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.table, Item: it,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(),
	})
	var ccf *ddb.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("create schedule %s: %w", s.ID, engine.ErrScheduleExists)
	}
	if err != nil {
		return fmt.Errorf("create schedule %s: %w", s.ID, err)
	}
	return nil
}

// Get reads a schedule with a strongly consistent read.
func (st *Schedules) Get(ctx context.Context, tenant, id string) (*domain.Schedule, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &st.table, ConsistentRead: aws.Bool(true), Key: scheduleKey(tenant, id),
	})
	if err != nil {
		return nil, fmt.Errorf("get schedule %s: %w", id, err)
	}
	if out.Item == nil {
		return nil, fmt.Errorf("schedule %s: %w", id, domain.ErrNotFound)
	}
	return decodeSchedule(id, out.Item)
}

// List pages through a tenant's schedules by id: one query of its
// partition per page.
func (st *Schedules) List(ctx context.Context, tenant, cursor string, limit int32) ([]*domain.Schedule, string, error) {
	after, err := engine.DecodeCursor(cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	if limit < 1 {
		return nil, "", domain.Invalid("limit", "must be at least 1")
	}
	kc := expression.Key("pk").Equal(expression.Value(schedulePartition(tenant)))
	if after != "" {
		kc = kc.And(expression.Key("sk").GreaterThan(expression.Value(after)))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, "", fmt.Errorf("list schedules: %w", err)
	}
	out, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &st.table, ConsistentRead: aws.Bool(true), Limit: aws.Int32(limit),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if err != nil {
		return nil, "", fmt.Errorf("list schedules: %w", err)
	}
	list := make([]*domain.Schedule, 0, len(out.Items))
	for _, it := range out.Items {
		sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
		if sk == nil {
			continue
		}
		s, err := decodeSchedule(sk.Value, it)
		if err != nil {
			return nil, "", err
		}
		list = append(list, s)
	}
	if len(out.LastEvaluatedKey) == 0 || len(list) == 0 {
		return list, "", nil
	}
	return list, engine.EncodeCursor(tenant, list[len(list)-1].ID), nil
}

// Delete removes a schedule, and with it its due-index entry.
func (st *Schedules) Delete(ctx context.Context, tenant, id string) error {
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeExists(expression.Name("pk"))).Build()
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	_, err = st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &st.table, Key: scheduleKey(tenant, id),
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(),
	})
	var ccf *ddb.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("schedule %s: %w", id, domain.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return nil
}

// Save writes s if the stored one is still at s.Version, and bumps it.
func (st *Schedules) Save(ctx context.Context, s *domain.Schedule) error {
	cond, err := versionCondition(s.Version)
	if err != nil {
		return fmt.Errorf("save schedule %s: %w", s.ID, err)
	}
	s.Version++
	it, err := scheduleItem(s)
	if err != nil {
		s.Version--
		return err
	}
	_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.table, Item: it,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values(),
	})
	if err != nil {
		s.Version--
		var ccf *ddb.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return fmt.Errorf("save schedule %s at version %d: %w", s.ID, s.Version, domain.ErrVersionConflict)
		}
		return fmt.Errorf("save schedule %s: %w", s.ID, err)
	}
	return nil
}

// Fire saves s and creates run in one transaction: the schedule at its
// version, the job where none is. Of two sweeps firing one tick, the
// second finds the schedule moved on and writes nothing.
func (st *Schedules) Fire(ctx context.Context, s *domain.Schedule, run *domain.Job) error {
	cond, err := versionCondition(s.Version)
	if err != nil {
		return fmt.Errorf("fire schedule %s: %w", s.ID, err)
	}
	jobCond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
	if err != nil {
		return fmt.Errorf("fire schedule %s: %w", s.ID, err)
	}
	run.Version = 1
	w, err := jobWriteOf(run, nil)
	if err != nil {
		return err
	}
	jobItem := w.item
	s.Version++
	schedItem, err := scheduleItem(s)
	if err != nil {
		s.Version--
		return err
	}
	items := []ddb.TransactWriteItem{
		{Put: &ddb.Put{TableName: &st.table, Item: schedItem, ConditionExpression: cond.Condition(),
			ExpressionAttributeNames: cond.Names(), ExpressionAttributeValues: cond.Values()}},
		{Put: &ddb.Put{TableName: &st.table, Item: jobItem, ConditionExpression: jobCond.Condition(),
			ExpressionAttributeNames: jobCond.Names()}},
	}
	for _, p := range w.parts { // a long run is written with its parts (parts.go)
		items = append(items, ddb.TransactWriteItem{Put: &ddb.Put{TableName: &st.table, Item: p.item}})
	}
	if len(items) > maxTransactItems {
		s.Version--
		return &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("schedule %s: its job would be stored in %d parts; the limit is %d", s.ID, len(w.parts), maxTransactItems-2)}
	}
	_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err != nil {
		s.Version--
		// A condition that failed, or a transaction that met another on
		// the same items (TransactionConflict): the caller reads again
		// and decides on what it finds.
		var tce *ddb.TransactionCanceledException
		if errors.As(err, &tce) {
			return fmt.Errorf("fire schedule %s at version %d: %w (%v)", s.ID, s.Version, domain.ErrVersionConflict, err)
		}
		return fmt.Errorf("fire schedule %s: %w", s.ID, err)
	}
	keepLayout(run, w.layout)
	return nil
}

// Due lists up to limit schedules per shard whose next tick is at or
// before now, from the due index.
func (st *Schedules) Due(ctx context.Context, now time.Time, limit int) ([]engine.DueSchedule, error) {
	var keys []engine.DueSchedule
	for shard := range ScheduleDueShards {
		kc := expression.Key("gsi2pk").Equal(expression.Value(fmt.Sprintf("DS#%d", shard))).
			And(expression.Key("gsi2sk").LessThanEqual(expression.Value(now.UTC().Format(dueLayout))))
		expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
		if err != nil {
			return nil, fmt.Errorf("due schedules query: %w", err)
		}
		out, err := st.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &st.table, IndexName: aws.String(IndexDue), Limit: aws.Int32(int32(limit)),
			KeyConditionExpression:    expr.KeyCondition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if err != nil {
			return nil, fmt.Errorf("due schedules query shard %d: %w", shard, err)
		}
		for _, it := range out.Items {
			pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
			sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
			if pk == nil || sk == nil {
				continue
			}
			if tenant, ok := strings.CutPrefix(pk.Value, "C#"); ok {
				keys = append(keys, engine.DueSchedule{Tenant: tenant, ID: sk.Value})
			}
		}
	}
	return keys, nil
}
