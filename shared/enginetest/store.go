package enginetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// Specs the checks build jobs from.
const (
	passSpec   = `{"steps":[{"id":"only","action":{"type":"pass"}}]}`
	workerSpec = `{"steps":[{"id":"s","action":{"type":"worker"},"retry":{"max_attempts":2}}]}`
)

var storeChecks = []check[StoreFixture]{
	{"create then get answers a fresh copy", storeCreateGet},
	{"a job's usage counts each request made of it", storeUsage},
	{"a tenant's spend counts today's apart", storeSpentToday},
	{"create all writes each job as create would", storeCreateAll},
	{"a waiting step's timer survives", storeTimers},
	{"another tenant's job is not found", storeTenantIsolation},
	{"idempotency key", storeIdempotency},
	{"idempotency key race has one winner", storeIdempotencyRace},
	{"save is conditional on version", storeSaveConditional},
	{"racing saves have exactly one winner", storeSaveRace},
	{"a cancel mark refuses writers that did not see it", storeCancelMark},
	{"outcome marks refuse writers that did not read them all", storeOutcomeMarks},
	{"save refuses a change from another state", storeSaveState},
	{"save refuses a job over the item limit", storeTooLarge},
	{"a long job is saved step by step and reads back whole", storeLongJob},
	{"racing saves of a long job have exactly one winner", storeLongJobRace},
	{"due lists unfinished jobs past their time", storeDue},
	{"due answers at most its limit from each part", storeDueParts},
	{"defer moves a due job only if unchanged", storeDefer},
	{"quarantine takes a job out of the due index", storeQuarantine},
	{"an unreadable job answers ErrUnreadable", storeUnreadable},
	{"list pages newest first", storeListPaging},
	{"list filters by state and queue", storeListFilters},
	{"list refuses foreign or garbage cursors", storeListCursor},
	{"list reads a range of ids: a prefix, a span of times", storeListIDRange},
	{"api keys", storeKeys},
	{"stats sum 24 hours", storeStats},
	{"run time sums 24 hours", storeRunTime},
	{"step counters are cumulative per tenant", storeStepCounters},
	{"the last sweep", storeSweep},
	{"health verdict thresholds", storeHealthVerdict},
}

// newJob builds an unsaved job from a submission body.
func newJob(t *testing.T, tenant, spec, idemKey string, now time.Time) *domain.Job {
	t.Helper()
	s, err := domain.ParseJobSpec([]byte(spec))
	require.NoError(t, err)
	j, err := domain.NewJob(tenant, ulid.Make().String(), s, idemKey, now)
	require.NoError(t, err)
	return j
}

// create stores a new job without an idempotency key.
func create(t *testing.T, f StoreFixture, tenant, spec string, now time.Time) *domain.Job {
	t.Helper()
	j := newJob(t, tenant, spec, "", now)
	got, created, err := f.Store.Create(context.Background(), j, "", now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int64(1), got.Version)
	return got
}

// load reads a job and how many events it had, as a caller of Save does.
func load(t *testing.T, f StoreFixture, tenant, id string) (*domain.Job, int) {
	t.Helper()
	j, err := f.Store.Get(context.Background(), tenant, id)
	require.NoError(t, err)
	return j, len(j.Events)
}

// leased stores a worker job whose step s is leased for an hour, and
// answers it with the lease's id.
func leased(t *testing.T, f StoreFixture) (*domain.Job, string) {
	t.Helper()
	j := create(t, f, tenantA, workerSpec, f.Now)
	loaded, n := load(t, f, tenantA, j.ID)
	l, err := loaded.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Hour}, f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(context.Background(), loaded, n))
	return loaded, l.ID
}

func eventTypes(j *domain.Job) []string {
	var out []string
	for _, e := range j.Events {
		out = append(out, e.Type)
	}
	return out
}

func storeCreateGet(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	spec := `{
		"queue": "billing", "priority": 0,
		"payload": {"order": 42, "items": ["a", "b"], "nested": {"ok": true, "none": null}},
		"steps": [
			{"id": "charge", "action": {"type": "worker", "queue": "cards", "lease_seconds": 90}, "timeout_seconds": 600,
			 "retry": {"max_attempts": 5, "backoff": "linear", "initial_delay_ms": 250, "max_delay_ms": 4000, "jitter": true}},
			{"id": "nap", "action": {"type": "sleep", "seconds": 1.5}},
			{"id": "boom", "action": {"type": "fail", "class": "needs_user", "message": "ask a person"}}
		]}`
	j := newJob(t, tenantA, spec, "", f.Now)
	got, created, err := f.Store.Create(ctx, j, "", f.Now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, int64(1), j.Version, "Create sets version 1")

	// A job made again under its id (a child job's start retried) is
	// refused as existing, and the stored one stays as it is.
	dup := newJob(t, tenantA, `{"steps": [{"id": "other", "action": {"type": "pass"}}]}`, "", f.Now)
	dup.ID = j.ID
	_, _, err = f.Store.Create(ctx, dup, "", f.Now)
	require.ErrorIs(t, err, domain.ErrExists)

	first, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.JSONEq(t, string(j.Payload), string(first.Payload))
	want := *j
	want.Payload = first.Payload // kept compact; its meaning is what must survive
	sameJob(t, &want, first)

	// Every Get is a copy of its own: changing one changes neither the
	// store nor another copy, and neither does changing the created job.
	second, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.NotSame(t, first, second)
	first.State, first.Steps[0].State, first.Events = domain.JobFailed, domain.StepFailed, nil
	j.Queue, j.Steps[1].Attempt = "mutated", 99
	third, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, second, third)
	require.Equal(t, "billing", third.Queue)
	require.Equal(t, domain.JobQueued, third.State)
	require.Equal(t, []string{"job_created", "step_waiting_deps", "step_waiting_deps"}, eventTypes(third))

	// A saved change roundtrips too.
	_, err = third.Lease("charge", domain.LeaseRequest{Worker: "w-1", ViaWorker: true, Nonce: "n1", Duration: time.Minute, Token: "tok-1"}, f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, third, len(second.Events)))
	require.Equal(t, int64(2), third.Version)
	again, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	sameJob(t, third, again)
	require.Equal(t, "tok-1", again.Steps[0].Lease.Token)
}

