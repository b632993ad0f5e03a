package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ActionMap runs a step per item of a list: its children.
const ActionMap = "map"

// Limits of a map.
const (
	MaxMapItems          = 10000
	DefaultMapConcurrent = 20
	MaxMapConcurrent     = 1000
	// MaxMapItemBytes bounds one item, which its child holds inline, and
	// MaxMapItemsBytes all of a map's: they are part of its job's item.
	MaxMapItemBytes  = DefaultInlineLimit
	MaxMapItemsBytes = 1 << 20
)

// MapAction is the map action type's parameters. A map step, when its
// dependencies are done, evaluates Items (CEL over payload and steps, as a
// condition reads them) to a list and adds a child step per item,
// <map id>[<index>], each running Step on {"item", "index", "input": the
// map's own input}. At most MaxConcurrency run at once: item i starts once
// item i-MaxConcurrency has ended (lanes, as Step Functions' MaxConcurrency
// bounds its iterations). The map waits (WAITING_DEPS) until every child
// has ended, and succeeds with their outputs in item order (a failed
// child's null), or fails as soon as more than ToleratedFailures children
// have failed, which cancels the rest (docs/model.md#map).
type MapAction struct {
	Items             string   `json:"items,omitempty"`
	Step              *MapStep `json:"step,omitempty"`
	MaxConcurrency    int      `json:"max_concurrency,omitempty"`
	ToleratedFailures *int     `json:"tolerated_failures,omitempty"`
}

// MapStep is what each child of a map runs: an executed action, with its
// retry policy and attempt timeout.
type MapStep struct {
	Action         ActionSpec   `json:"action"`
	Retry          *RetryPolicy `json:"retry,omitempty"`
	TimeoutSeconds int          `json:"timeout_seconds,omitempty"`
	// Output keeps part of each child's result, as a step's output does.
	Output string `json:"output,omitempty"`
}

func (MapAction) Name() string       { return ActionMap }
func (MapAction) Executor() Executor { return ExecutorNone }

func (MapAction) Validate(a *ActionSpec, c ActionCheck) error {
	if a.Items == "" {
		return Invalid(c.Field+".items", "is required for action type map: a CEL expression naming a list, such as payload.urls")
	}
	if err := checkShape(c.Field+".items", a.Items, nil, false); err != nil {
		return err
	}
	if a.Step == nil {
		return Invalid(c.Field+".step", `is required for action type map: what each item runs, such as {"action": {"type": "worker", "queue": "q"}}`)
	}
	child := StepSpec{ID: "item", Action: a.Step.Action, Retry: a.Step.Retry, TimeoutSeconds: a.Step.TimeoutSeconds, Output: a.Step.Output}
	kind, known := LookupAction(child.Action.Type)
	if known && kind.Executor() == ExecutorNone {
		return Invalid(c.Field+".step.action.type", "is %q, which nothing runs: a map's items run an executed action (pass, fail, http, lambda, worker, job)", child.Action.Type)
	}
	if err := child.validate(c.Field+".step", c.JobQueue); err != nil {
		return err
	}
	a.Step.Action, a.Step.Retry, a.Step.TimeoutSeconds = child.Action, child.Retry, child.TimeoutSeconds
	if a.MaxConcurrency == 0 {
		a.MaxConcurrency = DefaultMapConcurrent
	} else if a.MaxConcurrency < 1 || a.MaxConcurrency > MaxMapConcurrent {
		return Invalid(c.Field+".max_concurrency", "must be between 1 and %d", MaxMapConcurrent)
	}
	if a.ToleratedFailures == nil {
		zero := 0
		a.ToleratedFailures = &zero
	} else if *a.ToleratedFailures < 0 {
		return Invalid(c.Field+".tolerated_failures", "must be 0 or more")
	}
	return nil
}

