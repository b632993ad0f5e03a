package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
)

// A job stored apart. A job's own item holds all of it while its
// compressed document stays within sealBytes: one write unit a transition.
// Past that, a write moves what it would otherwise carry again and again
// into a part: an item of its own, written once and never changed
// (pk JP#<tenant>#<id>, sk its name), holding steps as they were and
// events. The job's item, the header, then holds the job's own fields, the
// steps changed since their part was written and the events after the
// parts', and names its parts in order. A write of a job of any length
// costs what changed since the last seal, not the job: a step, a few
// events, about one write unit, plus a part every few transitions.
//
// A part is written before the header that names it, by a plain put under
// a fresh name; a write that loses its race deletes the parts it wrote. A
// header is read with a strongly consistent read, and the parts it names
// exist; they are read (strongly consistent, since one may be moments old)
// once per process and kept (partCache): they never change.
//
// Parts expire with the job: the write that finishes it gives them its TTL
// once the header is written (a part sealed by that write is put with it),
// and a redrive takes it away again before its header is written, so a
// failure between the two leaves a part that lasts too long, never a job
// without its parts. A process that dies between a part and its header
// leaves that part for ever: a KB of storage a crash.
//
// The header's document is version 4, in attribute hdoc: a build before
// it finds no doc on the item and answers the job unreadable, rather than
// reading the header as a whole job and writing back a job without the
// steps its parts hold.
const (
	documentVersionApart = 4
	headerDocAttr        = "hdoc"
	// sealBytes keeps a header within one write unit (1 KB) with its
	// other attributes (keys, state, version, indexes: about 150 bytes;
	// its usage, some 30 to 50): a 1,000-step job's largest header is
	// 977 bytes.
	sealBytes = 820
	// maxPartBytes bounds a part's compressed document well within
	// DynamoDB's 400 KB item.
	maxPartBytes = 300 * 1024
	// partCacheBytes bounds the parts a process keeps.
	partCacheBytes = 64 << 20
)

func partsPartition(tenant, id string) string { return "JP#" + tenant + "#" + id }

// partKey names a part in partCache.
func partKey(tenant, id, name string) string { return tenant + "/" + id + "/" + name }

// headerDoc is a job's document when the job is stored apart: a jobDoc
// whose Steps are only those changed since the parts (StepAt gives their
// places) and whose Events follow the parts' EventBase events.
type headerDoc struct {
	jobDoc
	Parts     []string `json:"parts"`
	StepCount int      `json:"step_count"`
	StepAt    []int    `json:"step_at,omitempty"`
	EventBase int      `json:"event_base"`
	// PartsTTL is the TTL the parts carry (unix seconds; none while the job
	// runs).
	PartsTTL int64 `json:"parts_ttl,omitempty"`
}

// partsTTL is the TTL a job's parts must carry: its item's once it is
// finished, none before.
func partsTTL(j *domain.Job) int64 {
	if t := j.TTLAt(); t != nil {
		return t.Unix()
	}
	return 0
}

// partDoc is a part's document: steps as they were when it was written,
// and the events that followed the parts before it.
type partDoc struct {
	Steps  []partStep `json:"steps,omitempty"`
	Events []eventDoc `json:"events,omitempty"`
	// Parts makes it an index part: the names of the parts it stands for,
	// in order (folded out of a header that named too many, foldParts).
	Parts []string `json:"parts,omitempty"`
}

type partStep struct {
	At   int      `json:"at"`
	Step *stepDoc `json:"step"`
}

// layout is how a job read from the store is kept: what its parts hold,
// so its next write carries only what differs. It rides on the job
// (domain.Job.Stored) from the read to the write.
type layout struct {
	parts     []string // as the header names them: "@<name>" an index part
	all       []string // every part item, index parts among them
	eventBase int
	// base is the fingerprint of each step as its latest part holds it
	// (0: none does); a step whose fingerprint is the same is not written
	// again.
	base []uint64
	// ttl is the TTL the parts carry (unix seconds), 0 for none: a
	// finished job's.
	ttl int64
	// stored is what the parts are billed for as stored (StoredBytes of
	// each), kept in the header's usage: a finished job's storage counts
	// them.
	stored int
}

// Apart reports that some of the job is kept in parts.
func (l *layout) Apart() bool { return l != nil && len(l.parts) > 0 }

// names answers the names of every part item of the job, none for a
// whole job.
func (l *layout) names() []string {
	if l == nil {
		return nil
	}
	return l.all
}

