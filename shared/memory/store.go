package memory

import (
	"bytes"
	"cmp"
	"compress/flate"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Store = (*Store)(nil)

// MaxItemBytes is the default bound on a job's stored size: DynamoDB's
// item limit (shared/store.MaxItemBytes), which the job engine must meet
// wherever it runs. The size is counted as the DynamoDB adapter counts its
// item, closely enough for the bound to bite at the same jobs: the job's
// JSON document deflated, plus its key and condition attributes.
const MaxItemBytes = 400 * 1024

// dueLayout renders due times as the due index holds them (millisecond
// strings that sort as times).
const dueLayout = "2006-01-02T15:04:05.000Z"

// hourLayout names a stats bucket.
const hourLayout = "2006010215"

// idempotencyTTL is how long an idempotency key holds its job.
const idempotencyTTL = 24 * time.Hour

type jobKey struct{ tenant, id string }

// record is a stored job: its encoded document and, beside it, what
// conditions and indexes read, as in the DynamoDB item. A Save replaces the
// whole record (quarantine marks included), as PutItem replaces the item.
type record struct {
	// doc is the job without its steps and events, which are kept one by
	// one: a save encodes only the steps whose fingerprint changed and the
	// events after those kept (a job of thousands of steps would otherwise
	// be encoded whole on every save).
	doc           []byte
	steps         [][]byte
	fps           []uint64 // each step's domain.Step.Fingerprint, as encoded
	events        [][]byte
	state         domain.JobState
	version       int64
	queue         string
	schedule      string // the schedule whose run it is, if any
	due           string // dueLayout; "" when out of the due index
	quarantined   string // why, once quarantined
	quarantinedAt time.Time
	cancel        bool              // Store.RequestCancel's mark; a save clears it
	marks         map[string][]byte // Store.MarkOutcome's; a save clears them
	marksMade     int64
	bytes         int // the size of the item a DynamoDB store would keep (size)
}

type idemRecord struct {
	jobID, hash string
	expires     time.Time
}

type statsKey struct{ tenant, hour string }

// Store is the in-memory job store. It needs no clock: every method whose
// answer depends on the time is given it by the engine.
type Store struct {
	mu       sync.Mutex
	jobs     map[jobKey]*record
	idem     map[jobKey]idemRecord // tenant, idempotency key
	keys     map[string]string     // sha256 of an API key -> tenant
	hours    map[statsKey]engine.StatsDelta
	blocked  map[string]int64
	steps    map[string]engine.StepCounts // cumulative, per tenant (and engine.AllTenants)
	swept    *time.Time
	maxBytes int
	// resources are encoded, as stored, so no caller shares a stored value.
	resources map[jobKey][]byte
	uses      queueUses // worker queue uses (workerqueues.go)
	operator  operatorFigures
	// polls are each tenant's open long-poll slots: lease -> until.
	polls   map[string]map[string]time.Time
	changes changes // snapshot.go
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithMaxItemBytes bounds a job's stored size (MaxItemBytes by default);
// n <= 0 removes the bound.
func WithMaxItemBytes(n int) StoreOption { return func(s *Store) { s.maxBytes = n } }

// NewStore answers an empty store.
func NewStore(opts ...StoreOption) *Store {
	s := &Store{
		jobs: map[jobKey]*record{}, idem: map[jobKey]idemRecord{}, keys: map[string]string{},
		hours: map[statsKey]engine.StatsDelta{}, blocked: map[string]int64{}, steps: map[string]engine.StepCounts{}, maxBytes: MaxItemBytes,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// encode renders j as its record over prev, the record stored at the
// version j was read at (nil for none), refusing a job whose own fields,
// or one step, pass the size bound with the DynamoDB adapter's error: it
// keeps a long job apart, a step and the job's own fields in items of
// their own.
func (s *Store) encode(j *domain.Job, prev *record) (*record, error) {
	head := *j
	head.Steps, head.Events, head.Stored = nil, nil, nil
	doc, err := json.Marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", j.ID, err)
	}
	r := &record{doc: doc, state: j.State, version: j.Version, queue: j.Queue, schedule: j.ScheduleID,
		steps: make([][]byte, len(j.Steps)), fps: make([]uint64, len(j.Steps))}
	if j.DueAt != nil {
		r.due = j.DueAt.UTC().Format(dueLayout)
	}
	tooLarge := func(n int) error {
		return &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf(
			"job %s would be %d bytes stored in one item; DynamoDB's limit is %d: keep large outputs elsewhere (S3) and pass references", j.ID, n, s.maxBytes)}
	}
	r.bytes = r.size(j.Tenant, j.ID, s.maxBytes)
	if n := r.bytes; s.maxBytes > 0 && n > s.maxBytes {
		return nil, tooLarge(n)
	}
	for i, st := range j.Steps {
		r.fps[i] = st.Fingerprint()
		if prev != nil && i < len(prev.fps) && prev.fps[i] == r.fps[i] {
			r.steps[i] = prev.steps[i]
			continue
		}
		if r.steps[i], err = json.Marshal(st); err != nil {
			return nil, fmt.Errorf("encode job %s: %w", j.ID, err)
		}
		if n := compressedSize(r.steps[i], s.maxBytes); s.maxBytes > 0 && n > s.maxBytes {
			return nil, tooLarge(n)
		}
	}
	// Events are only ever appended.
	r.events = make([][]byte, len(j.Events))
	kept := 0
	if prev != nil && len(prev.events) <= len(j.Events) {
		kept = copy(r.events, prev.events)
	}
	for i := kept; i < len(j.Events); i++ {
		if r.events[i], err = json.Marshal(j.Events[i]); err != nil {
			return nil, fmt.Errorf("encode job %s: %w", j.ID, err)
		}
	}
	return r, nil
}

// compressedSize answers len(b), or what it compresses to when that is
// over limit.
func compressedSize(b []byte, limit int) int {
	if limit <= 0 || len(b) <= limit {
		return len(b)
	}
	var buf bytes.Buffer
	zw, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Len()
}

// size answers the record's size as the DynamoDB adapter's item would
// count it; below limit without compressing, it answers the uncompressed
// size (only an upper bound matters then).
func (r *record) size(tenant, id string, limit int) int {
	attrs := len("pk") + len("J#") + len(tenant) + len("#0") + len("sk") + len(id) +
		len("state") + len(r.state) + len("version") + len(strconv.FormatInt(r.version, 10)) +
		len("queue") + len(r.queue) + len("doc") + len("dv") + 1 // dv: the document's version
	if r.due != "" {
		attrs += len("gsi2pk") + len("D#0") + len("gsi2sk") + len(r.due)
	}
	if r.schedule != "" {
		attrs += len("schedule") + len(r.schedule)
	}
	return attrs + compressedSize(r.doc, limit-attrs)
}

// decode answers a fresh copy of the stored job.
func (r *record) decode(tenant, id string) (*domain.Job, error) {
	var j domain.Job
	unreadable := func(err error) error {
		return fmt.Errorf("job %s: %w (decode job: %v)", id, domain.ErrUnreadable, err)
	}
	if err := json.Unmarshal(r.doc, &j); err != nil {
		return nil, unreadable(err)
	}
	j.Steps = make([]*domain.Step, len(r.steps))
	for i, b := range r.steps {
		j.Steps[i] = new(domain.Step)
		if err := json.Unmarshal(b, j.Steps[i]); err != nil {
			return nil, unreadable(err)
		}
	}
	j.Events = make([]domain.Event, len(r.events))
	for i, b := range r.events {
		if err := json.Unmarshal(b, &j.Events[i]); err != nil {
			return nil, unreadable(err)
		}
	}
	j.CancelRequested = r.cancel
	j.Marks, j.MarksMade = maps.Clone(r.marks), r.marksMade
	return &j, nil
}

// Create writes a new job at version 1. With an idempotency key, a key
// recorded within the last 24 hours answers its job instead (created false)
// when requestHash matches, else domain.ErrIdempotencyMismatch.
// CreateAll creates each job, none with an idempotency key, as Create
// does.
func (s *Store) CreateAll(ctx context.Context, jobs []*domain.Job, now time.Time) []error {
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		if j.IdempotencyKey != "" {
			errs[i] = fmt.Errorf("create job %s: CreateAll takes no job with an idempotency key", j.ID)
			continue
		}
		_, _, errs[i] = s.Create(ctx, j, "", now)
	}
	return errs
}

func (s *Store) Create(_ context.Context, j *domain.Job, requestHash string, now time.Time) (*domain.Job, bool, error) {
	j.Version = 1
	// The units it counts are the DynamoDB store's for an item of the
	// size it measures, as it was before the write (sizing the write's
	// own would encode it twice).
	units := domain.WriteUnitsOf(0) + domain.DueMoveUnits("", dueOf(j))
	if j.IdempotencyKey != "" {
		units = 2*units + 2 // a transaction with the key's record
	}
	spent := j.Usage
	j.Spend(domain.Usage{WriteUnits: units})
	j.SettleSpent()
	r, err := s.encode(j, nil)
	if err != nil {
		j.Usage = spent
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := jobKey{j.Tenant, j.ID}
	if _, taken := s.jobs[k]; taken {
		return nil, false, fmt.Errorf("create job %s: %w", j.ID, domain.ErrExists)
	}
	if j.IdempotencyKey != "" {
		ik := jobKey{j.Tenant, j.IdempotencyKey}
		if rec, ok := s.idem[ik]; ok && rec.expires.Unix() >= now.Unix() { // the table's ttl condition
			if rec.hash != requestHash {
				return nil, false, domain.ErrIdempotencyMismatch
			}
			existing, ok := s.jobs[jobKey{j.Tenant, rec.jobID}]
			if !ok {
				return nil, false, fmt.Errorf("idempotent replay of job %s: %w", rec.jobID, domain.ErrNotFound)
			}
			got, err := existing.decode(j.Tenant, rec.jobID)
			if err != nil {
				return nil, false, fmt.Errorf("idempotent replay of job %s: %w", rec.jobID, err)
			}
			return got, false, nil
		}
		s.idem[ik] = idemRecord{jobID: j.ID, hash: requestHash, expires: now.Add(idempotencyTTL)}
	}
	s.jobs[k] = r
	s.changes.add()
	j.ItemBytes, j.ItemDue = r.bytes, r.due
	return j, true, nil
}

// dueOf is j's due index entry as a store would name it.
func dueOf(j *domain.Job) string {
	if j.DueAt == nil {
		return ""
	}
	return j.DueAt.UTC().Format(dueLayout)
}

// Get answers a fresh copy of one of tenant's jobs.
func (s *Store) Get(_ context.Context, tenant, id string) (*domain.Job, error) {
	s.mu.Lock()
	r, ok := s.jobs[jobKey{tenant, id}]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	j, err := r.decode(tenant, id) // a record is never changed in place
	if err != nil {
		return nil, err
	}
	j.ItemBytes, j.ItemDue = r.bytes, r.due
	j.Spend(domain.Usage{ReadUnits: domain.ReadUnitsOf(r.bytes)})
	return j, nil
}

// Save writes j if the stored job is still at j.Version and in one of
// domain.SaveSources(j, loadedEvents); it bumps j.Version on success. A lost
// race answers domain.ErrVersionConflict and leaves j's version as it was.
func (s *Store) Save(_ context.Context, j *domain.Job, loadedEvents int) error {
	sources := domain.SaveSources(j, loadedEvents)
	k := jobKey{j.Tenant, j.ID}
	s.mu.Lock()
	prev := s.jobs[k]
	s.mu.Unlock()
	if prev != nil && prev.version != j.Version {
		prev = nil // another version: nothing of it is j's to keep
	}
	j.Version++
	put := domain.WriteUnitsOf(j.ItemBytes)
	used, spent := j.Usage, j.Spent
	j.Spend(domain.Usage{WriteUnits: put + domain.DueMoveUnits(j.ItemDue, dueOf(j))})
	j.SettleSpent()
	j.Usage.TableGBMonths = j.KeptGBMonths(j.ItemBytes + 100) // as the item was: sizing it now would encode it twice
	undo := func() {
		j.Version--
		j.Usage, j.Spent = used, spent
	}
	r, err := s.encode(j, prev)
	if err != nil {
		undo()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.jobs[k]
	if !ok || cur.version != j.Version-1 || cur.cancel && !j.CancelRequested || cur.marksMade != j.MarksMade ||
		len(sources) > 0 && !slices.Contains(sources, cur.state) {
		undo()
		j.Spend(domain.Usage{WriteUnits: put}) // a failed condition is billed
		return fmt.Errorf("save job %s at version %d: %w", j.ID, j.Version, domain.ErrVersionConflict)
	}
	s.jobs[k] = r
	s.changes.add()
	j.ItemBytes, j.ItemDue = r.bytes, r.due
	j.CancelRequested, j.Marks, j.MarksMade = false, nil, 0
	return nil
}

// MarkOutcome records rec beside an unfinished job under key; its version
// stays.
func (s *Store) MarkOutcome(_ context.Context, tenant, id, key string, rec []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{tenant, id}]
	if !ok || r.state.Terminal() {
		return nil
	}
	if _, made := r.marks[key]; made {
		return nil
	}
	m := *r
	m.marks = maps.Clone(r.marks)
	if m.marks == nil {
		m.marks = map[string][]byte{}
	}
	m.marks[key], m.marksMade = slices.Clone(rec), r.marksMade+1
	s.jobs[jobKey{tenant, id}] = &m
	s.changes.add()
	return nil
}

// RequestCancel marks an unfinished job as asked to be cancelled; its
// version stays.
func (s *Store) RequestCancel(_ context.Context, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{tenant, id}]
	if !ok || r.state.Terminal() || r.cancel {
		return nil
	}
	m := *r
	m.cancel = true
	s.jobs[jobKey{tenant, id}] = &m
	s.changes.add()
	return nil
}

// List pages through tenant's jobs, newest first (job ids are ULIDs, which
// sort by time). A page holds at most f.Limit jobs; the cursor is empty
// after the last.
func (s *Store) List(_ context.Context, tenant string, f engine.ListFilter) ([]engine.JobSummary, string, error) {
	before, err := engine.DecodeCursor(f.Cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	if f.Limit < 1 {
		return nil, "", domain.Invalid("limit", "must be at least 1")
	}
	s.mu.Lock()
	var all []engine.JobSummary
	for k, r := range s.jobs {
		if k.tenant != tenant || before != "" && k.id >= before ||
			f.State != "" && r.state != f.State || len(f.States) > 0 && !slices.Contains(f.States, r.state) ||
			f.Queue != "" && r.queue != f.Queue || f.Schedule != "" && r.schedule != f.Schedule ||
			f.IDFrom != "" && k.id < f.IDFrom || f.IDBelow != "" && k.id >= f.IDBelow {
			continue
		}
		js := engine.JobSummary{ID: k.id, State: r.state, Queue: r.queue, Schedule: r.schedule}
		if f.Jobs {
			js.Job, _ = r.decode(tenant, k.id) // an unreadable job is listed by its attributes alone
		}
		all = append(all, js)
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b engine.JobSummary) int { return strings.Compare(b.ID, a.ID) })
	if len(all) <= int(f.Limit) {
		return all, "", nil
	}
	page := all[:f.Limit]
	return page, engine.EncodeCursor(tenant, page[len(page)-1].ID), nil
}

// Due answers up to limit jobs from each part of the due index (DueParts)
// whose due time is at or before now, earliest first.
func (s *Store) Due(_ context.Context, now time.Time, limit int) ([]engine.DueJob, error) {
	at := now.UTC().Format(dueLayout)
	s.mu.Lock()
	parts := map[string][]engine.DueJob{}
	for k, r := range s.jobs {
		if r.due != "" && r.due <= at {
			p := duePart(k.id)
			parts[p] = append(parts[p], engine.DueJob{Tenant: k.tenant, ID: k.id, Due: r.due, Part: p})
		}
	}
	s.mu.Unlock()
	var out []engine.DueJob
	for _, part := range parts {
		slices.SortFunc(part, earliestDue)
		if limit >= 0 && len(part) > limit {
			part = part[:limit]
		}
		out = append(out, part...)
	}
	slices.SortFunc(out, earliestDue)
	return out, nil
}

// DueParts is how many parts the due index has, as the DynamoDB adapter
// has shards (store.DueShards), a job in the same part as there: Due
// answers at most its limit from each, so a sweep meets the same bounds.
const DueParts = 8

func duePart(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("D#%d", h.Sum32()%DueParts)
}

func earliestDue(a, b engine.DueJob) int {
	return cmp.Or(strings.Compare(a.Due, b.Due), strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.ID, b.ID))
}

