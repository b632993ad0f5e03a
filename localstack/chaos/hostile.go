package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
// paused, it sends every poison body once more (the first answer counts)
// and reaches for every job of the run. Every request whose answer is
// known in advance is an exchange of the check it counts in. (What it
// would meet with the faults paused anyway, the long-poll bound, each
// tenant's health, a huge failure message, is devstack's hostile_test.go
// and longpoll_e2e_test.go.)
type hostile struct {
	plan   HostilePlan
	c      *client // as the hostile tenant
	raw    *store.Store
	sqs    queue.API // without faults: lists the queues
	names  *queue.Queue
	prefix string
	runIDs func() []string // the run's job ids answered so far
	// progress says when its flood finished, or what it waits for
	progress func(format string, args ...any)

	colliders sync.WaitGroup // claims on the colliding names, until the run stops its workers
	flood     sync.WaitGroup // the flood, its worker and the rest of the run-phase work

	mu          sync.Mutex
	claims      []claimRecord
	exchanges   map[string][]exchange // by the check they count in
	subs        []*submission         // by JobPlan.N
	poisonLease string                // a lease of the "poisoned" step, once claimed
	poisonSent  bool
	finished    map[string]bool // flood jobs seen terminal within the bound
	notes       []string
}

// The kinds of claim the hostile tenant makes, and the checks its
// exchanges count in.
const (
	claimColliding = "colliding"
	claimUnknown   = "unknown"
	claimOwn       = "own"

	checkNothing  = "claims on colliding or unknown names hand out nothing"
	checkPoison   = "every poison body answers 400"
	checkIsolated = "the run's jobs answer it 404"
)

// claimRecord is one claim and the job of each lease it handed out.
type claimRecord struct {
	Queue, Kind string
	Status      int // 0 for a transport error
	Jobs        []string
}

func newHostile(r *run, plan HostilePlan) *hostile {
	prefix := r.st.Resources.Env["STEPFLOW_WORKER_QUEUE_PREFIX"]
	return &hostile{
		plan: plan,
		c:    &client{base: r.st.URL, key: HostileKey, hc: &http.Client{Timeout: 30 * time.Second}},
		raw:  r.raw, sqs: r.st.SQS, prefix: prefix,
		names:     queue.New(nil, queue.Config{WorkerQueuePrefix: prefix}),
		subs:      make([]*submission, len(plan.Flood)),
		exchanges: map[string][]exchange{},
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

func (h *hostile) record(check string, x exchange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exchanges[check] = append(h.exchanges[check], x)
}

// send makes a request whose answer must be want: once, the first answer
// counting (strict), or again after each 5xx or no answer.
func (h *hostile) send(ctx context.Context, check, what, method, path string, body []byte, want int, strict bool, deadline time.Time) {
	as := []answer{}
	if strict {
		as = append(as, h.c.once(ctx, method, path, body))
	} else {
		as = h.c.retry(ctx, deadline, method, path, body)
	}
	h.record(check, exchange{what: what, statuses: statuses(as), want: want, strict: strict})
}

// start sets the hostile tenant going: the colliding claims until work
// ends, the rest until it is done or the deadline passes.
func (h *hostile) start(work, ctx context.Context, deadline time.Time) {
	for _, name := range CollidingQueues() {
		// Waits of 0 and 1 s in turn; nothing is submitted there, so it
		// must be handed nothing.
		h.colliders.Go(func() {
			for i := 0; work.Err() == nil; i++ {
				h.claim(work, name, claimColliding, 10, i%2)
			}
		})
	}
	h.flood.Go(func() { h.runPhase(ctx, deadline) })
}

// claim makes one claim and records it.
func (h *hostile) claim(ctx context.Context, name, kind string, most, wait int) []engine.ClaimedLease {
	body, _ := json.Marshal(map[string]any{"queue": name, "max": most, "wait_seconds": wait, "worker": "hostile-" + kind})
	a := h.c.once(ctx, http.MethodPost, "/v1/claim", body)
	if ctx.Err() != nil && a.err != nil {
		return nil // the run stopped it: not a claim
	}
	rec := claimRecord{Queue: name, Kind: kind, Status: a.status}
	x := exchange{what: fmt.Sprintf("claim on %s queue %q", kind, name), statuses: []int{a.status}, want: http.StatusOK, once: true}
	var ca claimAnswer
	if a.ok() && json.Unmarshal(a.body, &ca) != nil {
		x.bad = "unreadable: " + truncate(a.body, 160)
	}
	for _, l := range ca.Leases {
		rec.Jobs = append(rec.Jobs, l.JobID)
	}
	h.mu.Lock()
	h.claims = append(h.claims, rec)
	h.mu.Unlock()
	if kind != claimOwn {
		if len(rec.Jobs) > 0 {
			x.bad = fmt.Sprintf("handed out leases for jobs %v", rec.Jobs)
		}
		h.record(checkNothing, x)
	}
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
			h.submit(ctx, p, deadline)
		}
	}
	var worker sync.WaitGroup
	worker.Go(func() { h.work(ctx, deadline) })
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 2 {
		wg.Go(func() {
			for i := own + int(next.Add(1)) - 1; i < len(h.plan.Flood) && ctx.Err() == nil; i = own + int(next.Add(1)) - 1 {
				h.submit(ctx, h.plan.Flood[i], deadline)
			}
		})
	}
	for _, name := range h.plan.Unknown {
		h.claim(ctx, name, claimUnknown, 10, 0)
	}
	for _, p := range h.plan.Poison {
		if !p.Complete {
			h.send(ctx, checkPoison, p.Name+" (during the run)", http.MethodPost, "/v1/jobs", p.Body, http.StatusBadRequest, false, deadline)
		}
	}
	wg.Wait()
	// The run's jobs submitted so far: a few of each request a tenant could
	// make on a job of its own.
	h.reach(ctx, h.runIDs(), 5, 2, false, deadline)
	worker.Wait()
}