// expiry answers the parts' TTL, 0 for none.
func (l *layout) expiry() int64 {
	if l == nil {
		return 0
	}
	return l.ttl
}

func layoutOf(j *domain.Job) *layout {
	l, _ := j.Stored.(*layout)
	return l
}

// keepLayout notes l on j; a whole job carries none.
func keepLayout(j *domain.Job, l *layout) {
	if l == nil {
		j.Stored = nil
		return
	}
	j.Stored = l
}

// jobWrite is what a write of a job puts: its parts first, then its item.
type jobWrite struct {
	item   map[string]ddb.AttributeValue
	parts  []sealedPart
	layout *layout // the job's layout once written
}

// sealedPart is a part to write: its item, and its document as the cache
// keeps it.
type sealedPart struct {
	name string
	item map[string]ddb.AttributeValue
	raw  []byte
}

// stepHash is a step's fingerprint (domain.Step.Fingerprint), never 0,
// which means no part holds the step. It is of this process only.
func stepHash(s *domain.Step) uint64 { return s.Fingerprint() | 1 }

// jobWriteOf renders the write of j over what its parts hold (l, nil for
// a job with none): the whole job in its item while that stays within
// sealBytes; else the header, and a new part when the header would pass
// sealBytes.
func jobWriteOf(j *domain.Job, l *layout) (jobWrite, error) {
	if !l.Apart() {
		it, z, err := wholeItem(j)
		if err != nil {
			return jobWrite{}, err
		}
		if len(z) <= sealBytes || !sealPays(j, nil, len(z)) {
			return jobWrite{item: it}, nil
		}
		l = nil
	}
	hashes := make([]uint64, len(j.Steps))
	for i, s := range j.Steps {
		hashes[i] = stepHash(s)
	}
	var changed []int
	if l.Apart() && len(j.Steps) >= len(l.base) && len(j.Events) >= l.eventBase {
		for i, h := range hashes {
			if i >= len(l.base) || h != l.base[i] {
				changed = append(changed, i)
			}
		}
		next := &layout{parts: l.parts, all: l.all, eventBase: l.eventBase, base: l.base, ttl: partsTTL(j), stored: l.stored}
		it, z, err := headerItem(j, next, changed)
		if err != nil {
			return jobWrite{}, err
		}
		if len(z) <= sealBytes || !sealPays(j, next, len(z)) {
			return jobWrite{item: it, layout: next}, nil
		}
	} else {
		// A job that was whole, or one whose steps or events went back
		// (no domain change does that): all of it is sealed afresh.
		l = &layout{}
		changed = make([]int, len(j.Steps))
		for i := range changed {
			changed[i] = i
		}
	}
	return seal(j, l, changed, hashes)
}

// sealPays reports whether sealing a header of size bytes pays: it brings
// the header within sealBytes, or, for a job whose own fields fill more
// than that (a payload of some KB), takes sealBytes of steps and events
// off it; such a job would otherwise seal a part on every write.
func sealPays(j *domain.Job, l *layout, size int) bool {
	empty := &layout{eventBase: len(j.Events)}
	if l != nil {
		empty.parts, empty.ttl = l.parts, l.ttl
	}
	_, z, err := headerItem(j, empty, nil)
	return err != nil || len(z) <= sealBytes || size-len(z) >= sealBytes
}

// seal renders the write of j that moves the steps at changed and the
// events after l's into new parts, leaving the header none of either.
func seal(j *domain.Job, l *layout, changed []int, hashes []uint64) (jobWrite, error) {
	sealed := partDoc{Events: mapSlice(j.Events[l.eventBase:], eventDocOf)}
	for _, i := range changed {
		d := stepDocOf(*j.Steps[i])
		sealed.Steps = append(sealed.Steps, partStep{At: i, Step: &d})
	}
	docs, err := splitPart(sealed)
	if err != nil {
		return jobWrite{}, fmt.Errorf("seal job %s: %w", j.ID, err)
	}
	next := &layout{parts: slices.Clone(l.parts), all: slices.Clone(l.all), eventBase: len(j.Events), base: make([]uint64, len(j.Steps)), ttl: partsTTL(j), stored: l.stored}
	copy(next.base, l.base)
	for _, i := range changed {
		next.base[i] = hashes[i]
	}
	w := jobWrite{layout: next}
	for _, doc := range docs {
		next.parts = append(next.parts, w.addPart(j, next, doc))
	}
	if err := w.foldParts(j, next); err != nil {
		return jobWrite{}, fmt.Errorf("seal job %s: %w", j.ID, err)
	}
	w.item, _, err = headerItem(j, next, nil)
	if err != nil {
		return jobWrite{}, err
	}
	return w, nil
}

