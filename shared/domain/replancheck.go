package domain

import "fmt"

// The replans a spec's fail actions carry are checked at submit, each on
// the job as it will stand when it happens (checkReplan). Done as
// checkReplan does it, by building that job and looking for a cycle in
// it, that costs O(steps) a replan: O(steps²) for a spec of MaxSteps
// steps that all carry one, seconds of a submit. checkReplans answers the
// same in about O(steps) for the whole spec, and leaves a replan that
// fails to checkReplan, which says what is wrong with it as it always
// has.
//
// What makes it cheap: the job's graph has no cycle (validateDeps), and
// a replan puts its steps in the place of one (rewire) so that the
// steps that waited on it wait on the new ones. The new steps then close
// a cycle exactly when they wait on each other in a cycle, or one of
// them depends on a step that waited, down some path, on the one
// replaced: from there the path leads back through the rewired steps to
// every new step. Which steps wait on which replaced step is one pass
// over the graph (carrierReach). A replan a new step carries joins the
// job as that replan left it, and the same holds there: a step waited on
// a new step of the replan above when it is one of those new steps and
// waits on it among them, or is a step from before and waited on the
// step that replan replaced.

// checkReplans checks the replans specs carry (graph: the specs declare
// their dependencies, else they run in order; index: their positions by
// id; they form no cycle), as checkReplan of each in turn would.
func checkReplans(specs []StepSpec, graph bool, index map[string]int) error {
	var carriers []int
	for i := range specs {
		if len(specs[i].Action.Steps) > 0 {
			carriers = append(carriers, i)
		}
	}
	if len(carriers) == 0 {
		return nil
	}
	deps := make([][]int, len(specs))
	for i, st := range specs {
		if !graph {
			if i > 0 {
				deps[i] = []int{i - 1}
			}
			continue
		}
		for _, id := range st.DependsOn {
			deps[i] = append(deps[i], index[id])
		}
	}
	top := &replanLevel{replaced: -1, steps: specs, ids: index, reach: newCarrierReach(deps, topoOrder(deps), carriers)}
	for _, i := range carriers {
		if top.fits(i, specs[i].Action.Steps) {
			continue
		}
		if err := checkReplan(specs, graph, i, specs[i].Action.Steps, fmt.Sprintf("steps[%d].action.steps", i)); err != nil {
			return err
		}
	}
	return nil
}

// replanLevel is the job as a replan leaves it, as far as checking the
// replans within it needs: the steps it added (steps, from position
// offset, ids their positions) in place of the step at replaced, within
// the job as the level above left it (up); the top level is the spec's
// own steps (up nil).
type replanLevel struct {
	up       *replanLevel
	replaced int
	offset   int
	steps    []StepSpec
	ids      map[string]int
	reach    *carrierReach // which of its steps carrying a replan each of its steps waits on, among them
}

func (l *replanLevel) lookup(id string) (int, bool) {
	for ; l != nil; l = l.up {
		if p, ok := l.ids[id]; ok {
			return p, true
		}
	}
	return 0, false
}

// waitedOn reports whether the step at position x waits, down some path,
// on the step at position at, one of l's steps that carries a replan, in
// the job as l leaves it.
func (l *replanLevel) waitedOn(x, at int) bool {
	if x < l.offset {
		return l.up.waitedOn(x, l.replaced)
	}
	return l.reach.waits(x-l.offset, at-l.offset)
}

// fits reports whether steps may take the place of the step at position
// at, one of l's: what checkReplan would find no fault with. false may
// mean a fault, never the reverse.
func (l *replanLevel) fits(at int, steps []StepSpec) bool {
	total := l.offset + len(l.steps)
	if total+len(steps) > MaxSteps {
		return false
	}
	next := &replanLevel{up: l, replaced: at, offset: total, steps: steps, ids: make(map[string]int, len(steps))}
	for k, st := range steps {
		if !validID(st.ID) {
			return false
		}
		if _, dup := next.lookup(st.ID); dup {
			return false
		}
		next.ids[st.ID] = total + k
	}
	replaced := l.steps[at-l.offset].ID
	among := make([][]int, len(steps)) // their dependencies on each other
	for k, st := range steps {
		for d, dep := range st.DependsOn {
			if dep == replaced || dep == st.ID || containsBefore(st.DependsOn, d) {
				return false
			}
			if p, ok := next.ids[dep]; ok {
				among[k] = append(among[k], p-total)
				continue
			}
			x, ok := l.lookup(dep)
			if !ok || l.waitedOn(x, at) {
				return false
			}
		}
	}
	order := topoOrder(among)
	if len(order) < len(steps) {
		return false // they wait on each other in a cycle
	}
	var carriers []int
	for k := range steps {
		if len(steps[k].Action.Steps) > 0 {
			carriers = append(carriers, k)
		}
	}
	if len(carriers) == 0 {
		return true
	}
	next.reach = newCarrierReach(among, order, carriers)
	for _, k := range carriers {
		if !next.fits(total+k, steps[k].Action.Steps) {
			return false
		}
	}
	return true
}

// containsBefore reports whether ids[d] is also one of ids[:d].
func containsBefore(ids []string, d int) bool {
	for _, id := range ids[:d] {
		if id == ids[d] {
			return true
		}
	}
	return false
}

// topoOrder answers the nodes of a graph (deps[v]: the nodes v waits on)
// in an order each comes after what it waits on (Kahn's algorithm); one
// with a cycle answers fewer than all.
func topoOrder(deps [][]int) []int {
	waiting := make([]int, len(deps))
	after := make([][]int, len(deps))
	order := make([]int, 0, len(deps))
	for v, ds := range deps {
		waiting[v] = len(ds)
		for _, d := range ds {
			after[d] = append(after[d], v)
		}
		if len(ds) == 0 {
			order = append(order, v)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, v := range after[order[i]] {
			if waiting[v]--; waiting[v] == 0 {
				order = append(order, v)
			}
		}
	}
	return order
}

// carrierReach answers, for each node of a graph with no cycle, which of
// some of its nodes (the carriers) it waits on, directly or down a path:
// a bit set per node, filled in one pass in topological order.
type carrierReach struct {
	words int
	bit   map[int]int // carrier -> its bit
	bits  []uint64    // node v's set is bits[v*words:(v+1)*words]
}

func newCarrierReach(deps [][]int, order, carriers []int) *carrierReach {
	r := &carrierReach{words: (len(carriers) + 63) / 64, bit: make(map[int]int, len(carriers))}
	for c, v := range carriers {
		r.bit[v] = c
	}
	r.bits = make([]uint64, len(deps)*r.words)
	for _, v := range order {
		set := r.set(v)
		for _, d := range deps[v] {
			for w, x := range r.set(d) {
				set[w] |= x
			}
			if c, ok := r.bit[d]; ok {
				set[c/64] |= 1 << (c % 64)
			}
		}
	}
	return r
}

func (r *carrierReach) set(v int) []uint64 { return r.bits[v*r.words : (v+1)*r.words] }

// waits reports whether node v waits, down some path, on carrier at.
func (r *carrierReach) waits(v, at int) bool {
	c := r.bit[at]
	return r.set(v)[c/64]&(1<<(c%64)) != 0
}
