package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// ResourceView is a resource as /v1/resources answers it: its slots in
// use and the leases holding them, live ones only (an expired holder's
// slot is free, whether or not a write has dropped it yet).
type ResourceView struct {
	ID           string            `json:"id"`
	Capabilities []string          `json:"capabilities"`
	Labels       map[string]string `json:"labels"`
	Capacity     int               `json:"capacity"`
	InUse        int               `json:"in_use"`
	Free         int               `json:"free"`
	Holders      []HolderView      `json:"holders"`
	Waiting      []domain.Waiter   `json:"waiting,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// HolderView is a slot in use.
type HolderView struct {
	Job       string    `json:"job_id"`
	Step      string    `json:"step_id"`
	Attempt   string    `json:"attempt"` // job/step/attempt
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

func resourceView(r *domain.Resource, now time.Time) ResourceView {
	v := ResourceView{
		ID: r.ID, Capabilities: r.Capabilities, Labels: r.Labels, Capacity: r.Capacity,
		InUse: r.Live(now), Free: r.Free(now), Holders: []HolderView{}, Waiting: r.Waiters,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	for key, h := range r.Holders {
		if now.Before(h.ExpiresAt) {
			v.Holders = append(v.Holders, HolderView{Job: h.Job, Step: h.Step, Attempt: key, Since: h.Since, ExpiresAt: h.ExpiresAt})
		}
	}
	slices.SortFunc(v.Holders, func(a, b HolderView) int { return strings.Compare(a.Attempt, b.Attempt) })
	return v
}

// putResource creates or changes a resource: 201 when created, 200 when
// changed.
func (a *API) putResource(ctx context.Context, tenant string, r *request) (int, any, error) {
	body, err := r.body()
	if err != nil {
		return 0, nil, err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte(`{}`)
	}
	res, created, err := a.Engine.PutResource(ctx, tenant, r.ev.PathParameters["id"], body)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return status, resourceView(res, a.Engine.Clock()), nil
}

func (a *API) getResource(ctx context.Context, tenant string, r *request) (int, any, error) {
	res, err := a.Engine.GetResource(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resourceView(res, a.Engine.Clock()), nil
}

func (a *API) listResources(ctx context.Context, tenant string, _ *request) (int, any, error) {
	all, err := a.Engine.ListResources(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	now := a.Engine.Clock()
	out := struct {
		Resources []ResourceView `json:"resources"`
	}{Resources: make([]ResourceView, 0, len(all))}
	for _, res := range all {
		out.Resources = append(out.Resources, resourceView(res, now))
	}
	return http.StatusOK, out, nil
}

func (a *API) deleteResource(ctx context.Context, tenant string, r *request) (int, any, error) {
	if err := a.Engine.DeleteResource(ctx, tenant, r.ev.PathParameters["id"]); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"id": r.ev.PathParameters["id"], "deleted": true}, nil
}
