package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
)

// ListFilter selects jobs of one tenant, newest first.
type ListFilter struct {
	State  domain.JobState // "" for any
	Queue  string          // "" for any
	Limit  int32
	Cursor string // from the previous page
}

// Summary is a job as the listing index holds it.
type Summary struct {
	ID    string          `json:"id"`
	State domain.JobState `json:"state"`
	Queue string          `json:"queue"`
}

// maxListPages bounds the pages one listing reads when a filter skips many
// jobs; the caller gets a cursor to go on.
const maxListPages = 10

// List pages through a tenant's jobs on the by_tenant index. A filter is
// applied by DynamoDB as it reads; the answer's cursor resumes right after
// the last job read.
func (s *Store) List(ctx context.Context, tenant string, f ListFilter) ([]Summary, string, error) {
	start, err := decodeCursor(f.Cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	b := expression.NewBuilder().WithKeyCondition(expression.Key("gsi1pk").Equal(expression.Value("T#" + tenant)))
	var cond expression.ConditionBuilder
	hasCond := false
	add := func(c expression.ConditionBuilder) {
		if hasCond {
			cond = cond.And(c)
		} else {
			cond, hasCond = c, true
		}
	}
	if f.State != "" {
		add(expression.Name("state").Equal(expression.Value(string(f.State))))
	}
	if f.Queue != "" {
		add(expression.Name("queue").Equal(expression.Value(f.Queue)))
	}
	if hasCond {
		b = b.WithFilter(cond)
	}
	expr, err := b.Build()
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	var out []Summary
	for page := 0; page < maxListPages; page++ {
		res, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, IndexName: aws.String(IndexByTenant),
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(f.Limit - int32(len(out))),
			ExclusiveStartKey:         start,
			KeyConditionExpression:    expr.KeyCondition(),
			FilterExpression:          expr.Filter(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if err != nil {
			return nil, "", fmt.Errorf("list jobs: %w", err)
		}
		for _, it := range res.Items {
			var sm struct {
				ID    string `json:"gsi1sk"`
				State string `json:"state"`
				Queue string `json:"queue"`
			}
			if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &sm); err != nil {
				return nil, "", fmt.Errorf("list jobs: %w", err)
			}
			out = append(out, Summary{ID: sm.ID, State: domain.JobState(sm.State), Queue: sm.Queue})
		}
		start = res.LastEvaluatedKey
		if len(start) == 0 || int32(len(out)) >= f.Limit {
			break
		}
	}
	if len(start) == 0 {
		return out, "", nil
	}
	cur, err := encodeCursor(start)
	return out, cur, err
}

func encodeCursor(key map[string]ddb.AttributeValue) (string, error) {
	flat := map[string]string{}
	for k, v := range key {
		sv, ok := v.(*ddb.AttributeValueMemberS)
		if !ok {
			return "", fmt.Errorf("encode cursor: key %s is not a string", k)
		}
		flat[k] = sv.Value
	}
	raw, err := json.Marshal(flat)
	if err != nil {
		return "", fmt.Errorf("encode cursor: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// decodeCursor reads a cursor, refusing one made for another tenant.
func decodeCursor(cur, tenant string) (map[string]ddb.AttributeValue, error) {
	if cur == "" {
		return nil, nil
	}
	bad := domain.Invalid("cursor", "is not a cursor this listing returned")
	raw, err := base64.RawURLEncoding.DecodeString(cur)
	if err != nil {
		return nil, bad
	}
	var flat map[string]string
	if err := json.Unmarshal(raw, &flat); err != nil || flat["gsi1pk"] != "T#"+tenant || len(flat) != 4 {
		return nil, bad
	}
	key := map[string]ddb.AttributeValue{}
	for _, k := range []string{"pk", "sk", "gsi1pk", "gsi1sk"} {
		v, ok := flat[k]
		if !ok {
			return nil, bad
		}
		key[k] = &ddb.AttributeValueMemberS{Value: v}
	}
	return key, nil
}

// Stats are a tenant's outcome counts over a window, and how many of its
// jobs wait on a person now.
type Stats struct {
	Completed, Failed, Cancelled int64
	Blocked                      int64
}

const hourLayout = "2006010215"

// StatsDelta is what a batch of changes adds to a tenant's counters.
type StatsDelta struct {
	Completed, Failed, Cancelled int64
	Blocked                      int64 // jobs that started (+) or stopped (-) waiting on a person
}

// Zero reports whether the delta changes nothing.
func (d StatsDelta) Zero() bool { return d == StatsDelta{} }

// RecordOutcome counts one finished job (state completed, failed or
// cancelled; others count nothing) and moves the blocked gauge.
func (s *Store) RecordOutcome(ctx context.Context, tenant string, state domain.JobState, blockedDelta int, now time.Time) error {
	d := StatsDelta{Blocked: int64(blockedDelta)}
	switch state {
	case domain.JobCompleted:
		d.Completed = 1
	case domain.JobFailed:
		d.Failed = 1
	case domain.JobCancelled:
		d.Cancelled = 1
	}
	return s.RecordStats(ctx, tenant, d, now)
}

// RecordStats adds a delta to a tenant's counters: the outcomes in their
// hour, on one of a few shards so a busy tenant has no hot key, and the
// blocked gauge. One write each, whatever the delta's size: the engine
// batches a whole invocation's changes into one call.
func (s *Store) RecordStats(ctx context.Context, tenant string, d StatsDelta, now time.Time) error {
	if d.Completed+d.Failed+d.Cancelled > 0 {
		pk := fmt.Sprintf("S#%s#%s#%d", tenant, now.UTC().Format(hourLayout), rand.IntN(StatsShards))
		n := func(v int64) ddb.AttributeValue { return &ddb.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)} }
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.table,
			Key:                       map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: "S"}},
			UpdateExpression:          aws.String("ADD n_COMPLETED :c, n_FAILED :f, n_CANCELLED :x SET #ttl = :ttl"),
			ExpressionAttributeNames:  map[string]string{"#ttl": "ttl"},
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":c": n(d.Completed), ":f": n(d.Failed), ":x": n(d.Cancelled), ":ttl": n(now.Add(48 * time.Hour).Unix())},
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

// Stats sums a tenant's outcome counters over the last 24 hours in one
// BatchGetItem (24 hours x shards keys, under its limit of 100).
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (Stats, error) {
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
	var st Stats
	req := map[string]ddb.KeysAndAttributes{s.table: {Keys: keys}}
	for tries := 0; len(req) > 0 && tries < 5; tries++ {
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
			}
			if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &c); err != nil {
				return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
			}
			st.Completed += c.Completed
			st.Failed += c.Failed
			st.Cancelled += c.Cancelled
			st.Blocked += c.Blocked
		}
		req = out.UnprocessedKeys
	}
	return st, nil
}
