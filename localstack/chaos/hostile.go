package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// hostile is the hostile tenant of one run. It works beside the run's
// jobs, faults and all: it claims the colliding queue names over and over
// until the run stops its workers, and meanwhile submits its flood, works
// its own queue, claims unknown queue names, sends its poison bodies and
// reaches for the run's jobs. Once the run's jobs are done and the faults
// paused, it sends every poison body once more (the first answer counts),
// reaches for every job of the run, and reads both tenants' health around
// submitting its parked jobs.
type hostile struct {
	plan   HostilePlan
	c      *client // as the hostile tenant
	chaos  *client // as the run's tenant, for its health
	raw    *store.Store
	sqs    queue.API // without faults: counts the queues
	names  *queue.Queue
	prefix string
	runIDs func() []string // the run's job ids answered so far
	faults *Faults
	// progress says when its flood finished, or what it waits for
	progress func(format string, args ...any)

	colliders sync.WaitGroup // claims on the colliding names, until the run stops its workers
	flood     sync.WaitGroup // the flood, its worker and the rest of the run-phase work

	mu          sync.Mutex
	claims      []claimRecord
	subs        []*submission // Flood then Parked, by JobPlan.N
	poison      []poisonRecord
	poisonLease string // a lease of the "poisoned" step, once claimed
	poisonSent  bool
	isolation   []isoRecord
	bigFail     *bigFailRecord
	finished    map[string]bool // flood jobs seen terminal within the bound
	health      healthRecord
	longPolls   *longPollRecord // longpoll.go
	notes       []string
}

// The kinds of claim the hostile tenant makes.
const (
	claimColliding = "colliding"
	claimUnknown   = "unknown"
	claimOwn       = "own"
)

// claimRecord is one claim and what it answered.
type claimRecord struct {
	Queue, Kind string
	Status      int      // 0 for a transport error
	Jobs        []string // the job id of each lease handed out
	Answer      string   // a non-2xx answer's body, cut short
}

// poisonRecord is one poison body sent, again after each 5xx or transport
// error unless Strict (sent with faults paused: the first answer counts).
type poisonRecord struct {
	Name     string
	Strict   bool
	Statuses []int
	Answer   string // the last answer's body, cut short
}

// isoRecord is one request of the hostile tenant on a job of the run's.
type isoRecord struct {
	What     string
	Strict   bool
	Statuses []int
}

// bigFailRecord is the failure of the "bigfail" step with BigFailBytes.
type bigFailRecord struct {
	Statuses    []int
	AnswerState domain.JobState // job_state in the 2xx answer
	Stored      domain.JobState // the job read right after that answer
	AttemptEnd  bool            // the attempt failed had ended (and no attempt is running)
	Message     string          // the failed attempt's stored message
	Err         string
}

// healthRecord is both tenants' health read around the parked jobs'
// submit, with faults paused and the run's jobs done.
type healthRecord struct {
	Read                        bool
	ChaosBefore, ChaosAfter     int // the run's tenant's backlog
	HostileBefore, HostileAfter int
	ChaosQueued                 int // the run's jobs QUEUED in the table
	Parked                      int // parked jobs answered 2xx
	// WriteFaults counts the faults the run injected on DynamoDB writes:
	// each may lose a change of the health counters (the engine counts a
	// change in memory once its write is answered, and flushes the counts
	// as advisory), so with any the backlog may be off by a few.
	WriteFaults int
	Err         string
}

