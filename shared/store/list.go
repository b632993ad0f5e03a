package store

import (
	"context"
	"fmt"
	"sort"

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
// tenant's partitions for jobs older than the cursor and in the filter's id
// range (DynamoDB applies the rest of the filter as it reads) and merges
// them. The answer is complete down to its last job, and the cursor
// resumes right after it.
func (s *Store) List(ctx context.Context, tenant string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	before, err := engine.DecodeCursor(f.Cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	from, below, ok := idRange(f, before)
	if !ok {
		return nil, "", nil // no id is in the range: nothing to read
	}
	var all []engine.JobSummary
	// boundary is the highest id at which some partition stopped reading
	// with jobs left: below it, that partition's jobs are unknown yet.
	boundary := ""
	for shard := range uint32(ListShards) {
		found, stoppedAt, err := s.listShard(ctx, tenant, shard, from, below, f)
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

// idRange answers the ids a listing reads, from <= id < below ("" for no
// bound): the filter's range, below the cursor's id. ok is false when no
// id is in it.
func idRange(f engine.ListFilter, before string) (from, below string, ok bool) {
	from, below = f.IDFrom, f.IDBelow
	if before != "" && (below == "" || before < below) {
		below = before
	}
	if from != "" && below != "" && from > lastBelow(below) {
		return "", "", false
	}
	return from, below, true
}

// lastBelow answers the greatest job id below id, as far as a key
// condition needs: id with its last character lowered and "~" after it.
// Job ids are ULIDs, whose characters all sort before "~", so for them
// sk <= lastBelow(id) is sk < id. (A query takes one condition on the
// sort key, and BETWEEN's bounds are inclusive.)
func lastBelow(id string) string {
	return id[:len(id)-1] + string(id[len(id)-1]-1) + "~"
}

// listShard reads one partition newest first from below down to from
// (idRange), until it has f.Limit matching jobs, runs out, or has read
// maxShardPages pages. It answers the id it stopped at when jobs are
// left unread.
func (s *Store) listShard(ctx context.Context, tenant string, shard uint32, from, below string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	kc := expression.Key("pk").Equal(expression.Value(jobPartition(tenant, shard)))
	// The range is a key condition: DynamoDB reads only the ids in it.
	switch {
	case from != "" && below != "":
		kc = kc.And(expression.Key("sk").Between(expression.Value(from), expression.Value(lastBelow(below))))
	case from != "":
		kc = kc.And(expression.Key("sk").GreaterThanEqual(expression.Value(from)))
	case below != "":
		kc = kc.And(expression.Key("sk").LessThan(expression.Value(below)))
	}
	proj := expression.NamesList(expression.Name("sk"), expression.Name("state"), expression.Name("queue"), expression.Name("schedule"))
	if f.Jobs {
		proj = proj.AddNames(expression.Name("doc"), expression.Name(headerDocAttr), expression.Name(docVersionAttr), expression.Name(dictAttr), expression.Name(usageAttr))
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
				js.Job, _ = s.readJob(ctx, it) // an unreadable job is listed by its attributes alone
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