// storeCreateAll: a batch's jobs, more than one request of them, a long
// one among them (stored apart), are each stored as Create would store
// them; a job with an idempotency key is refused and writes nothing.
func storeCreateAll(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	var jobs []*domain.Job
	for i := range 30 {
		spec := passSpec
		if i == 7 {
			spec = longSpec(min(60, domain.MaxSteps))
		}
		jobs = append(jobs, newJob(t, tenantA, spec, "", f.Now))
	}
	keyed := newJob(t, tenantA, passSpec, "batch-key", f.Now)
	jobs = append(jobs, keyed)
	errs := f.Store.CreateAll(ctx, jobs, f.Now)
	require.Len(t, errs, len(jobs))
	for i, j := range jobs[:30] {
		require.NoError(t, errs[i], "job %d", i)
		require.Equal(t, int64(1), j.Version)
		got, n := load(t, f, tenantA, j.ID)
		sameJob(t, j, got, "job %d", i)
		// It moves on as a created job does.
		_, err := got.Lease(got.Steps[0].ID(), domain.LeaseRequest{Nonce: "n", Duration: time.Minute}, f.Now)
		require.NoError(t, err)
		require.NoError(t, f.Store.Save(ctx, got, n), "job %d", i)
	}
	require.Error(t, errs[30], "a job with an idempotency key goes by Create")
	_, err := f.Store.Get(ctx, tenantA, keyed.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
}

// storeTimers: the steps nothing runs keep how they wait (a wake time, a
// deadline, parked) through the store, and what a cancel leaves of it.
func storeTimers(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := newJob(t, tenantA, `{"steps":[
		{"id": "nap", "action": {"type": "sleep", "seconds": 86400}},
		{"id": "wait", "action": {"type": "wait", "signal": "go", "timeout_seconds": 60}},
		{"id": "gate", "action": {"type": "approval", "timeout_seconds": 120}},
		{"id": "open", "action": {"type": "wait", "signal": "late"}},
		{"id": "after", "action": {"type": "pass"}, "depends_on": ["nap", "wait", "gate", "open"]}]}`, "", f.Now)
	for _, s := range j.Steps[:4] {
		require.NotNil(t, s.Timer, s.ID())
	}
	require.True(t, j.Steps[0].Timer.Parked && j.Steps[3].Timer.Parked)
	_, _, err := f.Store.Create(ctx, j, "", f.Now)
	require.NoError(t, err)
	got, n := load(t, f, tenantA, j.ID)
	sameJob(t, j, got)

	_, err = got.Cancel(f.Now.Add(time.Second))
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, got, n))
	again, _ := load(t, f, tenantA, j.ID)
	sameJob(t, got, again)
	require.Equal(t, &domain.Timer{Parked: true}, again.Steps[3].Timer)
}

func storeTenantIsolation(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	_, err := f.Store.Get(ctx, tenantA, ulid.Make().String())
	require.ErrorIs(t, err, domain.ErrNotFound)

	j := create(t, f, tenantA, passSpec, f.Now)
	_, err = f.Store.Get(ctx, tenantB, j.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's job answers exactly as a missing one")
	require.Equal(t, domain.CodeNotFound, domain.CodeOf(err))
	got, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, tenantA, got.Tenant)

	// Another tenant's save of it is no save.
	theirs := *got
	theirs.Tenant = tenantB
	_, err = theirs.Cancel(f.Now)
	require.NoError(t, err)
	require.ErrorIs(t, f.Store.Save(ctx, &theirs, len(got.Events)), domain.ErrVersionConflict)
	got, err = f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobQueued, got.State)
}

func storeIdempotency(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	key := "key-" + ulid.Make().String()
	first := newJob(t, tenantA, passSpec, key, f.Now)
	got, created, err := f.Store.Create(ctx, first, "hash-1", f.Now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, first.ID, got.ID)

	// The same key and hash answer the first job; the duplicate is not written.
	dup := newJob(t, tenantA, passSpec, key, f.Now)
	got, created, err = f.Store.Create(ctx, dup, "hash-1", f.Now.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, got.ID)
	stored, err := f.Store.Get(ctx, tenantA, first.ID)
	require.NoError(t, err)
	sameJob(t, stored, got)
	_, err = f.Store.Get(ctx, tenantA, dup.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)

	// The same key with another body's hash is refused.
	other := newJob(t, tenantA, passSpec, key, f.Now)
	_, _, err = f.Store.Create(ctx, other, "hash-2", f.Now)
	require.ErrorIs(t, err, domain.ErrIdempotencyMismatch)
	_, err = f.Store.Get(ctx, tenantA, other.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)

	// Another tenant's key is its own.
	theirs := newJob(t, tenantB, passSpec, key, f.Now)
	got, created, err = f.Store.Create(ctx, theirs, "hash-2", f.Now)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, theirs.ID, got.ID)

	// A key recorded more than a day ago no longer holds; the new job
	// takes it over.
	old := "old-" + ulid.Make().String()
	then := f.Now.Add(-25 * time.Hour)
	_, created, err = f.Store.Create(ctx, newJob(t, tenantA, passSpec, old, then), "hash-1", then)
	require.NoError(t, err)
	require.True(t, created)
	fresh := newJob(t, tenantA, passSpec, old, f.Now)
	got, created, err = f.Store.Create(ctx, fresh, "hash-2", f.Now)
	require.NoError(t, err)
	require.True(t, created, "an expired key is free")
	got, created, err = f.Store.Create(ctx, newJob(t, tenantA, passSpec, old, f.Now), "hash-2", f.Now)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, fresh.ID, got.ID)
}

