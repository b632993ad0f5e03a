// Package store keeps jobs in one DynamoDB table. A job is one item holding
// its projection and its event log, so every transition is one conditional
// write that checks the version and state it was decided on and changes the
// state and the log together, or not at all.
//
// Keys (single-table):
//
//	job           pk J#<tenant>#<shard of the id>  sk <job id>
//	idempotency   pk I#<tenant>#<key>              sk I
//	api key       pk K#<sha256 of the key>         sk K
//	stats         pk S#<tenant>#<hour>#<shard>     sk S
//	resource      pk R#<tenant>                    sk <resource id>
//	schedule      pk C#<tenant>                    sk <schedule id>   (schedule.go)
//	long-polls    pk P#<tenant>                    sk P               (longpoll.go)
//	index due:    gsi2pk D#<shard>, gsi2sk <due time>; only unfinished jobs,
//	              and finished ones whose stored data is due for deletion
//	              gsi2pk DS#<shard>, gsi2sk <next tick>; only running schedules
//
// A tenant's jobs sit in ListShards partitions, sorted by id (ULIDs sort by
// time): listing queries them directly and merges, so no index has to be
// rewritten when a job changes state, and a busy tenant's writes spread
// over several partitions. The tenant is part of every job key, so another
// tenant's job is simply not found.
package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// API is the part of the DynamoDB client the store uses (fault layers and
// the cost meter sit in the SDK middleware stack, localstack/awsfault).
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// Index names and shard counts; template.yaml declares the same indexes.
const (
	ListShards     = 8 // partitions per tenant; a listing queries each
	IndexDue       = "due"
	DueShards      = 8 // spreads due-index writes; a sweep queries each shard once
	StatsShards    = 4
	dueLayout      = "2006-01-02T15:04:05.000Z"
	idempotencyTTL = 24 * time.Hour
)

// Store is the DynamoDB adapter.
type Store struct {
	db    API
	table string
	// Log hears of job documents read leniently (decodeJob); nil is
	// slog.Default().
	Log *slog.Logger
	// kept holds the parts of jobs stored apart this process read or
	// wrote (parts.go).
	kept partCache
	// Now is the clock that tells whether an item's TTL has passed; nil
	// is time.Now.
	Now func() time.Time
}

// New answers a store over table.
func New(db API, table string) *Store { return &Store{db: db, table: table} }

func shardOf(id string, n int) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32() % uint32(n)
}

func jobPartition(tenant string, shard uint32) string { return fmt.Sprintf("J#%s#%d", tenant, shard) }

// ItemKey answers the table key of a job, for tools and tests that read
// the raw item.
func ItemKey(tenant, id string) (pk, sk string) {
	return jobPartition(tenant, shardOf(id, ListShards)), id
}

func jobKey(tenant, id string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: jobPartition(tenant, shardOf(id, ListShards))},
		"sk": &ddb.AttributeValueMemberS{Value: id},
	}
}

var decoder = attributevalue.NewDecoder(func(o *attributevalue.DecoderOptions) { o.TagKey = "json" })

func dueShard(id string) string { return fmt.Sprintf("D#%d", shardOf(id, DueShards)) }

// item renders a job as its table item, whole: the attributes conditions
// and indexes read (state, version, queue, index keys, ttl) stand on their
// own; the rest of the job, its steps and event log, is one compressed
// JSON document. Write units are billed per KB, and a job's JSON
// compresses several times over, so most jobs stay one unit per write. A
// job whose document passes sealBytes is stored apart (parts.go).
func item(j *domain.Job) (map[string]ddb.AttributeValue, error) {
	it, _, err := wholeItem(j)
	return it, err
}

// wholeItem is item, with the compressed document.
func wholeItem(j *domain.Job) (map[string]ddb.AttributeValue, []byte, error) {
	doc, err := encodeDocument(j)
	if err != nil {
		return nil, nil, fmt.Errorf("encode job %s: %w", j.ID, err)
	}
	z, err := deflateWith(doc, writeDict)
	if err != nil {
		return nil, nil, fmt.Errorf("compress job %s: %w", j.ID, err)
	}
	return itemOf(j, "doc", z, documentVersion), z, nil
}

