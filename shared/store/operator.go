package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/engine"
)

// The operator's figures (engine/operator.go) are two kinds of small
// item: the heartbeat's last readings (pk H, sk R: replaced by one PutItem
// a sweep, beside its last sweep time, H/H), and a counter item per route
// (pk A#<route key>, sk A) that each HTTP function instance ADDs its
// requests to at most every engine.StatsFlushEvery. GET /v1/metrics reads
// them all in one BatchGetItem. A route's item is not sharded: it takes a
// write per instance every 10 s at most, far below a key's 1,000 a second.

var readingsKey = statsKey("H", "R")

func requestsKey(route string) map[string]ddb.AttributeValue { return statsKey("A#"+route, "A") }

// readingsDoc is the readings item's JSON: the store's own, mapped field
// by field, so the engine's types carry no tags.
type readingsDoc struct {
	At       time.Time          `json:"at"`
	TookUs   int64              `json:"took_us"`
	Sweep    engine.SweepReport `json:"sweep"`
	Queues   *queuesDoc         `json:"queues,omitempty"`
	Leases   int64              `json:"leases"`
	Timers   int64              `json:"timers"`
	OldestMs int64              `json:"oldest_due_ms"`
}

type queuesDoc struct {
	Stack   []depthDoc `json:"stack"`
	Workers []depthDoc `json:"workers,omitempty"`
	Lanes   int        `json:"lanes"`
}

type depthDoc struct {
	Queue    string `json:"q"`
	Visible  int64  `json:"v"`
	InFlight int64  `json:"f"`
	Delayed  int64  `json:"d"`
}

func depthDocs(ds []engine.QueueDepth) []depthDoc {
	out := make([]depthDoc, len(ds))
	for i, d := range ds {
		out[i] = depthDoc{Queue: d.Queue, Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}
	}
	return out
}

func queueDepths(ds []depthDoc) []engine.QueueDepth {
	out := make([]engine.QueueDepth, len(ds))
	for i, d := range ds {
		out[i] = engine.QueueDepth{Queue: d.Queue, Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}
	}
	return out
}

// PutReadings replaces the last readings: one PutItem of a few KB at most
// (engine.MaxWorkerLaneReadings bounds the lanes it holds).
func (s *Store) PutReadings(ctx context.Context, r engine.Readings) error {
	doc := readingsDoc{At: r.At.UTC(), TookUs: r.Took.Microseconds(), Sweep: r.Sweep, Leases: r.LeasesLive, Timers: r.TimersWaiting, OldestMs: r.OldestDue.Milliseconds()}
	if q := r.Queues; q != nil {
		doc.Queues = &queuesDoc{Stack: depthDocs(q.Stack), Workers: depthDocs(q.Workers), Lanes: q.WorkerLanes}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode the readings: %w", err)
	}
	it := statsKey("H", "R")
	it["r"] = &ddb.AttributeValueMemberS{Value: string(b)}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: it}); err != nil {
		return fmt.Errorf("keep the readings: %w", err)
	}
	return nil
}

func decodeReadings(it map[string]ddb.AttributeValue) (*engine.Readings, error) {
	v, ok := it["r"].(*ddb.AttributeValueMemberS)
	if !ok {
		return nil, nil
	}
	var doc readingsDoc
	if err := json.Unmarshal([]byte(v.Value), &doc); err != nil {
		return nil, fmt.Errorf("decode the readings: %w", err)
	}
	r := &engine.Readings{At: doc.At, Took: time.Duration(doc.TookUs) * time.Microsecond, Sweep: doc.Sweep,
		LeasesLive: doc.Leases, TimersWaiting: doc.Timers, OldestDue: time.Duration(doc.OldestMs) * time.Millisecond}
	if q := doc.Queues; q != nil {
		r.Queues = &engine.QueueReadings{Stack: queueDepths(q.Stack), Workers: queueDepths(q.Workers), WorkerLanes: q.Lanes}
	}
	return r, nil
}

// Attribute names of a route's counters: c<class> (1-5: 1xx to 5xx),
// b<bucket> (engine.RequestBuckets, and one past the last), us (the sum of
// the durations, in microseconds).
const (
	attrClass   = "c"
	attrReqBuck = "b"
	attrReqSum  = "us"
)

// RecordRequests adds each route's counts to its item: one UpdateItem a
// route that had requests.
func (s *Store) RecordRequests(ctx context.Context, counts map[string]engine.RequestCounts) error {
	for route, c := range counts {
		var u counterAdds
		add := u.add
		for i, n := range c.Classes {
			add(attrClass+strconv.Itoa(i+1), n)
		}
		for i, n := range c.Counts {
			add(attrReqBuck+strconv.Itoa(i), n)
		}
		add(attrReqSum, c.SumMicros)
		if u.empty() {
			continue
		}
		if _, err := s.db.UpdateItem(ctx, u.input(s.table, requestsKey(route))); err != nil {
			return fmt.Errorf("record the requests of %s: %w", route, err)
		}
	}
	return nil
}

func decodeRequests(it map[string]ddb.AttributeValue) (engine.RequestCounts, error) {
	var c engine.RequestCounts
	for attr, av := range it {
		nv, ok := av.(*ddb.AttributeValueMemberN)
		if !ok {
			continue // pk, sk
		}
		n, err := strconv.ParseInt(nv.Value, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s: %w", attr, err)
		}
		switch {
		case attr == attrReqSum:
			c.SumMicros = n
		case strings.HasPrefix(attr, attrClass):
			if i, err := strconv.Atoi(attr[len(attrClass):]); err == nil && i >= 1 && i <= len(c.Classes) {
				c.Classes[i-1] = n
			}
		case strings.HasPrefix(attr, attrReqBuck):
			if i, err := strconv.Atoi(attr[len(attrReqBuck):]); err == nil && i >= 0 && i < len(c.Counts) {
				c.Counts[i] = n
			} // else a bucket this version does not have
		}
	}
	return c, nil
}

// OperatorFigures reads the last readings and the routes' counters: one
// BatchGetItem of the routes and the readings item (a second past 99
// routes, which the API is far from).
func (s *Store) OperatorFigures(ctx context.Context, routes []string) (*engine.Readings, map[string]engine.RequestCounts, error) {
	keys := []map[string]ddb.AttributeValue{readingsKey}
	for _, r := range routes {
		keys = append(keys, requestsKey(r))
	}
	var items []map[string]ddb.AttributeValue
	for len(keys) > 0 {
		n := min(len(keys), 100)
		got, err := s.batchGet(ctx, keys[:n])
		if err != nil {
			return nil, nil, fmt.Errorf("read the operator's figures: %w", err)
		}
		items, keys = append(items, got...), keys[n:]
	}
	var readings *engine.Readings
	requests := map[string]engine.RequestCounts{}
	for _, it := range items {
		pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
		if pk == nil {
			continue
		}
		if route, ok := strings.CutPrefix(pk.Value, "A#"); ok {
			c, err := decodeRequests(it)
			if err != nil {
				return nil, nil, fmt.Errorf("read the requests of %s: %w", route, err)
			}
			requests[route] = c
			continue
		}
		r, err := decodeReadings(it)
		if err != nil {
			return nil, nil, err
		}
		readings = r
	}
	return readings, requests, nil
}