// addPart adds a part to write, under a fresh name, and answers its name.
func (w *jobWrite) addPart(j *domain.Job, next *layout, doc partBytes) string {
	name := rand.Text()[:10] // 50 bits: a job's parts never meet by chance
	it := map[string]ddb.AttributeValue{
		"pk":  &ddb.AttributeValueMemberS{Value: partsPartition(j.Tenant, j.ID)},
		"sk":  &ddb.AttributeValueMemberS{Value: name},
		"doc": &ddb.AttributeValueMemberB{Value: doc.z},
	}
	withDict(it)
	if next.ttl != 0 {
		it["ttl"] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(next.ttl, 10)}
	}
	w.parts = append(w.parts, sealedPart{name: name, raw: doc.raw, item: it})
	next.all = append(next.all, name)
	next.stored += StoredBytes(it)
	return name
}

// A header names at most maxNamedParts parts: past that, foldParts writes
// the first foldedParts of its names into an index part, which it names
// instead ("@<name>"), so the names a header carries do not grow with the
// job (an index part's names may be index parts too).
const (
	maxNamedParts = 24
	foldedParts   = 16
)

func (w *jobWrite) foldParts(j *domain.Job, next *layout) error {
	for len(next.parts) > maxNamedParts {
		raw, err := json.Marshal(partDoc{Parts: next.parts[:foldedParts]})
		if err != nil {
			return err
		}
		z, err := deflateWith(raw, writeDict)
		if err != nil {
			return err
		}
		name := w.addPart(j, next, partBytes{raw, z})
		next.parts = append([]string{"@" + name}, next.parts[foldedParts:]...)
	}
	return nil
}

type partBytes struct{ raw, z []byte }

// splitPart compresses a part's document, halving it until each half
// fits maxPartBytes; the halves keep the events' order.
func splitPart(d partDoc) ([]partBytes, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	z, err := deflateWith(raw, writeDict)
	if err != nil {
		return nil, err
	}
	if len(z) <= maxPartBytes {
		return []partBytes{{raw, z}}, nil
	}
	// Each half holds fewer steps and events than d; the events stay in
	// order, a's before b's.
	var a, b partDoc
	switch h := len(d.Steps) / 2; {
	case len(d.Steps) > 1:
		a, b = partDoc{Steps: d.Steps[:h]}, partDoc{Steps: d.Steps[h:], Events: d.Events}
	case len(d.Events) > 1:
		h = len(d.Events) / 2
		a, b = partDoc{Steps: d.Steps, Events: d.Events[:h]}, partDoc{Events: d.Events[h:]}
	case len(d.Steps) == 1 && len(d.Events) == 1:
		a, b = partDoc{Steps: d.Steps}, partDoc{Events: d.Events}
	default:
		return nil, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("one step or event is %d bytes compressed; the limit is %d: keep large outputs elsewhere (S3) and pass references", len(z), maxPartBytes)}
	}
	za, err := splitPart(a)
	if err != nil {
		return nil, err
	}
	zb, err := splitPart(b)
	if err != nil {
		return nil, err
	}
	return append(za, zb...), nil
}

// headerItem renders a job stored apart as its item: the steps at
// changed, the events after l's, l's parts named.
func headerItem(j *domain.Job, l *layout, changed []int) (map[string]ddb.AttributeValue, []byte, error) {
	eventBase := l.eventBase
	d := headerDoc{jobDoc: jobDocOf(j), Parts: l.parts, StepCount: len(j.Steps), StepAt: changed, EventBase: eventBase, PartsTTL: l.ttl}
	d.Steps = make([]*stepDoc, len(changed))
	for k, i := range changed {
		s := stepDocOf(*j.Steps[i])
		d.Steps[k] = &s
	}
	d.Events = mapSlice(j.Events[eventBase:], eventDocOf)
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, nil, fmt.Errorf("encode job %s: %w", j.ID, err)
	}
	z, err := deflateWith(raw, writeDict)
	if err != nil {
		return nil, nil, fmt.Errorf("compress job %s: %w", j.ID, err)
	}
	return itemOf(j, headerDocAttr, z, documentVersionApart), z, nil
}