// itemOf is a job's item with its compressed document z in attribute doc,
// of document version v.
func itemOf(j *domain.Job, doc string, z []byte, v int) map[string]ddb.AttributeValue {
	it := jobKey(j.Tenant, j.ID)
	it["state"] = &ddb.AttributeValueMemberS{Value: string(j.State)}
	it["version"] = &ddb.AttributeValueMemberN{Value: strconv.FormatInt(j.Version, 10)}
	it["queue"] = &ddb.AttributeValueMemberS{Value: j.Queue}
	it[doc] = &ddb.AttributeValueMemberB{Value: z}
	it[docVersionAttr] = &ddb.AttributeValueMemberN{Value: strconv.Itoa(v)}
	withDict(it)
	if j.DueAt != nil {
		it["gsi2pk"] = &ddb.AttributeValueMemberS{Value: dueShard(j.ID)}
		it["gsi2sk"] = &ddb.AttributeValueMemberS{Value: j.DueAt.UTC().Format(dueLayout)}
	}
	if t := j.TTLAt(); t != nil {
		it["ttl"] = &ddb.AttributeValueMemberN{Value: fmt.Sprint(t.Unix())}
	}
	if j.ScheduleID != "" {
		it["schedule"] = &ddb.AttributeValueMemberS{Value: j.ScheduleID} // GET /v1/jobs?schedule= filters on it
	}
	return it
}

// decodeJob reads a job's item. A document of a newer build, or one with
// a field this build does not store, is read as far as this build knows
// it (as the domain's JSON always read one) and logged: failing it would
// quarantine every job a newer build wrote, on a rollback. The golden
// items' test reads strictly, so no build writes a field it cannot read.
func (s *Store) decodeJob(it map[string]ddb.AttributeValue) (*domain.Job, error) {
	raw, err := inflateAttr(it, "doc")
	if err != nil {
		return nil, fmt.Errorf("decode job: inflate: %w", err)
	}
	v, err := documentVersionOf(it)
	if err != nil {
		return nil, fmt.Errorf("decode job: %w", err)
	}
	j, strictErr := decodeDocument(raw, v, true)
	if strictErr == nil {
		return j, nil
	}
	if !errors.Is(strictErr, errUnknownField) && v <= documentVersion {
		return nil, fmt.Errorf("decode job: %w", strictErr)
	}
	j, err = decodeDocument(raw, v, false)
	if err != nil {
		return nil, fmt.Errorf("decode job: %w", err)
	}
	s.log().Warn("job read without what this build does not store; a write of it drops that",
		"tenant", j.Tenant, "job", j.ID, "document_version", v, "err", strictErr)
	return j, nil
}

// readJob reads a job's item, whole or stored apart.
func (s *Store) readJob(ctx context.Context, it map[string]ddb.AttributeValue) (*domain.Job, error) {
	read := s.decodeJob
	if _, apart := it[headerDocAttr]; apart {
		read = func(it map[string]ddb.AttributeValue) (*domain.Job, error) { return s.readApart(ctx, it) }
	}
	j, err := read(it)
	if err != nil {
		return nil, err
	}
	d, _ := usageDocIn(it)
	j.Usage = d.usage()
	if l := layoutOf(j); l != nil {
		l.stored = d.PB
	}
	j.ItemBytes, j.ItemDue = ItemSize(it), dueEntry(it)
	_, j.CancelRequested = it[cancelAttr]
	if n, ok := it[marksAttr].(*ddb.AttributeValueMemberN); ok {
		j.MarksMade, _ = strconv.ParseInt(n.Value, 10, 64)
		j.Marks = map[string][]byte{}
		for name, v := range it {
			if b, ok := v.(*ddb.AttributeValueMemberB); ok && strings.HasPrefix(name, markPrefix) {
				j.Marks[strings.TrimPrefix(name, markPrefix)] = b.Value
			}
		}
	}
	return j, nil
}

// MarkOutcome's marks on a job's item: each under markPrefix and its key,
// and marksAttr counting those made. A save puts the whole item, so the
// write that applies them clears them.
const (
	markPrefix = "om_"
	marksAttr  = "marks"
)