func newHostile(r *run, plan HostilePlan) *hostile {
	prefix := r.st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]
	return &hostile{
		plan:  plan,
		c:     &client{base: r.st.URL, key: HostileKey, hc: &http.Client{Timeout: 30 * time.Second}},
		chaos: r.c,
		raw:   r.raw, sqs: r.st.SQS, prefix: prefix,
		names:  queue.New(nil, queue.Config{WorkerQueuePrefix: prefix}),
		subs:   make([]*submission, len(plan.Flood)+len(plan.Parked)),
		faults: r.f,
		progress: func(format string, args ...any) {
			fmt.Fprintf(r.cfg.Progress, "seed %d: hostile: %s\n", r.cfg.Seed, fmt.Sprintf(format, args...))
		},
		finished: map[string]bool{},
		runIDs: func() []string {
			r.mu.Lock()
			defer r.mu.Unlock()
			var ids []string
			for _, s := range r.subs {
				if s != nil && s.id != "" {
					ids = append(ids, s.id)
				}
			}
			return ids
		},
	}
}

func (h *hostile) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.notes) < 20 {
		h.notes = append(h.notes, fmt.Sprintf(format, args...))
	}
}

// start sets the hostile tenant going: the colliding claims until work
// ends, the rest until it is done or the deadline passes.
func (h *hostile) start(work, ctx context.Context, deadline time.Time) {
	for _, name := range CollidingQueues() {
		h.colliders.Go(func() { h.collide(work, name) })
	}
	h.flood.Go(func() { h.runPhase(ctx, deadline) })
}

// collide claims a colliding name over and over, with waits of 0 and 1 s
// in turn; it submits nothing there, so it must be handed nothing.
func (h *hostile) collide(ctx context.Context, name string) {
	for i := 0; ctx.Err() == nil; i++ {
		h.claim(ctx, name, claimColliding, 10, i%2)
	}
}

// claim makes one claim and records it.
func (h *hostile) claim(ctx context.Context, name, kind string, most, wait int) []engine.ClaimedLease {
	body, _ := json.Marshal(map[string]any{"queue": name, "max": most, "wait_seconds": wait, "worker": "hostile-" + kind})
	a := h.c.once(ctx, http.MethodPost, "/v1/claim", body)
	if ctx.Err() != nil && a.err != nil {
		return nil // the run stopped it: not a claim
	}
	rec := claimRecord{Queue: name, Kind: kind, Status: a.status}
	var ca claimAnswer
	switch {
	case a.ok() && json.Unmarshal(a.body, &ca) == nil:
		for _, l := range ca.Leases {
			rec.Jobs = append(rec.Jobs, l.JobID)
		}
	case a.ok():
		rec.Answer = "unreadable: " + truncate(a.body, 160)
	default:
		rec.Answer = truncate(a.body, 160)
		if a.err != nil {
			rec.Answer = a.err.Error()
		}
	}
	h.mu.Lock()
	h.claims = append(h.claims, rec)
	h.mu.Unlock()
	if !a.ok() {
		sleep(ctx, 100*time.Millisecond) // a crashed claim: do not spin
	}
	return ca.Leases
}

// runPhase is the hostile tenant's work while the run's jobs go: its own
// worker jobs (and a worker for them), the pass flood, the unknown names,
// the poison bodies, and reaching for the run's jobs.
func (h *hostile) runPhase(ctx context.Context, deadline time.Time) {
	own := 0
	for _, p := range h.plan.Flood {
		if p.Kind != "pass" {
			own++
		}
	}
	for _, p := range h.plan.Flood[:own] {
		h.submit(ctx, p, deadline)
	}
	var worker sync.WaitGroup
	worker.Go(func() { h.work(ctx, deadline) })
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 2 {
		wg.Go(func() {
			for {
				i := own + int(next.Add(1)) - 1
				if i >= len(h.plan.Flood) || ctx.Err() != nil {
					return
				}
				h.submit(ctx, h.plan.Flood[i], deadline)
			}
		})
	}
	for _, name := range h.plan.Unknown {
		h.claim(ctx, name, claimUnknown, 10, 0)
	}
	for _, p := range h.plan.Poison {
		if !p.Complete {
			h.sendPoison(ctx, p, "", false, deadline)
		}
	}
	wg.Wait()
	// The run's jobs submitted so far: a few of each request a tenant could
	// make on a job of its own, again after a 5xx.
	ids := h.runIDs()
	for i, id := range ids[:min(len(ids), 5)] {
		h.reach(ctx, http.MethodGet, "/v1/jobs/"+id, false, deadline)
		if i < 2 {
			h.reach(ctx, http.MethodGet, "/v1/jobs/"+id+"/events", false, deadline)
			h.reach(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel", false, deadline)
		}
	}
	worker.Wait()
}

// submit submits one of its jobs as the run's client does: with its
// Idempotency-Key, again on a 5xx or a transport error.
func (h *hostile) submit(ctx context.Context, p JobPlan, deadline time.Time) {
	s := &submission{plan: p, ids: map[string]int{}}
	s.send(ctx, h.c, deadline)
	h.mu.Lock()
	h.subs[p.N] = s
	h.mu.Unlock()
}

// ownJobs answers the ids of its flood's worker jobs answered so far.
func (h *hostile) ownJobs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for i, p := range h.plan.Flood {
		if p.Kind != "pass" && h.subs[i] != nil && h.subs[i].id != "" {
			ids = append(ids, h.subs[i].id)
		}
	}
	return ids
}

