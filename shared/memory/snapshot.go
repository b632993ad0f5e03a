package memory

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Snapshots: each adapter answers what it holds as plain data (JSON
// encodes it) and restores it, so a process that runs the engine on them
// for real, the embedded dev stack (localstack/embedded), keeps its state
// in a file across restarts. Changes counts each adapter's writes, so that
// process writes the file only after something changed.

// changes counts an adapter's writes.
type changes struct{ n atomic.Uint64 }

func (c *changes) add() { c.n.Add(1) }

// StoreState is what a Store holds. Open long-poll slots are left out:
// they belong to the requests of the process that took them.
type StoreState struct {
	Jobs        []JobRecord                `json:"jobs"`
	Idempotency []IdempotencyRecord        `json:"idempotency,omitempty"`
	Keys        map[string]string          `json:"keys,omitempty"` // sha256 of an API key -> tenant
	Hours       []HourStats                `json:"hours,omitempty"`
	Blocked     map[string]int64           `json:"blocked,omitempty"`
	Steps       map[string]StepCountsState `json:"steps,omitempty"` // by tenant (and engine.AllTenants)
	Swept       *time.Time                 `json:"swept,omitempty"`
	Resources   []json.RawMessage          `json:"resources,omitempty"`
	QueueUses   []engine.WorkerQueueUse    `json:"queue_uses,omitempty"`
}

// JobRecord is a stored job as the store keeps it: its document, steps
// and events as encoded (JSON), beside the attributes conditions and
// indexes read.
type JobRecord struct {
	Tenant          string            `json:"tenant"`
	ID              string            `json:"id"`
	Doc             json.RawMessage   `json:"doc"`
	Steps           []json.RawMessage `json:"steps"`
	Fingerprints    []uint64          `json:"fingerprints"`
	Events          []json.RawMessage `json:"events"`
	State           domain.JobState   `json:"state"`
	Version         int64             `json:"version"`
	Queue           string            `json:"queue,omitempty"`
	Schedule        string            `json:"schedule,omitempty"`
	Due             string            `json:"due,omitempty"`
	Quarantined     string            `json:"quarantined,omitempty"`
	QuarantinedAt   *time.Time        `json:"quarantined_at,omitempty"`
	CancelRequested bool              `json:"cancel_requested,omitempty"`
	Marks           map[string][]byte `json:"marks,omitempty"`
	MarksMade       int64             `json:"marks_made,omitempty"`
}

// IdempotencyRecord is an idempotency key's job.
type IdempotencyRecord struct {
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	JobID   string    `json:"job_id"`
	Hash    string    `json:"hash"`
	Expires time.Time `json:"expires"`
}

// HourStats is one tenant's counters of one hour (engine.StatsDelta's
// hourly part).
type HourStats struct {
	Tenant     string `json:"tenant"`
	Hour       string `json:"hour"` // 2006010215
	Completed  int64  `json:"completed,omitempty"`
	Failed     int64  `json:"failed,omitempty"`
	Cancelled  int64  `json:"cancelled,omitempty"`
	Queued     int64  `json:"queued,omitempty"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	Timed      int64  `json:"timed,omitempty"`
	CostNano   int64  `json:"cost_nano_usd,omitempty"`
}

// StepCountsState is engine.StepCounts with its moves listed: JSON keys
// a map by strings alone.
type StepCountsState struct {
	Moves     []MoveCount                              `json:"moves,omitempty"`
	Retries   int64                                    `json:"retries,omitempty"`
	Durations map[domain.AttemptState]engine.Durations `json:"durations,omitempty"`
	InState   map[domain.StepState]int64               `json:"in_state,omitempty"`
}

// MoveCount is how many times steps made one move.
type MoveCount struct {
	From domain.StepState `json:"from"`
	To   domain.StepState `json:"to"`
	N    int64            `json:"n"`
}

func stepCountsState(c engine.StepCounts) StepCountsState {
	out := StepCountsState{Retries: c.Retries, Durations: maps.Clone(c.Durations), InState: maps.Clone(c.InState)}
	for m, n := range c.Moves {
		out.Moves = append(out.Moves, MoveCount{From: m.From, To: m.To, N: n})
	}
	slices.SortFunc(out.Moves, func(a, b MoveCount) int {
		return strings.Compare(string(a.From)+" "+string(a.To), string(b.From)+" "+string(b.To))
	})
	return out
}

func (c StepCountsState) counts() engine.StepCounts {
	out := engine.StepCounts{Retries: c.Retries, Durations: maps.Clone(c.Durations), InState: maps.Clone(c.InState)}
	for _, m := range c.Moves {
		out.Move(engine.StepMove{From: m.From, To: m.To}, m.N)
	}
	return out
}

// rawJSON answers b as a JSON value: itself, or, for bytes that are no
// JSON (a document Corrupt overwrote), a string of them, which decodes
// as no job either, so the job stays unreadable.
func rawJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return slices.Clone(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

func rawList(bs [][]byte) []json.RawMessage {
	out := make([]json.RawMessage, len(bs))
	for i, b := range bs {
		out[i] = rawJSON(b)
	}
	return out
}

func byteList(rs []json.RawMessage) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = slices.Clone([]byte(r))
	}
	return out
}

// Changes answers how many writes the store has taken: when it has not
// moved, nothing changed.
func (s *Store) Changes() uint64 { return s.changes.n.Load() + s.uses.changes.n.Load() }

// Snapshot answers what the store holds.
func (s *Store) Snapshot() StoreState {
	s.mu.Lock()
	out := StoreState{Keys: maps.Clone(s.keys), Blocked: maps.Clone(s.blocked), Steps: map[string]StepCountsState{}}
	for k, r := range s.jobs {
		jr := JobRecord{
			Tenant: k.tenant, ID: k.id, Doc: rawJSON(r.doc), Steps: rawList(r.steps), Fingerprints: slices.Clone(r.fps),
			Events: rawList(r.events), State: r.state, Version: r.version, Queue: r.queue, Schedule: r.schedule, Due: r.due,
			Quarantined: r.quarantined, CancelRequested: r.cancel, Marks: maps.Clone(r.marks), MarksMade: r.marksMade,
		}
		if r.quarantined != "" {
			at := r.quarantinedAt
			jr.QuarantinedAt = &at
		}
		out.Jobs = append(out.Jobs, jr)
	}
	for k, r := range s.idem {
		out.Idempotency = append(out.Idempotency, IdempotencyRecord{Tenant: k.tenant, Key: k.id, JobID: r.jobID, Hash: r.hash, Expires: r.expires})
	}
	for k, d := range s.hours {
		out.Hours = append(out.Hours, HourStats{Tenant: k.tenant, Hour: k.hour, Completed: d.Completed, Failed: d.Failed,
			Cancelled: d.Cancelled, Queued: d.Queued, DurationMs: d.DurationMs, Timed: d.Timed, CostNano: d.CostNanoUSD})
	}
	for tenant, c := range s.steps {
		out.Steps[tenant] = stepCountsState(c)
	}
	if s.swept != nil {
		at := *s.swept
		out.Swept = &at
	}
	for _, b := range s.resources {
		out.Resources = append(out.Resources, slices.Clone(b))
	}
	s.mu.Unlock()
	s.uses.mu.Lock()
	for _, u := range s.uses.m {
		out.QueueUses = append(out.QueueUses, u)
	}
	s.uses.mu.Unlock()

	// In a fixed order, so an unchanged store writes the same file.
	slices.SortFunc(out.Jobs, func(a, b JobRecord) int { return strings.Compare(a.Tenant+"/"+a.ID, b.Tenant+"/"+b.ID) })
	slices.SortFunc(out.Idempotency, func(a, b IdempotencyRecord) int {
		return strings.Compare(a.Tenant+"/"+a.Key, b.Tenant+"/"+b.Key)
	})
	slices.SortFunc(out.Hours, func(a, b HourStats) int { return strings.Compare(a.Tenant+"/"+a.Hour, b.Tenant+"/"+b.Hour) })
	slices.SortFunc(out.Resources, func(a, b json.RawMessage) int { return strings.Compare(string(a), string(b)) })
	slices.SortFunc(out.QueueUses, func(a, b engine.WorkerQueueUse) int {
		return strings.Compare(a.Tenant+"/"+a.Name, b.Tenant+"/"+b.Name)
	})
	return out
}

// Restore replaces what the store holds with st.
func (s *Store) Restore(st StoreState) {
	jobs := make(map[jobKey]*record, len(st.Jobs))
	for _, j := range st.Jobs {
		r := &record{
			doc: slices.Clone([]byte(j.Doc)), steps: byteList(j.Steps), fps: slices.Clone(j.Fingerprints), events: byteList(j.Events),
			state: j.State, version: j.Version, queue: j.Queue, schedule: j.Schedule, due: j.Due,
			quarantined: j.Quarantined, cancel: j.CancelRequested, marks: maps.Clone(j.Marks), marksMade: j.MarksMade,
		}
		if len(r.fps) != len(r.steps) {
			r.fps = make([]uint64, len(r.steps)) // re-encoded at the next save, as no fingerprint matches
		}
		if j.QuarantinedAt != nil {
			r.quarantinedAt = *j.QuarantinedAt
		}
		jobs[jobKey{j.Tenant, j.ID}] = r
	}
	idem := make(map[jobKey]idemRecord, len(st.Idempotency))
	for _, r := range st.Idempotency {
		idem[jobKey{r.Tenant, r.Key}] = idemRecord{jobID: r.JobID, hash: r.Hash, expires: r.Expires}
	}
	hours := make(map[statsKey]engine.StatsDelta, len(st.Hours))
	for _, h := range st.Hours {
		hours[statsKey{h.Tenant, h.Hour}] = engine.StatsDelta{Completed: h.Completed, Failed: h.Failed, Cancelled: h.Cancelled,
			Queued: h.Queued, DurationMs: h.DurationMs, Timed: h.Timed, CostNanoUSD: h.CostNano}
	}
	steps := make(map[string]engine.StepCounts, len(st.Steps))
	for tenant, c := range st.Steps {
		steps[tenant] = c.counts()
	}
	resources := map[jobKey][]byte{}
	for _, b := range st.Resources {
		var r domain.Resource
		if json.Unmarshal(b, &r) == nil {
			resources[jobKey{r.Tenant, r.ID}] = slices.Clone([]byte(b))
		}
	}
	s.mu.Lock()
	s.jobs, s.idem, s.hours, s.steps, s.resources = jobs, idem, hours, steps, resources
	s.keys = maps.Clone(st.Keys)
	if s.keys == nil {
		s.keys = map[string]string{}
	}
	s.blocked = maps.Clone(st.Blocked)
	if s.blocked == nil {
		s.blocked = map[string]int64{}
	}
	s.swept = nil
	if st.Swept != nil {
		at := *st.Swept
		s.swept = &at
	}
	s.polls = nil
	s.changes.add()
	s.mu.Unlock()
	s.uses.mu.Lock()
	s.uses.m = map[jobKey]engine.WorkerQueueUse{}
	for _, u := range st.QueueUses {
		s.uses.m[jobKey{u.Tenant, u.Name}] = u
	}
	s.uses.mu.Unlock()
}

// QueueState is what a Queue holds.
type QueueState struct {
	// NextID is the last message id issued: a token of any id up to it
	// whose message is not among Messages names one deleted.
	NextID   int64          `json:"next_id"`
	Messages []MessageState `json:"messages,omitempty"` // each list's in its order
	// WorkerQueues and Lanes are the worker queues and their P0 and P2
	// lanes made so far, empty ones too.
	WorkerQueues []QueueList      `json:"worker_queues,omitempty"`
	Lanes        []QueueList      `json:"lanes,omitempty"`
	Dead         []engine.Message `json:"dead,omitempty"`
}

// QueueList names one list of messages: a ready queue (Tenant empty) or
// a lane of a tenant's worker queue, by priority.
type QueueList struct {
	Tenant   string `json:"tenant,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Priority int    `json:"priority"`
}

// MessageState is one message.
type MessageState struct {
	ID        int64          `json:"id"`
	List      QueueList      `json:"list"`
	Body      engine.Message `json:"body"`
	VisibleAt time.Time      `json:"visible_at"`
	SentAt    time.Time      `json:"sent_at"`
	Receives  int            `json:"receives,omitempty"`
}

// Ready reports whether m is in a ready queue (a worker's queue else).
func (m MessageState) Ready() bool { return m.List.Tenant == "" }

// Changes answers how many writes the queue has taken (sends, receives,
// visibility changes, deletes).
func (q *Queue) Changes() uint64 { return q.changes.n.Load() }

// Snapshot answers what the queue holds.
func (q *Queue) Snapshot() QueueState {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := QueueState{NextID: q.nextID, Dead: slices.Clone(q.dead)}
	add := func(l QueueList, f *fifo) {
		for _, m := range f.msgs {
			out.Messages = append(out.Messages, MessageState{ID: m.id, List: l, Body: m.body, VisibleAt: m.visibleAt, SentAt: m.sentAt, Receives: m.receives})
		}
	}
	for p, f := range q.ready {
		add(QueueList{Priority: p}, f)
	}
	for _, k := range slices.SortedFunc(maps.Keys(q.workers), compareWorkerKeys) {
		l := QueueList{Tenant: k.tenant, Queue: k.name, Priority: domain.DefaultPriority}
		out.WorkerQueues = append(out.WorkerQueues, l)
		add(l, q.workers[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(q.lanes), func(a, b laneKey) int {
		if c := compareWorkerKeys(a.workerKey, b.workerKey); c != 0 {
			return c
		}
		return a.priority - b.priority
	}) {
		l := QueueList{Tenant: k.tenant, Queue: k.name, Priority: k.priority}
		out.Lanes = append(out.Lanes, l)
		add(l, q.lanes[k])
	}
	return out
}

func compareWorkerKeys(a, b workerKey) int {
	return strings.Compare(a.tenant+"\x00"+a.name, b.tenant+"\x00"+b.name)
}

// Restore replaces what the queue holds with st: its messages, each with
// the id, receive count and visibility it had, so the tokens handed out
// before (a worker's lease) still name them.
func (q *Queue) Restore(st QueueState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.ready {
		f.msgs = nil
	}
	q.workers, q.lanes = map[workerKey]*fifo{}, map[laneKey]*fifo{}
	q.live, q.deleted = map[int64]*message{}, map[int64]bool{}
	// Made whatever the bound, which held when they were made: a lower one
	// now keeps the tenant from making more.
	list := func(l QueueList) *fifo {
		if l.Tenant == "" {
			return q.ready[min(max(l.Priority, 0), domain.MaxPriority)]
		}
		k := workerKey{l.Tenant, l.Queue}
		f := q.workers[k]
		if f == nil {
			f = q.makeLocked(k)
		}
		if l.Priority == domain.DefaultPriority {
			return f
		}
		return q.laneLocked(laneKey{k, l.Priority}, f)
	}
	for _, l := range st.WorkerQueues {
		list(l)
	}
	for _, l := range st.Lanes {
		list(l)
	}
	for _, ms := range st.Messages {
		f := list(ms.List)
		m := &message{id: ms.ID, body: ms.Body, q: f, visibleAt: ms.VisibleAt, sentAt: ms.SentAt, receives: ms.Receives}
		f.msgs = append(f.msgs, m)
		q.live[m.id] = m
	}
	q.dead = slices.Clone(st.Dead)
	q.nextID, q.forgotten = st.NextID, st.NextID
	q.changes.add()
}

// ScheduleRecord is a stored schedule.
type ScheduleRecord struct {
	Tenant  string          `json:"tenant"`
	ID      string          `json:"id"`
	Doc     json.RawMessage `json:"doc"`
	Version int64           `json:"version"`
	Due     string          `json:"due,omitempty"`
}

// Changes answers how many writes the schedule store has taken.
func (st *Schedules) Changes() uint64 { return st.changes.n.Load() }

// Snapshot answers the schedules, by tenant and id.
func (st *Schedules) Snapshot() []ScheduleRecord {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]ScheduleRecord, 0, len(st.m))
	for k, r := range st.m {
		out = append(out, ScheduleRecord{Tenant: k.tenant, ID: k.id, Doc: rawJSON(r.doc), Version: r.version, Due: r.due})
	}
	slices.SortFunc(out, func(a, b ScheduleRecord) int { return strings.Compare(a.Tenant+"/"+a.ID, b.Tenant+"/"+b.ID) })
	return out
}

// Restore replaces the schedules with rs.
func (st *Schedules) Restore(rs []ScheduleRecord) {
	m := make(map[jobKey]*scheduleRecord, len(rs))
	for _, r := range rs {
		m[jobKey{r.Tenant, r.ID}] = &scheduleRecord{doc: slices.Clone([]byte(r.Doc)), version: r.Version, due: r.Due}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.m = m
	st.changes.add()
}

// Changes answers how many writes the blob store has taken.
func (b *Blobs) Changes() uint64 { return b.changes.n.Load() }

// Snapshot answers the data by key.
func (b *Blobs) Snapshot() map[string][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]byte, len(b.data))
	for k, d := range b.data {
		out[k] = slices.Clone(d)
	}
	return out
}

// Restore replaces the data with data.
func (b *Blobs) Restore(data map[string][]byte) {
	m := make(map[string][]byte, len(data))
	for k, d := range data {
		m[k] = slices.Clone(d)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = m
	b.changes.add()
}