// MarkOutcome records rec beside an unfinished job under key: one small
// update, no read, the version unchanged.
func (s *Store) MarkOutcome(ctx context.Context, tenant, id, key string, rec []byte) error {
	name := expression.NameNoDotSplit(markPrefix + key) // a lease id's dots are no path
	cond := unfinishedJob().And(expression.AttributeNotExists(name))
	upd := expression.Set(name, expression.Value(rec)).Add(expression.Name(marksAttr), expression.Value(1))
	if err := s.updateJobIf(ctx, tenant, id, upd, cond); err != nil {
		return fmt.Errorf("mark an outcome of job %s: %w", id, err)
	}
	return nil
}

// unfinishedJob holds for a job's item in a state not terminal.
func unfinishedJob() expression.ConditionBuilder {
	var states []expression.OperandBuilder
	for _, st := range domain.AllJobStates() {
		if !st.Terminal() {
			states = append(states, expression.Value(string(st)))
		}
	}
	return expression.AttributeExists(expression.Name("pk")).And(
		expression.Name("state").In(states[0], states[1:]...))
}

// cancelAttr is RequestCancel's mark on a job's item. A save puts the
// whole item, so the write that cancels the job clears it.
const cancelAttr = "cancel"

// RequestCancel marks an unfinished job as asked to be cancelled: one
// small update, no read, the version unchanged.
func (s *Store) RequestCancel(ctx context.Context, tenant, id string) error {
	upd := expression.Set(expression.Name(cancelAttr), expression.Value(true))
	if err := s.updateJobIf(ctx, tenant, id, upd, unfinishedJob()); err != nil {
		return fmt.Errorf("request cancel of job %s: %w", id, err)
	}
	return nil
}

// updateJobIf updates a job's item without reading it, if cond holds; a
// condition that fails is no error (the job moved on, or is gone).
func (s *Store) updateJobIf(ctx context.Context, tenant, id string, upd expression.UpdateBuilder, cond expression.ConditionBuilder) error {
	expr, err := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: jobKey(tenant, id),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *ddb.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return err
	}
	return nil
}

