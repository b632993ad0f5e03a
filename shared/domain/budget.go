package domain

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Budget is what a job may cost (docs/model.md#budgets). Once its cost,
// the engine's, what its steps reported and what its child jobs cost,
// passes USD, no further step starts: the job waits at its budget gate
// (WAITING, Exceeded saying why) until a person sets a budget above what
// it cost (SetBudget) or cancels it. A step running then finishes, and
// its outcome is recorded.
type Budget struct {
	USD      float64         `json:"usd"`
	Exceeded *BudgetExceeded `json:"exceeded,omitempty"`
}

// BudgetExceeded is when a job came to its budget gate, at what cost.
type BudgetExceeded struct {
	At      time.Time `json:"at"`
	CostUSD float64   `json:"cost_usd"`
}

// BudgetSpec is a submission's budget.
type BudgetSpec struct {
	USD float64 `json:"usd"`
}

// MaxBudgetUSD bounds a budget: a typo of a billion dollars is refused.
const MaxBudgetUSD = 1e6

// CheckBudget checks a budget in dollars, naming field.
func CheckBudget(field string, usd float64) error {
	if math.IsNaN(usd) || usd <= 0 || usd > MaxBudgetUSD {
		return Invalid(field, "must be a number of US dollars above 0 and at most %g", float64(MaxBudgetUSD))
	}
	return nil
}

// Dollars renders an amount as a person reads a job's cost: a job's own
// is some millionths of a dollar, so it keeps what digits there are.
func Dollars(usd float64) string {
	return "$" + strconv.FormatFloat(roundUSD(usd), 'f', -1, 64)
}

// Message says why the job waits at its budget gate; "" when it does not.
func (b *Budget) Message() string {
	if b == nil || b.Exceeded == nil {
		return ""
	}
	return fmt.Sprintf("budget exceeded: %s of %s", Dollars(b.Exceeded.CostUSD), Dollars(b.USD))
}

// BudgetHeld reports whether the job waits at its budget gate.
func (j *Job) BudgetHeld() bool { return j.Budget != nil && j.Budget.Exceeded != nil }

// HoldIfOverBudget brings the job to its budget gate when its cost has
// passed its budget: its runnable steps are sent nothing more (a message
// already out finds the gate and is dropped), and the job waits once
// nothing of it runs. held reports whether it is at the gate, changed
// whether this call brought it there.
func (j *Job) HoldIfOverBudget(now time.Time) (held, changed bool, err error) {
	if j.Budget == nil || j.State.Terminal() {
		return false, false, nil
	}
	if j.Budget.Exceeded != nil {
		return true, false, nil
	}
	cost := j.CostUSD()
	if cost <= j.Budget.USD {
		return false, false, nil
	}
	j.Budget.Exceeded = &BudgetExceeded{At: now, CostUSD: roundUSD(cost)}
	for _, s := range j.Steps {
		if s.State.leasable() && s.Lease == nil {
			s.ReadyAt, s.Unsent = nil, nil // out of the sweep's sight until the budget is raised
		}
	}
	j.log(NoteBudgetExceeded, "", 0, j.Budget.Message(), now)
	return true, true, j.settle(now)
}

// SetBudget sets the job's budget to usd, which must be more than it has
// cost so far, by whom: a job at its budget gate goes on, its runnable
// steps sent again (the dispatches answered).
func (j *Job) SetBudget(usd float64, by string, now time.Time) ([]Dispatch, error) {
	if j.State.Terminal() {
		return nil, refused("job", j.ID, string(j.State), NoteBudgetSet,
			"job %s is %s; only an unfinished job's budget can be set", j.ID, j.State)
	}
	if err := CheckBudget("usd", usd); err != nil {
		return nil, err
	}
	if cost := j.CostUSD(); usd <= cost {
		return nil, Invalid("usd", "must be more than what job %s has cost so far (%s)", j.ID, Dollars(cost))
	}
	held := j.BudgetHeld()
	j.Budget = &Budget{USD: usd}
	detail := "budget set to " + Dollars(usd)
	if by != "" {
		detail += " by " + by
	}
	j.log(NoteBudgetSet, "", 0, detail, now)
	var out []Dispatch
	if held {
		for _, s := range j.Steps {
			if s.State.leasable() && s.Lease == nil && s.ReplacedBy == nil {
				t := now
				s.ReadyAt = &t
				out = append(out, Dispatch{Step: s})
			}
		}
	}
	return out, j.settle(now)
}
