package devstack_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/memory"
)

// Schedules over HTTP against a whole local stack on the emulator. The
// stack's heartbeat sweeps every 200 ms; the engine's clock stands still
// unless the test moves it, so each tick comes exactly when the test says.

type jobList struct {
	Jobs []struct {
		ID         string          `json:"id"`
		State      domain.JobState `json:"state"`
		ScheduleID string          `json:"schedule_id"`
	} `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

func scheduledStack(t *testing.T) (*stacktest.Harness, *memory.Clock) {
	t.Helper()
	clock := memory.NewClock(time.Now().UTC().Truncate(time.Second))
	h := stacktest.New(t, func(o *devstack.Options) {
		o.Now = clock.Now
		o.ScheduleEvery = 200 * time.Millisecond // STEPFLOW_SWEEP_EVERY
	})
	return h, clock
}

func runsOf(t *testing.T, h *stacktest.Harness, key, id string) jobList {
	t.Helper()
	var page jobList
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?schedule="+id+"&limit=100", key, nil, &page)
	return page
}

// awaitRuns polls until the schedule has made n jobs.
func awaitRuns(t *testing.T, h *stacktest.Harness, id string, n int) jobList {
	t.Helper()
	var page jobList
	require.Eventually(t, func() bool {
		page = runsOf(t, h, keyA, id)
		return len(page.Jobs) >= n
	}, 30*time.Second, 50*time.Millisecond, "schedule %s never made %d jobs", id, n)
	require.Len(t, page.Jobs, n, "schedule %s made more than %d jobs", id, n)
	return page
}

func TestScheduleEveryFiveSecondsMakesAJobEachTickUntilDeleted(t *testing.T) {
	t.Parallel()
	h, clock := scheduledStack(t)
	created := clock.Now()
	body := map[string]any{"id": "every-5s", "every": "5s", "overlap": "allow", "job": map[string]any{
		"payload": map[string]any{"report": "daily"},
		"steps":   []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}},
	}}
	var s stacktest.ScheduleView
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, body, &s)
	require.Equal(t, "5s", s.Every)
	require.True(t, created.Add(5*time.Second).Equal(*s.NextAt))
	plain := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})

	for tick := 1; tick <= 3; tick++ {
		clock.Advance(5 * time.Second)
		awaitRuns(t, h, "every-5s", tick)
		require.Zero(t, h.Sweep(t).Fired, "tick %d fired once", tick)
	}
	// Downtime: an hour of ticks nobody swept makes one job, not 720.
	clock.Advance(time.Hour)
	page := awaitRuns(t, h, "every-5s", 4)
	require.Zero(t, h.Sweep(t).Fired)
	require.Len(t, runsOf(t, h, keyA, "every-5s").Jobs, 4)

	for _, js := range page.Jobs {
		require.Equal(t, "every-5s", js.ScheduleID)
		require.NotEqual(t, plain.ID, js.ID, "?schedule= lists the schedule's jobs only")
		j := h.AwaitState(t, keyA, js.ID, domain.JobCompleted)
		require.JSONEq(t, `{"report":"daily"}`, string(j.Steps[0].Output))
		var full struct {
			ScheduleID string `json:"schedule_id"`
		}
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+js.ID, keyA, nil, &full)
		require.Equal(t, "every-5s", full.ScheduleID)
		h.CheckReplay(t, tenantA, js.ID)
	}
	require.Empty(t, runsOf(t, h, stacktest.KeyB, "every-5s").Jobs, "another tenant sees none")
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/schedules/every-5s", keyA, nil, &s)
	require.Equal(t, 4, s.Runs)
	require.Equal(t, page.Jobs[0].ID, s.LastJobID, "the newest run")
	require.True(t, clock.Now().Add(5*time.Second).Equal(*s.NextAt), "the first tick after now")

	// Paused, it makes nothing; resumed, it goes on from now.
	var paused stacktest.ScheduleView
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/schedules/every-5s/pause", keyA, nil, &paused)
	require.True(t, paused.Paused)
	require.Nil(t, paused.NextAt)
	clock.Advance(time.Minute)
	require.Zero(t, h.Sweep(t).SchedulesDue)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/schedules/every-5s/resume", keyA, nil, &s)
	require.False(t, s.Paused)
	clock.Advance(5 * time.Second)
	awaitRuns(t, h, "every-5s", 5)

	// Deleted, it stops.
	h.JSON(t, http.StatusOK, http.MethodDelete, "/v1/schedules/every-5s", keyA, nil, &s)
	require.Equal(t, 5, s.Runs)
	status, _ := h.Call(t, http.MethodGet, "/v1/schedules/every-5s", keyA, nil)
	require.Equal(t, http.StatusNotFound, status)
	for range 3 {
		clock.Advance(5 * time.Second)
		require.Zero(t, h.Sweep(t).SchedulesDue)
	}
	require.Len(t, runsOf(t, h, keyA, "every-5s").Jobs, 5)
}