func (s *Store) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Create writes a new job. With an idempotency key the job and the key's
// record are written in one transaction; when the key is taken, the job it
// names is answered (created false) if requestHash matches, else
// ErrIdempotencyMismatch.
func (s *Store) Create(ctx context.Context, j *domain.Job, requestHash string, now time.Time) (*domain.Job, bool, error) {
	j.Version = 1
	w, err := jobWriteOf(j, nil)
	if err != nil {
		return nil, false, err
	}
	it := w.item
	notExists := expression.AttributeNotExists(expression.Name("pk"))
	jobCond, err := expression.NewBuilder().WithCondition(notExists).Build()
	if err != nil {
		return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	token := withWriteToken(it)
	// A put of its item alone, or a transaction: each put at twice its
	// units, the idempotency record's among them.
	transact := j.IdempotencyKey != "" || len(w.parts) > 0
	var partUnits float64
	for _, p := range w.parts {
		partUnits += 2 * kb(ItemSize(p.item))
	}
	own := func(size int) float64 {
		if !transact {
			return kb(size) + indexWrites("", dueEntry(it))
		}
		u := 2*kb(size) + indexWrites("", dueEntry(it)) + partUnits
		if j.IdempotencyKey != "" {
			u += 2
		}
		return u
	}
	withUsage(it, j, w.layout, own)
	if n := ItemSize(it); n > MaxItemBytes {
		return nil, false, tooLarge(j, n)
	}
	created := func() (*domain.Job, bool, error) {
		saved(j, it)
		keepLayout(j, w.layout)
		for _, p := range w.parts {
			s.kept.put(partKey(j.Tenant, j.ID, p.name), p.raw)
		}
		return j, true, nil
	}
	if j.IdempotencyKey == "" && len(w.parts) == 0 {
		if err := s.putNew(ctx, j, it, token); err != nil {
			return nil, false, err
		}
		return created()
	}
	// A job created with its parts is one transaction, so no part
	// outlives a creation that did not happen (a key already taken).
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []ddb.TransactWriteItem{
		{Put: &ddb.Put{TableName: &s.table, Item: it, ConditionExpression: jobCond.Condition(), ExpressionAttributeNames: jobCond.Names(),
			ReturnValuesOnConditionCheckFailure: ddb.ReturnValuesOnConditionCheckFailureAllOld}},
	}}
	idemPK := "I#" + j.Tenant + "#" + j.IdempotencyKey
	if j.IdempotencyKey != "" {
		idemItem := map[string]ddb.AttributeValue{
			"pk":     &ddb.AttributeValueMemberS{Value: idemPK},
			"sk":     &ddb.AttributeValueMemberS{Value: "I"},
			"job_id": &ddb.AttributeValueMemberS{Value: j.ID},
			"hash":   &ddb.AttributeValueMemberS{Value: requestHash},
			"ttl":    &ddb.AttributeValueMemberN{Value: fmt.Sprint(now.Add(idempotencyTTL).Unix())},
		}
		// An expired record that TTL has not deleted yet counts as free.
		idemCond, err := expression.NewBuilder().WithCondition(
			notExists.Or(expression.Name("ttl").LessThan(expression.Value(now.Unix()))),
		).Build()
		if err != nil {
			return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
		}
		in.TransactItems = append(in.TransactItems, ddb.TransactWriteItem{Put: &ddb.Put{TableName: &s.table, Item: idemItem, ConditionExpression: idemCond.Condition(),
			ExpressionAttributeNames: idemCond.Names(), ExpressionAttributeValues: idemCond.Values()}})
	}
	if len(w.parts)+len(in.TransactItems) > maxTransactItems {
		return nil, false, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("job %s would be stored in %d parts; the limit is %d: submit fewer or smaller steps, and keep large payloads elsewhere (S3)", j.ID, len(w.parts), maxTransactItems-len(in.TransactItems))}
	}
	for _, p := range w.parts {
		in.TransactItems = append(in.TransactItems, ddb.TransactWriteItem{Put: &ddb.Put{TableName: &s.table, Item: p.item}})
	}
	var tce *ddb.TransactionCanceledException
	for try := 0; ; try++ {
		_, err = s.db.TransactWriteItems(ctx, in)
		if err == nil {
			return created()
		}
		if !errors.As(err, &tce) {
			return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
		}
		// Two submissions with one key in flight together: DynamoDB cancels
		// one with TransactionConflict. Its retry then fails the condition
		// and answers the winner's job below.
		if transactionConflict(tce) && try < 4 {
			if err := pause(ctx, time.Duration(10<<try)*time.Millisecond); err != nil { // backoff between retries of one call
				return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
			}
			continue
		}
		break
	}
	if conditionFailed(tce, 0) && ownItem(tce.CancellationReasons[0].Item, token) {
		return created() // an SDK retry of a write that took: the job is this one
	}
	if j.IdempotencyKey == "" || !conditionFailed(tce, 1) {
		if conditionFailed(tce, 0) {
			return nil, false, fmt.Errorf("create job %s: %w", j.ID, domain.ErrExists)
		}
		return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		Key: map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: idemPK}, "sk": &ddb.AttributeValueMemberS{Value: "I"}},
	})
	if err != nil {
		return nil, false, fmt.Errorf("read idempotency key: %w", err)
	}
	var rec struct {
		JobID string `json:"job_id"`
		Hash  string `json:"hash"`
	}
	if err := decoder.Decode(&ddb.AttributeValueMemberM{Value: out.Item}, &rec); err != nil || rec.JobID == "" {
		return nil, false, fmt.Errorf("read idempotency key: record unreadable: %v", err)
	}
	if rec.Hash != requestHash {
		return nil, false, domain.ErrIdempotencyMismatch
	}
	existing, err := s.Get(ctx, j.Tenant, rec.JobID)
	if err != nil {
		return nil, false, fmt.Errorf("idempotent replay of job %s: %w", rec.JobID, err)
	}
	return existing, false, nil
}

// pause waits d, or answers ctx's error if it ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func transactionConflict(tce *ddb.TransactionCanceledException) bool {
	for _, r := range tce.CancellationReasons {
		if aws.ToString(r.Code) == "TransactionConflict" {
			return true
		}
	}
	return false
}

