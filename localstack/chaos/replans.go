package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Replans and signal floods under chaos: beside the run, a tenant of its
// own, over the API and under the run's faults.
//
//   - Worker replans: a job x -> s1 -> s2 -> s3 (and u beside them) whose
//     worker step x the run claims itself and fails with class replan,
//     first with steps of which one depends on s1, s2 or s3 (drawn): that
//     would close a dependency cycle, and must answer 400 naming a
//     depends_on; then with steps that fit (200), after which the job
//     must complete.
//   - Fail-action replans: the same two replans carried by a fail action:
//     the first must answer 400 at submit, the second run to COMPLETED.
//   - Signal floods: a job whose waits (ready, then wait) are flooded from
//     four senders with signals of names no wait listens for, the job's
//     own go among them, then ready: go must be answered 200 (kept or
//     delivered), never 409, and the job complete with go's payload.
//
// The checks: no job of the run, or of this tenant, holds a dependency
// cycle; every cycle was refused with a 400 naming a depends_on; every
// job here COMPLETED; each flood's own signal was accepted and no name
// nothing waits for was kept.

// ReplanTenant is the tenant of the replans and floods; its jobs are none
// of the run's (whose checks count every job of Tenant).
const (
	ReplanTenant = "chaos-replans"
	ReplanKey    = "chaos-replans-key"
	// ReplanQueue is the worker queue the run itself claims for the
	// replans (the chaos workers serve WorkerQueues only).
	ReplanQueue = "replan"
)

// replanJob is one job of the replans' plan.
type replanJob struct {
	Kind  string // replan-worker, replan-fail, flood
	Depth int    // replans: the cycle closes through s<Depth>
	Chain bool   // replans: the closing step is not a sink (another new step follows it)
	Junk  int    // flood: signals of names nothing waits for
}

// replanPlan draws the replans' jobs from StreamReplans.
func (f *Faults) replanPlan() []replanJob {
	var out []replanJob
	f.Draw(StreamReplans, func(r *rand.Rand) {
		for _, kind := range []string{"replan-worker", "replan-worker", "replan-worker", "replan-fail", "replan-fail", "flood", "flood"} {
			out = append(out, replanJob{Kind: kind, Depth: 1 + r.IntN(3), Chain: r.IntN(2) == 0, Junk: 60 + r.IntN(61)})
		}
	})
	return out
}

// replanner drives the replans and floods of a run.
type replanner struct {
	r    *run
	c    *client
	plan []replanJob

	mu      sync.Mutex
	ids     []string             // every job submitted
	refused map[int][]answer     // job -> the answers to its cycle-closing replan (or submit)
	fit     map[int][]int        // job -> statuses of its fitting replan
	floods  map[int]*floodRecord // job -> what its flood heard
	byLease map[string]int       // worker replans: lease job id -> plan index
	done    map[int]bool         // worker replans: the fitting replan was answered 200
	jobs    map[int]string       // plan index -> job id
	notes   []string
	wg      sync.WaitGroup
}

type floodRecord struct {
	own   []answer // the job's own signal, go
	other []string // junk answered anything but 200 dropped
}

func newReplanner(r *run) *replanner {
	return &replanner{
		r: r, plan: r.f.replanPlan(),
		c:       &client{base: r.st.URL, key: ReplanKey, hc: &http.Client{Timeout: 30 * time.Second}},
		refused: map[int][]answer{}, fit: map[int][]int{}, floods: map[int]*floodRecord{},
		byLease: map[string]int{}, done: map[int]bool{}, jobs: map[int]string{},
	}
}

func replanStep(id string, action map[string]any, deps ...string) map[string]any {
	s := map[string]any{"id": id, "action": action}
	if len(deps) > 0 {
		s["depends_on"] = deps
	}
	return s
}

var replanPass = map[string]any{"type": "pass"}

// newSteps answers a replan's steps: closing, one depends on s<Depth>,
// which runs after the replanned step (a cycle once s1 waits on them);
// else on u, which does not.
func (p replanJob) newSteps(closing bool) []any {
	on := "u"
	if closing {
		on = fmt.Sprintf("s%d", p.Depth)
	}
	steps := []any{replanStep("n", replanPass, on)}
	if p.Chain {
		steps = append(steps, replanStep("m", replanPass, "n"))
	}
	return steps
}

