package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

const hourLayout = "2006010215"

// dayLayout is the day an hourLayout bucket begins with.
const dayLayout = "20060102"

func statsKey(pk, sk string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: pk}, "sk": &ddb.AttributeValueMemberS{Value: sk}}
}

func num(v int64) ddb.AttributeValue {
	return &ddb.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// sweepKey is the item that holds the heartbeat's last sweep.
var sweepKey = statsKey("H", "H")

// stepsPartition is one shard of a tenant's cumulative step counters
// (engine.AllTenants: the stack's).
func stepsPartition(tenant string, shard int) string { return fmt.Sprintf("M#%s#%d", tenant, shard) }

// RecordStats adds a delta to a tenant's counters: the outcomes and run
// times in their hour, on one of a few shards so a busy tenant has no hot
// key; the blocked gauge; and the cumulative step counters, sharded too.
// At most one write each, whatever the delta's size: the engine batches
// a whole invocation's changes into one call.
func (s *Store) RecordStats(ctx context.Context, tenant string, d engine.StatsDelta, now time.Time) error {
	if d.Windowed() {
		pk := fmt.Sprintf("S#%s#%s#%d", tenant, now.UTC().Format(hourLayout), rand.IntN(StatsShards))
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                &s.table,
			Key:                      statsKey(pk, "S"),
			UpdateExpression:         aws.String("ADD n_COMPLETED :c, n_FAILED :f, n_CANCELLED :x, n_QUEUED :q, n_DUR_MS :dm, n_TIMED :t, n_COST :cn SET #ttl = :ttl"),
			ExpressionAttributeNames: map[string]string{"#ttl": "ttl"},
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":c": num(d.Completed), ":f": num(d.Failed), ":x": num(d.Cancelled), ":q": num(d.Queued),
				":dm": num(d.DurationMs), ":t": num(d.Timed), ":cn": num(d.CostNanoUSD), ":ttl": num(now.Add(48 * time.Hour).Unix())},
		})
		if err != nil {
			return fmt.Errorf("record outcomes of tenant %s: %w", tenant, err)
		}
	}
	if d.Blocked != 0 {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.table,
			Key:                       statsKey("S#"+tenant+"#blocked", "S"),
			UpdateExpression:          aws.String("ADD blocked :d"),
			ExpressionAttributeValues: map[string]ddb.AttributeValue{":d": num(d.Blocked)},
		})
		if err != nil {
			return fmt.Errorf("record blocked count of tenant %s: %w", tenant, err)
		}
	}
	if err := s.recordSteps(ctx, tenant, d.Steps); err != nil {
		return fmt.Errorf("record step counters of tenant %s: %w", tenant, err)
	}
	return nil
}

// Attribute names of the step counters: one number each, so a write ADDs
// to exactly the counters its delta moves (names are short: write units
// are billed by item size).
const (
	attrMove    = "m:"  // m:<from>><to>: step_state_transitions_total
	attrGauge   = "g:"  // g:<state>: steps_by_state
	attrRetries = "r"   // step_retries_total
	attrBucket  = "d:"  // d:<attempt state>:<bucket>: step_duration_seconds' counts
	attrSum     = "ds:" // ds:<attempt state>: their sum, in ms
)

// recordSteps adds c to one shard of the tenant's cumulative step
// counters: one UpdateItem.
func (s *Store) recordSteps(ctx context.Context, tenant string, c engine.StepCounts) error {
	if c.Empty() {
		return nil
	}
	var u counterAdds
	add := u.add
	for m, n := range c.Moves {
		add(attrMove+string(m.From)+">"+string(m.To), n)
	}
	for st, n := range c.InState {
		add(attrGauge+string(st), n)
	}
	add(attrRetries, c.Retries)
	for st, h := range c.Durations {
		for i, n := range h.Counts {
			add(fmt.Sprintf("%s%s:%d", attrBucket, st, i), n)
		}
		add(attrSum+string(st), h.SumMs)
	}
	if u.empty() {
		return nil
	}
	_, err := s.db.UpdateItem(ctx, u.input(s.table, statsKey(stepsPartition(tenant, rand.IntN(StatsShards)), "M")))
	return err
}

// counterAdds is one UpdateItem that adds to counters (ADD #a :v), the
// counters of zero left out.
type counterAdds struct {
	names  map[string]string
	values map[string]ddb.AttributeValue
	adds   []string
}

func (u *counterAdds) add(attr string, v int64) {
	if v == 0 {
		return
	}
	if u.names == nil {
		u.names, u.values = map[string]string{}, map[string]ddb.AttributeValue{}
	}
	i := len(u.adds)
	u.names[fmt.Sprintf("#a%d", i)] = attr
	u.values[fmt.Sprintf(":v%d", i)] = num(v)
	u.adds = append(u.adds, fmt.Sprintf("#a%d :v%d", i, i))
}

func (u *counterAdds) empty() bool { return len(u.adds) == 0 }

// input is the UpdateItem of the item key of table.
func (u *counterAdds) input(table string, key map[string]ddb.AttributeValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: &table, Key: key, UpdateExpression: aws.String("ADD " + strings.Join(u.adds, ", ")),
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.values,
	}
}