func conditionFailed(tce *ddb.TransactionCanceledException, i int) bool {
	if len(tce.CancellationReasons) > i {
		return aws.ToString(tce.CancellationReasons[i].Code) == "ConditionalCheckFailed"
	}
	// Some emulators omit the reasons; the message still names the check.
	return strings.Contains(tce.ErrorMessage(), "ConditionalCheckFailed")
}

// Get reads a job with a strongly consistent read, or ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (*domain.Job, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		Key: jobKey(tenant, id),
	})
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	if out.Item == nil {
		return nil, fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	j, err := s.readJob(ctx, out.Item)
	if errors.Is(err, errPartMissing) && s.expired(out.Item) {
		return nil, fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w (%v)", id, domain.ErrUnreadable, err)
	}
	j.Spend(domain.Usage{ReadUnits: fourKB(j.ItemBytes)})
	return j, nil
}

// expired reports that an item's TTL has passed: DynamoDB deletes it
// within days, and a job's parts may go first.
func (s *Store) expired(it map[string]ddb.AttributeValue) bool {
	n, ok := it["ttl"].(*ddb.AttributeValueMemberN)
	if !ok {
		return false
	}
	t, err := strconv.ParseInt(n.Value, 10, 64)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	return err == nil && now().Unix() >= t
}

// Quarantine sets aside a job that cannot be read or moved on: it leaves
// the due index (so no sweep meets it again) and carries why and when, for
// an operator. It is one write that needs no decoding of the job.
func (s *Store) Quarantine(ctx context.Context, tenant, id, reason string, now time.Time) error {
	upd := expression.Set(expression.Name("quarantined"), expression.Value(domain.Truncate(reason, 1024))).
		Set(expression.Name("quarantined_at"), expression.Value(now.UTC().Format(time.RFC3339Nano))).
		Remove(expression.Name("gsi2pk")).Remove(expression.Name("gsi2sk"))
	if err := s.updateJobIf(ctx, tenant, id, upd, expression.AttributeExists(expression.Name("pk"))); err != nil {
		return fmt.Errorf("quarantine job %s: %w", id, err)
	}
	return nil
}

// Defer moves a due job later without reading it, if its due time is still
// the one the sweep saw: a job the sweep cannot move on is looked at again
// after until, not on every sweep, and never holds the others back.
func (s *Store) Defer(ctx context.Context, k engine.DueJob, until time.Time) error {
	if k.Due == "" {
		return nil
	}
	cond := expression.Name("gsi2sk").Equal(expression.Value(k.Due))
	upd := expression.Set(expression.Name("gsi2sk"), expression.Value(until.UTC().Format(dueLayout)))
	if err := s.updateJobIf(ctx, k.Tenant, k.ID, upd, cond); err != nil {
		return fmt.Errorf("defer job %s: %w", k.ID, err)
	}
	return nil
}