func storeIdempotencyRace(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	key := "race-" + ulid.Make().String()
	const racers = 8
	jobs := make([]*domain.Job, racers)
	for i := range jobs {
		jobs[i] = newJob(t, tenantA, passSpec, key, f.Now)
	}
	type answer struct {
		id      string
		created bool
		err     error
	}
	answers := make([]answer, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			j, created, err := f.Store.Create(ctx, jobs[i], "same-hash", f.Now)
			if err == nil {
				answers[i] = answer{j.ID, created, nil}
			} else {
				answers[i] = answer{err: err}
			}
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, a := range answers {
		require.NoError(t, a.err, "racer %d", i)
		if a.created {
			require.Empty(t, winner, "two racers created a job")
			winner = a.id
		}
	}
	require.NotEmpty(t, winner, "no racer created the job")
	for i, a := range answers {
		require.Equal(t, winner, a.id, "racer %d", i)
	}
}

func storeSaveConditional(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, workerSpec, f.Now)
	first, n1 := load(t, f, tenantA, j.ID)
	second, n2 := load(t, f, tenantA, j.ID)

	_, err := first.Cancel(f.Now)
	require.NoError(t, err)
	_, err = second.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "x", Duration: time.Minute}, f.Now)
	require.NoError(t, err)

	require.NoError(t, f.Store.Save(ctx, first, n1))
	require.Equal(t, int64(2), first.Version, "a save bumps the version")
	err = f.Store.Save(ctx, second, n2)
	require.ErrorIs(t, err, domain.ErrVersionConflict)
	require.Equal(t, int64(1), second.Version, "the loser's version is unchanged")

	stored, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	sameJob(t, first, stored)
	require.Contains(t, eventTypes(stored), "job_cancelled")
	require.NotContains(t, eventTypes(stored), "job_leased")

	// A save of a job never created is a conflict too, and creates nothing.
	ghost := newJob(t, tenantA, passSpec, "", f.Now)
	ghost.Version = 1
	_, err = ghost.Cancel(f.Now)
	require.NoError(t, err)
	require.ErrorIs(t, f.Store.Save(ctx, ghost, 1), domain.ErrVersionConflict)
	_, err = f.Store.Get(ctx, tenantA, ghost.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
}

// storeSaveRace races racers saves on one version, round after round:
// exactly one wins each round, the others get ErrVersionConflict and keep
// their version, and the store holds the winner's change.
func storeSaveRace(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	const racers, rounds = 8, 20
	j, leaseID := leased(t, f)
	for round := range rounds + 1 {
		copies := make([]*domain.Job, racers)
		loaded := make([]int, racers)
		for i := range copies {
			copies[i], loaded[i] = load(t, f, tenantA, j.ID)
			var err error
			switch {
			case round < rounds: // a change with no job event: the state must be the one read
				_, err = copies[i].Heartbeat("s", leaseID, time.Duration(round*racers+i+1)*time.Minute, f.Now)
			case i%3 == 0: // the last round: job events of several kinds
				_, err = copies[i].Complete("s", leaseID, json.RawMessage(fmt.Sprintf(`{"racer":%d}`, i)), f.Now)
			case i%3 == 1:
				_, err = copies[i].Cancel(f.Now)
			default:
				_, err = copies[i].Fail("s", leaseID, domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprint(i)}, f.Now, nil)
			}
			require.NoError(t, err)
		}
		winner := saveRace(t, f, copies, loaded, round)
		stored, err := f.Store.Get(ctx, tenantA, j.ID)
		require.NoError(t, err)
		sameJob(t, copies[winner], stored, "round %d: the store holds the winner's change", round)
	}
}

// saveRace saves copies of one version of a job at once and answers the
// one racer that won; the others lost the race and kept their version.
func saveRace(t *testing.T, f StoreFixture, copies []*domain.Job, loaded []int, round int) int {
	t.Helper()
	version := copies[0].Version
	errs := make([]error, len(copies))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			<-start
			errs[i] = f.Store.Save(context.Background(), copies[i], loaded[i])
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "round %d: racers %d and %d both won", round, winner, i)
			winner = i
			require.Equal(t, version+1, copies[i].Version)
			continue
		}
		require.ErrorIs(t, err, domain.ErrVersionConflict, "round %d racer %d", round, i)
		require.Equal(t, version, copies[i].Version, "round %d: a loser's version is unchanged", round)
	}
	require.NotEqual(t, -1, winner, "round %d: no racer won", round)
	return winner
}

func storeCancelMark(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, workerSpec, f.Now)
	before, n := load(t, f, tenantA, j.ID)
	require.False(t, before.CancelRequested)

	require.NoError(t, f.Store.RequestCancel(ctx, tenantA, j.ID))
	require.NoError(t, f.Store.RequestCancel(ctx, tenantA, j.ID), "marking twice is no error")
	_, err := before.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Hour}, f.Now)
	require.NoError(t, err)
	require.ErrorIs(t, f.Store.Save(ctx, before, n), domain.ErrVersionConflict, "a writer that read the job before the mark loses")
	require.Equal(t, int64(1), before.Version)

	marked, n := load(t, f, tenantA, j.ID)
	require.True(t, marked.CancelRequested)
	require.Equal(t, int64(1), marked.Version, "the mark is no transition")
	changed, err := marked.Cancel(f.Now)
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, f.Store.Save(ctx, marked, n), "the writer that read the mark saves")
	require.False(t, marked.CancelRequested)
	after, _ := load(t, f, tenantA, j.ID)
	require.False(t, after.CancelRequested, "a saved job carries no mark")
	require.Equal(t, domain.JobCancelled, after.State)

	// A finished job and a missing one are left as they are.
	require.NoError(t, f.Store.RequestCancel(ctx, tenantA, j.ID))
	after, _ = load(t, f, tenantA, j.ID)
	require.False(t, after.CancelRequested)
	require.Equal(t, int64(2), after.Version)
	require.NoError(t, f.Store.RequestCancel(ctx, tenantA, ulid.Make().String()))
	_, err = f.Store.Get(ctx, tenantB, j.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func storeOutcomeMarks(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, workerSpec, f.Now)
	before, n := load(t, f, tenantA, j.ID)
	require.Empty(t, before.Marks)
	require.Zero(t, before.MarksMade)

	const first, second = "01ABC.0.1.aa", "01ABC.1.1.bb" // lease ids: the dots are no path
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantA, j.ID, first, []byte(`{"n":1}`)))
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantA, j.ID, first, []byte(`{"n":2}`)), "a key marked again is no error")
	_, err := before.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Hour}, f.Now)
	require.NoError(t, err)
	require.ErrorIs(t, f.Store.Save(ctx, before, n), domain.ErrVersionConflict, "a writer that read the job before the mark loses")
	require.Equal(t, int64(1), before.Version)

	marked, n := load(t, f, tenantA, j.ID)
	require.Equal(t, map[string][]byte{first: []byte(`{"n":1}`)}, marked.Marks, "the first mark under a key stays")
	require.Equal(t, int64(1), marked.MarksMade)
	require.Equal(t, int64(1), marked.Version, "a mark is no transition")
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantA, j.ID, second, []byte(`{"n":3}`)))
	_, err = marked.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Hour}, f.Now)
	require.NoError(t, err)
	require.ErrorIs(t, f.Store.Save(ctx, marked, n), domain.ErrVersionConflict, "a writer that missed a later mark loses")

	both, n := load(t, f, tenantA, j.ID)
	require.Len(t, both.Marks, 2)
	require.Equal(t, int64(2), both.MarksMade)
	_, err = both.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: time.Hour}, f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, both, n), "the writer that read every mark saves")
	require.Empty(t, both.Marks)
	after, n := load(t, f, tenantA, j.ID)
	require.Empty(t, after.Marks, "a saved job carries no mark")
	require.Zero(t, after.MarksMade)
	require.Equal(t, int64(2), after.Version)

	// A finished job and a missing one are left as they are.
	_, err = after.Cancel(f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, after, n))
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantA, j.ID, "late", []byte(`{}`)))
	done, _ := load(t, f, tenantA, j.ID)
	require.Empty(t, done.Marks)
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantA, ulid.Make().String(), first, []byte(`{}`)))
	require.NoError(t, f.Store.MarkOutcome(ctx, tenantB, j.ID, first, []byte(`{}`)))
	_, err = f.Store.Get(ctx, tenantB, j.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a mark across tenants makes no job")
}

