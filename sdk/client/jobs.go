package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SubmitOption adjusts a submission.
type SubmitOption func(*call)

// WithIdempotencyKey submits under your own key: the same key and body
// answer the job made first (Job.Replayed), another body 422. Without it,
// Submit makes a key per call, so only its own retries are deduplicated.
func WithIdempotencyKey(key string) SubmitOption {
	return func(k *call) { k.headers["Idempotency-Key"] = key }
}

// Submit submits a job.
func (c *Client) Submit(ctx context.Context, req JobRequest, opts ...SubmitOption) (*Job, error) {
	return c.submit(ctx, req, opts)
}

// SubmitJSON submits a job body as it is (JSON), e.g. read from a file.
func (c *Client) SubmitJSON(ctx context.Context, body json.RawMessage, opts ...SubmitOption) (*Job, error) {
	if !json.Valid(body) {
		return nil, errors.New("stepflow: the job body is not valid JSON")
	}
	return c.submit(ctx, body, opts)
}

func (c *Client) submit(ctx context.Context, body any, opts []SubmitOption) (*Job, error) {
	var j Job
	k := call{method: http.MethodPost, path: "/v1/jobs", body: body, out: &j, headers: map[string]string{}}
	for _, o := range opts {
		o(&k)
	}
	if k.headers["Idempotency-Key"] == "" {
		k.headers["Idempotency-Key"] = newToken("sdk-")
	}
	status, _, err := c.do(ctx, k)
	if err != nil {
		return nil, err
	}
	j.Replayed = status == http.StatusOK
	return &j, nil
}

// Job answers a job.
func (c *Client) Job(ctx context.Context, id string) (*Job, error) {
	var j Job
	_, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/jobs/" + esc(id), out: &j})
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// GetView answers a job in one vocabulary's words (GET
// /v1/jobs/{id}?view=canonical|task|formal|gated) as the API sends it; an
// unknown view answers a 400 naming the field view.
func (c *Client) GetView(ctx context.Context, id, view string) (json.RawMessage, error) {
	var raw json.RawMessage
	_, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/jobs/" + esc(id), query: url.Values{"view": {view}}, out: &raw})
	if err != nil {
		return nil, err
	}
	return raw, nil
}

// ListJobsOptions filter and page GET /v1/jobs. Empty fields are not sent.
type ListJobsOptions struct {
	State    JobState
	Queue    string
	Schedule string // a schedule's runs
	Parent   string // a job's child jobs (its job steps')
	Limit    int    // 1-100 a page (default 50)
	Cursor   string
}

// ListJobs answers one page of the tenant's jobs, newest first.
func (c *Client) ListJobs(ctx context.Context, o ListJobsOptions) (*JobPage, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", string(o.State))
	set("queue", o.Queue)
	set("schedule", o.Schedule)
	set("parent", o.Parent)
	set("cursor", o.Cursor)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var p JobPage
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/jobs", query: q, out: &p}); err != nil {
		return nil, err
	}
	return &p, nil
}

// Jobs iterates over the jobs ListJobs pages through, from o.Cursor on,
// fetching each page as it is reached. An error ends it.
func (c *Client) Jobs(ctx context.Context, o ListJobsOptions) iter.Seq2[JobSummary, error] {
	return func(yield func(JobSummary, error) bool) {
		for page, err := range c.JobPages(ctx, o) {
			if err != nil {
				yield(JobSummary{}, err)
				return
			}
			for _, j := range page.Jobs {
				if !yield(j, nil) {
					return
				}
			}
		}
	}
}

// JobPages iterates over the pages of ListJobs, from o.Cursor on.
func (c *Client) JobPages(ctx context.Context, o ListJobsOptions) iter.Seq2[*JobPage, error] {
	return pages(func(cursor string) (*JobPage, string, error) {
		o.Cursor = cursor
		p, err := c.ListJobs(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p, p.NextCursor, nil
	}, o.Cursor)
}

// pages iterates over a cursor-paged listing until a page has no next
// cursor.
func pages[P any](fetch func(cursor string) (P, string, error), cursor string) iter.Seq2[P, error] {
	return func(yield func(P, error) bool) {
		for {
			p, next, err := fetch(cursor)
			if !yield(p, err) || err != nil || next == "" {
				return
			}
			cursor = next
		}
	}
}

// EventsOptions select events: those after a sequence number, and with
// Wait a long-poll for the first new one (the API answers at once where it
// does not long-poll).
type EventsOptions struct {
	After int           // only events with seq > After
	Wait  time.Duration // long-poll up to this long (whole seconds)
}

// Events answers a job's event log, in order.
func (c *Client) Events(ctx context.Context, jobID string, o EventsOptions) (*EventList, error) {
	q := url.Values{}
	if o.After > 0 {
		q.Set("after", strconv.Itoa(o.After))
	}
	if o.Wait > 0 {
		q.Set("wait", strconv.Itoa(int((o.Wait+time.Second-1)/time.Second)))
	}
	var l EventList
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/jobs/" + esc(jobID) + "/events", query: q, out: &l}); err != nil {
		return nil, err
	}
	// An API that ignores after answers the whole log.
	kept := l.Events[:0]
	for _, e := range l.Events {
		if e.Seq > o.After {
			kept = append(kept, e)
		}
	}
	l.Events = kept
	return &l, nil
}