// Save writes a changed job if, and only if, the stored one is still the
// version it was read at and in the state the change's first job event
// leaves (from the formal job table). loadedEvents is how many events the
// job had when read. A lost race answers domain.ErrVersionConflict and
// leaves j's version as it was.
func (s *Store) Save(ctx context.Context, j *domain.Job, loadedEvents int) error {
	cond := expression.Name("version").Equal(expression.Value(j.Version))
	if !j.CancelRequested {
		cond = cond.And(expression.AttributeNotExists(expression.Name(cancelAttr)))
	}
	if j.MarksMade == 0 {
		cond = cond.And(expression.AttributeNotExists(expression.Name(marksAttr)))
	} else {
		cond = cond.And(expression.Name(marksAttr).Equal(expression.Value(j.MarksMade)))
	}
	if !layoutOf(j).Apart() {
		// A job read whole, or carried by its first message (which cannot
		// know how its first write stored it): never over a header.
		cond = cond.And(expression.AttributeNotExists(expression.Name(headerDocAttr)))
	}
	if src := domain.SaveSources(j, loadedEvents); len(src) > 0 {
		ops := make([]expression.OperandBuilder, 0, len(src))
		for _, st := range src {
			ops = append(ops, expression.Value(string(st)))
		}
		in := expression.Name("state").In(ops[0], ops[1:]...)
		if len(ops) == 1 {
			in = expression.Name("state").Equal(ops[0])
		}
		cond = cond.And(in)
	}
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	j.Version++
	l := layoutOf(j)
	w, err := jobWriteOf(j, l)
	if err != nil {
		j.Version--
		return err
	}
	it := w.item
	token := withWriteToken(it)
	// The units of this write: its parts' puts, then its item's, by the
	// larger of the item as read and as written. A job whose usage counts
	// no write yet was carried by a message sent before its first write
	// (engine.sendFirst), which cost what a put of it does.
	var partUnits float64
	for _, p := range w.parts {
		partUnits += kb(ItemSize(p.item))
	}
	// A redrive's parts lose their TTL before the write; a finished job's
	// take its TTL after it: an update of each part, either way.
	clearTTL := l.Apart() && l.ttl != 0 && w.layout.ttl == 0
	setTTL := w.layout.Apart() && w.layout.ttl != 0 && l.expiry() == 0
	ttlUnits := 0.0
	if clearTTL || setTTL {
		ttlUnits = float64(len(l.names()))
	}
	carried := j.Usage.WriteUnits == 0 && j.ItemBytes == 0
	own := func(size int) float64 {
		// A job read from a message (engine.carrying) comes with no note
		// of its item: one sent before its write was written out of the
		// due index, one sent after it with its due time (CarriedDue).
		oldDue := j.ItemDue
		if j.ItemBytes == 0 && !carried && j.CarriedDue != nil {
			oldDue = dueShard(j.ID) + "|" + j.CarriedDue.UTC().Format(dueLayout)
		}
		u := kb(max(j.ItemBytes, size)) + indexWrites(oldDue, dueEntry(it)) + partUnits + ttlUnits
		if carried {
			u += kb(size)
		}
		return u
	}
	withUsage(it, j, w.layout, own)
	if n := ItemSize(it); n > MaxItemBytes {
		j.Version--
		return tooLarge(j, n)
	}
	if clearTTL {
		// A finished job moves again (a redrive): its parts lose their
		// TTL before its header says so.
		if err := s.setPartsTTL(ctx, j, l.names(), 0); err != nil {
			j.Version--
			return fmt.Errorf("save job %s: %w", j.ID, err)
		}
	}
	if err := s.putParts(ctx, j, w); err != nil {
		j.Version--
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	var attempts int
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: it,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: ddb.ReturnValuesOnConditionCheckFailureAllOld,
	}, countAttempts(&attempts))
	if err != nil && !ownWrite(err, token) {
		j.Version--
		var ccf *ddb.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// A failed condition is billed as the put would have been;
			// the parts were put. The engine carries it to the next try.
			j.Spend(domain.Usage{WriteUnits: kb(max(j.ItemBytes, ItemSize(it))) + partUnits})
			// Refused at its only attempt, the header was not written, so
			// no header names the parts this write put. After a retry the
			// refusal may be of our own write, landed and then built on
			// by another writer (whose header names our parts): they are
			// left, a KB of storage each, rather than taken from under it.
			if attempts <= 1 {
				s.dropParts(ctx, j, w)
			}
			return fmt.Errorf("save job %s at version %d: %w", j.ID, j.Version, domain.ErrVersionConflict)
		}
		return fmt.Errorf("save job %s: %w", j.ID, err)
	}
	keepLayout(j, w.layout)
	saved(j, it)
	j.CancelRequested, j.Marks, j.MarksMade = false, nil, 0
	if setTTL {
		// The job is finished: its parts expire with its item (those this
		// write sealed were put with the TTL). A TTL that moves later on
		// (earlier, once its data is deleted) is not written again: a part
		// outliving its header by a day costs nothing but storage.
		if err := s.setPartsTTL(ctx, j, l.names(), w.layout.ttl); err != nil {
			s.log().Warn("a finished job's parts were not given its TTL; they outlive it", "job", j.ID, "err", err)
		}
	}
	return nil
}

