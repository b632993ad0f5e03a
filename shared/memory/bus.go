package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.Publisher = (*Bus)(nil)

// Bus is the in-memory event bus: it records the job state changes
// published to it, in order, as the EventBridge bus (shared/eventbus)
// carries them to its rules.
type Bus struct {
	mu      sync.Mutex
	changes []engine.JobStateChange
	calls   int
}

// NewBus answers an empty bus.
func NewBus() *Bus { return &Bus{} }

// Publish records changes.
func (b *Bus) Publish(_ context.Context, changes []engine.JobStateChange) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	b.changes = append(b.changes, changes...)
	return nil
}

// Changes answers every change published so far, in order.
func (b *Bus) Changes() []engine.JobStateChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.changes)
}

// Calls answers how many times Publish was called.
func (b *Bus) Calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}
