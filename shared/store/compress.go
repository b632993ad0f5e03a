package store

import (
	"bytes"
	"compress/flate"
	_ "embed"
	"fmt"
	"io"
	"strconv"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A job's documents (whole, header, parts) are compressed with a preset
// dictionary: documents of a few representative jobs, whose field names,
// states, event types and defaults a small document then refers back to
// instead of spelling out. A single-step job's document shrinks to about
// a quarter, a step added to a header costs about 70 bytes instead of
// about 200, so a five-step job stays one item and a long job's parts
// hold several times the steps: fewer write units a step.
//
// Dictionary 1 (zdict1.json, 29 KB: flate uses the last 32 KB) is the
// documents of five of the golden jobs (resources, blob-refs,
// gate-wait-sleep, worker-lease, cancelled), then a header, a part and
// the whole document of a four-step pass chain, the commonest last.
//
// The item's zd attribute names the dictionary (none: plain deflate, as
// written before). A dictionary never changes once written with
// (TestDictionariesAreFrozen); a better one is added under a new number.
// A build that knows no dictionary fails to inflate such a document, or
// reads it right: it never misreads one.
const (
	dictAttr  = "zd"
	writeDict = 1
)

//go:embed zdict1.json
var dictionary1 []byte

var dictionaries = map[int][]byte{1: dictionary1}

// deflate compresses a stored document plainly (a schedule's).
func deflate(doc []byte) ([]byte, error) { return deflateWith(doc, 0) }

func inflate(z []byte) ([]byte, error) { return inflateWith(z, 0) }

// deflateWith compresses a stored document with dictionary dict (0: none).
func deflateWith(doc []byte, dict int) ([]byte, error) {
	var buf bytes.Buffer
	zw, _ := flate.NewWriterDict(&buf, flate.DefaultCompression, dictionaries[dict]) // fails only for a bad level
	if _, err := zw.Write(doc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// inflateWith reads a document compressed with dictionary dict.
func inflateWith(z []byte, dict int) ([]byte, error) {
	d, ok := dictionaries[dict]
	if dict != 0 && !ok {
		return nil, fmt.Errorf("compressed with dictionary %d, which this build does not know", dict)
	}
	return io.ReadAll(flate.NewReaderDict(bytes.NewReader(z), d))
}

// itemDict answers the dictionary an item's document is compressed with.
func itemDict(it map[string]ddb.AttributeValue) (int, error) { return intAttr(it, dictAttr, 0) }

// inflateAttr reads the document an item holds in attribute attr.
func inflateAttr(it map[string]ddb.AttributeValue, attr string) ([]byte, error) {
	z, ok := it[attr].(*ddb.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("item has no %s", attr)
	}
	dict, err := itemDict(it)
	if err != nil {
		return nil, err
	}
	return inflateWith(z.Value, dict)
}

// withDict notes on an item that its document is compressed with the
// dictionary this build writes with.
func withDict(it map[string]ddb.AttributeValue) {
	it[dictAttr] = &ddb.AttributeValueMemberN{Value: strconv.Itoa(writeDict)}
}