func tooLarge(j *domain.Job, n int) error {
	return &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("job %s would be %d bytes stored in its own item; DynamoDB's limit is %d: keep large payloads and signals elsewhere (S3) and pass references", j.ID, n, MaxItemBytes)}
}

// putNew writes a new job's item (carrying token) if no item has its key:
// one whose answer was lost and whose retry finds it is the job's own.
func (s *Store) putNew(ctx context.Context, j *domain.Job, it map[string]ddb.AttributeValue, token string) error {
	notExists, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("pk"))).Build()
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: it,
		ConditionExpression:                 notExists.Condition(),
		ExpressionAttributeNames:            notExists.Names(),
		ReturnValuesOnConditionCheckFailure: ddb.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *ddb.ConditionalCheckFailedException
	switch {
	case err == nil, ownWrite(err, token):
		return nil
	case errors.As(err, &ccf):
		return fmt.Errorf("create job %s: %w", j.ID, domain.ErrExists)
	}
	return fmt.Errorf("create job %s: %w", j.ID, err)
}

// maxBatchWrite is DynamoDB's bound on the items of one BatchWriteItem.
const maxBatchWrite = 25

// CreateAll writes new jobs without an idempotency key, a batch
// submission's, as Create would, but those stored in one item together:
// one BatchWriteItem per 25, where Create is one request each. A batch
// write has no condition, which a new job's fresh id does not need; it is
// sent once (an SDK retry after a lost answer could put a job back over a
// change already made to it), and a job it did not write, or whose answer
// was lost, is then created alone, conditionally, under the same write
// token (so one the batch did write is known as its own).
func (s *Store) CreateAll(ctx context.Context, jobs []*domain.Job, now time.Time) []error {
	errs := make([]error, len(jobs))
	type pending struct {
		at    int
		w     jobWrite
		token string
	}
	var batch []pending
	for i, j := range jobs {
		if j.IdempotencyKey != "" {
			errs[i] = fmt.Errorf("create job %s: CreateAll takes no job with an idempotency key", j.ID)
			continue
		}
		j.Version = 1
		w, err := jobWriteOf(j, nil)
		if err == nil && len(w.parts) == 0 {
			token := withWriteToken(w.item)
			withUsage(w.item, j, nil, func(size int) float64 { return kb(size) + indexWrites("", dueEntry(w.item)) })
			if ItemSize(w.item) <= MaxItemBytes {
				batch = append(batch, pending{at: i, w: w, token: token})
				continue
			}
		}
		_, _, errs[i] = s.Create(ctx, j, "", now) // alone: parts, or what refuses it
	}
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), maxBatchWrite)]
		batch = batch[len(chunk):]
		reqs := make([]ddb.WriteRequest, len(chunk))
		for k, p := range chunk {
			reqs[k] = ddb.WriteRequest{PutRequest: &ddb.PutRequest{Item: p.w.item}}
		}
		out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddb.WriteRequest{s.table: reqs}},
			func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
		unwritten := map[string]bool{}
		if err == nil {
			for _, r := range out.UnprocessedItems[s.table] {
				if r.PutRequest != nil {
					unwritten[key(r.PutRequest.Item)] = true
				}
			}
		}
		for _, p := range chunk {
			j := jobs[p.at]
			if err != nil || unwritten[key(p.w.item)] {
				if errs[p.at] = s.putNew(ctx, j, p.w.item, p.token); errs[p.at] != nil {
					continue
				}
			}
			saved(j, p.w.item)
			keepLayout(j, p.w.layout)
		}
	}
	return errs
}

// key is an item's primary key, as text.
func key(it map[string]ddb.AttributeValue) string {
	pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
	sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return ""
	}
	return pk.Value + "|" + sk.Value
}

// maxTransactItems is DynamoDB's bound on the items of one transaction.
const maxTransactItems = 100

// A job item carries the token of the write that put it. A write applied
// whose answer was lost (a timeout) is retried by the SDK, and the retry
// fails its condition against that very write; the item the failure
// returns (ReturnValuesOnConditionCheckFailure, at no read cost) carries
// the token, telling it apart from another writer's.
const (
	writeTokenAttr = "w"
	writeTokenLen  = 16 // characters of crypto/rand's base32 text: 80 bits
)