// start expands the map into its children, or, once they have all ended
// (its second opening, by progressMaps), finishes it.
func (MapAction) start(j *Job, s *Step, now time.Time) ([]Dispatch, error) {
	i := j.index(s)
	if s.Expanded {
		if ended, _, _ := j.mapTally(i); ended < s.Children {
			// Redriven with children reopened: it waits on them again.
			return nil, j.stepTo(s, StepEvWaitDeps, now, "")
		}
		return j.finishMap(i, now)
	}
	items, err := j.mapItems(i)
	if need := (*NeedDataError)(nil); errors.As(err, &need) {
		return nil, err
	}
	if err != nil {
		return nil, j.failUnrun(s, "items: "+err.Error(), now)
	}
	s.Expanded = true
	if len(items) == 0 {
		return j.finishMap(i, now)
	}
	if err := j.stepTo(s, StepEvWaitDeps, now, fmt.Sprintf("%d items", len(items))); err != nil {
		return nil, err
	}
	if outs, ok, err := j.instantItems(i, items); err != nil || ok {
		if err != nil {
			return nil, err
		}
		return nil, j.runInstantItems(s, items, outs, now)
	}
	k := s.Spec.Action.lanes()
	var out []Dispatch
	for n, c := range j.addItems(s, items, k) {
		if n >= k {
			if err := j.stepTo(c, StepEvWaitDeps, now, ""); err != nil {
				return nil, err
			}
			continue
		}
		ds, err := j.ready(c, now)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// lanes is how many of a map's items run at once.
func (a MapAction) lanes() int { return max(a.MaxConcurrency, 1) }

// addItems adds map step s's children, one per item, PENDING; with lanes,
// each after the item lanes before it.
func (j *Job) addItems(s *Step, items []json.RawMessage, lanes int) []*Step {
	a := s.Spec.Action
	out := make([]*Step, len(items))
	for n, item := range items {
		spec := StepSpec{ID: childID(s.ID(), n), Action: a.Step.Action, Retry: a.Step.Retry, TimeoutSeconds: a.Step.TimeoutSeconds, Output: a.Step.Output}
		if lanes > 0 && n >= lanes {
			spec.DependsOn = []string{childID(s.ID(), n-lanes)}
		}
		out[n] = &Step{Spec: spec, State: StepPending, MapOf: s.ID(), Item: item, Index: n}
	}
	j.Steps = append(j.Steps, out...)
	s.Children = len(items)
	return out
}

func (MapAction) timedOut(ActionSpec) string { return "map timed out" }

// maxInstantItemOutput bounds what an item run at expansion may keep: a
// larger output is the engine's to place (inline or in S3), so its item
// runs as a step of its own.
const maxInstantItemOutput = 512

// instantItems runs map step i's items at once when they are instant:
// pass items whose output expression keeps at most maxInstantItemOutput
// bytes of each (without one, a pass item's output holds the map's whole
// input). ok, with their outputs. Run in the map's own write, they are
// leased and recorded there, one write for all, as a chain records
// instant steps together; nothing runs long enough for max_concurrency to
// bound. Otherwise ok is false and the items run as steps in lanes. The
// map's input is decoded once and shared by every item's evaluation, not
// marshalled into each.
func (j *Job) instantItems(i int, items []json.RawMessage) ([]json.RawMessage, bool, error) {
	st := j.Steps[i].Spec.Action.Step
	if st.Action.Type != ActionPass || st.Output == "" {
		return nil, false, nil
	}
	in, err := j.storedValue(j.InputData(i))
	if err != nil {
		return nil, false, err // a NeedDataError: fetched, then decided again
	}
	input, err := jsonValue(in)
	if err != nil {
		return nil, false, nil
	}
	prg, err := shapeProgram(st.Output, true)
	if err != nil {
		return nil, false, nil
	}
	outs := make([]json.RawMessage, len(items))
	for n, item := range items {
		v, err := jsonValue(item)
		if err != nil {
			return nil, false, nil
		}
		out, err := evalJSON(prg, map[string]any{"output": map[string]any{"item": v, "index": n, "input": input}})
		if err != nil || len(out) > maxInstantItemOutput {
			return nil, false, nil // its step fails or keeps its output as any step does
		}
		outs[n] = out
	}
	return outs, true, nil
}

// runInstantItems adds map step s's children and records each run at
// once with its output; the map then finishes in the same change
// (progressMaps).
func (j *Job) runInstantItems(s *Step, items, outs []json.RawMessage, now time.Time) error {
	j.addItems(s, items, 0) // nothing waits: each is recorded below
	j.settleLater = true
	for n := range items {
		id := childID(s.ID(), n)
		l, err := j.Lease(id, LeaseRequest{Nonce: "map", Duration: time.Minute}, now)
		if err == nil {
			_, err = j.Complete(id, l.ID, outs[n], now)
		}
		if err != nil {
			j.settleLater = false
			return err
		}
	}
	j.settleLater = false
	return j.settle(now)
}

// releaseLane releases item s's lane's next item, if it waits only on s.
func (j *Job) releaseLane(s *Step, now time.Time) ([]Dispatch, error) {
	m, _, err := j.Step(s.MapOf)
	if err != nil {
		return nil, nil
	}
	next, ok := j.positions()[childID(m.ID(), s.Index+m.Spec.Action.lanes())]
	if !ok || j.Steps[next].State != StepWaitingDeps || !j.depsMet(next) {
		return nil, nil
	}
	return j.open(next, now)
}

func childID(mapID string, n int) string { return fmt.Sprintf("%s[%d]", mapID, n) }

// mapItems evaluates map step i's items: a list, each item at most
// MaxMapItemBytes, at most MaxMapItems of them.
func (j *Job) mapItems(i int) ([]json.RawMessage, error) {
	vars, err := j.conditionVars(i)
	if err != nil {
		return nil, err
	}
	prg, err := shapeProgram(j.Steps[i].Spec.Action.Items, false)
	if err != nil {
		return nil, err
	}
	raw, err := evalJSON(prg, vars)
	if err != nil {
		return nil, err
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("is %s, not a list", Truncate(string(raw), 80))
	}
	if len(items) > MaxMapItems {
		return nil, fmt.Errorf("is a list of %d items; the limit is %d", len(items), MaxMapItems)
	}
	if len(j.Steps)+len(items) > MaxSteps+MaxMapItems {
		return nil, fmt.Errorf("would give the job %d steps; the limit is %d", len(j.Steps)+len(items), MaxSteps+MaxMapItems)
	}
	total := 0
	for n, it := range items {
		if len(it) > MaxMapItemBytes {
			return nil, fmt.Errorf("item %d is %d bytes; the limit is %d (pass a reference, such as a URL, instead)", n, len(it), MaxMapItemBytes)
		}
		total += len(it)
	}
	if total > MaxMapItemsBytes {
		return nil, fmt.Errorf("are %d bytes in all; the limit is %d (pass references, such as URLs, instead)", total, MaxMapItemsBytes)
	}
	return items, nil
}

// mapChildren answers the positions of map step i's children.
func (j *Job) mapChildren(i int) []int {
	s := j.Steps[i]
	if s.Children == 0 {
		return nil
	}
	first, ok := j.positions()[childID(s.ID(), 0)]
	if !ok {
		return nil
	}
	out := make([]int, 0, s.Children)
	for n := range s.Children {
		out = append(out, first+n)
	}
	return out
}

// mapTally counts map step i's children that ended, and failed.
func (j *Job) mapTally(i int) (ended, failed int, firstFailed *Step) {
	for _, k := range j.mapChildren(i) {
		c := j.Steps[k]
		switch {
		case c.State == StepFailed:
			failed++
			ended++
			if firstFailed == nil {
				firstFailed = c
			}
		case c.State.Terminal():
			ended++
		}
	}
	return
}

// tolerated reports whether s, a failed child of a map, is within its
// map's tolerated failures: the map goes on without it.
func (j *Job) tolerated(s *Step) bool {
	m, i, err := j.Step(s.MapOf)
	if err != nil {
		return false
	}
	_, failed, _ := j.mapTally(i)
	return failed <= *m.Spec.Action.ToleratedFailures
}

// finishMap ends map step i once its children have: it fails if more
// than it tolerates failed, else succeeds with their outputs in order.
func (j *Job) finishMap(i int, now time.Time) ([]Dispatch, error) {
	s := j.Steps[i]
	_, failed, first := j.mapTally(i)
	if failed > *s.Spec.Action.ToleratedFailures {
		return nil, j.failMap(i, now)
	}
	if err := j.stepTo(s, StepEvWait, now, ""); err != nil {
		return nil, err
	}
	detail := fmt.Sprintf("%d items", s.Children)
	if failed > 0 {
		detail += fmt.Sprintf(", %d failed (first %s: %s)", failed, first.ID(), first.Error.Message)
	}
	if err := j.stepTo(s, StepEvWake, now, detail); err != nil {
		return nil, err
	}
	s.OutputIsChildren, s.Timer = true, nil
	return j.releaseAfter(i, now)
}

// failMap fails map step i, whose children failed past its tolerance:
// the job fails with it (settle), which cancels the children left.
func (j *Job) failMap(i int, now time.Time) error {
	s := j.Steps[i]
	_, failed, first := j.mapTally(i)
	return j.failUnrun(s, fmt.Sprintf("%d of %d items failed (tolerated %d); %s: %s", failed, s.Children, *s.Spec.Action.ToleratedFailures, first.ID(), first.Error.Message), now)
}

// progressMaps moves every expanded map on after a change: a map past its
// tolerance fails; the lane successors of a child whose failure it
// tolerates are released; a map whose children have all ended finishes.
// What this releases goes to Released, for the engine to send.
func (j *Job) progressMaps(now time.Time) error {
	for i, s := range j.Steps {
		if s.Children == 0 || s.State != StepWaitingDeps {
			continue
		}
		ended, failed, _ := j.mapTally(i)
		if failed > *s.Spec.Action.ToleratedFailures {
			if err := j.failMap(i, now); err != nil {
				return err
			}
			continue
		}
		for _, k := range j.mapChildren(i) {
			c := j.Steps[k]
			if c.State != StepFailed {
				continue
			}
			ds, err := j.releaseLane(c, now)
			if err != nil {
				return err
			}
			j.Released = append(j.Released, ds...)
		}
		if ended < s.Children {
			continue
		}
		if err := j.stepTo(s, StepEvDepsMet, now, ""); err != nil {
			return err
		}
		ds, err := j.open(i, now)
		if err != nil {
			return err
		}
		j.Released = append(j.Released, ds...)
	}
	return nil
}

// TakeReleased answers the steps a change released beside what its call
// answered (progressMaps), and forgets them.
func (j *Job) TakeReleased() []Dispatch {
	ds := j.Released
	j.Released = nil
	return ds
}
