// Package client is a Go client for stepflow's HTTP API v1: typed requests
// and answers for every route, a context on every call, and retries of
// throttled (429) and failed (5xx) requests honouring Retry-After.
//
// Which calls retry: every call retries a 429 and a 503 contended (the API
// did nothing: it was throttled, or its write lost every race). Another 5xx
// or a broken connection is retried only where a repeat cannot do twice
// what was asked: reads, PUT and DELETE, submit (it always sends an
// Idempotency-Key, made per call unless you give one), cancel, approve,
// reject, signal (it sends an id, made per call unless you give one),
// redrive, setting a job's budget, the schedule routes and the lease routes (heartbeat, complete
// and fail under one lease are answered again, not applied twice). Claim
// and resume are not retried after a 5xx: a lost claim's leases come back
// when they expire, and a repeated resume answers 409.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the API's base URL, e.g. http://127.0.0.1:3000 (make dev)
	// or the stack's ApiUrl output.
	BaseURL string
	// APIKey is sent as Authorization: Bearer <key>.
	APIKey string
	// HTTPClient makes the requests; nil uses one with a 60 s timeout
	// (a claim long-polls up to 20 s, an events long-poll up to 20 s).
	HTTPClient *http.Client
	// MaxRetries bounds the retries of one call (default 4; negative: none).
	MaxRetries int
	// MaxRetryWait is the longest wait before a retry (default 30 s): a
	// Retry-After beyond it is not waited for, and the call answers the
	// *Error with RetryAfter set.
	MaxRetryWait time.Duration
	// UserAgent is sent as User-Agent (default "stepflow-go").
	UserAgent string
}

// Client calls one stepflow API with one key. It is safe for concurrent
// use.
type Client struct {
	base       *url.URL
	key        string
	http       *http.Client
	noRedirect *http.Client // answers a redirect instead of following it
	maxRetries int
	maxWait    time.Duration
	agent      string
}

// New answers a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("stepflow client: BaseURL is required")
	}
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || base.Scheme != "http" && base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("stepflow client: BaseURL %q is not an http or https URL", cfg.BaseURL)
	}
	c := &Client{base: base, key: cfg.APIKey, http: cfg.HTTPClient, maxRetries: cfg.MaxRetries, maxWait: cfg.MaxRetryWait, agent: cfg.UserAgent}
	if c.http == nil {
		c.http = &http.Client{Timeout: 60 * time.Second}
	}
	nr := *c.http
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.noRedirect = &nr
	switch {
	case cfg.MaxRetries == 0:
		c.maxRetries = 4
	case cfg.MaxRetries < 0:
		c.maxRetries = 0
	}
	if c.maxWait <= 0 {
		c.maxWait = 30 * time.Second
	}
	if c.agent == "" {
		c.agent = "stepflow-go"
	}
	return c, nil
}

// BaseURL answers the API's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// Error is an answer of the API other than 2xx: its status and the API's
// {"error":{"code","message","field"}}.
type Error struct {
	Status  int    // HTTP status
	Code    string // invalid, unauthorized, not_found, conflict, lease_lost, too_large, idempotency_mismatch, throttled, internal...
	Message string
	Field   string // the JSON field a 400 names, e.g. steps[0].action.queue
	// RetryAfter is what a 429 or 503 asked to wait, when it said; a retry
	// waits that and up to a quarter more (jitter).
	RetryAfter time.Duration
}

// Error codes the API answers.
const (
	CodeInvalid             = "invalid"
	CodeUnauthorized        = "unauthorized"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeConflict            = "conflict"
	CodeLeaseLost           = "lease_lost"
	CodeTooLarge            = "too_large"
	CodeIdempotencyMismatch = "idempotency_mismatch"
	CodeThrottled           = "throttled"
	CodeInternal            = "internal"
	// CodeContended is a 503: the write lost its race to other writers
	// each time it was tried, and changed nothing; every call retries it
	// after Retry-After.
	CodeContended = "contended"
	// CodeBudgetExceeded is a 402: a submit past the tenant's daily budget
	// (TenantBudget); nothing was submitted.
	CodeBudgetExceeded = "budget_exceeded"
)