// work claims its own queue until each of its worker jobs is finished
// (read from the table) or the deadline passes.
func (h *hostile) work(ctx context.Context, deadline time.Time) {
	ids := h.ownJobs()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		done := 0
		for _, id := range ids {
			if j, err := h.raw.Get(ctx, HostileTenant, id); err == nil && j.State.Terminal() {
				done++
			}
		}
		if done == len(ids) {
			return
		}
		for _, l := range h.claim(ctx, HostileOwnQueue, claimOwn, 5, 1) {
			h.handle(ctx, l, deadline)
		}
	}
}

// handle treats one lease of its own queue as its step id says. A lease
// lost on the way (409) is let go: the step is claimed again.
func (h *hostile) handle(ctx context.Context, l engine.ClaimedLease, deadline time.Time) {
	path := "/v1/leases/" + l.LeaseID
	switch l.StepID {
	case stepBigFail:
		h.failBig(ctx, l, deadline)
		return
	case stepPoisoned:
		h.mu.Lock()
		first := !h.poisonSent
		h.poisonSent, h.poisonLease = true, l.LeaseID
		h.mu.Unlock()
		if first {
			for _, p := range h.plan.Poison {
				if p.Complete {
					h.sendPoison(ctx, p, l.LeaseID, false, deadline)
				}
			}
		}
	}
	out, _ := json.Marshal(map[string]any{"output": map[string]any{"hostile": true, "step": l.StepID, "attempt": l.Attempt}})
	as := h.c.retry(ctx, deadline, http.MethodPost, path+"/complete", out)
	if a := as[len(as)-1]; !a.ok() && a.status != http.StatusConflict && !a.retryable() {
		h.note("complete of lease %s answered %d: %s", l.LeaseID, a.status, truncate(a.body, 160))
	}
}

