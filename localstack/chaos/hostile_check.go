package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

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
	// Poison bodies: sends answered 400, sends answered 2xx (must be 0),
	// and sends repeated after a 5xx or no answer (a fault met first).
	PoisonSent, PoisonRefused, PoisonAccepted, PoisonResent int
	Flood, FloodFinished, Parked                            int
	// Backlogs read with faults paused and the run's jobs done, before and
	// after its parked jobs were submitted.
	ChaosBacklog, ChaosBacklogAfter     int
	HostileBacklog, HostileBacklogAfter int
	// ChaosBacklogDrift is the run's tenant's backlog minus its jobs
	// queued, at the end: non-zero only after faults on DynamoDB writes
	// lost changes of the health counters (a failed check without any).
	ChaosBacklogDrift int
	Reached           int // its requests on the run's jobs
	Checks            []*Check
	Notes             []string
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
	Plan     HostilePlan
	Claims   []claimRecord
	Subs     []*submission // by JobPlan.N: Flood, then Parked
	Stored   map[string]*domain.Job
	Listed   map[string]bool // its job ids in the table's listing
	ListErr  error
	Finished map[string]bool
	Poison   []poisonRecord
	// Queues are the worker queues' names under the stack's prefix;
	// Legit the names some job could have made; Required those that
	// must be there.
	Queues    []string
	QueuesErr error
	Legit     map[string]bool
	Required  []string
	BigFail   *bigFailRecord
	Isolation []isoRecord
	Health    healthRecord
	Notes     []string
}