func (e *Error) Error() string {
	msg := fmt.Sprintf("stepflow: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" && !strings.Contains(e.Message, e.Field) {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// ErrorCode answers the API error code err carries, or "" when err is not
// an answer of the API.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports a 404: no such object for this key's tenant.
func IsNotFound(err error) bool { return ErrorCode(err) == CodeNotFound }

// IsLeaseLost reports a 409 lease_lost: the lease expired, was taken over
// or ended; the outcome changed nothing.
func IsLeaseLost(err error) bool { return ErrorCode(err) == CodeLeaseLost }

// IsConflict reports a 409 conflict: the object is not in a state that
// allows the call.
func IsConflict(err error) bool { return ErrorCode(err) == CodeConflict }

// IsBudgetExceeded reports a 402 budget_exceeded: the tenant spent its
// daily budget, and the call (a submit) was refused until it resets.
func IsBudgetExceeded(err error) bool { return ErrorCode(err) == CodeBudgetExceeded }

// retryPolicy says what a call may repeat.
type retryPolicy int

const (
	// retrySafe: a repeat cannot do twice what was asked: 429, 5xx and
	// transport errors are retried.
	retrySafe retryPolicy = iota
	// retryThrottled: only a 429, which the API answered without acting.
	retryThrottled
)

// call is one API request.
type call struct {
	method, path string
	query        url.Values
	body         any // JSON-encoded unless nil
	headers      map[string]string
	retry        retryPolicy
	out          any // decoded from a 2xx answer unless nil
}

// do makes a call, retrying as its policy allows, and answers the final
// response's status.
func (c *Client) do(ctx context.Context, k call) (int, http.Header, error) {
	var body []byte
	if k.body != nil {
		var err error
		if body, err = json.Marshal(k.body); err != nil {
			return 0, nil, fmt.Errorf("encode %s %s: %w", k.method, k.path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		status, hdr, raw, err := c.once(ctx, c.http, k, body)
		retry, wait := c.retryable(k.retry, status, hdr, err, attempt)
		if !retry {
			if err != nil {
				return status, hdr, err
			}
			if k.out != nil && len(bytes.TrimSpace(raw)) > 0 {
				if err := json.Unmarshal(raw, k.out); err != nil {
					return status, hdr, fmt.Errorf("decode %s %s answer: %w", k.method, k.path, err)
				}
			}
			return status, hdr, nil
		}
		if serr := sleep(ctx, wait); serr != nil {
			return status, hdr, errors.Join(serr, err)
		}
	}
}

// once makes one request: a non-2xx answer is an *Error; raw is the body.
func (c *Client) once(ctx context.Context, hc *http.Client, k call, body []byte) (int, http.Header, []byte, error) {
	req, err := c.request(ctx, k, body)
	if err != nil {
		return 0, nil, nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", k.method, k.path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, res.Header, nil, fmt.Errorf("%s %s: read answer: %w", k.method, k.path, err)
	}
	if res.StatusCode/100 == 2 || res.StatusCode/100 == 3 {
		return res.StatusCode, res.Header, raw, nil
	}
	return res.StatusCode, res.Header, raw, apiError(res, raw)
}

func (c *Client) request(ctx context.Context, k call, body []byte) (*http.Request, error) {
	// k.path's segments are escaped (esc): an id holding '/' stays one
	// segment, which the API refuses, rather than naming another route.
	u := *c.base
	u.RawPath = c.base.EscapedPath() + k.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", k.method, k.path, err)
	}
	u.Path = p
	if len(k.query) > 0 {
		u.RawQuery = k.query.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u.String(), r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", k.method, k.path, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.agent)
	for name, v := range k.headers {
		req.Header.Set(name, v)
	}
	return req, nil
}

// apiError reads an error answer: the API's own shape, or API Gateway's
// {"message"} (its throttle), or whatever else answered.
func apiError(res *http.Response, raw []byte) *Error {
	e := &Error{Status: res.StatusCode, RetryAfter: retryAfter(res.Header)}
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil {
		e.Code, e.Message, e.Field = body.Error.Code, body.Error.Message, body.Error.Field
		return e
	}
	e.Message = strings.TrimSpace(body.Message)
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(raw[:min(len(raw), 512)]))
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	switch {
	case res.StatusCode == http.StatusTooManyRequests:
		e.Code = CodeThrottled
	case res.StatusCode == http.StatusNotFound:
		e.Code = CodeNotFound
	case res.StatusCode == http.StatusPaymentRequired:
		e.Code = CodeBudgetExceeded
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		e.Code = CodeUnauthorized
	case res.StatusCode >= 500:
		e.Code = CodeInternal
	default:
		e.Code = "http_" + strconv.Itoa(res.StatusCode)
	}
	return e
}

// retryAfter reads Retry-After: seconds or an HTTP date; 0 when absent.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0)
	}
	return 0
}

// retryable decides whether to repeat a request and how long to wait
// first: Retry-After when the answer said, else exponential backoff with
// jitter (200 ms doubling, at most 5 s).
func (c *Client) retryable(p retryPolicy, status int, hdr http.Header, err error, attempt int) (bool, time.Duration) {
	if err == nil || attempt >= c.maxRetries || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false, 0
	}
	var apiErr *Error
	isAPI := errors.As(err, &apiErr)
	switch {
	case isAPI && status == http.StatusTooManyRequests:
	case isAPI && apiErr.Code == CodeContended: // a lost race changed nothing: every call may repeat it
	case p == retrySafe && isAPI && status >= 500:
	case p == retrySafe && !isAPI && status == 0: // the request may not have reached the API
	default:
		return false, 0
	}
	if isAPI && apiErr.RetryAfter > 0 {
		if apiErr.RetryAfter > c.maxWait {
			return false, 0
		}
		// A little jitter past what was asked, so that callers turned away
		// together do not come back together.
		return true, apiErr.RetryAfter + rand.N(apiErr.RetryAfter/4+1)
	}
	backoff := min(200*time.Millisecond<<attempt, 5*time.Second)
	return true, backoff/2 + rand.N(backoff/2+1)
}

// newToken answers a random token for idempotency keys and signal ids.
func newToken(prefix string) string {
	b := make([]byte, 16)
	_, _ = crand.Read(b) // never fails
	return prefix + hex.EncodeToString(b)
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }
