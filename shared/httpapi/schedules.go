package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// ScheduleView is a schedule as the schedule routes answer it.
type ScheduleView struct {
	ID        string          `json:"id"`
	Cron      string          `json:"cron,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
	Every     string          `json:"every,omitempty"`
	Overlap   domain.Overlap  `json:"overlap"`
	Paused    bool            `json:"paused"`
	NextAt    *time.Time      `json:"next_at,omitempty"`
	LastRunAt *time.Time      `json:"last_run_at,omitempty"` // the tick of the last job made
	LastJobID string          `json:"last_job_id,omitempty"`
	LastError string          `json:"last_error,omitempty"` // why the last tick made no job, if its job was refused
	Runs      int64           `json:"runs"`
	Skipped   int64           `json:"skipped"`
	Job       json.RawMessage `json:"job"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func scheduleView(s *domain.Schedule) ScheduleView {
	return ScheduleView{
		ID: s.ID, Cron: s.Cron, TimeZone: s.TimeZone, Every: s.Every, Overlap: s.Overlap, Paused: s.Paused,
		NextAt: s.NextAt, LastRunAt: s.LastRunAt, LastJobID: s.LastJobID, LastError: s.LastError,
		Runs: s.Runs, Skipped: s.Skipped, Job: s.Job, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// createSchedule makes a schedule: 201, or 200 when one of that id was made
// from the same body; another body under a taken id answers 409.
func (a *API) createSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	b, err := r.body()
	if err != nil {
		return 0, nil, err
	}
	s, created, err := a.Engine.CreateSchedule(ctx, tenant, b)
	if err != nil {
		return 0, nil, err
	}
	r.setHeader("location", "/v1/schedules/"+s.ID)
	if !created {
		return http.StatusOK, scheduleView(s), nil
	}
	return http.StatusCreated, scheduleView(s), nil
}

// replaceSchedule answers PUT /v1/schedules/{id}: the schedule with the
// body's definition, its runs and pause kept.
func (a *API) replaceSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	b, err := r.body()
	if err != nil {
		return 0, nil, err
	}
	s, err := a.Engine.ReplaceSchedule(ctx, tenant, r.ev.PathParameters["id"], b)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(s), nil
}

func (a *API) listSchedules(ctx context.Context, tenant string, r *request) (int, any, error) {
	q := r.ev.QueryStringParameters
	limit := int32(50)
	if l := q["limit"]; l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, domain.Invalid("limit", "must be a whole number from 1 to 100")
		}
		limit = int32(n)
	}
	list, next, err := a.Engine.ListSchedules(ctx, tenant, q["cursor"], limit)
	if err != nil {
		return 0, nil, err
	}
	views := make([]ScheduleView, 0, len(list))
	for _, s := range list {
		views = append(views, scheduleView(s))
	}
	return http.StatusOK, map[string]any{"schedules": views, "next_cursor": next}, nil
}

func (a *API) getSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	s, err := a.Engine.GetSchedule(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(s), nil
}

// deleteSchedule removes a schedule and answers it as it was.
func (a *API) deleteSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	s, err := a.Engine.DeleteSchedule(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(s), nil
}

// pauseSchedule and resumeSchedule take no body; both are idempotent.
func (a *API) pauseSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct{} // no members: anything else answers 400
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	s, err := a.Engine.PauseSchedule(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(s), nil
}

func (a *API) resumeSchedule(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct{}
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	s, err := a.Engine.ResumeSchedule(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleView(s), nil
}
