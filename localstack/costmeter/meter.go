// Package costmeter prices the AWS requests a workload makes. moto reports
// a constant ConsumedCapacity, so the meter sits between the engine and its
// DynamoDB client and models the request units DynamoDB would bill from
// the items themselves: write units by item size (the larger of the old and
// new item), doubled in transactions, plus the index writes each change
// causes; read units by the size of what is read.
package costmeter

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/store"
)

// Units are modelled DynamoDB request units.
type Units struct {
	WRU, RRU float64
}

// Meter wraps a DynamoDB client.
type Meter struct {
	api store.API

	mu    sync.Mutex
	items map[string]itemInfo
	units Units
}

type itemInfo struct {
	size int
	due  string // the due index entry (keys); the table's only index
}

// Wrap answers a metering client around api.
func Wrap(api store.API) *Meter { return &Meter{api: api, items: map[string]itemInfo{}} }

// Units answers the units so far.
func (m *Meter) Units() Units {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.units
}

func kb(n int) float64 { return math.Max(1, math.Ceil(float64(n)/1024)) }

func fourKB(n int) float64 { return math.Max(1, math.Ceil(float64(n)/4096)) }

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

func (m *Meter) put(it map[string]ddb.AttributeValue, factor float64, applied bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(it)
	old := m.items[k]
	n := info(it)
	m.units.WRU += factor * kb(max(old.size, n.size))
	if applied {
		m.units.WRU += indexWrites(old, n)
		m.items[k] = n
	}
}

// PutItem meters a put; a failed condition is billed too.
func (m *Meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := m.api.PutItem(ctx, in, o...)
	m.put(in.Item, 1, err == nil)
	return out, err
}

// TransactWriteItems meters each put at twice its units.
func (m *Meter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := m.api.TransactWriteItems(ctx, in, o...)
	for _, ti := range in.TransactItems {
		switch {
		case ti.Put != nil:
			m.put(ti.Put.Item, 2, err == nil)
		default:
			m.mu.Lock()
			m.units.WRU += 2
			m.mu.Unlock()
		}
	}
	return out, err
}

// UpdateItem meters an update of a small item (the counters) as one unit.
func (m *Meter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := m.api.UpdateItem(ctx, in, o...)
	m.mu.Lock()
	m.units.WRU++
	m.mu.Unlock()
	return out, err
}

func readFactor(consistent *bool) float64 {
	if aws.ToBool(consistent) {
		return 1
	}
	return 0.5
}

// GetItem meters a read by the item's size.
func (m *Meter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := m.api.GetItem(ctx, in, o...)
	n := 0
	if err == nil && out.Item != nil {
		n = store.ItemSize(out.Item)
	}
	m.mu.Lock()
	m.units.RRU += readFactor(in.ConsistentRead) * fourKB(n)
	m.mu.Unlock()
	return out, err
}

// Query meters the total size read, rounded up to 4 KB.
func (m *Meter) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := m.api.Query(ctx, in, o...)
	n := 0
	if err == nil {
		for _, it := range out.Items {
			n += store.ItemSize(it)
		}
	}
	m.mu.Lock()
	m.units.RRU += readFactor(in.ConsistentRead) * fourKB(n)
	m.mu.Unlock()
	return out, err
}

// BatchGetItem meters each item read.
func (m *Meter) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	out, err := m.api.BatchGetItem(ctx, in, o...)
	if err == nil {
		m.mu.Lock()
		for table, items := range out.Responses {
			f := readFactor(in.RequestItems[table].ConsistentRead)
			for _, it := range items {
				m.units.RRU += f * fourKB(store.ItemSize(it))
			}
		}
		m.mu.Unlock()
	}
	return out, err
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
	for _, k := range []string{"dynamodb_wru", "dynamodb_rru", "sqs_request", "lambda_request", "sfn_standard_transition", "sfn_express_request", "sfn_express_gb_second"} {
		if _, ok := p[k]; !ok {
			return nil, fmt.Errorf("price table %s has no row %q", path, k)
		}
	}
	return p, sc.Err()
}
