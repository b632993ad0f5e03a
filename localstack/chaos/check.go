package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Category is what a failed check counts as in the summary line.
type Category string

const (
	Lost       Category = "lost"
	Duplicated Category = "duplicated"
	Mismatched Category = "mismatched"
)

// Check is one invariant, checked once per job (or per queue, message or
// key).
type Check struct {
	Name     string
	Category Category
	OK       int
	Failed   int
	Examples []string // the first few failures
}

func (c *Check) pass() { c.OK++ }

func (c *Check) fail(format string, args ...any) {
	c.Failed++
	if len(c.Examples) < 5 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// Result is one run's outcome.
type Result struct {
	Seed   uint64
	Jobs   int
	Stack  string
	Plan   string // PlanDigest of the jobs submitted
	Faults map[Kind]int64
	Checks []*Check
	// Lost, Duplicated and Mismatched count the jobs (and, for Mismatched,
	// also the messages left in flight) that failed a check of the category.
	Lost, Duplicated, Mismatched int
	States                       map[domain.JobState]int
	Queues                       []queueCount // what each queue held when the drain stopped
	Dead                         int          // messages in the dead-letter queue (parked, not in flight)
	Sweeps                       SweepTotals
	Claimed                      int64 // leases the chaos workers were handed
	WorkerOutcomes               int64 // worker outcomes the engine accepted
	WorkerRefused                int64 // worker heartbeats and outcomes answered 409
	Waited, Duration             time.Duration
	Notes                        []string
	Calls                        map[string]int64 // engine AWS calls by operation
	// RetriedOutcomes counts worker outcomes sent again after a 5xx or no
	// answer and then answered 409; AppliedButRefused those of them whose
	// first send had in fact been applied: the worker was told "lease
	// lost" about its own recorded outcome.
	RetriedOutcomes, AppliedButRefused int
	FaultsByCall                       map[string]int64 // "kind Service.Operation" -> faults injected there
	// Races is what the racers and the sleeps came to.
	Races RaceTotals
	// Resources is what the resource jobs did, and their checks
	// (resources_check.go); nil when the run had none.
	Resources *ResourceResult
	// Hostile is what the hostile tenant did beside the run, and its
	// checks; nil when the run had none.
	Hostile *HostileResult
	// Schedules is what the schedules beside the run did, and their
	// checks (schedule.go); their failures count in Lost, Duplicated and
	// Mismatched.
	Schedules *ScheduleResult
}

// Passed reports whether every check held, the hostile tenant's too.
func (r *Result) Passed() bool {
	return r.Lost+r.Duplicated+r.Mismatched == 0 && r.Hostile.Failed() == 0
}

// FaultTotal answers how many faults the run injected.
func (r *Result) FaultTotal() int64 {
	var n int64
	for _, v := range r.Faults {
		n += v
	}
	return n
}

func (r *run) check(ctx context.Context, res *Result) {
	var (
		answered   = &Check{Name: "every submit answered a job", Category: Lost}
		oneID      = &Check{Name: "one job per Idempotency-Key", Category: Duplicated}
		stored     = &Check{Name: "every submitted job is stored", Category: Lost}
		listed     = &Check{Name: "every job answered 2xx is listed", Category: Lost}
		terminal   = &Check{Name: fmt.Sprintf("every job finished within %s", r.cfg.Bound), Category: Lost}
		extra      = &Check{Name: "no job beyond those submitted", Category: Duplicated}
		once       = &Check{Name: "one terminal event, and it is last", Category: Duplicated}
		fenced     = &Check{Name: "nothing accepted under a lost lease", Category: Duplicated}
		replay     = &Check{Name: "events replay to the stored state", Category: Mismatched}
		inFlight   = &Check{Name: "no message left in flight (per queue)", Category: Mismatched}
		outcome    = &Check{Name: "every job ends as its plan and the faults imply", Category: Mismatched}
		sleeps     = &Check{Name: "nothing after a sleep starts before its wake time", Category: Mismatched}
		races      = &Check{Name: "racing calls answered as their landing implies", Category: Mismatched}
		lostJobs   = map[int]bool{}
		dupJobs    = map[int]bool{}
		mismatched = map[int]bool{}
	)
	res.Checks = []*Check{answered, oneID, stored, listed, terminal, extra, once, fenced, replay, inFlight, outcome, sleeps, races}
	res.Races = RaceTotals{MinSlack: -1}
	res.States = map[domain.JobState]int{}

	r.mu.Lock()
	subs := append([]*submission(nil), r.subs...)
	finished := r.finished
	r.mu.Unlock()
	late := map[string][]lateAnswer{}
	r.w.mu.Lock()
	for _, l := range r.w.late {
		late[l.Job] = append(late[l.Job], l)
	}
	r.w.mu.Unlock()

	listedIDs, listErr := r.listAll(ctx)
	byID := map[string]int{}
	for i, s := range subs {
		if s == nil || s.id == "" {
			if s == nil {
				answered.fail("job %d: never submitted", i)
			} else {
				answered.fail("job %d (%s): no 2xx answer; statuses %v", i, s.plan.Kind, s.statuses)
			}
			lostJobs[i] = true
			continue
		}
		answered.pass()
		byID[s.id] = i
		if len(s.ids) > 1 {
			oneID.fail("key %s answered %d jobs: %v", s.plan.Key, len(s.ids), s.ids)
			dupJobs[i] = true
		} else {
			oneID.pass()
		}
		for id := range s.ids {
			byID[id] = i
		}
		j, err := r.raw.Get(ctx, Tenant, s.id)
		if err != nil {
			stored.fail("job %s: %v", s.id, err)
			lostJobs[i] = true
			continue
		}
		stored.pass()
		res.States[j.State]++
		if listErr != nil {
			listed.fail("list: %v", listErr)
			lostJobs[i] = true
		} else if !listedIDs[s.id] {
			listed.fail("job %s is not listed", s.id)
			lostJobs[i] = true
		} else {
			listed.pass()
		}
		if finished[s.id] && j.State.Terminal() {
			terminal.pass()
		} else {
			terminal.fail("job %s (%s) is %s; steps %s", s.id, s.plan.Kind, j.State, stepStates(j))
			lostJobs[i] = true
		}
		if msg := checkRuns(j); msg != "" {
			once.fail("job %s: %s", s.id, msg)
			dupJobs[i] = true
		} else {
			once.pass()
		}
		if msgs := checkFencing(j, late[s.id]); len(msgs) > 0 {
			for _, m := range msgs {
				fenced.fail("job %s: %s", s.id, m)
			}
			dupJobs[i] = true
		} else {
			fenced.pass()
		}
		if msg := checkReplay(j); msg != "" {
			replay.fail("job %s: %s", s.id, msg)
			mismatched[i] = true
		} else {
			replay.pass()
		}
		if !j.State.Terminal() {
			continue // lost, above: what it ends as is not known
		}
		if msg := checkOutcome(j, s); msg != "" {
			outcome.fail("job %s (%s): %s", s.id, s.plan.Kind, msg)
			mismatched[i] = true
		} else {
			outcome.pass()
		}
		if msgs, seen := checkSleeps(j); len(msgs) > 0 {
			for _, m := range msgs {
				sleeps.fail("job %s (%s): %s", s.id, s.plan.Kind, m)
			}
			mismatched[i] = true
		} else if len(seen) > 0 {
			sleeps.pass()
			for _, x := range seen {
				res.Races.Sleeps++
				if x.viaSFN {
					res.Races.SleepsViaSFN++
				}
				if res.Races.MinSlack < 0 || x.slack < res.Races.MinSlack {
					res.Races.MinSlack = x.slack
				}
			}
		}
		if s.race != nil {
			if msgs := checkRace(j, s, &res.Races); len(msgs) > 0 {
				for _, m := range msgs {
					races.fail("job %s (%s%s): %s", s.id, s.plan.Kind, s.plan.Race, m)
				}
				mismatched[i] = true
			} else {
				races.pass()
			}
		}
	}
	extras := 0
	for id := range listedIDs {
		if _, ok := byID[id]; ok {
			extra.pass()
			continue
		}
		extras++
		extra.fail("job %s is stored but no submit answered it", id)
	}
	leftover := 0
	for _, q := range res.Queues {
		switch {
		case q.Err != "":
			leftover++
			inFlight.fail("%s: %s", q.Name, q.Err)
		case q.total() > 0:
			leftover += q.total()
			inFlight.fail("%s holds %d visible, %d in flight, %d delayed", q.Name, q.Visible, q.InFlight, q.Delayed)
		default:
			inFlight.pass()
		}
	}
	r.w.mu.Lock()
	retried := append([]retriedOutcome(nil), r.w.retried...)
	r.w.mu.Unlock()
	for _, o := range retried {
		res.RetriedOutcomes++
		j, err := r.raw.Get(ctx, Tenant, o.Job)
		if err != nil {
			continue
		}
		s, _, err := j.Step(o.Step)
		if err != nil || o.Attempt < 1 || o.Attempt > len(s.Attempts) {
			continue
		}
		a := s.Attempts[o.Attempt-1]
		var sent struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(o.Body, &sent)
		if o.Op == "complete" && a.State == domain.AttemptSucceeded || o.Op == "fail" && a.Error != nil && a.Error.Message == sent.Message {
			res.AppliedButRefused++
			if len(res.Notes) < 20 {
				res.Notes = append(res.Notes, fmt.Sprintf("job %s step %s attempt %d: %s was applied, yet its retry answered 409 lease_lost", o.Job, o.Step, o.Attempt, o.Op))
			}
		}
	}
	res.Lost = len(lostJobs)
	res.Duplicated = len(dupJobs) + extras
	res.Mismatched = len(mismatched) + leftover
	r.pool.check(ctx, r, res, subs, lostJobs, dupJobs, mismatched)
}

func (r *run) listAll(ctx context.Context) (map[string]bool, error) {
	return listTenant(ctx, r.raw, Tenant)
}

func stepStates(j *domain.Job) string {
	var parts []string
	for _, s := range j.Steps {
		parts = append(parts, fmt.Sprintf("%s=%s/%d", s.ID(), s.State, s.Attempt))
	}
	return strings.Join(parts, " ")
}

// checkTerminalOnce: a finished job's log holds exactly one of
// job_completed, job_failed, job_cancelled, as its last event; an
// unfinished one holds none.
func checkTerminalOnce(j *domain.Job) string {
	var terminal []int
	for i, ev := range j.Events {
		switch domain.JobEvent(ev.Type) {
		case domain.JobEvCompleted, domain.JobEvFailed, domain.JobEvCancelled:
			terminal = append(terminal, i)
		}
	}
	switch {
	case !j.State.Terminal() && len(terminal) > 0:
		return fmt.Sprintf("is %s but its log holds %s", j.State, j.Events[terminal[0]].Type)
	case !j.State.Terminal():
		return ""
	case len(terminal) != 1:
		var types []string
		for _, i := range terminal {
			types = append(types, j.Events[i].Type)
		}
		return fmt.Sprintf("%d terminal events: %v", len(terminal), types)
	case terminal[0] != len(j.Events)-1:
		return fmt.Sprintf("%s is event %d of %d; after it: %s", j.Events[terminal[0]].Type, terminal[0]+1, len(j.Events), j.Events[terminal[0]+1].Type)
	}
	return ""
}

// checkFencing: no outcome a worker sent after its lease was lost was
// applied (no output or error carries the zombie tag, and no late request
// was answered 2xx), and each step has at most one succeeded attempt,
// its last.
func checkFencing(j *domain.Job, late []lateAnswer) []string {
	var out []string
	for _, l := range late {
		out = append(out, fmt.Sprintf("%s of lease %s sent %s after it expired was answered %d %s",
			l.Op, l.Lease, l.Sent.Sub(l.Expires).Round(time.Millisecond), l.Status, l.Answer))
	}
	for _, s := range j.Steps {
		if zombie(s.Output) {
			out = append(out, fmt.Sprintf("step %s output %s carries the zombie tag", s.ID(), s.Output))
		}
		succeeded := 0
		for i, a := range s.Attempts {
			if zombie(a.Output) {
				out = append(out, fmt.Sprintf("step %s attempt %d output %s carries the zombie tag", s.ID(), a.N, a.Output))
			}
			if a.Error != nil && strings.Contains(a.Error.Message, "["+ZombieTag+"]") {
				out = append(out, fmt.Sprintf("step %s attempt %d failed with a zombie's report: %q", s.ID(), a.N, a.Error.Message))
			}
			if a.State == domain.AttemptSucceeded {
				succeeded++
				if i != len(s.Attempts)-1 {
					out = append(out, fmt.Sprintf("step %s attempt %d succeeded but is not the last (%d attempts)", s.ID(), a.N, len(s.Attempts)))
				}
			}
		}
		if succeeded > 1 {
			out = append(out, fmt.Sprintf("step %s has %d succeeded attempts", s.ID(), succeeded))
		}
	}
	return out
}

func zombie(raw json.RawMessage) bool {
	if len(raw) == 0 || !bytes.Contains(raw, []byte(ZombieTag)) {
		return false
	}
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil {
		return true // carries the tag in some other shape
	}
	tagged, _ := v[ZombieTag].(bool)
	return tagged
}

// checkReplay: the log replays to the stored state, its job events are
// legal in the formal job table plus the documented widenings, its
// sequence numbers run 1..n, and a finished job has left the due index.
func checkReplay(j *domain.Job) string {
	if err := domain.CheckReplay(j); err != nil {
		return err.Error()
	}
	if err := domain.CheckFormal(j.Events); err != nil {
		return err.Error()
	}
	for i, ev := range j.Events {
		if ev.Seq != i+1 {
			return fmt.Sprintf("event %d has seq %d", i+1, ev.Seq)
		}
	}
	if j.State.Terminal() && j.DueAt != nil {
		return fmt.Sprintf("is %s but still due at %s", j.State, j.DueAt.Format(time.RFC3339Nano))
	}
	return ""
}
