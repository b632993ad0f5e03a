// Package costmeter prices the AWS requests a workload makes. moto reports
// a constant ConsumedCapacity, so the meter models the request units
// DynamoDB would bill from the items themselves: write units by item size
// (the larger of the old and new item), doubled in transactions, plus the
// index writes each change causes; read units by the size of what is read.
//
// The meter is middleware in the SDK's own stack of a DynamoDB client
// (Meter.Middleware, for devstack.Options.APIOptions or a client's
// Options.APIOptions), and bills what AWS bills: each attempt that reached
// the service and was answered with a success or a failed condition (a
// conditional write that fails its check still consumes write units). It
// sits at the front of the Deserialize step, below the SDK's retry loop
// and signing and below any fault layer in the Finalize step, so it sees
// every attempt the SDK sends, retries included, with the typed output
// and error the deserializer made, and only attempts that went to the
// transport: a throttled attempt, a 5xx or a request that never got an
// answer is billed nothing, a write applied whose answer was then lost
// (chaos's ambiguous fault, above it) is billed like any other. The typed
// input it reads was kept in the context at the Initialize step
// (awsfault.CaptureInput).
//
// S3 bills by request: the meter counts each answered S3 attempt (any
// status under 500, as S3 bills a 404 too) in its class, writes (PUT,
// COPY, POST, LIST), deletes (free) or reads (GET and the rest). A
// worker's GET of a presigned URL is no client of the engine's: the
// emulator's proxy counts those (s3.GetObject).
//
// EventBridge bills each event put on a custom bus (per 64 KB of it; a
// Job State Change is well under): the meter counts the entries of each
// answered PutEvents that the bus took.
package costmeter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/store"
)

// Units are modelled DynamoDB request units, and S3 requests by class.
type Units struct {
	WRU, RRU float64
	// S3Writes are S3's class A requests (PutObject, ListObjectsV2...),
	// S3Reads its class B (GetObject...), S3Deletes its free DELETE
	// requests (DeleteObject, DeleteObjects: a job's data at expiry).
	S3Writes, S3Reads, S3Deletes float64
	// Events are EventBridge events put (Job State Change).
	Events float64
}

// Meter models the units of the DynamoDB requests it sees.
type Meter struct {
	mu     sync.Mutex
	items  map[string]itemInfo
	units  Units
	tagged map[string]*Tagged
}

// Tagged is what the requests made under one tag (Tag) cost: their units,
// and the attempts answered, by service and operation
// ("SQS.SendMessageBatch").
type Tagged struct {
	Units    Units
	Requests map[string]int64
}

type tagKey struct{}

// Tag marks the requests made with ctx, so that the meter answers what
// they cost apart from the rest (Meter.Tagged): the bench's sweeps, whose
// sending of long timers is priced on its own.
func Tag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

// Tagged answers what the requests under tag cost so far.
func (m *Meter) Tagged(tag string) Tagged {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Tagged{Requests: map[string]int64{}}
	if t := m.tagged[tag]; t != nil {
		out.Units = t.Units
		maps.Copy(out.Requests, t.Requests)
	}
	return out
}

type itemInfo struct {
	size int
	due  string // the due index entry (keys); the table's only index
}

// New answers a meter with nothing billed.
func New() *Meter { return &Meter{items: map[string]itemInfo{}} }

// Middleware is the meter's APIOptions entry: it keeps the typed input in
// the context at the Initialize step, and bills each attempt at the front
// of the Deserialize step. It sees every operation of a client and bills
// DynamoDB's it models; others pass through.
func (m *Meter) Middleware(s *middleware.Stack) error {
	if err := awsfault.CaptureInput(s); err != nil {
		return err
	}
	return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("costmeter.Bill", m.bill), middleware.Before)
}

// conditionFailed answers whether a DynamoDB error is a failed condition,
// which is billed as if applied (without the change).
func conditionFailed(err error) bool {
	var ccf *ddb.ConditionalCheckFailedException
	var tce *ddb.TransactionCanceledException
	return errors.As(err, &ccf) || errors.As(err, &tce)
}

