package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A dev stack's state kept in a file across restarts (make dev's
// STEPFLOW_DEV_STATE): moto keeps everything in memory and has no
// persistence of its own. The file holds what is the truth in stepflow,
// the table's items (jobs with their event logs, schedules, resources, API
// keys, idempotency records, health counters) and the data bucket's
// objects. Queue messages and timer executions are not kept: the table
// is the truth and they only carry work and time, so the heartbeat's sweep
// re-sends from the due index whatever is due, as it does after any lost
// message. Leases held when the stack stopped expire and are reclaimed.

// StateCounts says how much a state file held.
type StateCounts struct {
	Items   int // table items
	Objects int // data bucket objects
}

type stateFile struct {
	// Format names the embedded dev stack's file (localstack/embedded),
	// which is of another kind: this one has none.
	Format  string                  `json:"format,omitempty"`
	SavedAt time.Time               `json:"saved_at"`
	Table   string                  `json:"table"` // the table it was saved from, for the reader
	Items   []map[string]stateValue `json:"items"` // DynamoDB JSON, as `aws dynamodb scan` prints items
	Objects []stateObject           `json:"objects"`
}

type stateObject struct {
	Key  string `json:"key"`
	Data []byte `json:"data"`
}

// stateValue is one attribute value in DynamoDB JSON ({"S": "..."},
// {"N": "1"}, {"B": "<base64>"}, ...). Pointers keep an empty binary, list
// or map from being dropped.
type stateValue struct {
	S    *string                `json:"S,omitempty"`
	N    *string                `json:"N,omitempty"`
	B    *[]byte                `json:"B,omitempty"`
	BOOL *bool                  `json:"BOOL,omitempty"`
	NULL *bool                  `json:"NULL,omitempty"`
	SS   []string               `json:"SS,omitempty"`
	NS   []string               `json:"NS,omitempty"`
	BS   [][]byte               `json:"BS,omitempty"`
	L    *[]stateValue          `json:"L,omitempty"`
	M    *map[string]stateValue `json:"M,omitempty"`
}

func toStateValue(av ddb.AttributeValue) (stateValue, error) {
	var v stateValue
	switch a := av.(type) {
	case *ddb.AttributeValueMemberS:
		v.S = &a.Value
	case *ddb.AttributeValueMemberN:
		v.N = &a.Value
	case *ddb.AttributeValueMemberB:
		v.B = &a.Value
	case *ddb.AttributeValueMemberBOOL:
		v.BOOL = &a.Value
	case *ddb.AttributeValueMemberNULL:
		v.NULL = &a.Value
	case *ddb.AttributeValueMemberSS:
		v.SS = a.Value
	case *ddb.AttributeValueMemberNS:
		v.NS = a.Value
	case *ddb.AttributeValueMemberBS:
		v.BS = a.Value
	case *ddb.AttributeValueMemberL:
		l := make([]stateValue, len(a.Value))
		for i, e := range a.Value {
			var err error
			if l[i], err = toStateValue(e); err != nil {
				return v, err
			}
		}
		v.L = &l
	case *ddb.AttributeValueMemberM:
		m, err := toStateItem(a.Value)
		if err != nil {
			return v, err
		}
		v.M = &m
	default:
		return v, fmt.Errorf("attribute value of type %T", av)
	}
	return v, nil
}

func toStateItem(it map[string]ddb.AttributeValue) (map[string]stateValue, error) {
	m := make(map[string]stateValue, len(it))
	for k, av := range it {
		v, err := toStateValue(av)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		m[k] = v
	}
	return m, nil
}

func (v stateValue) attributeValue() (ddb.AttributeValue, error) {
	switch {
	case v.S != nil:
		return &ddb.AttributeValueMemberS{Value: *v.S}, nil
	case v.N != nil:
		return &ddb.AttributeValueMemberN{Value: *v.N}, nil
	case v.B != nil:
		return &ddb.AttributeValueMemberB{Value: *v.B}, nil
	case v.BOOL != nil:
		return &ddb.AttributeValueMemberBOOL{Value: *v.BOOL}, nil
	case v.NULL != nil:
		return &ddb.AttributeValueMemberNULL{Value: *v.NULL}, nil
	case v.SS != nil:
		return &ddb.AttributeValueMemberSS{Value: v.SS}, nil
	case v.NS != nil:
		return &ddb.AttributeValueMemberNS{Value: v.NS}, nil
	case v.BS != nil:
		return &ddb.AttributeValueMemberBS{Value: v.BS}, nil
	case v.L != nil:
		l := make([]ddb.AttributeValue, len(*v.L))
		for i, e := range *v.L {
			var err error
			if l[i], err = e.attributeValue(); err != nil {
				return nil, err
			}
		}
		return &ddb.AttributeValueMemberL{Value: l}, nil
	case v.M != nil:
		m, err := stateItem(*v.M)
		if err != nil {
			return nil, err
		}
		return &ddb.AttributeValueMemberM{Value: m}, nil
	}
	return nil, errors.New("attribute value of no known type")
}

func stateItem(m map[string]stateValue) (map[string]ddb.AttributeValue, error) {
	it := make(map[string]ddb.AttributeValue, len(m))
	for k, v := range m {
		av, err := v.attributeValue()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		it[k] = av
	}
	return it, nil
}

func (s *Stack) table() string  { return s.Resources.Env["STEPFLOW_TABLE"] }
func (s *Stack) bucket() string { return s.Resources.Env["STEPFLOW_DATA_BUCKET"] }