func storeSaveState(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, passSpec, f.Now)

	// A job event whose sources exclude the stored state, at the right version.
	loaded, n := load(t, f, tenantA, j.ID)
	require.NotContains(t, domain.JobSources(domain.JobEvCompleted), domain.JobQueued)
	loaded.Events = append(loaded.Events, domain.Event{Seq: n + 1, Type: string(domain.JobEvCompleted), At: f.Now})
	loaded.State = domain.JobCompleted
	require.ErrorIs(t, f.Store.Save(ctx, loaded, n), domain.ErrVersionConflict)
	require.Equal(t, int64(1), loaded.Version)

	// No job event, yet the state changed: the condition is the state the
	// change leaves, which is not the stored one.
	loaded, n = load(t, f, tenantA, j.ID)
	loaded.Events = append(loaded.Events, domain.Event{Seq: n + 1, Type: domain.StepRunning.EventType(), Step: "only", At: f.Now})
	loaded.State = domain.JobRunning
	require.ErrorIs(t, f.Store.Save(ctx, loaded, n), domain.ErrVersionConflict)

	stored, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	sameJob(t, j, stored, "nothing was written")

	// The same version with a job event the stored state allows is saved.
	loaded, n = load(t, f, tenantA, j.ID)
	_, err = loaded.Lease("only", domain.LeaseRequest{Nonce: "z", Duration: time.Minute}, f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, loaded, n))
}

// randomText answers n bytes of base64 that do not compress much.
func randomText(seed uint64, n int) string {
	raw := make([]byte, n*3/4+3)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(raw)
	return base64.RawStdEncoding.EncodeToString(raw)[:n]
}

// storeTooLarge: a job is bounded as DynamoDB bounds an item (400 KB,
// counted on the stored, compressed form): a change over it is refused
// with CodeTooLarge and writes nothing; one that compresses under it, or
// is simply small enough, is saved.
func storeTooLarge(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	complete := func(output string) (*domain.Job, error) {
		j, leaseID := leased(t, f)
		loaded, n := load(t, f, tenantA, j.ID)
		_, err := loaded.Complete("s", leaseID, json.RawMessage(`{"out":"`+output+`"}`), f.Now)
		require.NoError(t, err)
		return loaded, f.Store.Save(ctx, loaded, n)
	}

	// 400 KB of incompressible output, kept twice (the step's output and
	// its attempt's): over the limit however it is stored.
	loaded, err := complete(randomText(1, 400*1024))
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, domain.CodeTooLarge, de.Code)
	require.Equal(t, int64(2), loaded.Version, "the refused change's version is unchanged")
	stored, err := f.Store.Get(ctx, tenantA, loaded.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobRunning, stored.State, "nothing was written")
	require.Equal(t, int64(2), stored.Version)

	// 60 KB of it (the largest a built-in action may answer) fits.
	loaded, err = complete(randomText(2, 60*1024))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, loaded.State)

	// 300 KB that compresses well fits too, as a DynamoDB item would.
	loaded, err = complete(strings.Repeat("stepflow ", 300*1024/9))
	require.NoError(t, err)
	stored, err = f.Store.Get(ctx, tenantA, loaded.ID)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, stored.State)
}

// dueIDs answers the jobs a due listing names, as tenant/id.
func dueIDs(keys []engine.DueJob) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Tenant+"/"+k.ID)
	}
	return out
}

func due(t *testing.T, f StoreFixture, now time.Time, limit int) []engine.DueJob {
	t.Helper()
	keys, err := f.Store.Due(context.Background(), now, limit)
	require.NoError(t, err)
	return keys
}

func storeDue(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, passSpec, f.Now)
	require.NotNil(t, j.DueAt)
	require.True(t, j.DueAt.Equal(f.Now.Add(domain.DispatchGrace)))
	me := tenantA + "/" + j.ID

	require.NotContains(t, dueIDs(due(t, f, f.Now, 100)), me)
	require.NotContains(t, dueIDs(due(t, f, j.DueAt.Add(-time.Millisecond), 100)), me)
	require.Contains(t, dueIDs(due(t, f, *j.DueAt, 100)), me, "due at its due time")

	// Earliest first: the limit never leaves out the earliest job due, and
	// nothing answered is due later than asked.
	var all []string
	for i := range 4 {
		at := f.Now.Add(time.Duration(i+1) * time.Second)
		k := create(t, f, tenantB, passSpec, at)
		all = append(all, tenantB+"/"+k.ID)
	}
	later := f.Now.Add(2 * domain.DispatchGrace)
	keys := due(t, f, later, 100)
	require.ElementsMatch(t, append([]string{me}, all...), dueIDs(keys))
	for _, k := range keys {
		require.NotEmpty(t, k.Due)
	}
	first := due(t, f, later, 1)
	require.Contains(t, dueIDs(first), me, "the earliest due job comes first")
	require.NotContains(t, dueIDs(due(t, f, j.DueAt.Add(time.Second), 100)), all[3])

	// A finished job leaves the index.
	loaded, n := load(t, f, tenantA, j.ID)
	_, err := loaded.Cancel(f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, loaded, n))
	require.NotContains(t, dueIDs(due(t, f, later, 100)), me)
	require.ElementsMatch(t, all, dueIDs(due(t, f, later, 100)))
}

