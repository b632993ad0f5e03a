package chaos

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Clock is the stack's clock: real time plus an offset the run moves
// forward.
type Clock struct{ offset atomic.Int64 }

// Now answers the clock's time.
func (c *Clock) Now() time.Time { return time.Now().UTC().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// client calls the stack's HTTP API as a tenant.
type client struct {
	base string
	key  string
	hc   *http.Client
}

// answer is one HTTP exchange; err is a transport error.
type answer struct {
	status     int
	body       []byte
	err        error
	retryAfter string // the Retry-After header, if any
}

func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// retryable: the function crashed (5xx), was throttled, or the request
// never got an answer; the same request may be sent again.
func (a answer) retryable() bool {
	return a.err != nil || a.status >= 500 || a.status == http.StatusTooManyRequests
}

func (c *client) once(ctx context.Context, method, path string, body []byte, headers ...string) answer {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{status: res.StatusCode, err: err}
	}
	return answer{status: res.StatusCode, body: out, retryAfter: res.Header.Get("Retry-After")}
}

// retry sends the same request until it gets an answer that is not
// retryable or the deadline passes, and answers every answer it got.
func (c *client) retry(ctx context.Context, deadline time.Time, method, path string, body []byte, headers ...string) []answer {
	var all []answer
	wait := 50 * time.Millisecond
	for {
		a := c.once(ctx, method, path, body, headers...)
		all = append(all, a)
		if !a.retryable() || ctx.Err() != nil || !time.Now().Add(wait).Before(deadline) {
			return all
		}
		sleep(ctx, wait)
		wait = min(wait*2, time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
