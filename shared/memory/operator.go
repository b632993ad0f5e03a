package memory

import (
	"context"
	"slices"

	"github.com/stepflow/stepflow/shared/engine"
)

var _ engine.OperatorStore = (*Store)(nil)

// operatorFigures are the operator's figures (engine.OperatorStore): the
// last readings and the request counters per route.
type operatorFigures struct {
	readings *engine.Readings
	requests map[string]engine.RequestCounts
}

// copyReadings answers r sharing nothing with it.
func copyReadings(r engine.Readings) *engine.Readings {
	if q := r.Queues; q != nil {
		c := *q
		c.Stack, c.Workers = slices.Clone(q.Stack), slices.Clone(q.Workers)
		r.Queues = &c
	}
	return &r
}

// PutReadings replaces the last readings.
func (s *Store) PutReadings(_ context.Context, r engine.Readings) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.operator.readings = copyReadings(r)
	return nil
}

// RecordRequests adds counts to the routes' counters.
func (s *Store) RecordRequests(_ context.Context, counts map[string]engine.RequestCounts) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.operator.requests == nil {
		s.operator.requests = map[string]engine.RequestCounts{}
	}
	for route, c := range counts {
		t := s.operator.requests[route]
		t.Add(c)
		s.operator.requests[route] = t
	}
	return nil
}

// OperatorFigures answers the last readings and the counters of routes.
func (s *Store) OperatorFigures(_ context.Context, routes []string) (*engine.Readings, map[string]engine.RequestCounts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r *engine.Readings
	if s.operator.readings != nil {
		r = copyReadings(*s.operator.readings)
	}
	out := map[string]engine.RequestCounts{}
	for _, route := range routes {
		if c, ok := s.operator.requests[route]; ok {
			out[route] = c
		}
	}
	return r, out, nil
}