// SaveState writes the table's items and the bucket's objects to path
// (through a temporary file, so a failed save leaves the last one whole).
// Run it with nothing else writing: Close does, once the runner stopped.
func (s *Stack) SaveState(ctx context.Context, path string) (StateCounts, error) {
	f := stateFile{SavedAt: time.Now().UTC(), Table: s.table(), Items: []map[string]stateValue{}, Objects: []stateObject{}}
	// A Scan reads every item: acceptable here only, in the dev tool's
	// snapshot of a local emulator. No request path of stepflow scans.
	p := dynamodb.NewScanPaginator(s.DynamoDB, &dynamodb.ScanInput{TableName: aws.String(s.table()), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return StateCounts{}, fmt.Errorf("save state: scan %s: %w", s.table(), err)
		}
		for _, it := range page.Items {
			m, err := toStateItem(it)
			if err != nil {
				return StateCounts{}, fmt.Errorf("save state: item: %w", err)
			}
			f.Items = append(f.Items, m)
		}
	}
	if b := s.bucket(); b != "" {
		lp := s3.NewListObjectsV2Paginator(s.S3, &s3.ListObjectsV2Input{Bucket: aws.String(b)})
		for lp.HasMorePages() {
			page, err := lp.NextPage(ctx)
			if err != nil {
				return StateCounts{}, fmt.Errorf("save state: list bucket %s: %w", b, err)
			}
			for _, o := range page.Contents {
				out, err := s.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: o.Key})
				if err != nil {
					return StateCounts{}, fmt.Errorf("save state: get s3://%s/%s: %w", b, aws.ToString(o.Key), err)
				}
				data, err := io.ReadAll(out.Body)
				out.Body.Close()
				if err != nil {
					return StateCounts{}, fmt.Errorf("save state: read s3://%s/%s: %w", b, aws.ToString(o.Key), err)
				}
				f.Objects = append(f.Objects, stateObject{Key: aws.ToString(o.Key), Data: data})
			}
		}
	}
	raw, err := json.Marshal(f)
	if err != nil {
		return StateCounts{}, fmt.Errorf("save state: %w", err)
	}
	if err := WriteFileAtomic(path, raw); err != nil {
		return StateCounts{}, fmt.Errorf("save state: %w", err)
	}
	return StateCounts{Items: len(f.Items), Objects: len(f.Objects)}, nil
}

// WriteFileAtomic writes raw to path through a temporary file beside it,
// so a failed write, or a process killed while writing, leaves the file
// before it whole.
func WriteFileAtomic(path string, raw []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ErrStateNotRestored: the table already holds items (an emulator that
// kept its own state), so a saved state would overwrite newer writes.
var ErrStateNotRestored = errors.New("the table is not empty; the saved state was not restored over it")

// RestoreState writes what SaveState saved at path into the stack's empty
// table and bucket. A missing file restores nothing (a first start).
func (s *Stack) RestoreState(ctx context.Context, path string) (StateCounts, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return StateCounts{}, nil
	}
	if err != nil {
		return StateCounts{}, fmt.Errorf("restore state: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return StateCounts{}, fmt.Errorf("restore state: %s: %w", path, err)
	}
	if f.Format != "" {
		// Restored into nothing and then saved over, it would be lost.
		return StateCounts{}, fmt.Errorf("restore state: %s holds the state of make dev's embedded mode (%s), not the emulator's: name another file in STEPFLOW_DEV_STATE, or run embedded (STEPFLOW_DEV_MODE=embedded)", path, f.Format)
	}
	// Limit 1: one item read says whether the table is empty (dev tool only).
	out, err := s.DynamoDB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.table()), Limit: aws.Int32(1)})
	if err != nil {
		return StateCounts{}, fmt.Errorf("restore state: %w", err)
	}
	if len(out.Items) > 0 {
		return StateCounts{}, ErrStateNotRestored
	}
	for start := 0; start < len(f.Items); start += 25 { // BatchWriteItem's limit
		var reqs []ddb.WriteRequest
		for _, m := range f.Items[start:min(start+25, len(f.Items))] {
			it, err := stateItem(m)
			if err != nil {
				return StateCounts{}, fmt.Errorf("restore state: item: %w", err)
			}
			reqs = append(reqs, ddb.WriteRequest{PutRequest: &ddb.PutRequest{Item: it}})
		}
		pending := map[string][]ddb.WriteRequest{s.table(): reqs}
		for try := 0; len(pending) > 0; try++ {
			if try == 10 {
				return StateCounts{}, errors.New("restore state: items left unprocessed after 10 tries")
			}
			out, err := s.DynamoDB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return StateCounts{}, fmt.Errorf("restore state: write items: %w", err)
			}
			pending = out.UnprocessedItems
		}
	}
	for _, o := range f.Objects {
		if s.bucket() == "" {
			break
		}
		if _, err := s.S3.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket()), Key: aws.String(o.Key), Body: bytes.NewReader(o.Data),
			ContentLength: aws.Int64(int64(len(o.Data))), ContentType: aws.String("application/json"),
		}); err != nil {
			return StateCounts{}, fmt.Errorf("restore state: put s3://%s/%s: %w", s.bucket(), o.Key, err)
		}
	}
	n := StateCounts{Items: len(f.Items)}
	if s.bucket() != "" {
		n.Objects = len(f.Objects)
	}
	return n, nil
}
