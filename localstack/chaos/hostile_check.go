package chaos

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/store"
)

// HostileCategory is what a failed check of the hostile tenant counts as.
const HostileCategory Category = "hostile"

// HostileResult is what the hostile tenant did in a run, and its checks.
// A failed check fails the run as the run's own checks do.
type HostileResult struct {
	Tenant string
	Plan   string // PlanDigest of the jobs it submits
	// Claims counts the claims it made: CollidingClaims on the names that
	// collided under the old queue naming, UnknownClaims on names no job
	// named, the rest on its own queue; ClaimErrors of them answered 5xx
	// or not at all (faults).
	Claims, CollidingClaims, UnknownClaims, ClaimErrors int
	// Leases it was handed; ForeignLeases of them for a job it did not
	// submit (must be 0).
	Leases, ForeignLeases int
	// Queues are the worker queues under the stack's prefix at the end,
	// LegitQueues those some job named; QueuesCreated the others (must be 0).
	Queues, LegitQueues, QueuesCreated int
	// Poison bodies sent, and accepted (must be 0).
	PoisonSent, PoisonAccepted int
	Flood, FloodFinished       int
	Checks                     []*Check
	Notes                      []string
}

// Failed counts the failures of its checks.
func (h *HostileResult) Failed() int {
	if h == nil {
		return 0
	}
	n := 0
	for _, c := range h.Checks {
		n += c.Failed
	}
	return n
}

// hostileFacts is what the hostile tenant saw and what the table and the
// queues hold at the end; judgeHostile turns them into its checks.
type hostileFacts struct {
	Ends      map[string]expectation
	Plan      HostilePlan
	Claims    []claimRecord
	Exchanges map[string][]exchange
	Subs      []*submission // by JobPlan.N
	Stored    map[string]*domain.Job
	Listed    map[string]bool // its job ids in the table's listing
	ListErr   error
	Finished  map[string]bool
	// Queues are the worker queues' names under the stack's prefix;
	// Legit the names some job could have made; Required those that
	// must be there.
	Queues    []string
	QueuesErr error
	Legit     map[string]bool
	Required  []string
	Notes     []string
}

// check gathers the facts, once the run has stopped its workers.
func (h *hostile) check(ctx context.Context) *HostileResult {
	h.colliders.Wait()
	h.mu.Lock()
	f := hostileFacts{
		Plan: h.plan, Claims: append([]claimRecord(nil), h.claims...), Subs: append([]*submission(nil), h.subs...),
		Exchanges: map[string][]exchange{}, Finished: map[string]bool{}, Notes: append([]string(nil), h.notes...),
	}
	for k, v := range h.exchanges {
		f.Exchanges[k] = append([]exchange(nil), v...)
	}
	for id := range h.finished {
		f.Finished[id] = true
	}
	h.mu.Unlock()

	f.Listed, f.ListErr = listTenant(ctx, h.raw, HostileTenant)
	f.Stored = map[string]*domain.Job{}
	ids := map[string]bool{}
	for id := range f.Listed {
		ids[id] = true
	}
	for _, s := range f.Subs {
		if s != nil {
			for id := range s.ids {
				ids[id] = true
			}
		}
	}
	for id := range ids {
		if j, err := h.raw.Get(ctx, HostileTenant, id); err == nil {
			f.Stored[id] = j
		}
	}
	// A worker queue and its P0 and P2 lanes are legit once a job names
	// it: the run's, the replans' (replans.go) and its own.
	f.Legit = map[string]bool{}
	legit := func(tenant, q string) string {
		n := h.names.WorkerQueueName(tenant, q)
		f.Legit[n], f.Legit[h.names.LaneName(tenant, q, 0)], f.Legit[h.names.LaneName(tenant, q, 2)] = true, true, true
		return n
	}
	for _, q := range WorkerQueues {
		f.Required = append(f.Required, legit(Tenant, q))
	}
	legit(ReplanTenant, ReplanQueue)
	own := legit(HostileTenant, HostileOwnQueue)
	for _, j := range f.Stored {
		if len(j.Steps) > 0 && j.Steps[0].Spec.Action.Queue == HostileOwnQueue {
			f.Required = append(f.Required, own) // a job of it is stored: the queue was made
			break
		}
	}
	f.Queues, f.QueuesErr = h.workerQueues(ctx)
	return judgeHostile(f)
}

