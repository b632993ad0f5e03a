package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PutResource creates (created true) or changes a resource.
func (c *Client) PutResource(ctx context.Context, id string, r ResourceRequest) (*Resource, bool, error) {
	var res Resource
	status, _, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/resources/" + esc(id), body: r, out: &res})
	if err != nil {
		return nil, false, err
	}
	return &res, status == http.StatusCreated, nil
}

// Resource answers a resource with its live holders and waiting steps.
func (c *Client) Resource(ctx context.Context, id string) (*Resource, error) {
	var res Resource
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/resources/" + esc(id), out: &res}); err != nil {
		return nil, err
	}
	return &res, nil
}

// Resources answers the tenant's resources.
func (c *Client) Resources(ctx context.Context) ([]Resource, error) {
	var out struct {
		Resources []Resource `json:"resources"`
	}
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/resources", out: &out}); err != nil {
		return nil, err
	}
	return out.Resources, nil
}

// DeleteResource deletes a resource; 409 while a slot is held.
func (c *Client) DeleteResource(ctx context.Context, id string) error {
	_, _, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/resources/" + esc(id)})
	return err
}

// CreateSchedule creates a schedule (Schedule.Created), or answers the one
// made from the same body before; another body under its id answers 409.
func (c *Client) CreateSchedule(ctx context.Context, s ScheduleRequest) (*Schedule, error) {
	return c.createSchedule(ctx, s)
}

// CreateScheduleJSON creates a schedule from its JSON body as it is.
func (c *Client) CreateScheduleJSON(ctx context.Context, body json.RawMessage) (*Schedule, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("stepflow: the schedule body is not valid JSON")
	}
	return c.createSchedule(ctx, body)
}

func (c *Client) createSchedule(ctx context.Context, body any) (*Schedule, error) {
	var s Schedule
	status, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/schedules", body: body, out: &s})
	if err != nil {
		return nil, err
	}
	s.Created = status == http.StatusCreated
	return &s, nil
}

// Schedule answers a schedule.
func (c *Client) Schedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodGet, "/v1/schedules/"+esc(id))
}

// ReplaceSchedule gives schedule id the definition s (with the same id):
// its runs, last run and pause are kept (PUT /v1/schedules/{id}).
func (c *Client) ReplaceSchedule(ctx context.Context, id string, s ScheduleRequest) (*Schedule, error) {
	var out Schedule
	if _, _, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/schedules/" + esc(id), body: s, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplaceScheduleJSON is ReplaceSchedule of a JSON body as it is.
func (c *Client) ReplaceScheduleJSON(ctx context.Context, id string, body json.RawMessage) (*Schedule, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("stepflow: the schedule body is not valid JSON")
	}
	var out Schedule
	if _, _, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/schedules/" + esc(id), body: body, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes a schedule and answers it as it was.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodDelete, "/v1/schedules/"+esc(id))
}

// PauseSchedule pauses a schedule (idempotent).
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/v1/schedules/"+esc(id)+"/pause")
}

// ResumeSchedule resumes a schedule from its first tick after now
// (idempotent).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/v1/schedules/"+esc(id)+"/resume")
}

func (c *Client) scheduleCall(ctx context.Context, method, path string) (*Schedule, error) {
	var s Schedule
	if _, _, err := c.do(ctx, call{method: method, path: path, out: &s}); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSchedules answers one page of the tenant's schedules, by id.
func (c *Client) ListSchedules(ctx context.Context, limit int, cursor string) (*SchedulePage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p SchedulePage
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/schedules", query: q, out: &p}); err != nil {
		return nil, err
	}
	return &p, nil
}

// Schedules iterates over all the tenant's schedules, a page of limit at a
// time (0: the API's default).
func (c *Client) Schedules(ctx context.Context, limit int) iter.Seq2[Schedule, error] {
	return func(yield func(Schedule, error) bool) {
		for page, err := range pages(func(cursor string) (*SchedulePage, string, error) {
			p, err := c.ListSchedules(ctx, limit, cursor)
			if err != nil {
				return nil, "", err
			}
			return p, p.NextCursor, nil
		}, "") {
			if err != nil {
				yield(Schedule{}, err)
				return
			}
			for _, s := range page.Schedules {
				if !yield(s, nil) {
					return
				}
			}
		}
	}
}

// Claim takes up to r.Max leases from a worker queue, long-polling up to
// r.WaitSeconds for the first; none is an empty slice. Retried only on
// 429: a lost answer's leases come back to the queue when they expire.
func (c *Client) Claim(ctx context.Context, r ClaimRequest) ([]Lease, error) {
	var out struct {
		Leases []Lease `json:"leases"`
	}
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/claim", body: r, out: &out, retry: retryThrottled}); err != nil {
		return nil, err
	}
	return out.Leases, nil
}

// Heartbeat extends a lease by extend (0: the step's lease_seconds). A
// lease whose job was cancelled answers CancelRequested and is not
// extended; a lost one answers an error IsLeaseLost reports.
func (c *Client) Heartbeat(ctx context.Context, leaseID string, extend time.Duration) (*HeartbeatResult, error) {
	body := map[string]int{}
	if extend > 0 {
		body["extend_seconds"] = int((extend + time.Second - 1) / time.Second)
	}
	var h HeartbeatResult
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/leases/" + esc(leaseID) + "/heartbeat", body: body, out: &h}); err != nil {
		return nil, err
	}
	return &h, nil
}

// Complete records a lease's success with its output (any JSON value; a
// json.RawMessage is sent as it is).
func (c *Client) Complete(ctx context.Context, leaseID string, output any) (*OutcomeResult, error) {
	return c.CompleteReporting(ctx, leaseID, output, 0)
}

// CompleteReporting is Complete of an attempt that reports what it spent
// itself (costUSD, in US dollars; 0 for nothing), added to its job's cost.
func (c *Client) CompleteReporting(ctx context.Context, leaseID string, output any, costUSD float64) (*OutcomeResult, error) {
	var r OutcomeResult
	body := map[string]any{"output": output}
	if costUSD != 0 {
		body["cost"] = ReportedCost{USD: costUSD}
	}
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/leases/" + esc(leaseID) + "/complete", body: body, out: &r}); err != nil {
		return nil, err
	}
	return &r, nil
}

// Fail records a lease's failure; its class decides what comes next.
func (c *Client) Fail(ctx context.Context, leaseID string, f Failure) (*OutcomeResult, error) {
	var r OutcomeResult
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/leases/" + esc(leaseID) + "/fail", body: f, out: &r}); err != nil {
		return nil, err
	}
	return &r, nil
}

// FetchInput answers a lease's input: inline, or fetched from InputURL
// and checked against InputRef.
func (c *Client) FetchInput(ctx context.Context, l *Lease) (json.RawMessage, error) {
	if l.InputURL == "" {
		return l.Input, nil
	}
	return c.FetchData(ctx, l.InputURL, l.InputRef)
}

// verify checks data against its reference.
func verify(data []byte, ref DataRef) error {
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); len(data) != ref.Size || got != ref.SHA256 {
		return fmt.Errorf("stepflow: data %s is %d bytes with sha256 %s; its reference says %d bytes, %s", ref.Key, len(data), got, ref.Size, ref.SHA256)
	}
	return nil
}