// storeDueParts: Due names the part of the index each entry came from and
// answers at most limit of each part, its earliest: a part that answered
// limit may hold more (the sweep postpones what hides them).
func storeDueParts(t *testing.T, f StoreFixture) {
	var ids []string
	for i := range 24 {
		j := create(t, f, tenantA, passSpec, f.Now.Add(time.Duration(i)*time.Second))
		ids = append(ids, tenantA+"/"+j.ID)
	}
	later := f.Now.Add(2 * domain.DispatchGrace)
	all := due(t, f, later, 100)
	require.ElementsMatch(t, ids, dueIDs(all))
	parts := map[string][]engine.DueJob{}
	for _, k := range all {
		require.NotEmpty(t, k.Part, "%s/%s names its part", k.Tenant, k.ID)
		parts[k.Part] = append(parts[k.Part], k)
	}
	require.Greater(t, len(parts), 1, "24 jobs spread over the parts")
	for _, part := range parts {
		slices.SortFunc(part, func(a, b engine.DueJob) int { return strings.Compare(a.Due, b.Due) })
	}
	for _, limit := range []int{1, 2} {
		got := map[string][]string{}
		for _, k := range due(t, f, later, limit) {
			got[k.Part] = append(got[k.Part], k.Tenant+"/"+k.ID)
		}
		for p, part := range parts {
			require.ElementsMatch(t, dueIDs(part[:min(limit, len(part))]), got[p], "part %s answers its %d earliest", p, limit)
		}
	}
}

// dueKey answers j's entry in a due listing at now.
func dueKey(t *testing.T, f StoreFixture, tenant, id string, now time.Time) (engine.DueJob, bool) {
	t.Helper()
	for _, k := range due(t, f, now, 100) {
		if k.Tenant == tenant && k.ID == id {
			return k, true
		}
	}
	return engine.DueJob{}, false
}

func storeDefer(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, passSpec, f.Now)
	at := *j.DueAt
	later := at.Add(5 * time.Minute)
	k, ok := dueKey(t, f, tenantA, j.ID, at)
	require.True(t, ok)

	require.NoError(t, f.Store.Defer(ctx, k, later))
	_, ok = dueKey(t, f, tenantA, j.ID, at)
	require.False(t, ok, "deferred past its old due time")
	k2, ok := dueKey(t, f, tenantA, j.ID, later)
	require.True(t, ok, "due again at the time it was deferred to")
	require.NotEqual(t, k.Due, k2.Due)

	// A deferral decided on a due time that has moved since changes nothing.
	require.NoError(t, f.Store.Defer(ctx, k, later.Add(time.Hour)))
	_, ok = dueKey(t, f, tenantA, j.ID, later)
	require.True(t, ok)
	// Nor does one with no due time, or of a missing job.
	require.NoError(t, f.Store.Defer(ctx, engine.DueJob{Tenant: tenantA, ID: j.ID}, later.Add(time.Hour)))
	_, ok = dueKey(t, f, tenantA, j.ID, later)
	require.True(t, ok)
	require.NoError(t, f.Store.Defer(ctx, engine.DueJob{Tenant: tenantA, ID: ulid.Make().String(), Due: k2.Due}, later))

	got, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Equal(t, j.Version, got.Version, "a deferral is no transition")
	require.Equal(t, j.State, got.State)
}

func storeQuarantine(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, passSpec, f.Now)
	other := create(t, f, tenantA, passSpec, f.Now)
	later := j.DueAt.Add(time.Hour)
	require.NoError(t, f.Store.Quarantine(ctx, tenantA, j.ID, "cannot be read", f.Now))
	require.Equal(t, []string{tenantA + "/" + other.ID}, dueIDs(due(t, f, later, 100)))
	// The job itself is as it was.
	got, err := f.Store.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	sameJob(t, j, got)
	// A job that is gone, or another tenant's, is no error.
	require.NoError(t, f.Store.Quarantine(ctx, tenantA, ulid.Make().String(), "gone", f.Now))
	require.NoError(t, f.Store.Quarantine(ctx, tenantB, other.ID, "not theirs", f.Now))
	require.Equal(t, []string{tenantA + "/" + other.ID}, dueIDs(due(t, f, later, 100)))
}

func storeUnreadable(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	bad := create(t, f, tenantA, passSpec, f.Now)
	good := create(t, f, tenantA, passSpec, f.Now)
	f.Corrupt(t, tenantA, bad.ID)

	_, err := f.Store.Get(ctx, tenantA, bad.ID)
	require.ErrorIs(t, err, domain.ErrUnreadable)
	require.False(t, errors.Is(err, domain.ErrNotFound))
	_, err = f.Store.Get(ctx, tenantB, bad.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "still another tenant's business")
	_, err = f.Store.Get(ctx, tenantA, good.ID)
	require.NoError(t, err)

	// The due index still names it, so the sweep meets it and quarantines it.
	later := bad.DueAt.Add(time.Hour)
	require.ElementsMatch(t, []string{tenantA + "/" + bad.ID, tenantA + "/" + good.ID}, dueIDs(due(t, f, later, 100)))
	require.NoError(t, f.Store.Quarantine(ctx, tenantA, bad.ID, "unreadable", f.Now))
	require.Equal(t, []string{tenantA + "/" + good.ID}, dueIDs(due(t, f, later, 100)))
}

// listAll pages through a listing until its cursor runs out, requiring
// every page to keep to the limit and the filter.
func listAll(t *testing.T, f StoreFixture, tenant string, lf engine.ListFilter) []string {
	t.Helper()
	var ids []string
	for pages := 1; ; pages++ {
		page, cur, err := f.Store.List(context.Background(), tenant, lf)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), int(lf.Limit))
		for _, s := range page {
			if lf.State != "" {
				require.Equal(t, lf.State, s.State, "job %s", s.ID)
			}
			if len(lf.States) > 0 {
				require.Contains(t, lf.States, s.State, "job %s", s.ID)
			}
			if lf.Queue != "" {
				require.Equal(t, lf.Queue, s.Queue, "job %s", s.ID)
			}
			require.False(t, lf.IDFrom != "" && s.ID < lf.IDFrom || lf.IDBelow != "" && s.ID >= lf.IDBelow,
				"job %s is outside [%s, %s)", s.ID, lf.IDFrom, lf.IDBelow)
			ids = append(ids, s.ID)
		}
		if cur == "" {
			return ids
		}
		require.Less(t, pages, 100, "the listing does not end")
		lf.Cursor = cur
	}
}