// check gathers the facts, once the run has stopped its workers.
func (h *hostile) check(ctx context.Context) *HostileResult {
	h.colliders.Wait()
	h.mu.Lock()
	f := hostileFacts{
		Plan: h.plan, Claims: append([]claimRecord(nil), h.claims...), Subs: append([]*submission(nil), h.subs...),
		Finished: map[string]bool{}, Poison: append([]poisonRecord(nil), h.poison...), BigFail: h.bigFail,
		Isolation: append([]isoRecord(nil), h.isolation...), Health: h.health, Notes: append([]string(nil), h.notes...),
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

	f.Legit = map[string]bool{}
	// A worker queue's P0 and P2 lanes are its own, made when a job of that
	// priority names it.
	lanes := func(tenant, q string) {
		for _, p := range []int{0, 2} {
			f.Legit[h.names.LaneName(tenant, q, p)] = true
		}
	}
	for _, q := range WorkerQueues {
		n := h.names.WorkerQueueName(Tenant, q)
		f.Legit[n] = true
		lanes(Tenant, q)
		f.Required = append(f.Required, n)
	}
	// The replans' queue (replans.go), made by their jobs.
	f.Legit[h.names.WorkerQueueName(ReplanTenant, ReplanQueue)] = true
	lanes(ReplanTenant, ReplanQueue)
	for _, q := range []string{HostileOwnQueue, HostileParkedQueue} {
		n := h.names.WorkerQueueName(HostileTenant, q)
		f.Legit[n] = true
		lanes(HostileTenant, q)
		for _, j := range f.Stored {
			if len(j.Steps) > 0 && j.Steps[0].Spec.Action.Queue == q {
				f.Required = append(f.Required, n) // a job of it is stored: the queue was made
				break
			}
		}
	}
	f.Queues, f.QueuesErr = h.workerQueues(ctx)
	res := judgeHostile(f)
	h.mu.Lock()
	res.Checks = append(res.Checks, judgeLongPolls(h.longPolls))
	h.mu.Unlock()
	return res
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

// retryableStatus: a fault met the request before its body was read (or
// its answer was lost).
func retryableStatus(s int) bool { return s == 0 || s >= 500 || s == http.StatusTooManyRequests }

func has2xx(statuses []int) bool {
	for _, s := range statuses {
		if s >= 200 && s < 300 {
			return true
		}
	}
	return false
}

// judgeHostile turns the facts into the hostile tenant's checks and
// figures.
func judgeHostile(f hostileFacts) *HostileResult {
	check := func(name string) *Check { return &Check{Name: name, Category: HostileCategory} }
	var (
		nothing   = check("hostile: claims on colliding or unknown names hand out nothing")
		ownLease  = check("hostile: every lease names a job it submitted")
		queues    = check("hostile: no worker queue but those jobs named")
		poison    = check("hostile: every poison body answers 400")
		onlyLegit = check("hostile: it stores only jobs a submit was answered")
		finished  = check("hostile: its flood finishes within the bound")
		replay    = check("hostile: its jobs end once and replay")
		bigFail   = check(fmt.Sprintf("hostile: a %d KB failure ends the job at once", BigFailBytes/1024))
		outputs   = check("hostile: refused outputs are not written")
		parked    = check("hostile: its parked jobs stay queued")
		isolated  = check("hostile: the run's jobs answer it 404")
		health    = check("hostile: each tenant's backlog is its own")
	)
	res := &HostileResult{Tenant: HostileTenant, Plan: PlanDigest(append(append([]JobPlan(nil), f.Plan.Flood...), f.Plan.Parked...)), Notes: f.Notes,
		Checks: []*Check{nothing, ownLease, queues, poison, onlyLegit, finished, replay, bigFail, outputs, parked, isolated, health}}

	answered := map[string]*submission{}
	for _, s := range f.Subs {
		if s == nil {
			continue
		}
		for id := range s.ids {
			answered[id] = s
		}
	}
	own := func(id string) bool { return answered[id] != nil || f.Listed[id] }

	for _, c := range f.Claims {
		res.Claims++
		switch c.Kind {
		case claimColliding:
			res.CollidingClaims++
		case claimUnknown:
			res.UnknownClaims++
		}
		ok := c.Status >= 200 && c.Status < 300
		switch {
		case retryableStatus(c.Status):
			res.ClaimErrors++
		case !ok && c.Kind != claimOwn:
			nothing.fail("claim on %s queue %q answered %d: %s", c.Kind, c.Queue, c.Status, c.Answer)
		case c.Kind != claimOwn && len(c.Jobs) > 0:
			nothing.fail("claim on %s queue %q handed out %d leases: jobs %v", c.Kind, c.Queue, len(c.Jobs), c.Jobs)
		case c.Kind != claimOwn:
			nothing.pass()
		case !ok && len(res.Notes) < 20:
			res.Notes = append(res.Notes, fmt.Sprintf("a claim on its own queue %q answered %d: %s", c.Queue, c.Status, c.Answer))
		}
		for _, id := range c.Jobs {
			res.Leases++
			if c.Kind == claimOwn && own(id) {
				ownLease.pass()
				continue
			}
			res.ForeignLeases++
			ownLease.fail("a claim on its %s queue %q handed out a lease for job %s, which it did not submit there", c.Kind, c.Queue, id)
		}
	}

	if f.QueuesErr != nil {
		queues.fail("list the worker queues: %v", f.QueuesErr)
	}
	found := map[string]bool{}
	for _, q := range f.Queues {
		found[q] = true
		res.Queues++
		if f.Legit[q] {
			res.LegitQueues++
			queues.pass()
			continue
		}
		res.QueuesCreated++
		queues.fail("worker queue %s exists, but no job named it", q)
	}
	if f.QueuesErr == nil {
		for _, q := range f.Required {
			if !found[q] {
				queues.fail("worker queue %s, which jobs name, is missing", q)
			}
		}
	}

	for _, p := range f.Poison {
		res.PoisonSent++
		if len(p.Statuses) == 0 {
			poison.fail("%s: never sent", p.Name)
			continue
		}
		last := p.Statuses[len(p.Statuses)-1]
		res.PoisonResent += len(p.Statuses) - 1
		phase := "during the run"
		if p.Strict {
			phase = "with faults paused"
		}
		switch {
		case has2xx(p.Statuses):
			res.PoisonAccepted++
			poison.fail("%s (%s) was accepted: statuses %v, %s", p.Name, phase, p.Statuses, p.Answer)
		case p.Strict && len(p.Statuses) != 1, last != http.StatusBadRequest:
			poison.fail("%s (%s) answered %v: %s", p.Name, phase, p.Statuses, p.Answer)
		default:
			res.PoisonRefused++
			poison.pass()
		}
	}

	for id := range f.Listed {
		if answered[id] != nil {
			onlyLegit.pass()
			continue
		}
		state := "?"
		if j := f.Stored[id]; j != nil {
			state = string(j.State)
		}
		onlyLegit.fail("job %s (%s) is stored, but no submit of it was answered", id, state)
	}
	if f.ListErr != nil {
		onlyLegit.fail("list its jobs: %v", f.ListErr)
	}

	for i, p := range f.Plan.Flood {
		res.Flood++
		var s *submission
		if i < len(f.Subs) {
			s = f.Subs[i]
		}
		j := (*domain.Job)(nil)
		if s != nil {
			j = f.Stored[s.id]
		}
		switch {
		case s == nil:
			finished.fail("job %d (%s): never submitted", p.N, p.Kind)
		case s.id == "":
			finished.fail("job %d (%s): no 2xx answer; statuses %v", p.N, p.Kind, s.statuses)
		case len(s.ids) > 1:
			finished.fail("key %s answered %d jobs: %v", p.Key, len(s.ids), s.ids)
		case j == nil:
			finished.fail("job %s (%s) is not stored", s.id, p.Kind)
		case !j.State.Terminal() || !f.Finished[s.id]:
			finished.fail("job %s (%s) is %s; steps %s", s.id, p.Kind, j.State, stepStates(j))
		default:
			res.FloodFinished++
			finished.pass()
		}
		if j != nil && p.Kind == stepPoisoned {
			if msg := poisonWritten(j); msg != "" {
				outputs.fail("job %s: %s", j.ID, msg)
			} else {
				outputs.pass()
			}
		}
	}
	for k, p := range f.Plan.Parked {
		i := len(f.Plan.Flood) + k
		var s *submission
		if i < len(f.Subs) {
			s = f.Subs[i]
		}
		switch {
		case s == nil:
			parked.fail("parked job %d: never submitted", p.N)
		case s.id == "":
			parked.fail("parked job %d: no 2xx answer; statuses %v", p.N, s.statuses)
		case f.Stored[s.id] == nil:
			parked.fail("parked job %s is not stored", s.id)
		case f.Stored[s.id].State != domain.JobQueued || f.Stored[s.id].Steps[0].Attempt != 0:
			j := f.Stored[s.id]
			parked.fail("parked job %s is %s; steps %s", s.id, j.State, stepStates(j))
		default:
			res.Parked++
			parked.pass()
		}
	}
	for id, j := range f.Stored {
		if answered[id] == nil {
			continue // counted above
		}
		msgs := checkFencing(j, nil)
		if msg := checkTerminalOnce(j); msg != "" {
			msgs = append(msgs, msg)
		}
		if msg := checkReplay(j); msg != "" {
			msgs = append(msgs, msg)
		}
		if len(msgs) > 0 {
			replay.fail("job %s: %s", id, strings.Join(msgs, "; "))
		} else {
			replay.pass()
		}
	}

	if msg := judgeBigFail(f.BigFail); msg != "" {
		bigFail.fail("%s", msg)
	} else {
		bigFail.pass()
	}

	for _, r := range f.Isolation {
		res.Reached++
		phase := "during the run"
		if r.Strict {
			phase = "with faults paused"
		}
		switch {
		case len(r.Statuses) == 0:
			isolated.fail("%s: never sent", r.What)
		case has2xx(r.Statuses):
			isolated.fail("%s (%s) was answered %v: another tenant's job", r.What, phase, r.Statuses)
		case r.Strict && len(r.Statuses) != 1, r.Statuses[len(r.Statuses)-1] != http.StatusNotFound:
			isolated.fail("%s (%s) answered %v, not 404", r.What, phase, r.Statuses)
		default:
			isolated.pass()
		}
	}

	hr := f.Health
	res.ChaosBacklog, res.ChaosBacklogAfter, res.HostileBacklog, res.HostileBacklogAfter = hr.ChaosBefore, hr.ChaosAfter, hr.HostileBefore, hr.HostileAfter
	switch {
	case !hr.Read:
		health.fail("the tenants' health was not read")
	case hr.Err != "":
		health.fail("%s", hr.Err)
	default:
		// Faults paused, the run's jobs done: parking jobs moves the
		// hostile tenant's backlog by as many and the run's tenant's not
		// at all. (The backlog is never under 0: a counter that lost
		// changes to faults and went below 0 hides what is added, up to
		// its deficit.)
		if hr.ChaosAfter != hr.ChaosBefore {
			health.fail("the run's tenant's backlog went from %d to %d when the hostile tenant parked %d jobs", hr.ChaosBefore, hr.ChaosAfter, hr.Parked)
		} else {
			health.pass()
		}
		if d := hr.HostileAfter - hr.HostileBefore; d == hr.Parked || hr.HostileBefore == 0 && d >= 0 && d < hr.Parked && hr.WriteFaults > 0 {
			health.pass()
		} else {
			health.fail("its backlog went from %d to %d when it parked %d jobs", hr.HostileBefore, hr.HostileAfter, hr.Parked)
		}
		// The run's tenant's backlog is its jobs queued (none, its jobs
		// done), whatever the hostile tenant left queued, exactly when no
		// fault can have lost a count.
		res.ChaosBacklogDrift = hr.ChaosAfter - hr.ChaosQueued
		switch {
		case res.ChaosBacklogDrift == 0:
			health.pass()
		case hr.WriteFaults == 0:
			health.fail("the run's tenant's backlog is %d with %d of its jobs queued (and %d of the hostile tenant's), and no fault lost a count",
				hr.ChaosAfter, hr.ChaosQueued, hr.HostileAfter)
		default:
			res.Notes = append(res.Notes, fmt.Sprintf("the run's tenant's backlog is %d with %d of its jobs queued: counts lost to %d faults on DynamoDB writes",
				hr.ChaosAfter, hr.ChaosQueued, hr.WriteFaults))
		}
	}
	return res
}

// judgeBigFail: the fail with a BigFailBytes message was answered 2xx
// with the job FAILED, and the job read right after is FAILED, its
// attempt ended, with the message cut to at most MaxErrorMessageBytes on
// a rune boundary, saying so.
func judgeBigFail(r *bigFailRecord) string {
	switch {
	case r == nil:
		return "the step was never failed with its big message"
	case r.Err != "":
		return fmt.Sprintf("statuses %v: %s", r.Statuses, r.Err)
	case r.AnswerState != domain.JobFailed:
		return fmt.Sprintf("the fail answered job_state %q, not FAILED (statuses %v)", r.AnswerState, r.Statuses)
	case r.Stored != domain.JobFailed:
		return fmt.Sprintf("the job read right after the fail is %s, not FAILED", r.Stored)
	case !r.AttemptEnd:
		return "the failed attempt has not ended, or a lease is still held"
	case len(r.Message) > domain.MaxErrorMessageBytes:
		return fmt.Sprintf("the stored message is %d bytes, over %d", len(r.Message), domain.MaxErrorMessageBytes)
	case !utf8.ValidString(r.Message):
		return "the stored message is not valid UTF-8: cut inside a character"
	case !strings.Contains(r.Message, fmt.Sprintf("truncated from %d bytes", BigFailBytes)):
		return fmt.Sprintf("the stored message (%d bytes) does not say it was cut: %q", len(r.Message), truncate([]byte(r.Message), 80))
	}
	return ""
}

// poisonWritten answers what of a refused output was written to a job.
func poisonWritten(j *domain.Job) string {
	for _, s := range j.Steps {
		if bytes.Contains(s.Output, []byte(`"poison"`)) {
			return fmt.Sprintf("step %s output %s", s.ID(), truncate(s.Output, 80))
		}
		for _, a := range s.Attempts {
			if bytes.Contains(a.Output, []byte(`"poison"`)) {
				return fmt.Sprintf("step %s attempt %d output %s", s.ID(), a.N, truncate(a.Output, 80))
			}
		}
	}
	return ""
}
