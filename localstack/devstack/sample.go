package devstack

import (
	"context"
	"errors"
	"fmt"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// The sample job `make dev` keeps under the dev tenant, so the sample
// events act on a real job: events/enqueue-get.json reads it and
// events/execute-sqs.json names its step. Its id is fixed (the engine
// mints ids, so the events could not name one it made).
const (
	SampleTenant = "dev"
	// SampleJobID is a ULID of 2026-01-01T00:00:00Z that reads SAMP1E0J0B.
	SampleJobID   = "01KDVDNA00SAMP1E0J0B000000"
	SampleStep    = "hello"
	sampleJobSpec = `{"steps":[{"id":"hello","action":{"type":"pass"}}],"payload":{"hello":"world"}}`
)

// SeedSampleJob makes the sample job unless the table already holds it (a
// restored state, a second start on one emulator) and dispatches its step,
// as a submission would: the runner then runs it to COMPLETED.
func (s *Stack) SeedSampleJob(ctx context.Context) (created bool, err error) {
	e := s.Engine
	if _, err := e.Store.Get(ctx, SampleTenant, SampleJobID); err == nil {
		return false, nil
	} else if !errors.Is(err, domain.ErrNotFound) {
		return false, fmt.Errorf("sample job: %w", err)
	}
	spec, err := domain.ParseJobSpec([]byte(sampleJobSpec))
	if err != nil {
		return false, fmt.Errorf("sample job: %w", err)
	}
	// What Engine.Submit sets beside the id it mints.
	spec.ParkAfter, spec.Retention, spec.ResourceWait = e.TimerThreshold, e.Retention, e.ResourceWait
	now := e.Now()
	j, err := domain.NewJob(SampleTenant, SampleJobID, spec, "", now)
	if err != nil {
		return false, fmt.Errorf("sample job: %w", err)
	}
	if j, created, err = e.Store.Create(ctx, j, "", now); err != nil {
		return false, fmt.Errorf("sample job: %w", err)
	}
	// A lost send is re-sent by the sweep from the due index, as for any job.
	if err := e.Queue.Dispatch(ctx, j, engine.Route(j, j.Outstanding(now))); err != nil {
		s.log.Warn("sample job: dispatch failed; the sweep will re-send", "err", err)
	}
	return created, nil
}