// Quarantine takes a job out of the due index and notes why; the job
// itself is not read. A missing job is no error.
func (s *Store) Quarantine(_ context.Context, tenant, id, reason string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{tenant, id}]
	if !ok {
		return nil
	}
	q := *r
	q.due, q.quarantined, q.quarantinedAt = "", domain.Truncate(reason, 1024), now.UTC()
	s.jobs[jobKey{tenant, id}] = &q
	s.changes.add()
	return nil
}

// Defer moves a due job to until if its due time is still k.Due; otherwise,
// or for a missing or quarantined job, it changes nothing. It is no
// transition: the job's version stays.
func (s *Store) Defer(_ context.Context, k engine.DueJob, until time.Time) error {
	if k.Due == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{k.Tenant, k.ID}]
	if !ok || r.due != k.Due {
		return nil
	}
	d := *r
	d.due = until.UTC().Format(dueLayout)
	s.jobs[jobKey{k.Tenant, k.ID}] = &d
	s.changes.add()
	return nil
}

// AddKey records that key belongs to tenant.
func (s *Store) AddKey(tenant, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[engine.HashKey(key)] = tenant
	s.changes.add()
}

// TenantForKey answers the tenant of an API key, or domain.ErrUnauthorized.
func (s *Store) TenantForKey(_ context.Context, key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.keys[engine.HashKey(key)]
	if !ok || key == "" {
		return "", domain.ErrUnauthorized
	}
	return t, nil
}

