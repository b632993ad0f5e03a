package costmeter

import (
	"context"
	"maps"
	"math"
	"sync"
	"time"
)

// DefaultMemoryMB is Lambda's memory for a function that names none.
const DefaultMemoryMB = 128

// BilledGBSeconds answers what Lambda bills for one invocation that took
// d at memoryMB: the duration rounded up to the millisecond, at the
// memory in GB (1024 MB).
func BilledGBSeconds(d time.Duration, memoryMB int) float64 {
	ms := math.Ceil(float64(d) / float64(time.Millisecond))
	return ms / 1000 * float64(memoryMB) / 1024
}

// LambdaUse is what one function was billed: requests (invocations) and
// GB-seconds.
type LambdaUse struct{ Requests, GBSeconds float64 }

// Lambda meters the invocations of functions called in process, as Lambda
// bills them: a request each, and the wall time of each at the function's
// memory. A claim's long-poll is part of its invocation, so it is billed
// too.
type Lambda struct {
	memoryMB map[string]int
	mu       sync.Mutex
	use      map[string]LambdaUse
}

// NewLambda answers a meter for functions of these memory sizes (MB, by
// function; DefaultMemoryMB for one not named).
func NewLambda(memoryMB map[string]int) *Lambda {
	return &Lambda{memoryMB: memoryMB, use: map[string]LambdaUse{}}
}

// Record bills one invocation of fn that took d.
func (l *Lambda) Record(fn string, d time.Duration) {
	mb := l.memoryMB[fn]
	if mb <= 0 {
		mb = DefaultMemoryMB
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.use[fn]
	u.Requests++
	u.GBSeconds += BilledGBSeconds(d, mb)
	l.use[fn] = u
}

// Use answers what each function was billed so far.
func (l *Lambda) Use() map[string]LambdaUse {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.use)
}

// Timed answers h billing each call as an invocation of fn, a call that
// fails or panics included (Lambda bills those too).
func Timed[E, R any](l *Lambda, fn string, h func(context.Context, E) (R, error)) func(context.Context, E) (R, error) {
	return func(ctx context.Context, ev E) (R, error) {
		start := time.Now()
		defer func() { l.Record(fn, time.Since(start)) }()
		return h(ctx, ev)
	}
}
