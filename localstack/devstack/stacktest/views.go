package stacktest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// ResourceView is the part of GET /v1/resources/{id} the resource tests
// read.
type ResourceView struct {
	ID       string `json:"id"`
	Capacity int    `json:"capacity"`
	InUse    int    `json:"in_use"`
	Holders  []struct {
		Job string `json:"job_id"`
	} `json:"holders"`
}

// StepView is the part of a job's step the resource and failure tests
// read.
type StepView struct {
	ID           string               `json:"id"`
	State        domain.StepState     `json:"state"`
	Avoid        []string             `json:"avoid"`
	ResourceWait *domain.ResourceWait `json:"resource_wait"`
	NextRunAt    *time.Time           `json:"next_run_at"`
	Attempts     []struct {
		Resource string              `json:"resource"`
		State    domain.AttemptState `json:"state"`
	} `json:"attempts"`
}

// Steps answers tenant A's job id's steps, over HTTP.
func (h *Harness) Steps(t testing.TB, id string) []StepView {
	t.Helper()
	var j struct {
		Steps []StepView `json:"steps"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id, KeyA, nil, &j)
	return j.Steps
}

// InUse reads tenant A's resources gpu-1 and gpu-2 and requires neither
// to hold more slots than its capacity.
func (h *Harness) InUse(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, id := range []string{"gpu-1", "gpu-2"} {
		var r ResourceView
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/resources/"+id, KeyA, nil, &r)
		require.LessOrEqual(t, r.InUse, r.Capacity, "capacity is never exceeded")
		require.Len(t, r.Holders, r.InUse)
		out[id] = r.InUse
	}
	return out
}

// ScheduleView is a schedule as GET /v1/schedules/{id} answers it.
type ScheduleView struct {
	ID        string     `json:"id"`
	Every     string     `json:"every"`
	Cron      string     `json:"cron"`
	TimeZone  string     `json:"time_zone"`
	Overlap   string     `json:"overlap"`
	Paused    bool       `json:"paused"`
	NextAt    *time.Time `json:"next_at"`
	LastRunAt *time.Time `json:"last_run_at"`
	LastJobID string     `json:"last_job_id"`
	Runs      int        `json:"runs"`
	Skipped   int        `json:"skipped"`
}