// RecordStats adds d to tenant's counters: outcomes and the backlog in the
// bucket of now's hour, the blocked gauge on its own.
func (s *Store) RecordStats(_ context.Context, tenant string, d engine.StatsDelta, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := statsKey{tenant, now.UTC().Format(hourLayout)}
	s.changes.add()
	if d.Windowed() {
		h := s.hours[k]
		h.Add(d.Hourly())
		s.hours[k] = h
	}
	s.blocked[tenant] += d.Blocked
	if !d.Steps.Empty() {
		c := s.steps[tenant]
		c.Add(cloneCounts(d.Steps))
		s.steps[tenant] = c
	}
	return nil
}

// StepStats answers tenant's cumulative step counters (a copy).
func (s *Store) StepStats(_ context.Context, tenant string) (engine.StepCounts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneCounts(s.steps[tenant]), nil
}

func cloneCounts(c engine.StepCounts) engine.StepCounts {
	var out engine.StepCounts
	out.Add(c)
	return out
}

// RecordSweep notes the heartbeat's last sweep.
func (s *Store) RecordSweep(_ context.Context, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at = at.UTC()
	s.swept = &at
	s.changes.add()
	return nil
}

// Stats sums tenant's hourly buckets over the 24 hours up to now's (now's
// hour and the 23 before it) and reads the blocked gauge.
func (s *Store) Stats(_ context.Context, tenant string, now time.Time) (engine.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := engine.Stats{Blocked: s.blocked[tenant]}
	if s.swept != nil {
		at := *s.swept
		st.LastSweep = &at
	}
	today := now.UTC().Format("20060102")
	for h := range 24 {
		hour := now.UTC().Add(-time.Duration(h) * time.Hour).Format(hourLayout)
		b := s.hours[statsKey{tenant, hour}]
		st.Add(b)
		if strings.HasPrefix(hour, today) {
			st.SpentTodayNanoUSD += b.CostNanoUSD
		}
	}
	return st, nil
}

