package store

import (
	"encoding/json"
	"math"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
)

// A job's usage (domain.Usage) is kept in an attribute of its item beside
// the document, not in it: the units of a write depend on the item's size
// and the item carries the units, so the store renders the attribute
// again until the two agree, which never needs the document compressed
// twice. DynamoDB bills as costmeter models it (the bench's meter): a put
// by the larger of the old and new item per KB, a transaction's puts at
// twice that, a move of the due index entry a delete and a put, a
// strongly consistent read per 4 KB, a failed condition as if applied.
const usageAttr = "usage"

// usageDoc is a usage as stored: short names, for it is on every item.
type usageDoc struct {
	W  float64 `json:"w,omitempty"`
	R  float64 `json:"r,omitempty"`
	Q  float64 `json:"q,omitempty"`
	L  float64 `json:"l,omitempty"`
	LS float64 `json:"ls,omitempty"`
	A  float64 `json:"a,omitempty"`
	SW float64 `json:"sw,omitempty"`
	SR float64 `json:"sr,omitempty"`
	E  float64 `json:"e,omitempty"`
	T  float64 `json:"t,omitempty"`
	TG float64 `json:"tg,omitempty"`
	SG float64 `json:"sg,omitempty"`
	RP float64 `json:"rp,omitempty"`
	CH float64 `json:"ch,omitempty"`
	// PB is what its parts are billed for as stored (layout.stored).
	PB int `json:"pb,omitempty"`
}

// Counts are kept to what matters, for the attribute is on every write:
// requests and units to a ten-thousandth (a share is at least a
// hundredth), GB-seconds to a millionth, GB-months as KB-months to a
// thousandth, reported dollars to a billionth.
func round(v, to float64) float64 { return math.Round(v/to) * to }

const kbPerGB = 1 << 20

func usageDocOf(u domain.Usage) usageDoc {
	r := func(v float64) float64 { return round(v, 1e-4) }
	return usageDoc{W: r(u.WriteUnits), R: r(u.ReadUnits), Q: r(u.SQSRequests), L: r(u.LambdaRequests),
		LS: round(u.LambdaGBSeconds, 1e-6), A: r(u.APIRequests), SW: r(u.S3Writes), SR: r(u.S3Reads), E: r(u.Events),
		T: r(u.SFNTransitions), TG: round(u.TableGBMonths*kbPerGB, 1e-3), SG: round(u.S3GBMonths*kbPerGB, 1e-3), RP: round(u.ReportedUSD, 1e-9), CH: round(u.ChildrenUSD, 1e-9)}
}

func (d usageDoc) usage() domain.Usage {
	return domain.Usage{WriteUnits: d.W, ReadUnits: d.R, SQSRequests: d.Q, LambdaRequests: d.L, LambdaGBSeconds: d.LS,
		APIRequests: d.A, S3Writes: d.SW, S3Reads: d.SR, Events: d.E, SFNTransitions: d.T, TableGBMonths: d.TG / kbPerGB,
		S3GBMonths: d.SG / kbPerGB, ReportedUSD: d.RP, ChildrenUSD: d.CH}
}

// usageOf reads an item's usage; none without the attribute (an item
// written before it was kept, which counts from its next write).
func usageOf(it map[string]ddb.AttributeValue) domain.Usage {
	d, _ := usageDocIn(it)
	return d.usage()
}

// usageDocIn reads an item's usage as stored; ok false without one.
func usageDocIn(it map[string]ddb.AttributeValue) (usageDoc, bool) {
	v, ok := it[usageAttr].(*ddb.AttributeValueMemberS)
	if !ok {
		return usageDoc{}, false
	}
	var d usageDoc
	if json.Unmarshal([]byte(v.Value), &d) != nil {
		return usageDoc{}, false
	}
	return d, true
}

var (
	kb     = domain.WriteUnitsOf
	fourKB = domain.ReadUnitsOf
)

// dueEntry names an item's due index entry, "" when it has none.
func dueEntry(it map[string]ddb.AttributeValue) string {
	p, _ := it["gsi2pk"].(*ddb.AttributeValueMemberS)
	k, _ := it["gsi2sk"].(*ddb.AttributeValueMemberS)
	if p == nil || k == nil {
		return ""
	}
	return p.Value + "|" + k.Value
}

var indexWrites = domain.DueMoveUnits

// withUsage sets it's usage attribute to what j has used and spent, with
// the units own answers for the item's size added, until the size it was
// priced at is the size it has; it answers those units. A usage a few
// bytes longer may pass a KB once, never twice.
func withUsage(it map[string]ddb.AttributeValue, j *domain.Job, parts *layout, own func(size int) float64) float64 {
	u := j.Usage
	u.Add(j.Spent)
	delete(it, usageAttr)
	units := own(ItemSize(it))
	// Storage is set, not added: the item as it is now and its parts are
	// what is kept (its usage attribute taken as some 100 bytes).
	var pb int
	if parts != nil {
		pb = parts.stored
	}
	u.TableGBMonths = j.KeptGBMonths(StoredBytes(it) + len(usageAttr) + 100 + pb)
	for range 3 {
		v := u
		v.WriteUnits += units
		d := usageDocOf(v)
		d.PB = pb
		b, _ := json.Marshal(d)
		it[usageAttr] = &ddb.AttributeValueMemberS{Value: string(b)}
		if next := own(ItemSize(it)); next != units {
			units = next
			continue
		}
		break
	}
	return units
}

// saved notes on j the write that stored it as it: its usage settled, its
// item's size and due entry for the next write's units.
func saved(j *domain.Job, it map[string]ddb.AttributeValue, units float64) {
	j.Spend(domain.Usage{WriteUnits: units})
	j.SettleSpent()
	j.Usage.TableGBMonths = usageOf(it).TableGBMonths
	j.ItemBytes, j.ItemDue = ItemSize(it), dueEntry(it)
}

// ItemOverhead is what DynamoDB adds to the stored size of each item, and
// of each index entry.
const ItemOverhead = 100

// StoredBytes answers the bytes an item is billed for as stored: its size
// and overhead, and its entry in the due index (KEYS_ONLY: the table's and
// the index's keys) with its own overhead.
func StoredBytes(it map[string]ddb.AttributeValue) int {
	n := ItemSize(it) + ItemOverhead
	if _, ok := it["gsi2pk"]; ok {
		keys := map[string]ddb.AttributeValue{}
		for _, k := range []string{"pk", "sk", "gsi2pk", "gsi2sk"} {
			if v, ok := it[k]; ok {
				keys[k] = v
			}
		}
		n += ItemSize(keys) + ItemOverhead
	}
	return n
}

// HoursPerMonth is the month a GB-month is prorated over, by the hour.
const HoursPerMonth = 730