// failBig fails the "bigfail" step as fatal with a BigFailBytes message:
// the message is cut to domain.MaxErrorMessageBytes and the attempt, and
// with it the job, must end at once.
func (h *hostile) failBig(ctx context.Context, l engine.ClaimedLease, deadline time.Time) {
	rec := &bigFailRecord{}
	as := h.c.retry(ctx, deadline, http.MethodPost, "/v1/leases/"+l.LeaseID+"/fail", h.plan.BigFail)
	for _, a := range as {
		rec.Statuses = append(rec.Statuses, a.status)
	}
	a := as[len(as)-1]
	j, err := h.raw.Get(ctx, HostileTenant, l.JobID)
	switch {
	case a.ok():
		var res engine.OutcomeResult
		if err := json.Unmarshal(a.body, &res); err != nil {
			rec.Err = "answer unreadable: " + err.Error()
		}
		rec.AnswerState = res.JobState
	case a.status == http.StatusConflict && len(as) > 1 && err == nil && failedWith(j, l.Attempt):
		// A first send answered 5xx had been applied, and its retry heard
		// 409: the job ended with it all the same.
		rec.AnswerState = j.State
		h.note("the fail of lease %s was applied by a send answered %v, then answered 409", l.LeaseID, rec.Statuses)
	case a.status == http.StatusConflict:
		return // the lease was lost before the call: the step comes round again
	default:
		h.mu.Lock()
		if h.bigFail == nil {
			rec.Err = fmt.Sprintf("answered %d: %s", a.status, truncate(a.body, 200))
			h.bigFail = rec
		}
		h.mu.Unlock()
		return
	}
	if err != nil {
		rec.Err = err.Error()
	} else {
		rec.Stored = j.State
		if s, _, err := j.Step(stepBigFail); err == nil && l.Attempt >= 1 && l.Attempt <= len(s.Attempts) {
			at := s.Attempts[l.Attempt-1]
			rec.AttemptEnd = at.EndedAt != nil && at.State == domain.AttemptFailed && s.Lease == nil
			if at.Error != nil {
				rec.Message = at.Error.Message
			}
		}
	}
	h.mu.Lock()
	h.bigFail = rec
	h.mu.Unlock()
}

// failedWith reports whether the bigfail step's attempt n failed with a
// cut message, as the big fail leaves it.
func failedWith(j *domain.Job, n int) bool {
	s, _, err := j.Step(stepBigFail)
	if err != nil || n < 1 || n > len(s.Attempts) {
		return false
	}
	a := s.Attempts[n-1]
	return a.Error != nil && strings.Contains(a.Error.Message, "truncated from")
}

// sendPoison sends a poison body, a submit or a complete under lease. In
// the run phase a 5xx or transport error (a fault before the body was
// read) sends it again; strict, the first answer counts.
func (h *hostile) sendPoison(ctx context.Context, p Poison, lease string, strict bool, deadline time.Time) {
	path := "/v1/jobs"
	if p.Complete {
		if lease == "" {
			lease = "no-lease" // the body is read before the lease
		}
		path = "/v1/leases/" + lease + "/complete"
	}
	var as []answer
	if strict {
		as = []answer{h.c.once(ctx, http.MethodPost, path, p.Body)}
	} else {
		as = h.c.retry(ctx, deadline, http.MethodPost, path, p.Body)
	}
	rec := poisonRecord{Name: p.Name, Strict: strict}
	for _, a := range as {
		rec.Statuses = append(rec.Statuses, a.status)
	}
	last := as[len(as)-1]
	rec.Answer = truncate(last.body, 200)
	if last.err != nil {
		rec.Answer = last.err.Error()
	}
	h.mu.Lock()
	h.poison = append(h.poison, rec)
	h.mu.Unlock()
}

// reach makes one request on a job of the run's tenant: it must answer
// 404, as a missing job does.
func (h *hostile) reach(ctx context.Context, method, path string, strict bool, deadline time.Time) {
	var as []answer
	if strict {
		as = []answer{h.c.once(ctx, method, path, nil)}
	} else {
		as = h.c.retry(ctx, deadline, method, path, nil)
	}
	rec := isoRecord{What: method + " " + path, Strict: strict}
	for _, a := range as {
		rec.Statuses = append(rec.Statuses, a.status)
	}
	h.mu.Lock()
	h.isolation = append(h.isolation, rec)
	h.mu.Unlock()
}

