// Package actions runs the built-in step actions: pass, sleep, fail and
// http. (worker steps run elsewhere, on external workers through claim.)
package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// MaxOutputBytes bounds what an action may return; the job item carries
// every output and DynamoDB items stop at 400 KB.
const MaxOutputBytes = 64 * 1024

// Runner runs built-in actions.
type Runner struct {
	HTTP *http.Client
}

// Call is one attempt to run.
type Call struct {
	Spec           domain.StepSpec
	Input          json.RawMessage
	IdempotencyKey string // job/step/attempt, passed on so callees can de-duplicate
}

// Run runs the call until it ends or ctx is done, and answers its output or
// the failure that decides what happens next. A ctx that expires is a
// timeout.
func (r *Runner) Run(ctx context.Context, c Call) (json.RawMessage, *domain.Failure) {
	out, f := r.run(ctx, c)
	if f == nil && len(out) > MaxOutputBytes {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("output is %d bytes; the limit is %d", len(out), MaxOutputBytes)}
	}
	if f != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, &domain.Failure{Class: domain.ClassTimeout, Message: fmt.Sprintf("ran past timeout_seconds (%d)", c.Spec.TimeoutSeconds)}
	}
	return out, f
}

func (r *Runner) run(ctx context.Context, c Call) (json.RawMessage, *domain.Failure) {
	switch c.Spec.Action {
	case domain.ActionPass:
		return c.Input, nil
	case domain.ActionSleep:
		d := time.Duration(*c.Spec.Seconds * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return c.Input, nil
		case <-ctx.Done():
			return nil, &domain.Failure{Class: domain.ClassTimeout, Message: "sleep interrupted: " + ctx.Err().Error()}
		}
	case domain.ActionFail:
		msg := c.Spec.Message
		if msg == "" {
			msg = "step failed as its spec asked (action fail, class " + c.Spec.Class + ")"
		}
		return nil, &domain.Failure{Class: domain.FailureClass(c.Spec.Class), Message: msg}
	case domain.ActionHTTP:
		return r.post(ctx, c)
	}
	return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("action %q cannot run in the built-in executor", c.Spec.Action)}
}

// post sends the input to the step's url: 2xx succeeds with the response
// body as output; 408, 429 and 5xx are retryable (honouring Retry-After);
// any other status is fatal.
func (r *Runner) post(ctx context.Context, c Call) (json.RawMessage, *domain.Failure) {
	client := r.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Spec.URL, bytes.NewReader(c.Input))
	if err != nil {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("build request: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	res, err := client.Do(req)
	if err != nil {
		return nil, &domain.Failure{Class: domain.ClassRetryable, Message: fmt.Sprintf("POST %s: %v", c.Spec.URL, err)}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxOutputBytes+1))
	if err != nil {
		return nil, &domain.Failure{Class: domain.ClassRetryable, Message: fmt.Sprintf("POST %s: read body: %v", c.Spec.URL, err)}
	}
	switch code := res.StatusCode; {
	case code >= 200 && code < 300:
		if len(bytes.TrimSpace(body)) == 0 {
			return json.RawMessage(`null`), nil
		}
		if json.Valid(body) {
			return body, nil
		}
		s, _ := json.Marshal(string(body)) // a text answer becomes a JSON string
		return s, nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return nil, &domain.Failure{
			Class:      domain.ClassRetryable,
			Message:    fmt.Sprintf("POST %s answered %d", c.Spec.URL, code),
			RetryAfter: retryAfter(res.Header.Get("Retry-After"), time.Now()),
		}
	default:
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("POST %s answered %d: %.200s", c.Spec.URL, code, body)}
	}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if secs, err := strconv.Atoi(h); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