func (m *Meter) bill(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	service, op := awsfault.Call(ctx)
	r, ok := out.RawResponse.(*smithyhttp.Response)
	if !ok || r.Response == nil || r.StatusCode == 0 {
		return out, md, err // no answer (the transport failed): nothing known billed
	}
	var u Units
	switch {
	case service == "S3":
		if r.StatusCode < 500 {
			u = s3Request(op)
		}
	case service == "EventBridge":
		if put, ok := out.Result.(*eventbridge.PutEventsOutput); ok && err == nil {
			u = Units{Events: float64(len(put.Entries) - int(put.FailedEntryCount))}
		}
	case service == "DynamoDB" && (err == nil || conditionFailed(err)): // throttled, refused or failed: not billed
		u = m.meter(awsfault.Input(ctx), out.Result, err == nil)
	}
	tag, _ := ctx.Value(tagKey{}).(string)
	m.add(u, tag, service+"."+op)
	return out, md, err
}

// Units answers the units so far.
func (m *Meter) Units() Units {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.units
}

// kb and fourKB are DynamoDB's write and read units of an item of n
// bytes: the rules a job's own usage counts by.
var (
	kb     = domain.WriteUnitsOf
	fourKB = domain.ReadUnitsOf
)

func s(it map[string]ddb.AttributeValue, k string) string {
	if v, ok := it[k].(*ddb.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func key(it map[string]ddb.AttributeValue) string { return s(it, "pk") + "|" + s(it, "sk") }

func info(it map[string]ddb.AttributeValue) itemInfo {
	in := itemInfo{size: store.ItemSize(it)}
	if p := s(it, "gsi2pk"); p != "" {
		in.due = strings.Join([]string{s(it, "pk"), s(it, "sk"), p, s(it, "gsi2sk")}, "|")
	}
	return in
}

// indexWrites answers the index write units a change from old to new costs:
// a changed due entry is a delete and a put (its keys move).
func indexWrites(old, new itemInfo) float64 {
	var w float64
	if old.due != new.due {
		if old.due != "" {
			w++
		}
		if new.due != "" {
			w++
		}
	}
	return w
}

// put answers the write units of a put of it, and keeps what it learnt
// of the item when the put was applied.
func (m *Meter) put(it map[string]ddb.AttributeValue, factor float64, applied bool) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(it)
	old := m.items[k]
	n := info(it)
	w := factor * kb(max(old.size, n.size))
	if applied {
		w += indexWrites(old, n)
		m.items[k] = n
	}
	return w
}

// meter answers the units of one attempt of an operation on its typed
// input and output; applied is false for a failed condition.
func (m *Meter) meter(input, output any, applied bool) Units {
	var u Units
	switch in := input.(type) {
	case *dynamodb.PutItemInput:
		u.WRU = m.put(in.Item, 1, applied)
	case *dynamodb.TransactWriteItemsInput:
		// Each put at twice its units, every other item at two.
		for _, ti := range in.TransactItems {
			switch {
			case ti.Put != nil:
				u.WRU += m.put(ti.Put.Item, 2, applied)
			default:
				u.WRU += 2
			}
		}
	case *dynamodb.BatchWriteItemInput:
		// Each put at its units, those it left unprocessed unbilled.
		left := map[string]bool{}
		if out, ok := output.(*dynamodb.BatchWriteItemOutput); ok {
			for _, reqs := range out.UnprocessedItems {
				for _, r := range reqs {
					if r.PutRequest != nil {
						left[key(r.PutRequest.Item)] = true
					}
				}
			}
		}
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil && !left[key(r.PutRequest.Item)]:
					u.WRU += m.put(r.PutRequest.Item, 1, applied)
				case r.DeleteRequest != nil:
					u.WRU++
				}
			}
		}
	case *dynamodb.UpdateItemInput:
		// An update of a small item (the counters) is one unit.
		u.WRU = 1
	case *dynamodb.GetItemInput:
		// A read by the item's size.
		n := 0
		if out, ok := output.(*dynamodb.GetItemOutput); ok && out.Item != nil {
			n = store.ItemSize(out.Item)
		}
		u.RRU = readFactor(in.ConsistentRead) * fourKB(n)
	case *dynamodb.QueryInput:
		// The total size read, rounded up to 4 KB.
		n := 0
		if out, ok := output.(*dynamodb.QueryOutput); ok {
			for _, it := range out.Items {
				n += store.ItemSize(it)
			}
		}
		u.RRU = readFactor(in.ConsistentRead) * fourKB(n)
	case *dynamodb.BatchGetItemInput:
		// Each item read.
		if out, ok := output.(*dynamodb.BatchGetItemOutput); ok {
			for table, items := range out.Responses {
				f := readFactor(in.RequestItems[table].ConsistentRead)
				for _, it := range items {
					u.RRU += f * fourKB(store.ItemSize(it))
				}
			}
		}
	}
	return u
}

