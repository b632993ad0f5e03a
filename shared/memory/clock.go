// Package memory holds in-memory adapters of the engine's ports: a Store
// (engine.Store) and a Queue (engine.Queue) that keep the contract the
// DynamoDB and SQS adapters keep (shared/enginetest runs one suite against
// both pairs), driven by a Clock the test moves. They make the engine's
// tests take milliseconds and need no emulator. They are not for
// production: nothing is persisted but what a process writes of their
// Snapshot and gives back to Restore, as the embedded dev stack
// (localstack/embedded) does to keep a restart from losing its jobs.
//
// What they model and what they do not:
//
//   - Store: a job is kept encoded (its JSON document beside the few
//     attributes a condition reads: state, version, queue, due time), as the
//     DynamoDB item is, so every Get answers a fresh copy and a Save is one
//     conditional write under one lock. The due index is one part, not
//     DynamoDB's shards, so Due's limit is the whole answer's. A job's
//     stored size is bounded like DynamoDB's item (see MaxItemBytes).
//     Nothing expires by TTL: finished jobs and idempotency records stay
//     (an expired idempotency record is free, as in the table).
//   - Queue: a message is visible, delayed or in flight; a receive hides it
//     for the queue's visibility timeout and it comes back after it unless
//     acked or extended (at-least-once). Delays are whole seconds, capped
//     at 900 s, like SQS. Redrive to a dead-letter list after a number of
//     receives is modelled (the template's maxReceiveCount); ordering is
//     by send (SQS standard queues promise none), and fair queueing by
//     message group is not modelled.
//   - Bus: the job state changes published (engine.Publisher), recorded
//     in order; EventBridge's rules, targets and retries are not modelled.
//   - Time is the Clock's: Take never blocks on its wait, and a delay or a
//     visibility timeout runs out when the test advances the clock.
package memory

import (
	"sync"
	"time"
)

// Epoch is where a zero Clock starts.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a test clock that moves only when told to. It is safe for
// concurrent use; its zero value starts at Epoch.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock answers a clock set to start (in UTC).
func NewClock(start time.Time) *Clock { return &Clock{now: start.UTC()} }

// Now answers the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = Epoch
	}
	return c.now
}

// Advance moves the clock forward by d (a negative d is ignored: time does
// not go back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = Epoch
	}
	if d > 0 {
		c.now = c.now.Add(d)
	}
}
