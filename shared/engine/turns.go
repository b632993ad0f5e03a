package engine

import (
	"context"
	"sync"
)

// JobTurns has the changes of one job that one invocation makes at once
// take turns. An execute invocation runs its batch's deliveries at once,
// and those of one job (a fan-out's branches, sent together, often land
// in one batch) would otherwise each read the job, decide and lose the
// write to another, again and again. In turns, each change reads the job
// as the one before saved it and wins; the actions themselves (an http
// call, a Lambda invoke) still run at once, outside any change. Writers in
// other invocations race as before: a turn is no lock on the job.
type JobTurns struct {
	mu    sync.Mutex
	turns map[jobRef]chan struct{}
}

type jobRef struct{ tenant, id string }

// NewJobTurns answers turns for one invocation's deliveries.
func NewJobTurns() *JobTurns { return &JobTurns{turns: map[jobRef]chan struct{}{}} }

type turnsKey struct{}

// heldKey marks a context whose change already has its job's turn: a
// change it makes of the same job (a cancel saved first, a job put back in
// the due index) needs no other.
type heldKey struct{ ref jobRef }

// WithJobTurns answers ctx under which changes of one job take turns.
func WithJobTurns(ctx context.Context, t *JobTurns) context.Context {
	return context.WithValue(ctx, turnsKey{}, t)
}

// takeTurn waits for the job's turn when ctx has turns, and answers the
// context the change goes on under and the release of its turn. A
// context that ends while waiting goes on without the turn: the write is
// still conditional, so it merely races.
func takeTurn(ctx context.Context, tenant, id string) (context.Context, func()) {
	t, _ := ctx.Value(turnsKey{}).(*JobTurns)
	ref := jobRef{tenant, id}
	if t == nil || ctx.Value(heldKey{ref}) != nil {
		return ctx, func() {}
	}
	t.mu.Lock()
	turn, ok := t.turns[ref]
	if !ok {
		turn = make(chan struct{}, 1)
		t.turns[ref] = turn
	}
	t.mu.Unlock()
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return ctx, func() {}
	}
	return context.WithValue(ctx, heldKey{ref}, true), func() { <-turn }
}