// withWriteToken gives the item a fresh write token and answers it.
func withWriteToken(it map[string]ddb.AttributeValue) string {
	token := rand.Text()[:writeTokenLen]
	it[writeTokenAttr] = &ddb.AttributeValueMemberS{Value: token}
	return token
}

// ownWrite answers whether err is a failed condition against the write
// that carried token: the write was applied.
// countAttempts counts the attempts of one call that went on to be sent
// (the SDK's retryer runs the Finalize step once per attempt).
func countAttempts(n *int) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("stepflow.CountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					*n++
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

func ownWrite(err error, token string) bool {
	var ccf *ddb.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return false
	}
	return ownItem(ccf.Item, token)
}

// ownItem reports whether item, as a refused condition found it, was
// written under token (by an earlier try of the same write).
func ownItem(item map[string]ddb.AttributeValue, token string) bool {
	w, ok := item[writeTokenAttr].(*ddb.AttributeValueMemberS)
	return ok && w.Value == token
}

// MaxItemBytes is DynamoDB's item size limit.
const MaxItemBytes = 400 * 1024

// ItemSize computes an item's size as DynamoDB counts it: attribute names
// plus values (numbers approximated by their digits).
func ItemSize(it map[string]ddb.AttributeValue) int {
	n := 0
	for k, v := range it {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v ddb.AttributeValue) int {
	switch x := v.(type) {
	case *ddb.AttributeValueMemberS:
		return len(x.Value)
	case *ddb.AttributeValueMemberN:
		return len(x.Value)
	case *ddb.AttributeValueMemberB:
		return len(x.Value)
	case *ddb.AttributeValueMemberM:
		return 3 + ItemSize(x.Value)
	case *ddb.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	default:
		return 1
	}
}

// Due lists up to limit jobs per shard whose due time is at or before now,
// from the sparse due index: the sweep's cost follows the work due, not the
// number of jobs stored. The index holds keys only (about 100 bytes an
// entry): one query answers a shard's thousands (up to 1 MB), and 1,000
// entries cost about 15 read units.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]engine.DueJob, error) {
	var keys []engine.DueJob
	for shard := range DueShards {
		kc := expression.Key("gsi2pk").Equal(expression.Value(fmt.Sprintf("D#%d", shard))).
			And(expression.Key("gsi2sk").LessThanEqual(expression.Value(now.UTC().Format(dueLayout))))
		expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
		if err != nil {
			return nil, fmt.Errorf("due query: %w", err)
		}
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.table, IndexName: aws.String(IndexDue), Limit: aws.Int32(int32(limit)),
			KeyConditionExpression:    expr.KeyCondition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if err != nil {
			return nil, fmt.Errorf("due query shard %d: %w", shard, err)
		}
		for _, it := range out.Items {
			pk, _ := it["pk"].(*ddb.AttributeValueMemberS)
			sk, _ := it["sk"].(*ddb.AttributeValueMemberS)
			due, _ := it["gsi2sk"].(*ddb.AttributeValueMemberS)
			if pk == nil || sk == nil || due == nil {
				continue
			}
			parts := strings.Split(pk.Value, "#")
			if len(parts) == 3 && parts[0] == "J" {
				keys = append(keys, engine.DueJob{Tenant: parts[1], ID: sk.Value, Due: due.Value, Part: fmt.Sprintf("D#%d", shard)})
			}
		}
	}
	return keys, nil
}

// TenantForKey answers the tenant an API key names, or ErrUnauthorized.
func (s *Store) TenantForKey(ctx context.Context, key string) (string, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: map[string]ddb.AttributeValue{
		"pk": &ddb.AttributeValueMemberS{Value: "K#" + engine.HashKey(key)},
		"sk": &ddb.AttributeValueMemberS{Value: "K"},
	}})
	if err != nil {
		return "", fmt.Errorf("look up api key: %w", err)
	}
	t, _ := out.Item["tenant"].(*ddb.AttributeValueMemberS)
	if t == nil {
		return "", domain.ErrUnauthorized
	}
	return t.Value, nil
}
