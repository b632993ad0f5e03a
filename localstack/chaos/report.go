package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Result is one run's outcome.
type Result struct {
	Seed   uint64
	Jobs   int
	Plan   string // PlanDigest of the jobs submitted
	Faults map[Kind]int64
	Checks []*Check // the run's, its resources', its schedules' and its replans'
	// Lost, Duplicated and Mismatched count the jobs (or queues, or
	// schedules) that failed a check of the category.
	Lost, Duplicated, Mismatched int
	States                       map[domain.JobState]int
	Dead                         int // messages in the dead-letter queue (parked, not in flight)
	Sweeps                       SweepTotals
	Claimed                      int64 // leases the chaos workers were handed
	WorkerOutcomes               int64 // worker outcomes the engine accepted
	WorkerRefused                int64 // worker heartbeats and outcomes answered 409
	Waited, Duration             time.Duration
	Notes                        []string
	Calls                        map[string]int64 // engine AWS calls by operation
	FaultsByCall                 map[string]int64 // "kind Service.Operation" -> faults injected there
	Resources                    *ResourceResult  // nil when the run had no resource jobs
	Schedules                    *ScheduleResult
}

// Passed reports whether every check held.
func (r *Result) Passed() bool { return r.Lost+r.Duplicated+r.Mismatched == 0 }

// FaultTotal answers how many faults the run injected.
func (r *Result) FaultTotal() int64 {
	var n int64
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// Report writes a run's table: its seed, jobs, faults by kind and checks.
func (r *Result) Report(w io.Writer, verbose bool) {
	status := map[bool]string{true: "ok", false: "FAILED"}[r.Passed()]
	var states []string
	for _, s := range domain.AllJobStates() {
		if n := r.States[s]; n > 0 {
			states = append(states, fmt.Sprintf("%s %d", strings.ToLower(string(s)), n))
		}
	}
	fmt.Fprintf(w, "seed %d: %s, %d jobs (plan %s: %s), finished in %s, drained in %s\n", r.Seed, status, r.Jobs, r.Plan, strings.Join(states, ", "),
		r.Waited.Round(100*time.Millisecond), (r.Duration - r.Waited).Round(100*time.Millisecond))
	fmt.Fprintf(w, "  faults %d: %s\n", r.FaultTotal(), FormatCounts(r.Faults))
	fmt.Fprintf(w, "  sweeps %d (%d crashed, clock advanced %d times): reclaimed %d, re-dispatched %d; workers claimed %d, outcomes accepted %d, refused 409 %d; dead-lettered %d\n",
		r.Sweeps.Sweeps, r.Sweeps.Crashed, r.Sweeps.Advances, r.Sweeps.Reclaimed, r.Sweeps.Redispatched,
		r.Claimed, r.WorkerOutcomes, r.WorkerRefused, r.Dead)
	if rr := r.Resources; rr != nil {
		fmt.Fprintf(w, "  resources: %d jobs, %d of %d resources registered; %d attempts run on a slot (%d slots taken unobserved), %d slots taken after their lease ran out\n",
			rr.Jobs, rr.Registered, len(ResourcePool), rr.Ran, rr.Unobserved, rr.Late)
	}
	if sc := r.Schedules; sc != nil {
		fmt.Fprintf(w, "  schedules: %d made, %d runs, %d ticks skipped; racer: %d rounds of two sweeps at once fired %d ticks\n", sc.Schedules, sc.Runs, sc.Skipped, sc.RacePairs, sc.RacerFired)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  check\tok\tfailed\tcounts as\n")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", c.Name, c.OK, c.Failed, c.Category)
	}
	_ = tw.Flush()
	for _, c := range r.Checks {
		for _, e := range c.Examples {
			fmt.Fprintf(w, "    FAIL %s: %s\n", c.Name, e)
		}
	}
	if verbose {
		for what, m := range map[string]map[string]int64{"engine AWS calls": r.Calls, "faults by call": r.FaultsByCall} {
			var parts []string
			for _, k := range sortedKeys(m) {
				parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
			}
			fmt.Fprintf(w, "    %s: %s\n", what, strings.Join(parts, ", "))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "    note: %s\n", n)
		}
	}
}

// FaultSummary adds up the runs' faults by kind, in report order: the
// line before Summary.
func FaultSummary(results []*Result) string {
	total := map[Kind]int64{}
	for _, r := range results {
		for k, v := range r.Faults {
			total[k] += v
		}
	}
	return "chaos faults by kind: " + FormatCounts(total)
}

// Summary is the one line that ends a chaos command.
func Summary(results []*Result) string {
	var faults int64
	var jobs, lost, dup, mis int
	for _, r := range results {
		faults, jobs, lost, dup, mis = faults+r.FaultTotal(), jobs+r.Jobs, lost+r.Lost, dup+r.Duplicated, mis+r.Mismatched
	}
	return fmt.Sprintf("chaos: %d runs, %d faults injected, %d jobs, lost %d, duplicated %d, mismatched %d", len(results), faults, jobs, lost, dup, mis)
}
