package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// maxShardPages bounds the pages one listing reads from each shard when a
// filter skips many jobs; the caller gets a cursor to go on.
const maxShardPages = 3

// List pages through a tenant's jobs, newest first: it queries each of the
// tenant's partitions for jobs older than the cursor (DynamoDB applies the
// filter as it reads) and merges them. The answer is complete down to its
// last job, and the cursor resumes right after it.
func (s *Store) List(ctx context.Context, tenant string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	before, err := engine.DecodeCursor(f.Cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	var all []engine.JobSummary
	// boundary is the highest id at which some partition stopped reading
	// with jobs left: below it, that partition's jobs are unknown yet.
	boundary := ""
	for shard := range uint32(ListShards) {
		found, stoppedAt, err := s.listShard(ctx, tenant, shard, before, f)
		if err != nil {
			return nil, "", err
		}
		all = append(all, found...)
		if stoppedAt > boundary {
			boundary = stoppedAt
		}
	}
	sort.Slice(all, func(i, k int) bool { return all[i].ID > all[k].ID })
	var page []engine.JobSummary
	for _, sm := range all {
		if sm.ID < boundary || int32(len(page)) == f.Limit {
			break
		}
		page = append(page, sm)
	}
	switch {
	case int32(len(page)) == f.Limit:
		return page, engine.EncodeCursor(tenant, page[len(page)-1].ID), nil
	case boundary != "":
		return page, engine.EncodeCursor(tenant, boundary), nil
	default:
		return page, "", nil
	}
}

// listShard reads one partition newest first from before, until it has
// f.Limit matching jobs, runs out, or has read maxShardPages pages. It
// answers the id it stopped at when jobs are left unread.
func (s *Store) listShard(ctx context.Context, tenant string, shard uint32, before string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	kc := expression.Key("pk").Equal(expression.Value(jobPartition(tenant, shard)))
	if before != "" {
		kc = kc.And(expression.Key("sk").LessThan(expression.Value(before)))
	}
	proj := expression.NamesList(expression.Name("sk"), expression.Name("state"), expression.Name("queue"), expression.Name("schedule"))
	if f.Jobs {
		proj = proj.AddNames(expression.Name("doc"))
	}
	b := expression.NewBuilder().WithKeyCondition(kc).WithProjection(proj)
	var conds []expression.ConditionBuilder
	if f.State != "" {
		conds = append(conds, expression.Name("state").Equal(expression.Value(string(f.State))))
	}
	if len(f.States) > 0 {
		in := make([]expression.OperandBuilder, len(f.States))
		for i, st := range f.States {
			in[i] = expression.Value(string(st))
		}
		conds = append(conds, expression.Name("state").In(in[0], in[1:]...))
	}
	if f.Queue != "" {
		conds = append(conds, expression.Name("queue").Equal(expression.Value(f.Queue)))
	}
	if f.Schedule != "" {
		conds = append(conds, expression.Name("schedule").Equal(expression.Value(f.Schedule)))
	}
	if len(conds) > 0 {
		filter := conds[0]
		for _, c := range conds[1:] {
			filter = filter.And(c)
		}
		b = b.WithFilter(filter)
	}
	expr, err := b.Build()
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	// Without a filter every job read is a match; with one, read pages
	// large enough that a sparse match does not cost a request per job.
	pageSize := f.Limit
	if len(conds) > 0 {
		pageSize = max(f.Limit, 50)
	}
	var out []engine.JobSummary
	var start map[string]ddb.AttributeValue
	for range maxShardPages {
		res, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, ScanIndexForward: aws.Bool(false), ConsistentRead: aws.Bool(true),
			Limit:                     aws.Int32(pageSize),
			ExclusiveStartKey:         start,
			KeyConditionExpression:    expr.KeyCondition(),
			FilterExpression:          expr.Filter(),
			ProjectionExpression:      expr.Projection(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if err != nil {
			return nil, "", fmt.Errorf("list jobs: %w", err)
		}
		for _, it := range res.Items {
			var sm struct {
				ID       string `json:"sk"`
				State    string `json:"state"`
				Queue    string `json:"queue"`
				Schedule string `json:"schedule"`
			}
			if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &sm); err != nil {
				return nil, "", fmt.Errorf("list jobs: %w", err)
			}
			js := engine.JobSummary{ID: sm.ID, State: domain.JobState(sm.State), Queue: sm.Queue, Schedule: sm.Schedule}
			if f.Jobs {
				js.Job, _ = decodeJob(it) // an unreadable job is listed by its attributes alone
			}
			out = append(out, js)
		}
		start = res.LastEvaluatedKey
		if len(start) == 0 || int32(len(out)) >= f.Limit {
			break
		}
	}
	// Everything down to the last key read was seen; below it is unknown.
	sk, _ := start["sk"].(*ddb.AttributeValueMemberS)
	if sk == nil {
		return out, "", nil
	}
	return out, sk.Value, nil
}

const hourLayout = "2006010215"

// RecordStats adds a delta to a tenant's counters: the outcomes in their
// hour, on one of a few shards so a busy tenant has no hot key, and the
// blocked gauge. One write each, whatever the delta's size: the engine
// batches a whole invocation's changes into one call.
func (s *Store) RecordStats(ctx context.Context, tenant string, d engine.StatsDelta, now time.Time) error {
	if d.Completed+d.Failed+d.Cancelled > 0 || d.Queued != 0 {
		pk := fmt.Sprintf("S#%s#%s#%d", tenant, now.UTC().Format(hourLayout), rand.IntN(StatsShards))
		n := func(v int64) ddb.AttributeValue { return &ddb.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)} }
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.table,
			Key:                       map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: "S"}},
			UpdateExpression:          aws.String("ADD n_COMPLETED :c, n_FAILED :f, n_CANCELLED :x, n_QUEUED :q SET #ttl = :ttl"),
			ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":c": n(d.Completed), ":f": n(d.Failed), ":x": n(d.Cancelled), ":q": n(d.Queued), ":ttl": n(now.Add(48 * time.Hour).Unix())},
		})
		if err != nil {
			return fmt.Errorf("record outcomes of tenant %s: %w", tenant, err)
		}
	}
	if d.Blocked != 0 {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.table,
			Key:                       map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: "S#" + tenant + "#blocked"}, "sk": &ddb.AttributeValueMemberS{Value: "S"}},
			UpdateExpression:          aws.String("ADD blocked :d"),
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":d": &ddb.AttributeValueMemberN{Value: strconv.FormatInt(d.Blocked, 10)}},
		})
		if err != nil {
			return fmt.Errorf("record blocked count of tenant %s: %w", tenant, err)
		}
	}
	return nil
}