// putParts writes a job write's parts, before its header, and keeps
// them: the next read of the job in this process reads none of them.
func (s *Store) putParts(ctx context.Context, j *domain.Job, w jobWrite) error {
	for _, p := range w.parts {
		if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: p.item}); err != nil {
			return fmt.Errorf("write a part of job %s: %w", j.ID, err)
		}
		s.kept.put(partKey(j.Tenant, j.ID, p.name), p.raw)
	}
	return nil
}

// readApart reads a job stored apart from its header item: its parts
// from the cache, or the table, and the job assembled from them.
func (s *Store) readApart(ctx context.Context, it map[string]ddb.AttributeValue) (*domain.Job, error) {
	raw, err := inflateAttr(it, headerDocAttr)
	if err != nil {
		return nil, fmt.Errorf("decode job header: inflate: %w", err)
	}
	var hd headerDoc
	if err := strictJSON(raw, &hd); err != nil {
		return nil, fmt.Errorf("decode job header: %w", err)
	}
	names, indexes, err := s.expandParts(ctx, hd.Tenant, hd.ID, hd.Parts)
	if err != nil {
		return nil, err
	}
	parts, err := s.readParts(ctx, hd.Tenant, hd.ID, names)
	if err != nil {
		return nil, err
	}
	j, err := assemble(hd, names, parts)
	if err != nil {
		return nil, err
	}
	l := j.Stored.(*layout)
	l.all = append(slices.Clone(names), indexes...)
	return j, nil
}

// expandParts answers the data parts a header's names stand for, in
// order, reading the index parts among them (foldParts), and those index
// parts' own names.
func (s *Store) expandParts(ctx context.Context, tenant, id string, entries []string) (names, indexes []string, err error) {
	for _, e := range entries {
		name, index := strings.CutPrefix(e, "@")
		if !index {
			names = append(names, name)
			continue
		}
		raw, err := s.readParts(ctx, tenant, id, []string{name})
		if err != nil {
			return nil, nil, err
		}
		var d partDoc
		if err := strictJSON(raw[0], &d); err != nil {
			return nil, nil, fmt.Errorf("decode index part %s: %w", name, err)
		}
		n, ix, err := s.expandParts(ctx, tenant, id, d.Parts)
		if err != nil {
			return nil, nil, err
		}
		names = append(names, n...)
		indexes = append(append(indexes, name), ix...)
	}
	return names, indexes, nil
}

// assemble builds a job from its header and its data parts' documents
// (named names).
func assemble(hd headerDoc, names []string, parts [][]byte) (*domain.Job, error) {
	steps := make([]*stepDoc, hd.StepCount)
	var events []eventDoc
	for k, raw := range parts {
		var pd partDoc
		if err := strictJSON(raw, &pd); err != nil {
			return nil, fmt.Errorf("decode part %s: %w", names[k], err)
		}
		for _, ps := range pd.Steps {
			if ps.At < 0 || ps.At >= hd.StepCount || ps.Step == nil {
				return nil, fmt.Errorf("part %s holds step %d of %d", names[k], ps.At, hd.StepCount)
			}
			steps[ps.At] = ps.Step
		}
		events = append(events, pd.Events...)
	}
	if len(events) != hd.EventBase {
		return nil, fmt.Errorf("the parts hold %d events; the header follows %d", len(events), hd.EventBase)
	}
	l := &layout{parts: hd.Parts, eventBase: hd.EventBase, base: make([]uint64, hd.StepCount), ttl: hd.PartsTTL}
	for i, d := range steps {
		if d == nil {
			continue
		}
		st := d.step()
		l.base[i] = stepHash(&st)
	}
	if len(hd.StepAt) != len(hd.Steps) {
		return nil, fmt.Errorf("the header places %d steps of %d", len(hd.StepAt), len(hd.Steps))
	}
	for k, at := range hd.StepAt {
		if at < 0 || at >= hd.StepCount || hd.Steps[k] == nil {
			return nil, fmt.Errorf("the header holds step %d of %d", at, hd.StepCount)
		}
		steps[at] = hd.Steps[k]
	}
	for i, d := range steps {
		if d == nil {
			return nil, fmt.Errorf("no part holds step %d", i)
		}
	}
	d := hd.jobDoc
	d.Steps = steps
	d.Events = append(events, hd.Events...)
	j := d.job()
	j.Stored = l
	return j, nil
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// readParts answers the named parts' documents, in order.
func (s *Store) readParts(ctx context.Context, tenant, id string, names []string) ([][]byte, error) {
	out := make([][]byte, len(names))
	var missing []int
	for k, n := range names {
		if raw, ok := s.kept.get(partKey(tenant, id, n)); ok {
			out[k] = raw
		} else {
			missing = append(missing, k)
		}
	}
	for len(missing) > 0 {
		batch := missing[:min(len(missing), 100)] // BatchGetItem's limit
		missing = missing[len(batch):]
		keys := make([]map[string]ddb.AttributeValue, len(batch))
		at := make(map[string]int, len(batch))
		for i, k := range batch {
			keys[i] = map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: partsPartition(tenant, id)},
				"sk": &ddb.AttributeValueMemberS{Value: names[k]},
			}
			at[names[k]] = k
		}
		req := map[string]ddb.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for try := 0; len(req) > 0; try++ {
			if try > 0 {
				if err := pause(ctx, time.Duration(10<<min(try, 6))*time.Millisecond); err != nil {
					return nil, err
				}
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fmt.Errorf("read the parts of job %s: %w", id, err)
			}
			for _, it := range res.Responses[s.table] {
				sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
				if sk == nil {
					continue
				}
				k, ok := at[sk.Value]
				if !ok {
					continue
				}
				raw, err := inflateAttr(it, "doc")
				if err != nil {
					return nil, fmt.Errorf("part %s of job %s: inflate: %w", sk.Value, id, err)
				}
				out[k] = raw
				s.kept.put(partKey(tenant, id, sk.Value), raw)
			}
			req = res.UnprocessedKeys
		}
		for _, k := range batch {
			if out[k] == nil {
				return nil, fmt.Errorf("part %s of job %s: %w", names[k], id, errPartMissing)
			}
		}
	}
	return out, nil
}

