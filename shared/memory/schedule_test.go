package memory_test

import (
	"testing"

	"github.com/stepflow/stepflow/shared/enginetest"
	"github.com/stepflow/stepflow/shared/memory"
)

func TestScheduleContract(t *testing.T) {
	t.Parallel()
	enginetest.ScheduleContract(t, func(t *testing.T) enginetest.ScheduleFixture {
		jobs := memory.NewStore()
		return enginetest.ScheduleFixture{Schedules: memory.NewSchedules(jobs), Jobs: jobs, Now: (&memory.Clock{}).Now()}
	})
}