// statsTries bounds the BatchGetItem calls one Stats makes.
const statsTries = 5

// Stats sums a tenant's outcome counters over the last 24 hours in one
// BatchGetItem (24 hours x shards keys, under its limit of 100).
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (engine.Stats, error) {
	keys := []map[string]ddb.AttributeValue{{
		"pk": &ddb.AttributeValueMemberS{Value: "S#" + tenant + "#blocked"}, "sk": &ddb.AttributeValueMemberS{Value: "S"},
	}}
	for h := range 24 {
		hour := now.UTC().Add(-time.Duration(h) * time.Hour).Format(hourLayout)
		for sh := range StatsShards {
			keys = append(keys, map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: fmt.Sprintf("S#%s#%s#%d", tenant, hour, sh)},
				"sk": &ddb.AttributeValueMemberS{Value: "S"},
			})
		}
	}
	var st engine.Stats
	req := map[string]ddb.KeysAndAttributes{s.table: {Keys: keys}}
	for tries := 0; len(req) > 0; tries++ {
		if tries > 0 {
			// Keys left unprocessed (throttling): back off before asking
			// again, and never answer a partial count as a whole one.
			if tries == statsTries {
				return st, fmt.Errorf("read stats of tenant %s: %d keys unprocessed after %d tries", tenant, len(req[s.table].Keys), statsTries)
			}
			if err := pause(ctx, time.Duration(20<<tries)*time.Millisecond); err != nil {
				return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
			}
		}
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
		}
		for _, it := range out.Responses[s.table] {
			var c struct {
				Completed int64 `json:"n_COMPLETED"`
				Failed    int64 `json:"n_FAILED"`
				Cancelled int64 `json:"n_CANCELLED"`
				Blocked   int64 `json:"blocked"`
				Queued    int64 `json:"n_QUEUED"`
			}
			if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &c); err != nil {
				return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
			}
			st.Completed += c.Completed
			st.Failed += c.Failed
			st.Cancelled += c.Cancelled
			st.Blocked += c.Blocked
			st.Queued += c.Queued
		}
		req = out.UnprocessedKeys
	}
	return st, nil
}