func listTenant(ctx context.Context, raw *store.Store, tenant string) (map[string]bool, error) {
	out := map[string]bool{}
	cursor := ""
	for range 1000 {
		page, next, err := raw.List(ctx, tenant, engine.ListFilter{Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			out[s.ID] = true
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
	return out, errors.New("list: more than 1000 pages")
}

// judgeHostile turns the facts into the hostile tenant's checks and
// figures.
func judgeHostile(f hostileFacts) *HostileResult {
	l := newLedger()
	l.prefix = "hostile: "
	res := &HostileResult{Tenant: HostileTenant, Plan: PlanDigest(f.Plan.Flood), Notes: f.Notes}
	answered := map[string]bool{}
	for _, s := range f.Subs {
		if s != nil {
			for id := range s.ids {
				answered[id] = true
			}
		}
	}
	for _, c := range f.Claims {
		res.Claims++
		res.CollidingClaims += btoi(c.Kind == claimColliding)
		res.UnknownClaims += btoi(c.Kind == claimUnknown)
		res.ClaimErrors += btoi(retryableStatus(c.Status))
		for _, id := range c.Jobs {
			res.Leases++
			var foreign []string
			if c.Kind != claimOwn || !answered[id] && !f.Listed[id] {
				res.ForeignLeases++
				foreign = append(foreign, fmt.Sprintf("a claim on its %s queue %q handed out a lease for job %s, which it did not submit there", c.Kind, c.Queue, id))
			}
			l.judge("every lease names a job it submitted", HostileCategory, "job "+id, foreign...)
		}
	}
	for _, check := range sortedKeys(f.Exchanges) {
		for _, x := range f.Exchanges[check] {
			l.judge(check, HostileCategory, x.what, one(x.problem())...)
			if check == checkPoison {
				res.PoisonSent++
				res.PoisonAccepted += btoi(has2xx(x.statuses))
			}
		}
	}

	const queues = "no worker queue but those jobs named"
	if f.QueuesErr != nil {
		l.judge(queues, HostileCategory, "list", f.QueuesErr.Error())
	}
	found := map[string]bool{}
	for _, q := range f.Queues {
		found[q] = true
		res.Queues++
		if f.Legit[q] {
			res.LegitQueues++
			l.judge(queues, HostileCategory, q)
			continue
		}
		res.QueuesCreated++
		l.judge(queues, HostileCategory, q, "exists, but no job named it")
	}
	for _, q := range f.Required {
		if f.QueuesErr == nil && !found[q] {
			l.judge(queues, HostileCategory, q, "jobs name it, yet it is missing")
		}
	}

	const onlyAnswered = "it stores only jobs a submit was answered"
	if f.ListErr != nil {
		l.judge(onlyAnswered, HostileCategory, "list", f.ListErr.Error())
	}
	for _, id := range sortedKeys(f.Listed) {
		var extra []string
		if !answered[id] {
			extra = append(extra, "stored, but no submit of it was answered")
		}
		l.judge(onlyAnswered, HostileCategory, "job "+id, extra...)
	}
	for i, p := range f.Plan.Flood {
		key := fmt.Sprintf("job %d (%s)", p.N, p.Kind)
		var s *submission
		if i < len(f.Subs) {
			s = f.Subs[i]
		}
		if s == nil || s.id == "" || len(s.ids) > 1 {
			l.judge("every submit answered one job", HostileCategory, key, "answered no job, or more than one")
			continue
		}
		res.Flood++
		l.judgeJob(hostileEnds[p.Kind], judged{key: fmt.Sprintf("job %s (%s)", s.id, p.Kind), kind: p.Kind, sub: s, job: f.Stored[s.id], done: f.Finished[s.id]})
		if j := f.Stored[s.id]; j != nil && f.Finished[s.id] && j.State.Terminal() {
			res.FloodFinished++
		}
	}
	res.Checks = l.checks
	return res
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