// StepStats sums a tenant's cumulative step counters: one BatchGetItem
// of StatsShards keys.
func (s *Store) StepStats(ctx context.Context, tenant string) (engine.StepCounts, error) {
	keys := make([]map[string]ddb.AttributeValue, StatsShards)
	for sh := range StatsShards {
		keys[sh] = statsKey(stepsPartition(tenant, sh), "M")
	}
	var c engine.StepCounts
	items, err := s.batchGet(ctx, keys)
	if err != nil {
		return c, fmt.Errorf("read step counters of tenant %s: %w", tenant, err)
	}
	for _, it := range items {
		for attr, av := range it {
			nv, ok := av.(*ddb.AttributeValueMemberN)
			if !ok {
				continue // pk, sk
			}
			n, err := strconv.ParseInt(nv.Value, 10, 64)
			if err != nil {
				return c, fmt.Errorf("read step counters of tenant %s: %s: %w", tenant, attr, err)
			}
			switch {
			case strings.HasPrefix(attr, attrMove):
				from, to, _ := strings.Cut(attr[len(attrMove):], ">")
				c.Move(engine.StepMove{From: domain.StepState(from), To: domain.StepState(to)}, n)
			case strings.HasPrefix(attr, attrGauge):
				c.Gauge(domain.StepState(attr[len(attrGauge):]), n)
			case attr == attrRetries:
				c.Retries += n
			case strings.HasPrefix(attr, attrSum):
				h := engine.StepCounts{Durations: map[domain.AttemptState]engine.Durations{domain.AttemptState(attr[len(attrSum):]): {SumMs: n}}}
				c.Add(h)
			case strings.HasPrefix(attr, attrBucket):
				st, b, _ := strings.Cut(attr[len(attrBucket):], ":")
				i, err := strconv.Atoi(b)
				if err != nil || i < 0 || i > len(engine.DurationBuckets) {
					continue // a bucket this version does not have
				}
				var d engine.Durations
				d.Counts[i] = n
				c.Add(engine.StepCounts{Durations: map[domain.AttemptState]engine.Durations{domain.AttemptState(st): d}})
			}
		}
	}
	return c, nil
}

// RecordSweep notes when the heartbeat last swept: one small write a
// sweep.
func (s *Store) RecordSweep(ctx context.Context, at time.Time) error {
	it := statsKey("H", "H")
	it["at"] = &ddb.AttributeValueMemberS{Value: at.UTC().Format(time.RFC3339Nano)}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: it}); err != nil {
		return fmt.Errorf("record the sweep: %w", err)
	}
	return nil
}

// statsTries bounds the BatchGetItem calls one read of counters makes.
const statsTries = 5

// Stats sums a tenant's outcome counters over the last 24 hours and reads
// its blocked gauge and the last sweep, in one BatchGetItem (24 hours x
// shards + 2 keys, under its limit of 100).
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (engine.Stats, error) {
	keys := []map[string]ddb.AttributeValue{statsKey("S#"+tenant+"#blocked", "S"), sweepKey}
	for h := range 24 {
		hour := now.UTC().Add(-time.Duration(h) * time.Hour).Format(hourLayout)
		for sh := range StatsShards {
			keys = append(keys, statsKey(fmt.Sprintf("S#%s#%s#%d", tenant, hour, sh), "S"))
		}
	}
	var st engine.Stats
	today := now.UTC().Format(dayLayout)
	items, err := s.batchGet(ctx, keys)
	if err != nil {
		return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
	}
	for _, it := range items {
		var c struct {
			PK        string `json:"pk"`
			Completed int64  `json:"n_COMPLETED"`
			Failed    int64  `json:"n_FAILED"`
			Cancelled int64  `json:"n_CANCELLED"`
			Blocked   int64  `json:"blocked"`
			Queued    int64  `json:"n_QUEUED"`
			DurMs     int64  `json:"n_DUR_MS"`
			Timed     int64  `json:"n_TIMED"`
			Cost      int64  `json:"n_COST"`
			At        string `json:"at"`
		}
		if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: it}, &c); err != nil {
			return st, fmt.Errorf("read stats of tenant %s: %w", tenant, err)
		}
		if c.PK == "H" {
			if at, err := time.Parse(time.RFC3339Nano, c.At); err == nil {
				st.LastSweep = &at
			}
			continue
		}
		st.Add(engine.StatsDelta{Completed: c.Completed, Failed: c.Failed, Cancelled: c.Cancelled, Blocked: c.Blocked,
			Queued: c.Queued, DurationMs: c.DurMs, Timed: c.Timed, CostNanoUSD: c.Cost})
		if parts := strings.Split(c.PK, "#"); len(parts) >= 3 && strings.HasPrefix(parts[len(parts)-2], today) {
			st.SpentTodayNanoUSD += c.Cost // a bucket of today's hours: S#<tenant>#<hour>#<shard>
		}
	}
	return st, nil
}

// batchGet reads keys (at most 100) in BatchGetItem calls, asking again
// for the keys left unprocessed (throttling) after a pause, and never
// answering a partial read as a whole one.
func (s *Store) batchGet(ctx context.Context, keys []map[string]ddb.AttributeValue) ([]map[string]ddb.AttributeValue, error) {
	var items []map[string]ddb.AttributeValue
	req := map[string]ddb.KeysAndAttributes{s.table: {Keys: keys}}
	for tries := 0; len(req) > 0; tries++ {
		if tries > 0 {
			if tries == statsTries {
				return nil, fmt.Errorf("%d keys unprocessed after %d tries", len(req[s.table].Keys), statsTries)
			}
			if err := pause(ctx, time.Duration(20<<tries)*time.Millisecond); err != nil {
				return nil, err
			}
		}
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, err
		}
		items = append(items, out.Responses[s.table]...)
		req = out.UnprocessedKeys
	}
	return items, nil
}