// body answers a job's spec; for replan-fail its fail step carries the
// replan (closing a cycle or not).
func (p replanJob) body(closing bool) []byte {
	var steps []any
	switch p.Kind {
	case "flood":
		steps = []any{
			replanStep("ready", map[string]any{"type": "wait", "signal": "ready"}),
			replanStep("wait", map[string]any{"type": "wait", "signal": SignalName}),
			replanStep("after", replanPass),
		}
	case "replan-worker":
		// A short lease: a claim whose answer a fault lost leaves the
		// step leased until it runs out (or a clock jump ends it), then it
		// is reclaimed. Long enough for the claimer's two answers on a
		// machine loaded by `make test`: with 5 s, each claim's lease ran
		// out before its fitting replan, attempt after attempt.
		steps = []any{replanStep("x", map[string]any{"type": "worker", "queue": ReplanQueue, "lease_seconds": 15})}
	case "replan-fail":
		steps = []any{replanStep("x", map[string]any{"type": "fail", "class": "replan", "message": "chaos: replan", "steps": p.newSteps(closing)})}
	}
	if p.Kind != "flood" {
		steps = append(steps, replanStep("s1", replanPass, "x"), replanStep("s2", replanPass, "s1"), replanStep("s3", replanPass, "s2"), replanStep("u", replanPass))
		// Each step may lose many attempts to the faults (crashes, the
		// sweeper's clock jumps taking leases).
		for _, st := range steps {
			st.(map[string]any)["retry"] = map[string]any{"max_attempts": 20, "backoff": "fixed", "initial_delay_ms": 100, "max_delay_ms": 100}
		}
	}
	b, _ := json.Marshal(map[string]any{"steps": steps})
	return b
}

// start submits the jobs and works them: the worker replans from one
// claimer, each fail action and flood from its own goroutine.
func (p *replanner) start(ctx context.Context, deadline time.Time) {
	for i, job := range p.plan {
		switch job.Kind {
		case "replan-fail":
			p.wg.Go(func() {
				refused := p.c.retry(ctx, deadline, http.MethodPost, "/v1/jobs", job.body(true))
				id := p.submit(ctx, i, job.body(false), deadline)
				p.mu.Lock()
				p.refused[i] = refused
				p.jobs[i] = id
				p.mu.Unlock()
			})
		case "flood":
			p.wg.Go(func() { p.flood(ctx, i, job, deadline) })
		case "replan-worker":
			id := p.submit(ctx, i, job.body(false), deadline)
			p.mu.Lock()
			p.jobs[i] = id
			p.byLease[id] = i
			p.mu.Unlock()
		}
	}
	p.wg.Go(func() { p.claimer(ctx, deadline) })
}

// submit posts a job with an Idempotency-Key, again on a 5xx, and answers
// its id ("" if none was answered).
func (p *replanner) submit(ctx context.Context, i int, body []byte, deadline time.Time) string {
	key := fmt.Sprintf("chaos-replan-%d-%d", p.r.cfg.Seed, i)
	for _, a := range p.c.retry(ctx, deadline, http.MethodPost, "/v1/jobs", body, "Idempotency-Key", key) {
		var j struct {
			ID string `json:"id"`
		}
		if a.ok() && json.Unmarshal(a.body, &j) == nil && j.ID != "" {
			p.mu.Lock()
			p.ids = append(p.ids, j.ID)
			p.mu.Unlock()
			return j.ID
		}
	}
	return ""
}