func newestFirst(jobs []*domain.Job) []string {
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func storeListPaging(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	var mine []*domain.Job
	for i := range 7 {
		mine = append(mine, create(t, f, tenantA, passSpec, f.Now))
		if i%3 == 0 {
			create(t, f, tenantB, passSpec, f.Now)
		}
	}
	want := newestFirst(mine)

	page, cur, err := f.Store.List(ctx, tenantA, engine.ListFilter{Limit: 3})
	require.NoError(t, err)
	require.NotEmpty(t, cur)
	require.NotEmpty(t, page)
	require.Equal(t, want[:len(page)], ids(page))
	require.Equal(t, engine.JobSummary{ID: want[0], State: domain.JobQueued, Queue: domain.DefaultQueue}, page[0])

	require.Equal(t, want, listAll(t, f, tenantA, engine.ListFilter{Limit: 3}))
	require.Equal(t, want, listAll(t, f, tenantA, engine.ListFilter{Limit: 1}))
	require.Equal(t, want, listAll(t, f, tenantA, engine.ListFilter{Limit: 100}))
	require.Len(t, listAll(t, f, tenantB, engine.ListFilter{Limit: 100}), 3)
	require.Empty(t, listAll(t, f, "tenant-none", engine.ListFilter{Limit: 10}))
}

func ids(page []engine.JobSummary) []string {
	var out []string
	for _, s := range page {
		out = append(out, s.ID)
	}
	return out
}

func storeListFilters(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	var alpha, beta, cancelled []*domain.Job
	for i := range 12 {
		spec := `{"queue":"alpha","steps":[{"id":"s","action":{"type":"pass"}}]}`
		if i == 2 || i == 9 {
			spec = `{"queue":"beta","steps":[{"id":"s","action":{"type":"pass"}}]}`
		}
		j := create(t, f, tenantA, spec, f.Now)
		if i == 0 || i == 7 {
			loaded, n := load(t, f, tenantA, j.ID)
			_, err := loaded.Cancel(f.Now)
			require.NoError(t, err)
			require.NoError(t, f.Store.Save(ctx, loaded, n))
			cancelled = append(cancelled, loaded)
		}
		if j.Queue == "beta" {
			beta = append(beta, j)
		} else {
			alpha = append(alpha, j)
		}
	}
	// Another tenant's jobs match the same filters and are never listed.
	create(t, f, tenantB, `{"queue":"beta","steps":[{"id":"s","action":{"type":"pass"}}]}`, f.Now)

	require.Equal(t, newestFirst(beta), listAll(t, f, tenantA, engine.ListFilter{Queue: "beta", Limit: 1}))
	require.Equal(t, newestFirst(alpha), listAll(t, f, tenantA, engine.ListFilter{Queue: "alpha", Limit: 4}))
	require.Empty(t, listAll(t, f, tenantA, engine.ListFilter{Queue: "gamma", Limit: 5}))
	require.Equal(t, newestFirst(cancelled), listAll(t, f, tenantA, engine.ListFilter{State: domain.JobCancelled, Limit: 1}))
	require.Len(t, listAll(t, f, tenantA, engine.ListFilter{State: domain.JobQueued, Limit: 4}), 10)
	require.Equal(t, newestFirst(beta), listAll(t, f, tenantA, engine.ListFilter{State: domain.JobQueued, Queue: "beta", Limit: 1}))
	require.Empty(t, listAll(t, f, tenantA, engine.ListFilter{State: domain.JobCancelled, Queue: "beta", Limit: 1}))
	require.Equal(t, newestFirst(cancelled), listAll(t, f, tenantA, engine.ListFilter{State: domain.JobCancelled, Queue: "alpha", Limit: 1}))

	// Several states at once (a view's word), in one listing that pages
	// whole; Jobs answers each job as stored.
	either := engine.ListFilter{States: []domain.JobState{domain.JobCancelled, domain.JobCompleted}, Limit: 1}
	require.Equal(t, newestFirst(cancelled), listAll(t, f, tenantA, either))
	either.Queue = "beta"
	require.Empty(t, listAll(t, f, tenantA, either))
	page, _, err := f.Store.List(ctx, tenantA, engine.ListFilter{States: []domain.JobState{domain.JobCancelled}, Limit: 5, Jobs: true})
	require.NoError(t, err)
	require.Len(t, page, 2)
	for _, js := range page {
		require.NotNil(t, js.Job, "job %s", js.ID)
		require.Equal(t, js.ID, js.Job.ID)
		require.Equal(t, domain.JobCancelled, js.Job.State)
		require.NotEmpty(t, js.Job.Events)
	}
}

func storeListCursor(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	for range 3 {
		create(t, f, tenantA, passSpec, f.Now)
	}
	_, cur, err := f.Store.List(ctx, tenantA, engine.ListFilter{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, cur)
	for name, bad := range map[string]struct{ tenant, cursor string }{
		"another tenant's cursor": {tenantB, cur},
		"not base64":              {tenantA, "%%% not a cursor %%%"},
		"base64 of garbage":       {tenantA, base64.RawURLEncoding.EncodeToString([]byte("garbage"))},
		"base64 of JSON":          {tenantA, base64.RawURLEncoding.EncodeToString([]byte(`{"pk":"J#tenant-a#0"}`))},
	} {
		_, _, err := f.Store.List(ctx, bad.tenant, engine.ListFilter{Limit: 5, Cursor: bad.cursor})
		var de *domain.Error
		require.ErrorAs(t, err, &de, name)
		require.Equal(t, domain.CodeInvalid, de.Code, name)
		require.Equal(t, "cursor", de.Field, name)
	}
}

// storeListIDRange: IDFrom and IDBelow bound a listing by id, alone,
// together and with other filters, and it pages as any listing does. Job
// ids are ULIDs, so a range of ids is an id prefix or a span of creation
// times: the jobs here are made at hours apart.
func storeListIDRange(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	hour := func(n int) time.Time { return f.Now.Add(time.Duration(n) * time.Hour) }
	// timeID is the first 10 characters of a ULID made at `at`: its time.
	timeID := func(at time.Time) string { return ulid.MustNew(ulid.Timestamp(at), nil).String()[:10] }
	createAt := func(tenant string, at time.Time) *domain.Job {
		s, err := domain.ParseJobSpec([]byte(passSpec))
		require.NoError(t, err)
		j, err := domain.NewJob(tenant, ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String(), s, "", f.Now)
		require.NoError(t, err)
		got, created, err := f.Store.Create(ctx, j, "", f.Now)
		require.NoError(t, err)
		require.True(t, created)
		return got
	}
	byHour := map[int][]*domain.Job{}
	for _, n := range []int{-3, -2, -1, 0} {
		for range 3 {
			byHour[n] = append(byHour[n], createAt(tenantA, hour(n)))
		}
		createAt(tenantB, hour(n)) // in every range, and never listed
	}
	at := func(hours ...int) []string {
		var jobs []*domain.Job
		for _, n := range hours {
			jobs = append(jobs, byHour[n]...)
		}
		return newestFirst(jobs)
	}

	// A span of times, paged a job at a time, two, and whole.
	span := engine.ListFilter{IDFrom: timeID(hour(-2)), IDBelow: timeID(hour(0))}
	for _, limit := range []int32{1, 2, 100} {
		span.Limit = limit
		require.Equal(t, at(-1, -2), listAll(t, f, tenantA, span), "limit %d", limit)
	}
	require.Equal(t, at(0, -1), listAll(t, f, tenantA, engine.ListFilter{IDFrom: timeID(hour(-1)), Limit: 2}), "from alone")
	require.Equal(t, at(-3), listAll(t, f, tenantA, engine.ListFilter{IDBelow: timeID(hour(-2)), Limit: 2}), "below alone")
	require.Equal(t, at(0, -1, -2, -3), listAll(t, f, tenantA, engine.ListFilter{IDFrom: timeID(hour(-4)), IDBelow: timeID(hour(1)), Limit: 5}), "a span holding them all")

	// An id's prefix (a range up to the next prefix): its time's, which the
	// jobs of its hour share, down to the whole id.
	one := byHour[-2][1]
	prefix := func(n int) engine.ListFilter {
		p := one.ID[:n]
		return engine.ListFilter{IDFrom: p, IDBelow: p[:n-1] + string(p[n-1]+1), Limit: 1}
	}
	require.Equal(t, at(-2), listAll(t, f, tenantA, prefix(9)))
	require.Equal(t, at(-2), listAll(t, f, tenantA, prefix(10)))
	require.Equal(t, []string{one.ID}, listAll(t, f, tenantA, prefix(26)))

	// Empty ranges answer no job and no cursor.
	for name, lf := range map[string]engine.ListFilter{
		"from past below":  {IDFrom: timeID(hour(0)), IDBelow: timeID(hour(-2))},
		"from at below":    {IDFrom: timeID(hour(-1)), IDBelow: timeID(hour(-1))},
		"after the last":   {IDFrom: timeID(hour(1))},
		"before the first": {IDBelow: timeID(hour(-3))},
	} {
		lf.Limit = 5
		page, cur, err := f.Store.List(ctx, tenantA, lf)
		require.NoError(t, err, name)
		require.Empty(t, page, name)
		require.Empty(t, cur, name)
	}

	// With a state filter.
	cancelled := byHour[-1][2]
	loaded, n := load(t, f, tenantA, cancelled.ID)
	_, err := loaded.Cancel(f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, loaded, n))
	require.Equal(t, []string{cancelled.ID}, listAll(t, f, tenantA, engine.ListFilter{State: domain.JobCancelled, IDFrom: timeID(hour(-2)), IDBelow: timeID(hour(0)), Limit: 1}))
	require.Empty(t, listAll(t, f, tenantA, engine.ListFilter{State: domain.JobCancelled, IDFrom: timeID(hour(0)), Limit: 1}))
}

func storeKeys(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	key := "secret-" + ulid.Make().String()
	f.AddKey(t, "tenant-k", key)
	f.AddKey(t, "tenant-k", key+"-2")
	f.AddKey(t, "tenant-j", key+"-3")
	for k, want := range map[string]string{key: "tenant-k", key + "-2": "tenant-k", key + "-3": "tenant-j"} {
		got, err := f.Store.TenantForKey(ctx, k)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, k := range []string{"unknown-" + ulid.Make().String(), "", key + "x", strings.ToUpper(key)} {
		_, err := f.Store.TenantForKey(ctx, k)
		require.ErrorIs(t, err, domain.ErrUnauthorized, "key %q", k)
	}
}

func storeStats(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	now := f.Now
	record := func(tenant string, state domain.JobState, blocked, queued int64, at time.Time) {
		d := engine.OutcomeDelta(state)
		d.Blocked, d.Queued = blocked, queued
		require.NoError(t, f.Store.RecordStats(ctx, tenant, d, at))
	}
	for _, o := range []struct {
		state           domain.JobState
		blocked, queued int64
	}{
		{domain.JobCompleted, 0, 0},
		{domain.JobCompleted, 0, 0},
		{domain.JobCompleted, 0, 0},
		{domain.JobFailed, 0, 0},
		{domain.JobCancelled, 0, 0},
		{domain.JobWaiting, +1, 0},
		{domain.JobWaiting, +1, 0},
		{domain.JobQueued, -1, 0},
		{domain.JobQueued, 0, +3},
		{domain.JobRunning, 0, -1},
	} {
		record(tenantA, o.state, o.blocked, o.queued, now)
	}
	// Within the last 24 hours counts; older does not (the blocked gauge
	// is no window's).
	record(tenantA, domain.JobFailed, 0, 0, now.Add(-23*time.Hour))
	record(tenantA, domain.JobCompleted, 1, 5, now.Add(-25*time.Hour))
	record(tenantA, domain.JobRunning, 0, 0, now)
	record(tenantB, domain.JobCompleted, 1, 0, now)

	st, err := f.Store.Stats(ctx, tenantA, now)
	require.NoError(t, err)
	require.Equal(t, engine.Stats{Completed: 3, Failed: 2, Cancelled: 1, Blocked: 2, Queued: 2}, st)
	st, err = f.Store.Stats(ctx, tenantB, now)
	require.NoError(t, err)
	require.Equal(t, engine.Stats{Completed: 1, Blocked: 1}, st)
	st, err = f.Store.Stats(ctx, "tenant-none", now)
	require.NoError(t, err)
	require.Equal(t, engine.Stats{}, st)
	// A day later only the gauge is left.
	st, err = f.Store.Stats(ctx, tenantA, now.Add(25*time.Hour))
	require.NoError(t, err)
	require.Equal(t, engine.Stats{Blocked: 2}, st)
}

// longSpec is a job of n pass steps in a line, each with a retry policy,
// so its document is far past what one small item holds.
func longSpec(n int) string {
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"step-%04d","action":{"type":"pass"},"retry":{"max_attempts":3}}`, i)
	}
	return `{"payload":{"batch":"nightly"},"steps":[` + strings.Join(steps, ",") + `]}`
}

// sameJob requires two jobs to be the same job as the API shows it (the
// store's note of how it keeps one, domain.Job.Stored, aside).
func sameJob(t *testing.T, want, got *domain.Job, msgAndArgs ...any) {
	t.Helper()
	w, err := json.Marshal(want)
	require.NoError(t, err)
	g, err := json.Marshal(got)
	require.NoError(t, err)
	if !bytes.Equal(w, g) { // the same job encodes the same; JSONEq's diff says where not
		require.JSONEq(t, string(w), string(g), msgAndArgs...)
	}
}

// storeLongJob runs a long job through the store a transition at a time,
// reading it back after each: every read is the job as saved, from its
// first step to its last event.
func storeLongJob(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	n := min(100, domain.MaxSteps) // past 24 parts: the header folds some into an index part
	j := create(t, f, tenantA, longSpec(n), f.Now)
	now := f.Now
	loaded, events := load(t, f, tenantA, j.ID)
	for i := range n {
		id := fmt.Sprintf("step-%04d", i)
		now = now.Add(time.Second)
		l, err := loaded.Lease(id, domain.LeaseRequest{Nonce: fmt.Sprint(i), Duration: time.Minute}, now)
		require.NoError(t, err, id)
		require.NoError(t, f.Store.Save(ctx, loaded, events), id)
		// The saved job goes on without a read, as a chain does.
		events = len(loaded.Events)
		_, err = loaded.Complete(id, l.ID, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), now)
		require.NoError(t, err, id)
		require.NoError(t, f.Store.Save(ctx, loaded, events), id)
		events = len(loaded.Events)
		stored, err := f.Store.Get(ctx, tenantA, j.ID)
		require.NoError(t, err, id)
		sameJob(t, loaded, stored, "after %s", id)
	}
	done, _ := load(t, f, tenantA, j.ID)
	require.Equal(t, domain.JobCompleted, done.State)
	require.Len(t, done.Steps, n)
	require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, n-1), string(done.Steps[n-1].Output))
	require.NoError(t, domain.CheckReplay(done))
	// A listing of whole jobs answers it whole too.
	page, _, err := f.Store.List(ctx, tenantA, engine.ListFilter{Limit: 10, Jobs: true})
	require.NoError(t, err)
	var listed *domain.Job
	for _, js := range page {
		if js.ID == j.ID {
			listed = js.Job
		}
	}
	require.NotNil(t, listed, "the listing holds the job")
	sameJob(t, done, listed)
}

// storeLongJobRace: of writers racing on one version of a long job, each
// changing a different step, one wins and the store holds its change
// alone, whatever each wrote besides its job's own item.
func storeLongJobRace(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	const n, racers = 80, 6
	steps := make([]string, n)
	for i := range steps {
		steps[i] = fmt.Sprintf(`{"id":"s%03d","action":{"type":"worker"},"retry":{"max_attempts":2}}`, i)
	}
	j := create(t, f, tenantA, `{"steps":[`+strings.Join(steps, ",")+`]}`, f.Now)
	// Fan the steps out (each depends on none): every step is leasable.
	for round := range 4 {
		copies := make([]*domain.Job, racers)
		loaded := make([]int, racers)
		for i := range copies {
			copies[i], loaded[i] = load(t, f, tenantA, j.ID)
			// Each racer changes many steps, so each write seals.
			for k := range 10 {
				s := copies[i].Steps[(round*racers*10+i*10+k)%n]
				s.Redispatches += i + 1
			}
		}
		winner := saveRace(t, f, copies, loaded, round)
		stored, err := f.Store.Get(ctx, tenantA, j.ID)
		require.NoError(t, err)
		sameJob(t, copies[winner], stored, "round %d: the store holds the winner's change", round)
	}
}

// storeUsage: each write of a job saves what it cost with it (its own
// units included), each read is spent and saved by the next write, and a
// lost race's units are spent too; the usage reads back as saved, and a
// listing of whole jobs answers it as well.
func storeUsage(t *testing.T, f StoreFixture) {
	ctx := context.Background()
	j := create(t, f, tenantA, workerSpec, f.Now)
	require.GreaterOrEqual(t, j.Usage.WriteUnits, 1.0, "the create's write")
	created := j.Usage.WriteUnits

	loaded, n := load(t, f, tenantA, j.ID)
	require.Equal(t, j.Usage, loaded.Usage, "the usage reads back as written")
	require.GreaterOrEqual(t, loaded.Spent.ReadUnits, 0.5, "the read is spent")
	other, _ := load(t, f, tenantA, j.ID)

	loaded.Spend(domain.Usage{SQSRequests: 0.5, APIRequests: 1})
	_, err := loaded.Lease("s", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n1", Duration: time.Minute}, f.Now)
	require.NoError(t, err)
	require.NoError(t, f.Store.Save(ctx, loaded, n))
	require.True(t, loaded.Spent.Zero(), "a saved write settles what was spent")
	require.GreaterOrEqual(t, loaded.Usage.WriteUnits, created+1, "and adds its own units")
	require.Equal(t, 0.5, loaded.Usage.SQSRequests)
	require.Equal(t, 1.0, loaded.Usage.APIRequests)

	_, err = other.Lease("s", domain.LeaseRequest{Worker: "w2", ViaWorker: true, Nonce: "n2", Duration: time.Minute}, f.Now)
	require.NoError(t, err)
	read := other.Spent.ReadUnits
	require.ErrorIs(t, f.Store.Save(ctx, other, n), domain.ErrVersionConflict)
	require.Equal(t, read, other.Spent.ReadUnits)
	require.GreaterOrEqual(t, other.Spent.WriteUnits, 1.0, "a write refused by its condition is billed, and spent")

	stored, _ := load(t, f, tenantA, j.ID)
	require.Equal(t, loaded.Usage, stored.Usage, "the winner's usage is stored")
	page, _, err := f.Store.List(ctx, tenantA, engine.ListFilter{Limit: 10, Jobs: true})
	require.NoError(t, err)
	for _, js := range page {
		if js.ID == j.ID {
			require.Equal(t, loaded.Usage, js.Job.Usage, "a listing answers the usage too")
		}
	}
}