// add bills u, and counts an answered attempt of call under tag (if any).
func (m *Meter) add(u Units, tag, call string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units = m.units.Plus(u)
	if tag == "" {
		return
	}
	if m.tagged == nil {
		m.tagged = map[string]*Tagged{}
	}
	t := m.tagged[tag]
	if t == nil {
		t = &Tagged{Requests: map[string]int64{}}
		m.tagged[tag] = t
	}
	t.Units = t.Units.Plus(u)
	t.Requests[call]++
}

// Plus answers u and v added up.
func (u Units) Plus(v Units) Units {
	return Units{WRU: u.WRU + v.WRU, RRU: u.RRU + v.RRU, S3Writes: u.S3Writes + v.S3Writes,
		S3Reads: u.S3Reads + v.S3Reads, S3Deletes: u.S3Deletes + v.S3Deletes, Events: u.Events + v.Events}
}

// Minus answers what u has beyond v: the units between two readings.
func (u Units) Minus(v Units) Units { return u.Plus(v.Times(-1)) }

// Times answers u, each count multiplied by f.
func (u Units) Times(f float64) Units {
	return Units{WRU: u.WRU * f, RRU: u.RRU * f, S3Writes: u.S3Writes * f, S3Reads: u.S3Reads * f, S3Deletes: u.S3Deletes * f, Events: u.Events * f}
}

// s3Request is one S3 request of operation op, in its price class.
func s3Request(op string) Units {
	if strings.HasPrefix(op, "Delete") {
		return Units{S3Deletes: 1}
	}
	for _, a := range []string{"Put", "Copy", "Post", "List", "Create", "Upload", "Complete"} {
		if strings.HasPrefix(op, a) {
			return Units{S3Writes: 1}
		}
	}
	return Units{S3Reads: 1}
}

func readFactor(consistent *bool) float64 {
	if aws.ToBool(consistent) {
		return 1
	}
	return 0.5
}

// Prices maps a price key of docs/costs.md to USD per unit.
type Prices map[string]float64

// LoadPrices reads the price table of docs/costs.md: rows
// | key | what | USD | per | source | as of |.
func LoadPrices(path string) (Prices, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	defer f.Close()
	p := Prices{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(strings.Trim(strings.TrimSpace(sc.Text()), "|"), "|")
		if len(cols) < 4 {
			continue
		}
		usd, err1 := strconv.ParseFloat(strings.TrimSpace(cols[2]), 64)
		per, err2 := strconv.ParseFloat(strings.TrimSpace(cols[3]), 64)
		if err1 != nil || err2 != nil || per == 0 {
			continue
		}
		p[strings.TrimSpace(cols[0])] = usd / per
	}
	for _, k := range []string{"dynamodb_wru", "dynamodb_rru", "sqs_request", "lambda_request", "sfn_standard_transition", "sfn_express_request", "sfn_express_gb_second",
		"s3_put_request", "s3_get_request", "s3_delete_request", "eventbridge_event", "apigw_http_request", "lambda_gb_second_arm", "cloudwatch_logs_gb",
		"dynamodb_storage_gb_month", "dynamodb_pitr_gb_month", "s3_storage_gb_month"} {
		if _, ok := p[k]; !ok {
			return nil, fmt.Errorf("price table %s has no row %q", path, k)
		}
	}
	return p, sc.Err()
}