// claimer claims the replan queue until every worker replan fitted: each
// lease first hears the cycle-closing replan (400), then the fitting one.
func (p *replanner) claimer(ctx context.Context, deadline time.Time) {
	for ctx.Err() == nil && time.Now().Before(deadline) {
		p.mu.Lock()
		var waiting []int
		for i, job := range p.plan {
			if job.Kind == "replan-worker" && !p.done[i] && p.jobs[i] != "" {
				waiting = append(waiting, i)
			}
		}
		p.mu.Unlock()
		left := 0
		for _, i := range waiting {
			// A fitting replan whose answer was lost (a 5xx, then 409 for
			// the lease it ended) is done all the same.
			if j, err := p.r.raw.Get(ctx, ReplanTenant, p.jobs[i]); err == nil {
				if x, _, err := j.Step("x"); err == nil && x.ReplacedBy != nil {
					p.mu.Lock()
					p.done[i] = true
					p.mu.Unlock()
					continue
				}
			}
			left++
		}
		if left == 0 {
			return
		}
		as := p.c.retry(ctx, deadline, http.MethodPost, "/v1/claim", []byte(`{"queue":"`+ReplanQueue+`","max":10,"wait_seconds":1,"worker":"chaos-replanner"}`))
		var got struct {
			Leases []struct {
				LeaseID string `json:"lease_id"`
				JobID   string `json:"job_id"`
			} `json:"leases"`
		}
		if last := as[len(as)-1]; !last.ok() || json.Unmarshal(last.body, &got) != nil {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		// Each lease answered at once, side by side: one after another,
		// the last lease of a claim could run out before its answers.
		var answering sync.WaitGroup
		for _, l := range got.Leases {
			p.mu.Lock()
			i, ok := p.byLease[l.JobID]
			p.mu.Unlock()
			if !ok {
				continue
			}
			answering.Go(func() {
				job := p.plan[i]
				path := "/v1/leases/" + l.LeaseID + "/fail"
				closing, _ := json.Marshal(map[string]any{"class": "replan", "message": "chaos: closes a cycle", "steps": job.newSteps(true)})
				refused := p.c.retry(ctx, deadline, http.MethodPost, path, closing)
				fitting, _ := json.Marshal(map[string]any{"class": "replan", "message": "chaos: fits", "steps": job.newSteps(false)})
				fit := statuses(p.c.retry(ctx, deadline, http.MethodPost, path, fitting))
				p.mu.Lock()
				p.refused[i] = append(p.refused[i], refused...)
				p.fit[i] = append(p.fit[i], fit...)
				if fit[len(fit)-1] == http.StatusOK {
					p.done[i] = true
				}
				p.mu.Unlock()
			})
		}
		answering.Wait()
	}
}

// flood submits a job with two waits and floods it from four senders with
// signals of names none of them waits for, the job's own go in the
// middle; then it sends ready.
func (p *replanner) flood(ctx context.Context, i int, job replanJob, deadline time.Time) {
	id := p.submit(ctx, i, job.body(false), deadline)
	rec := &floodRecord{}
	p.mu.Lock()
	p.jobs[i] = id
	p.floods[i] = rec
	p.mu.Unlock()
	if id == "" {
		return
	}
	path := "/v1/jobs/" + id + "/signal"
	var mu sync.Mutex
	var senders sync.WaitGroup
	for s := range 4 {
		senders.Go(func() {
			for k := s; k < job.Junk; k += 4 {
				if k == job.Junk/2 {
					own := p.c.retry(ctx, deadline, http.MethodPost, path, []byte(`{"name":"`+SignalName+`","id":"flood-own","payload":{"own":true}}`))
					mu.Lock()
					rec.own = own
					mu.Unlock()
				}
				as := p.c.retry(ctx, deadline, http.MethodPost, path, []byte(fmt.Sprintf(`{"name":"junk-%d"}`, k)))
				last := as[len(as)-1]
				mu.Lock()
				switch {
				case last.status == http.StatusOK && signalOutcome(last.body) == domain.SignalDropped, last.retryable():
					// Dropped; or no answer before the deadline: nothing said either way.
				default:
					rec.other = append(rec.other, fmt.Sprintf("junk-%d answered %v %s", k, statuses(as), clipBody(last.body)))
				}
				mu.Unlock()
			}
		})
	}
	senders.Wait()
	p.c.retry(ctx, deadline, http.MethodPost, path, []byte(`{"name":"ready","id":"flood-ready"}`))
}

// ownPayload reports whether a flooded wait's output is its own signal's
// payload.
func ownPayload(out json.RawMessage) bool {
	var v struct {
		Own bool `json:"own"`
	}
	return json.Unmarshal(out, &v) == nil && v.Own
}

func clipBody(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// await waits for the senders and the claimer, then until every job here
// is finished or the deadline passes.
func (p *replanner) await(ctx context.Context, deadline time.Time) {
	p.wg.Wait()
	p.mu.Lock()
	ids := append([]string(nil), p.ids...)
	p.mu.Unlock()
	for _, id := range ids {
		for ctx.Err() == nil {
			j, err := p.r.raw.Get(ctx, ReplanTenant, id)
			if err == nil && j.State.Terminal() || !time.Now().Before(deadline) {
				break
			}
			sleep(ctx, 250*time.Millisecond)
		}
	}
}

// ends is the replans' workload table: every job completes (or fails on
// lost leases, never on a refused replan); a flood's row reads what its
// senders were answered.
func (p *replanner) ends() map[string]expectation {
	return map[string]expectation{
		"replan-worker": completes, "replan-fail": completes,
		"flood": {end: ends(domain.JobCompleted), lossy: true, facts: []func(*domain.Job, *submission) []string{p.floodFacts}},
	}
}

// floodFacts: the flood's own signal was accepted (unless it had no
// answer before the deadline) and its payload is the wait's output; every
// unknown name was answered 200 dropped and none was kept.
func (p *replanner) floodFacts(j *domain.Job, _ *submission) []string {
	p.mu.Lock()
	var rec *floodRecord
	for i, id := range p.jobs {
		if id == j.ID {
			rec = p.floods[i]
		}
	}
	p.mu.Unlock()
	if rec == nil {
		return []string{"no flood was sent"}
	}
	var out []string
	if n := len(rec.own); n > 0 && !rec.own[n-1].retryable() {
		if a := rec.own[n-1]; a.status != http.StatusOK || signalOutcome(a.body) != domain.SignalKept && signalOutcome(a.body) != domain.SignalDelivered {
			out = append(out, fmt.Sprintf("its own signal answered %v (%s)", statuses(rec.own), signalOutcome(a.body)))
		}
	}
	if len(rec.other) > 0 {
		out = append(out, fmt.Sprintf("%d unknown names not answered 200 dropped, e.g. %s", len(rec.other), rec.other[0]))
	}
	for _, sg := range j.Signals {
		if strings.HasPrefix(sg.Name, "junk-") {
			out = append(out, "keeps a signal of an unknown name: "+sg.Name)
		}
	}
	if wait, _, _ := j.Step("wait"); wait == nil || !ownPayload(wait.Output) {
		out = append(out, "the wait's output is not its own signal's payload")
	}
	return out
}

// check holds every job here to the invariants and its row, and each
// cycle-closing replan to a 400 naming a depends_on.
func (p *replanner) check(ctx context.Context, l *ledger) {
	const refused = "a replan closing a cycle answers 400 naming a depends_on"
	table := p.ends() // the senders and the claimer are done (await)
	for i, job := range p.plan {
		id := p.jobs[i]
		key := fmt.Sprintf("job %s (%s)", id, job.Kind)
		if id == "" {
			l.judge("every submit answered a job", Lost, fmt.Sprintf("%s job %d", job.Kind, i), "no 2xx answer")
			continue
		}
		j, _ := p.r.raw.Get(ctx, ReplanTenant, id)
		l.judgeJob(table[job.Kind], judged{key: key, kind: job.Kind, job: j, done: j != nil && j.State.Terminal()})
		if job.Kind == "flood" {
			continue
		}
		var bad []string
		for _, a := range p.refused[i] {
			if !a.retryable() && (a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "depends_on") || !strings.Contains(string(a.body), "cycle")) {
				bad = append(bad, fmt.Sprintf("answered %d %s", a.status, clipBody(a.body)))
			}
		}
		if len(p.refused[i]) == 0 {
			bad = append(bad, "never sent")
		}
		l.judge(refused, Mismatched, key, bad...)
	}
}
