package enginetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// PublisherFixture is one check's publisher: a bus of its own, nothing
// published to it yet.
type PublisherFixture struct {
	Publisher engine.Publisher
	// Received waits until n changes have arrived where the bus delivers
	// them (for EventBridge, a rule's target), failing the check if they
	// do not come, and answers them in any order.
	Received func(t *testing.T, n int) []engine.JobStateChange
	// Skip names checks this adapter is known to fail, each with why.
	Skip map[string]string
}

var publisherChecks = []check[PublisherFixture]{
	{"a job's changes arrive whole", publishWhole},
	{"more changes than one request carries all arrive", publishMany},
}

// PublisherChecks answers the names of the publisher contract's checks.
func PublisherChecks() []string { return names(publisherChecks) }

// PublisherContract runs every publisher check, each in parallel on a
// fixture of its own from setup.
func PublisherContract(t *testing.T, setup func(t *testing.T) PublisherFixture) {
	run(t, publisherChecks, func(t *testing.T) (PublisherFixture, map[string]string) {
		f := setup(t)
		require.NotNil(t, f.Received, "the fixture must say how published changes are read back")
		return f, f.Skip
	})
}

// sortChanges orders changes by job, then by their place in its log.
func sortChanges(cs []engine.JobStateChange) []engine.JobStateChange {
	slices.SortFunc(cs, func(a, b engine.JobStateChange) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Seq, b.Seq))
	})
	return cs
}

func publishWhole(t *testing.T, f PublisherFixture) {
	at := time.Now().UTC().Truncate(time.Millisecond)
	job := fmt.Sprintf("01J%023d", at.UnixNano()%1e15)
	sent := []engine.JobStateChange{
		{Tenant: "tenant-a", JobID: job, From: domain.JobInitial, To: domain.JobQueued, At: at, Event: "job_created", Seq: 1, ScheduleID: "nightly"},
		{Tenant: "tenant-a", JobID: job, From: domain.JobQueued, To: domain.JobRunning, At: at.Add(time.Second), Event: "job_running", Seq: 4, ScheduleID: "nightly"},
		{
			Tenant: "tenant-a", JobID: job, From: domain.JobRunning, To: domain.JobFailed, At: at.Add(2 * time.Second), Event: "job_failed", Seq: 9, ScheduleID: "nightly",
			Step: "render", Error: &domain.StepError{Class: domain.ClassFatal, Message: "bad input: \"x\" ✗"},
		},
	}
	require.NoError(t, f.Publisher.Publish(context.Background(), sent[:1]))
	require.NoError(t, f.Publisher.Publish(context.Background(), sent[1:]))
	require.Equal(t, sent, sortChanges(f.Received(t, len(sent))))
}

func publishMany(t *testing.T, f PublisherFixture) {
	at := time.Now().UTC().Truncate(time.Millisecond)
	var sent []engine.JobStateChange
	for i := range 23 { // EventBridge takes 10 entries a request
		sent = append(sent, engine.JobStateChange{
			Tenant: "tenant-b", JobID: fmt.Sprintf("01K%023d", i), From: domain.JobRunning, To: domain.JobCompleted,
			At: at, Event: "job_completed", Seq: 7,
		})
	}
	require.NoError(t, f.Publisher.Publish(context.Background(), sent))
	require.Equal(t, sent, sortChanges(f.Received(t, len(sent))))
}
