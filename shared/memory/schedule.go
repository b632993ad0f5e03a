package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Schedules = (*Schedules)(nil)

// scheduleRecord is a stored schedule: its encoded document, and beside it
// what a condition and the due index read, as in the DynamoDB item.
type scheduleRecord struct {
	doc     []byte
	version int64
	due     string // dueLayout; "" while paused
}

// Schedules is the in-memory schedule store. Its runs are created in the
// job store it was made with, under both stores' locks, so a Fire is as
// atomic here as the DynamoDB transaction.
type Schedules struct {
	jobs    *Store
	mu      sync.Mutex
	m       map[jobKey]*scheduleRecord // tenant, schedule id
	changes changes                    // snapshot.go
}

// NewSchedules answers an empty schedule store whose runs go to jobs.
func NewSchedules(jobs *Store) *Schedules {
	return &Schedules{jobs: jobs, m: map[jobKey]*scheduleRecord{}}
}

func encodeSchedule(s *domain.Schedule) (*scheduleRecord, error) {
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode schedule %s: %w", s.ID, err)
	}
	r := &scheduleRecord{doc: doc, version: s.Version}
	if s.NextAt != nil && !s.Paused {
		r.due = s.NextAt.UTC().Format(dueLayout)
	}
	return r, nil
}

func (r *scheduleRecord) decode(id string) (*domain.Schedule, error) {
	var s domain.Schedule
	if err := json.Unmarshal(r.doc, &s); err != nil {
		return nil, fmt.Errorf("schedule %s: %w (%v)", id, domain.ErrUnreadable, err)
	}
	return &s, nil
}

// Create writes a new schedule at version 1.
func (st *Schedules) Create(_ context.Context, s *domain.Schedule) error {
	s.Version = 1
	r, err := encodeSchedule(s)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	k := jobKey{s.Tenant, s.ID}
	if _, taken := st.m[k]; taken {
		return fmt.Errorf("create schedule %s: %w", s.ID, engine.ErrScheduleExists)
	}
	st.m[k] = r
	st.changes.add()
	return nil
}

// Get answers a fresh copy of one of tenant's schedules.
func (st *Schedules) Get(_ context.Context, tenant, id string) (*domain.Schedule, error) {
	st.mu.Lock()
	r, ok := st.m[jobKey{tenant, id}]
	st.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("schedule %s: %w", id, domain.ErrNotFound)
	}
	return r.decode(id) // a record is never changed in place
}

// List pages through tenant's schedules by id.
func (st *Schedules) List(_ context.Context, tenant, cursor string, limit int32) ([]*domain.Schedule, string, error) {
	after, err := engine.DecodeCursor(cursor, tenant)
	if err != nil {
		return nil, "", err
	}
	if limit < 1 {
		return nil, "", domain.Invalid("limit", "must be at least 1")
	}
	st.mu.Lock()
	var ids []string
	for k := range st.m {
		if k.tenant == tenant && k.id > after {
			ids = append(ids, k.id)
		}
	}
	slices.Sort(ids)
	more := len(ids) > int(limit)
	if more {
		ids = ids[:limit]
	}
	recs := make([]*scheduleRecord, len(ids))
	for i, id := range ids {
		recs[i] = st.m[jobKey{tenant, id}]
	}
	st.mu.Unlock()
	out := make([]*domain.Schedule, 0, len(ids))
	for i, r := range recs {
		s, err := r.decode(ids[i])
		if err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	if !more {
		return out, "", nil
	}
	return out, engine.EncodeCursor(tenant, ids[len(ids)-1]), nil
}

// Delete removes a schedule.
func (st *Schedules) Delete(_ context.Context, tenant, id string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := jobKey{tenant, id}
	if _, ok := st.m[k]; !ok {
		return fmt.Errorf("schedule %s: %w", id, domain.ErrNotFound)
	}
	delete(st.m, k)
	st.changes.add()
	return nil
}

// Save writes s if the stored one is still at s.Version, and bumps it.
func (st *Schedules) Save(_ context.Context, s *domain.Schedule) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.saveLocked(s)
}

func (st *Schedules) saveLocked(s *domain.Schedule) error {
	k := jobKey{s.Tenant, s.ID}
	cur, ok := st.m[k]
	if !ok || cur.version != s.Version {
		return fmt.Errorf("save schedule %s at version %d: %w", s.ID, s.Version, domain.ErrVersionConflict)
	}
	s.Version++
	r, err := encodeSchedule(s)
	if err != nil {
		s.Version--
		return err
	}
	st.m[k] = r
	st.changes.add()
	return nil
}

// Fire saves s and creates run in the job store, both or neither.
func (st *Schedules) Fire(_ context.Context, s *domain.Schedule, run *domain.Job) error {
	run.Version = 1
	jr, err := st.jobs.encode(run, nil)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.jobs.mu.Lock()
	defer st.jobs.mu.Unlock()
	if _, taken := st.jobs.jobs[jobKey{run.Tenant, run.ID}]; taken {
		return fmt.Errorf("fire schedule %s: run %s exists: %w", s.ID, run.ID, domain.ErrVersionConflict)
	}
	if err := st.saveLocked(s); err != nil {
		return err
	}
	st.jobs.jobs[jobKey{run.Tenant, run.ID}] = jr
	st.jobs.changes.add()
	return nil
}

// Due answers up to limit schedules whose next tick is at or before now,
// earliest first (the index is one part here).
func (st *Schedules) Due(_ context.Context, now time.Time, limit int) ([]engine.DueSchedule, error) {
	at := now.UTC().Format(dueLayout)
	type due struct {
		engine.DueSchedule
		at string
	}
	st.mu.Lock()
	var all []due
	for k, r := range st.m {
		if r.due != "" && r.due <= at {
			all = append(all, due{engine.DueSchedule{Tenant: k.tenant, ID: k.id}, r.due})
		}
	}
	st.mu.Unlock()
	slices.SortFunc(all, func(a, b due) int {
		return cmp.Or(strings.Compare(a.at, b.at), strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.ID, b.ID))
	})
	if limit >= 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]engine.DueSchedule, len(all))
	for i, d := range all {
		out[i] = d.DueSchedule
	}
	return out, nil
}