// reach makes requests on the run's jobs, as if they were its own: each
// must answer 404, as a missing job does.
func (h *hostile) reach(ctx context.Context, ids []string, gets, more int, strict bool, deadline time.Time) {
	for i, id := range ids[:min(len(ids), gets)] {
		h.send(ctx, checkIsolated, "GET "+id, http.MethodGet, "/v1/jobs/"+id, nil, http.StatusNotFound, strict, deadline)
		if i < more {
			h.send(ctx, checkIsolated, "GET events of "+id, http.MethodGet, "/v1/jobs/"+id+"/events", nil, http.StatusNotFound, strict, deadline)
			h.send(ctx, checkIsolated, "cancel "+id, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil, http.StatusNotFound, strict, deadline)
		}
	}
}

// submit submits one of its jobs as the run's client does.
func (h *hostile) submit(ctx context.Context, p JobPlan, deadline time.Time) {
	s := &submission{plan: p, ids: map[string]int{}}
	s.send(ctx, h.c, deadline)
	h.mu.Lock()
	h.subs[p.N] = s
	h.mu.Unlock()
}

// work claims its own queue until each of its worker jobs is finished
// (read from the table) or the deadline passes.
func (h *hostile) work(ctx context.Context, deadline time.Time) {
	var ids []string
	h.mu.Lock()
	for i, p := range h.plan.Flood {
		if p.Kind != "pass" && h.subs[i] != nil && h.subs[i].id != "" {
			ids = append(ids, h.subs[i].id)
		}
	}
	h.mu.Unlock()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if !slices.ContainsFunc(ids, func(id string) bool {
			j, err := h.raw.Get(ctx, HostileTenant, id)
			return err != nil || !j.State.Terminal()
		}) {
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
	if l.StepID == stepPoisoned {
		h.mu.Lock()
		first := !h.poisonSent
		h.poisonSent, h.poisonLease = true, l.LeaseID
		h.mu.Unlock()
		for _, p := range h.plan.Poison {
			if first && p.Complete {
				h.send(ctx, checkPoison, p.Name+" (during the run)", http.MethodPost, path+"/complete", p.Body, http.StatusBadRequest, false, deadline)
			}
		}
	}
	out, _ := json.Marshal(map[string]any{"output": map[string]any{"hostile": true, "step": l.StepID, "attempt": l.Attempt}})
	as := h.c.retry(ctx, deadline, http.MethodPost, path+"/complete", out)
	if a := as[len(as)-1]; !a.ok() && a.status != http.StatusConflict && !a.retryable() {
		h.note("complete of lease %s answered %d: %s", l.LeaseID, a.status, truncate(a.body, 160))
	}
}

// await waits for the run-phase work, then polls the table until each of
// its flood jobs answered is finished or the deadline passes.
func (h *hostile) await(ctx context.Context, deadline time.Time) {
	started := time.Now()
	h.flood.Wait()
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
			h.progress("flood finished or given up %s after the run's", time.Since(started).Round(time.Millisecond))
			return
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// endPhase runs with faults paused, once the run's jobs are done.
func (h *hostile) endPhase(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	h.mu.Lock()
	lease := h.poisonLease
	h.mu.Unlock()
	if lease == "" {
		lease = "no-lease" // the body is read before the lease
	}
	for _, p := range h.plan.Poison {
		path := "/v1/jobs"
		if p.Complete {
			path = "/v1/leases/" + lease + "/complete"
		}
		h.send(ctx, checkPoison, p.Name+" (faults paused)", http.MethodPost, path, p.Body, http.StatusBadRequest, true, deadline)
	}
	h.reach(ctx, h.runIDs(), 1<<30, 3, true, deadline)
}

// hostileEnds is the hostile tenant's workload table.
var hostileEnds = map[string]expectation{
	"pass": completes, stepWork: completes,
	stepPoisoned: {end: ends(domain.JobCompleted), lossy: true, facts: []func(*domain.Job, *submission) []string{poisonWritten}},
}

// poisonWritten: nothing of a refused output was written.
func poisonWritten(j *domain.Job, _ *submission) []string {
	var out []string
	for _, s := range j.Steps {
		for _, a := range s.Attempts {
			if bytes.Contains(a.Output, []byte(`"poison"`)) || bytes.Contains(s.Output, []byte(`"poison"`)) {
				out = append(out, fmt.Sprintf("a refused output was written: step %s attempt %d output %s", s.ID(), a.N, truncate(a.Output, 80)))
			}
		}
	}
	return out
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
			names = append(names, u[strings.LastIndex(u, "/")+1:])
		}
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	slices.Sort(names)
	return names, nil
}