// await waits for the run-phase work, then polls the table until each of
// its flood jobs answered is finished or the deadline passes.
func (h *hostile) await(ctx context.Context, deadline time.Time) {
	started := time.Now()
	h.flood.Wait()
	lastNote := time.Now()
	for {
		h.mu.Lock()
		var ids []string
		for _, s := range h.subs[:len(h.plan.Flood)] {
			if s != nil && s.id != "" && !h.finished[s.id] {
				ids = append(ids, s.id)
			}
		}
		h.mu.Unlock()
		for _, id := range ids {
			if j, err := h.raw.Get(ctx, HostileTenant, id); err == nil && j.State.Terminal() {
				h.mu.Lock()
				h.finished[id] = true
				h.mu.Unlock()
			}
		}
		if len(ids) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			h.mu.Lock()
			n := len(h.finished)
			h.mu.Unlock()
			h.progress("%d of %d flood jobs finished, %s after the run's", n, len(h.plan.Flood), time.Since(started).Round(time.Millisecond))
			return
		}
		if time.Since(lastNote) >= 5*time.Second {
			lastNote = time.Now()
			h.progress("waiting for %d flood jobs, e.g. %s", len(ids), ids[0])
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// endPhase runs with faults paused, once the run's jobs are done: every
// poison body again and every job of the run reached for, each first
// answer counting; then both tenants' health read before and after the
// parked jobs are submitted.
func (h *hostile) endPhase(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	h.floodLongPolls(ctx)
	h.mu.Lock()
	lease := h.poisonLease
	h.mu.Unlock()
	for _, p := range h.plan.Poison {
		h.sendPoison(ctx, p, lease, true, deadline)
	}
	for i, id := range h.runIDs() {
		h.reach(ctx, http.MethodGet, "/v1/jobs/"+id, true, deadline)
		if i < 3 {
			h.reach(ctx, http.MethodGet, "/v1/jobs/"+id+"/events", true, deadline)
			h.reach(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel", true, deadline)
		}
	}

	rec := healthRecord{Read: true}
	for _, d := range h.faults.Trace() {
		switch d.Call {
		case "DynamoDB.PutItem", "DynamoDB.TransactWriteItems", "DynamoDB.UpdateItem":
			rec.WriteFaults++
		}
	}
	defer func() {
		h.mu.Lock()
		h.health = rec
		h.mu.Unlock()
	}()
	queued, _, err := h.raw.List(ctx, Tenant, engine.ListFilter{State: domain.JobQueued, Limit: 100})
	if err != nil {
		rec.Err = "list the run's queued jobs: " + err.Error()
		return
	}
	rec.ChaosQueued = len(queued)
	if rec.ChaosBefore, err = backlog(ctx, h.chaos, deadline); err == nil {
		rec.HostileBefore, err = backlog(ctx, h.c, deadline)
	}
	if err != nil {
		rec.Err = err.Error()
		return
	}
	for _, p := range h.plan.Parked {
		h.submit(ctx, p, deadline)
		h.mu.Lock()
		if s := h.subs[p.N]; s.id != "" {
			rec.Parked++
		}
		h.mu.Unlock()
	}
	if rec.HostileAfter, err = backlog(ctx, h.c, deadline); err == nil {
		rec.ChaosAfter, err = backlog(ctx, h.chaos, deadline)
	}
	if err != nil {
		rec.Err = err.Error()
	}
}

// backlog reads a tenant's GET /v1/health backlog.
func backlog(ctx context.Context, c *client, deadline time.Time) (int, error) {
	as := c.retry(ctx, deadline, http.MethodGet, "/v1/health", nil)
	a := as[len(as)-1]
	if !a.ok() {
		return 0, fmt.Errorf("health answered %d: %s", a.status, truncate(a.body, 160))
	}
	var hh engine.Health
	if err := json.Unmarshal(a.body, &hh); err != nil {
		return 0, fmt.Errorf("health unreadable: %w", err)
	}
	return hh.Backlog, nil
}

// workerQueues lists the worker queues under the stack's prefix, by name.
func (h *hostile) workerQueues(ctx context.Context) ([]string, error) {
	var names []string
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(h.prefix), MaxResults: aws.Int32(1000)}
	for range 100 {
		out, err := h.sqs.ListQueues(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, u := range out.QueueUrls {
			names = append(names, queueNameOf(u))
		}
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	sort.Strings(names)
	return names, nil
}

// queueNameOf answers the name at the end of a queue URL.
func queueNameOf(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}
