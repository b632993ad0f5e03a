package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
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

func newClient(base, key string) *client {
	return &client{base: base, key: key, hc: &http.Client{Timeout: 30 * time.Second}}
}

// answer is one HTTP exchange; err is a transport error.
type answer struct {
	status int
	body   []byte
	err    error
}

func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// retryable: the function crashed (5xx), was throttled, or the request
// never got an answer; the same request may be sent again.
func (a answer) retryable() bool { return a.err != nil || retryableStatus(a.status) }

// retryableStatus: a fault met the request before its body was read (or
// its answer was lost).
func retryableStatus(s int) bool { return s == 0 || s >= 500 || s == http.StatusTooManyRequests }

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
	return answer{status: res.StatusCode, body: out}
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

// call is one request sent again after each 5xx or no answer (a racer's,
// a cancel, a replan's, a schedule's), with every status it was answered
// (0 for none) and the last answer's body.
type call struct {
	Op       string // approve, reject, cancel, signal, redrive
	SignalID string // signal: its id ("" for none)
	K        int    // signal: its payload's "k"
	Round    int    // redrive: which round (1 after the planned failure)
	Statuses []int
	Body     []byte
}

// do sends c's request, again after each 5xx or no answer, and notes the
// answers in it.
func (c *client) do(ctx context.Context, deadline time.Time, x call, method, path string, body []byte) call {
	for _, a := range c.retry(ctx, deadline, method, path, body) {
		x.Statuses, x.Body = append(x.Statuses, a.status), a.body
	}
	return x
}

// final answers the last status, 0 for none.
func (c call) final() int {
	if len(c.Statuses) == 0 {
		return 0
	}
	return c.Statuses[len(c.Statuses)-1]
}

// retried reports whether the call was sent more than once: a 409 at the
// end may then answer its own first send.
func (c call) retried() bool { return len(c.Statuses) > 1 }

// outcome reads what an answer to a signal says became of it
// ("signal":{"outcome":...}); "" when it says nothing.
func (c call) outcome() string {
	var v struct {
		Signal struct {
			Outcome string `json:"outcome"`
		} `json:"signal"`
	}
	_ = json.Unmarshal(c.Body, &v)
	return v.Signal.Outcome
}

func (c call) String() string { return fmt.Sprintf("%s answered %v", c.group(), c.Statuses) }

// notes are what a run saw that no check judges (an odd answer, an
// unreadable write): the first 20, for the report.
type notes struct {
	mu   sync.Mutex
	list []string
}

func (n *notes) note(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.list) < 20 {
		n.list = append(n.list, fmt.Sprintf(format, args...))
	}
}

// poll calls done every interval until it answers true or the deadline
// passes, and answers its last answer.
func poll(ctx context.Context, deadline time.Time, every time.Duration, done func() bool) bool {
	for {
		if done() {
			return true
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, every)
	}
}

// every calls f each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
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

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
