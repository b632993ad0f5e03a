package domain

import (
	"runtime"
	"sync"
	"weak"
)

// A job of thousands of steps must not pay a scan of its steps for every
// lookup of one by id (each dependency of each step is one): a transition
// would cost O(steps²). stepIndex answers a step's position by id in
// constant time.
//
// It is built lazily from the job's steps and kept while they stand:
// steps are only ever appended (NewJob, a replan), never moved, and a
// step's id never changes, so an index built from as many steps, with the
// same first and last, is the job's. What a step depends on is not kept:
// it is read from the step each time, as a job stored by an older build
// may have it changed.
//
// It is kept beside the job, not in it: jobs are compared field by field
// (the store's round trips, tests), and two equal jobs, one of which has
// built its index, must stay equal. A job's entry goes when the job does.
type stepIndex struct {
	n           int
	first, last *Step
	pos         map[string]int // id -> position
}

// stepIndexes holds each job's stepIndex, keyed by a weak pointer to the
// job so that the table keeps no job alive.
var stepIndexes sync.Map // weak.Pointer[Job] -> *stepIndex

// positions answers j's index of its steps by id, building it if j has
// none or its steps changed.
func (j *Job) positions() map[string]int {
	key := weak.Make(j)
	if v, ok := stepIndexes.Load(key); ok {
		if ix := v.(*stepIndex); ix.of(j) {
			return ix.pos
		}
	}
	ix := newStepIndex(j)
	if _, had := stepIndexes.Swap(key, ix); !had {
		runtime.AddCleanup(j, func(k weak.Pointer[Job]) { stepIndexes.Delete(k) }, key)
	}
	return ix.pos
}

// of reports whether ix was built from j's steps as they stand.
func (ix *stepIndex) of(j *Job) bool {
	if ix.n != len(j.Steps) {
		return false
	}
	return ix.n == 0 || ix.first == j.Steps[0] && ix.last == j.Steps[ix.n-1]
}

func newStepIndex(j *Job) *stepIndex {
	n := len(j.Steps)
	ix := &stepIndex{n: n, pos: make(map[string]int, n)}
	if n > 0 {
		ix.first, ix.last = j.Steps[0], j.Steps[n-1]
	}
	for i := n - 1; i >= 0; i-- {
		ix.pos[j.Steps[i].Spec.ID] = i // the first of a repeated id, as a scan finds
	}
	return ix
}