// errPartMissing: a part a header names is not in the table. Only expiry
// deletes parts, so the job is gone (its header's TTL has passed too, and
// DynamoDB deletes the items one at a time) or was damaged.
var errPartMissing = errors.New("missing")

// setPartsTTL gives the named parts of a job ttl (unix seconds), or takes
// it away (0).
func (s *Store) setPartsTTL(ctx context.Context, j *domain.Job, names []string, ttl int64) error {
	for _, n := range names {
		in := &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: map[string]ddb.AttributeValue{
				"pk": &ddb.AttributeValueMemberS{Value: partsPartition(j.Tenant, j.ID)},
				"sk": &ddb.AttributeValueMemberS{Value: n},
			},
			UpdateExpression:         aws.String("REMOVE #t"),
			ExpressionAttributeNames: map[string]string{"#t": "ttl"},
		}
		if ttl != 0 {
			in.UpdateExpression = aws.String("SET #t = :t")
			in.ExpressionAttributeValues = map[string]ddb.AttributeValue{":t": &ddb.AttributeValueMemberN{Value: strconv.FormatInt(ttl, 10)}}
		}
		if _, err := s.db.UpdateItem(ctx, in); err != nil {
			return fmt.Errorf("part %s of job %s: %w", n, j.ID, err)
		}
	}
	return nil
}

// dropParts deletes the parts a write that lost its race wrote: no
// header names them. Best effort: one left costs storage only.
func (s *Store) dropParts(ctx context.Context, j *domain.Job, w jobWrite) {
	for _, p := range w.parts {
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: map[string]ddb.AttributeValue{"pk": p.item["pk"], "sk": p.item["sk"]}})
		if err != nil {
			s.log().Warn("a part no header names was not deleted", "job", j.ID, "part", p.name, "err", err)
		}
	}
}

// partCache keeps parts this process read or wrote, by tenant/job/name,
// up to partCacheBytes, the oldest going first: a part never changes, so
// what is kept is never stale.
type partCache struct {
	mu    sync.Mutex
	raw   map[string][]byte
	order []string
	bytes int
}

func (c *partCache) get(k string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	raw, ok := c.raw[k]
	return raw, ok
}

func (c *partCache) put(k string, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.raw[k]; ok || len(raw) > partCacheBytes {
		return
	}
	if c.raw == nil {
		c.raw = map[string][]byte{}
	}
	for c.bytes+len(raw) > partCacheBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.raw[old])
		delete(c.raw, old)
	}
	c.raw[k] = raw
	c.order = append(c.order, k)
	c.bytes += len(raw)
}
