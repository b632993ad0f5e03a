package store

import (
	"encoding/binary"
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
//
// The attribute is on every item, a long job's 1 KB header among them, so
// it is binary: a version byte, then for each count that is not zero its
// tag and its value in its unit (usageScales) as a uvarint; about 30
// bytes where JSON took 75.
const usageAttr = "u"

// usageDoc is a usage as stored.
type usageDoc struct {
	W, R, Q, L, LS, A, SW, SR, E, T, TG, SG, RP, CH float64
	// PB is what its parts are billed for as stored (layout.stored).
	PB int
}

// usageVersion is the attribute's first byte: a reader of another
// version reads no usage (the job counts from its next write).
const usageVersion = 1

// fields are the counts of a usageDoc by tag, each with how many of its
// stored units make one (a count is stored to a ten-thousandth, GB-seconds
// to a millionth, KB-months to a thousandth, dollars to a billionth).
func (d *usageDoc) fields() []struct {
	v   *float64
	per float64
} {
	return []struct {
		v   *float64
		per float64
	}{
		{&d.W, 1e4}, {&d.R, 1e4}, {&d.Q, 1e4}, {&d.L, 1e4}, {&d.LS, 1e6}, {&d.A, 1e4}, {&d.SW, 1e4},
		{&d.SR, 1e4}, {&d.E, 1e4}, {&d.T, 1e4}, {&d.TG, 1e3}, {&d.SG, 1e3}, {&d.RP, 1e9}, {&d.CH, 1e9},
	}
}

// pbTag is the tag of PB, after the fields'.
const pbTag = 14

func (d usageDoc) encode() []byte {
	b := []byte{usageVersion}
	for tag, f := range d.fields() {
		if n := uint64(math.Round(*f.v * f.per)); n > 0 && *f.v > 0 {
			b = binary.AppendUvarint(append(b, byte(tag)), n)
		}
	}
	if d.PB > 0 {
		b = binary.AppendUvarint(append(b, pbTag), uint64(d.PB))
	}
	return b
}

func decodeUsage(b []byte) (usageDoc, bool) {
	var d usageDoc
	if len(b) == 0 || b[0] != usageVersion {
		return d, false
	}
	fields := d.fields()
	for i := 1; i < len(b); {
		tag := int(b[i])
		n, k := binary.Uvarint(b[i+1:])
		if k <= 0 {
			return usageDoc{}, false
		}
		i += 1 + k
		switch {
		case tag < len(fields):
			*fields[tag].v = float64(n) / fields[tag].per // a power of ten: the nearest double to the decimal
		case tag == pbTag:
			d.PB = int(n)
		default:
			return usageDoc{}, false
		}
	}
	return d, true
}

const kbPerGB = 1 << 20

func usageDocOf(u domain.Usage) usageDoc {
	// Storage as KB-months: a job's is some millionths of a GB-month.
	return usageDoc{W: u.WriteUnits, R: u.ReadUnits, Q: u.SQSRequests, L: u.LambdaRequests, LS: u.LambdaGBSeconds,
		A: u.APIRequests, SW: u.S3Writes, SR: u.S3Reads, E: u.Events, T: u.SFNTransitions, TG: u.TableGBMonths * kbPerGB,
		SG: u.S3GBMonths * kbPerGB, RP: u.ReportedUSD, CH: u.ChildrenUSD}
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
	v, ok := it[usageAttr].(*ddb.AttributeValueMemberB)
	if !ok {
		return usageDoc{}, false
	}
	return decodeUsage(v.Value)
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
// priced at is the size it has. A usage a few bytes longer may pass a KB
// once, never twice.
func withUsage(it map[string]ddb.AttributeValue, j *domain.Job, parts *layout, own func(size int) float64) {
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
		it[usageAttr] = &ddb.AttributeValueMemberB{Value: d.encode()}
		if next := own(ItemSize(it)); next != units {
			units = next
			continue
		}
		break
	}
}

// saved notes on j the write that stored it as it: its usage as stored
// (each count to its unit, as a read answers it), nothing left spent, its
// item's size and due entry for the next write's units.
func saved(j *domain.Job, it map[string]ddb.AttributeValue) {
	j.Usage, j.Spent = usageOf(it), domain.Usage{}
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
