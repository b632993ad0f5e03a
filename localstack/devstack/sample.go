package devstack

import (
	"context"
	"fmt"

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
	return SeedSampleJob(ctx, s.Engine)
}

// SeedSampleJob makes the sample job on eng, as Stack.SeedSampleJob does.
func SeedSampleJob(ctx context.Context, eng *engine.Engine) (created bool, err error) {
	_, created, err = eng.SubmitAs(ctx, SampleTenant, SampleJobID, []byte(sampleJobSpec))
	if err != nil {
		return false, fmt.Errorf("sample job: %w", err)
	}
	return created, nil
}