func (c *Client) jobCall(ctx context.Context, method, path string, body any, p retryPolicy) (*Job, error) {
	var j Job
	if _, _, err := c.do(ctx, call{method: method, path: path, body: body, out: &j, retry: p}); err != nil {
		return nil, err
	}
	return &j, nil
}

// Cancel ends a job and fences off its running attempts; cancelling a
// cancelled job answers it again, a finished one 409.
func (c *Client) Cancel(ctx context.Context, jobID string) (*Job, error) {
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/cancel", nil, retrySafe)
}

// Approve opens an approval gate.
func (c *Client) Approve(ctx context.Context, jobID, stepID string, d DecisionRequest) (*Job, error) {
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/steps/"+esc(stepID)+"/approve", d, retrySafe)
}

// Reject closes an approval gate, failing its job.
func (c *Client) Reject(ctx context.Context, jobID, stepID string, d DecisionRequest) (*Job, error) {
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/steps/"+esc(stepID)+"/reject", d, retrySafe)
}

// Resume runs a step waiting on a person (NEEDS_USER) again with their
// input. Not retried after a 5xx: a repeat would answer 409.
func (c *Client) Resume(ctx context.Context, jobID, stepID string, input any) (*Job, error) {
	body := map[string]any{"input": input}
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/steps/"+esc(stepID)+"/resume", body, retryThrottled)
}

// Signal sends a signal to a job's waits. Without an ID it makes one, so
// its own retries deliver it once.
func (c *Client) Signal(ctx context.Context, jobID string, s SignalRequest) (*Job, error) {
	if s.ID == "" {
		s.ID = newToken("sdk-")
	}
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/signal", s, retrySafe)
}

// Redrive runs a FAILED job again from its failed and cancelled steps.
func (c *Client) Redrive(ctx context.Context, jobID string) (*Job, error) {
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/redrive", nil, retrySafe)
}

// SetBudget sets or raises a job's budget to usd: a job waiting at its
// budget gate goes on once usd is more than it cost. A usd not more than
// the job's cost so far answers 400 naming usd; a finished job 409.
func (c *Client) SetBudget(ctx context.Context, jobID string, usd float64) (*Job, error) {
	return c.jobCall(ctx, http.MethodPost, "/v1/jobs/"+esc(jobID)+"/budget", map[string]float64{"usd": usd}, retrySafe)
}

// StepOutput answers a step's whole output, also one kept in S3: when the
// API answers 303 (too large for its response) it GETs the presigned URL,
// without the API key, and checks what it got against the reference.
func (c *Client) StepOutput(ctx context.Context, jobID, stepID string) (json.RawMessage, error) {
	k := call{method: http.MethodGet, path: "/v1/jobs/" + esc(jobID) + "/steps/" + esc(stepID) + "/output"}
	var raw []byte
	var status int
	var hdr http.Header
	for attempt := 0; ; attempt++ {
		var err error
		status, hdr, raw, err = c.once(ctx, c.noRedirect, k, nil)
		retry, wait := c.retryable(retrySafe, status, hdr, err, attempt)
		if !retry {
			if err != nil {
				return nil, err
			}
			break
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
	if status != http.StatusSeeOther && status != http.StatusFound && status != http.StatusTemporaryRedirect {
		return raw, nil
	}
	var moved struct {
		Ref *DataRef `json:"output_ref"`
		URL string   `json:"url"`
	}
	_ = json.Unmarshal(raw, &moved)
	loc := hdr.Get("Location")
	if loc == "" {
		loc = moved.URL
	}
	if loc == "" {
		return nil, fmt.Errorf("stepflow: output of %s/%s: %d without a Location", jobID, stepID, status)
	}
	return c.FetchData(ctx, loc, moved.Ref)
}

// FetchData GETs data from a presigned URL (an input_url, an output's 303),
// without the API key, and checks it against ref when given.
func (c *Client) FetchData(ctx context.Context, rawURL string, ref *DataRef) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("stepflow: fetch data: %w", err)
	}
	req.Header.Set("User-Agent", c.agent)
	var data []byte
	for attempt := 0; ; attempt++ {
		data, err = c.fetchOnce(req)
		if err == nil {
			break
		}
		if attempt >= c.maxRetries || ctx.Err() != nil {
			return nil, err
		}
		var e *Error
		if errors.As(err, &e) && e.Status < 500 && e.Status != http.StatusTooManyRequests {
			return nil, err // expired or refused: a repeat answers the same
		}
		if err := sleep(ctx, min(200*time.Millisecond<<attempt, 5*time.Second)); err != nil {
			return nil, err
		}
	}
	if ref != nil {
		if err := verify(data, *ref); err != nil {
			return nil, err
		}
	}
	return data, nil
}

func (c *Client) fetchOnce(req *http.Request) ([]byte, error) {
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stepflow: fetch data: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("stepflow: fetch data: %w", err)
	}
	if res.StatusCode/100 != 2 {
		e := apiError(res, data)
		e.Message = "fetch data: " + e.Message
		return nil, e
	}
	return data, nil
}

// Health answers the tenant's health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/health", out: &h}); err != nil {
		return nil, err
	}
	return &h, nil
}

// Budget answers the tenant's daily budget and what it spent today.
func (c *Client) Budget(ctx context.Context) (*TenantBudget, error) {
	var b TenantBudget
	if _, _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/budget", out: &b}); err != nil {
		return nil, err
	}
	return &b, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