// Corrupt is a test hook: it overwrites a stored job's document with bytes
// that do not decode, leaving its attributes (state, version, due time) as
// they were, so Get answers domain.ErrUnreadable and the sweep still finds
// the job due.
func (s *Store) Corrupt(tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{tenant, id}]
	if !ok {
		return fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	c := *r
	c.doc = []byte("\x00\x01 not a job")
	s.jobs[jobKey{tenant, id}] = &c
	s.changes.add()
	return nil
}

// Quarantined answers why a job was quarantined, if it was.
func (s *Store) Quarantined(tenant, id string) (reason string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, found := s.jobs[jobKey{tenant, id}]
	if !found || r.quarantined == "" {
		return "", false
	}
	return r.quarantined, true
}

// JobVersion answers a job's version alone.
func (s *Store) JobVersion(_ context.Context, tenant, id string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.jobs[jobKey{tenant, id}]
	if !ok {
		return 0, fmt.Errorf("job %s: %w", id, domain.ErrNotFound)
	}
	return r.version, nil
}

// TakePollSlot holds one of tenant's bound long-poll slots, slots past
// their until counting as free.
func (s *Store) TakePollSlot(_ context.Context, tenant, lease string, bound int, until, now time.Time) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.polls == nil {
		s.polls = map[string]map[string]time.Time{}
	}
	held := s.polls[tenant]
	if held == nil {
		held = map[string]time.Time{}
		s.polls[tenant] = held
	}
	var first time.Time
	for l, u := range held {
		if !u.After(now) {
			delete(held, l)
		} else if first.IsZero() || u.Before(first) {
			first = u
		}
	}
	if len(held) >= bound {
		return first, false, nil
	}
	held[lease] = until
	return time.Time{}, true, nil
}

// ReleasePollSlot frees lease's slot.
func (s *Store) ReleasePollSlot(_ context.Context, tenant, lease string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.polls[tenant], lease)
	return nil
}
