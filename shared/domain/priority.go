package domain

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Priority is a job's priority as a client writes it: 0, 1 or 2, or the
// quality platform's "P0", "P1", "P2" (docs/model.md#priorities). P0 is
// served first.
type Priority int

// UnmarshalJSON accepts a number 0-2 or a string P0-P2 (or "0"-"2").
func (p *Priority) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		return p.set(n)
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("priority must be 0, 1 or 2, or \"P0\", \"P1\" or \"P2\"")
	}
	t := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "P")
	if len(t) != 1 || t[0] < '0' || t[0] > '9' {
		return fmt.Errorf("priority %q is not P0, P1 or P2", s)
	}
	return p.set(int(t[0] - '0'))
}

func (p *Priority) set(n int) error {
	if n < 0 || n > MaxPriority {
		return fmt.Errorf("priority %d is not 0, 1 or 2", n)
	}
	*p = Priority(n)
	return nil
}

// Label is the priority as the quality platform names it: P0, P1, P2.
func (p Priority) Label() string { return fmt.Sprintf("P%d", int(p)) }
