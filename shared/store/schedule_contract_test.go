package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/store"
)

// TestScheduleContract runs the engine's schedule contract against the
// DynamoDB adapter on the emulator, each check on a table of its own.
func TestScheduleContract(t *testing.T) {
	t.Parallel()
	enginetest.ScheduleContract(t, func(t *testing.T) enginetest.ScheduleFixture {
		h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true })
		table := h.Resources.Tables["JobsTable"]
		require.NotEmpty(t, table)
		return enginetest.ScheduleFixture{Schedules: store.NewSchedules(h.DynamoDB, table), Jobs: store.New(h.DynamoDB, table)}
	})
}
