package engine

import (
	"encoding/json"
	"time"
)

// Deciding reports whether a decision runs now (commit.go): a test's
// adapters refuse any call made while one does.
func (e *Engine) Deciding() bool { return e.deciding.Load() > 0 }

// Configure changes an engine's configuration after New, for tests that
// wrap an adapter of the bundle they were given.
func (e *Engine) Configure(f func(c *Config)) { f(&e.cfg) }

// SuccessMark answers the mark a success under leaseID makes (marks.go).
func SuccessMark(leaseID string, output json.RawMessage, at time.Time) []byte {
	rec, _ := markOf(leaseID, output, nil, nil, at)
	return rec
}

// CarryVisibility is how long a chain hides its message to carry steps
// out of the due index (execute.go).
const CarryVisibility = carryVisibility
