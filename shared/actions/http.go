package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/netguard"
)

// CheckTarget answers why an http step's url may never be called under the
// runner's guard (a literal address it refuses), so the job is refused at
// submit; host names are checked when dialled.
// A nil Runner checks with the default guard.
func (r *Runner) CheckTarget(url string) error {
	if r == nil {
		return netguard.Policy{}.CheckURL(url)
	}
	return r.Guard.CheckURL(url)
}

func (r *Runner) httpClient() *http.Client {
	if r.HTTP != nil {
		return r.HTTP
	}
	r.once.Do(func() { r.client = r.Guard.Client(DefaultHTTPTimeout) })
	return r.client
}

// checkHTTP is the http action's check at submit.
func (r *Runner) checkHTTP(a domain.ActionSpec) (string, error) {
	if err := r.CheckTarget(a.URL); err != nil {
		return "url", err // "<url> refused: <rule>"
	}
	return "", nil
}

// post sends the input to the step's url: 2xx succeeds with the response
// body as output; a callee not reached (connection, DNS) is class network;
// 408 and 504 are timeout; 429 and other 5xx are retryable (honouring
// Retry-After up to MaxRetryAfter); any other status is fatal, and so is a
// destination the guard refuses (the URL, an address it resolves to, a
// redirect).
func (r *Runner) post(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	target := clip(redact(c.Spec.Action.URL))
	if err := r.Guard.CheckURL(c.Spec.Action.URL); err != nil {
		return nil, refused(target, "", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Spec.Action.URL, bytes.NewReader(c.Input))
	if err != nil {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: clip(fmt.Sprintf("build request for %s: %v", target, err))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	res, err := r.httpClient().Do(req)
	if err != nil {
		var re *netguard.RefusedError
		if errors.As(err, &re) {
			where := redact(c.Spec.Action.URL)
			var ue *url.Error
			if errors.As(err, &ue) {
				where = ue.URL
			}
			return nil, refused(target, where, re)
		}
		// Connection refused, DNS, reset: the callee was not reached.
		return nil, &domain.Failure{Class: domain.ClassNetwork, Message: fmt.Sprintf("POST %s: %s", target, clip(err.Error()))}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, MaxOutputBytes+1))
	if err != nil {
		return nil, &domain.Failure{Class: domain.ClassNetwork, Message: fmt.Sprintf("POST %s: read body: %s", target, clip(err.Error()))}
	}
	switch code := res.StatusCode; {
	case code >= 200 && code < 300:
		if len(body) > MaxOutputBytes {
			return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("POST %s answered %d with a body over the limit of %d bytes", target, code, MaxOutputBytes)}
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return json.RawMessage(`null`), nil
		}
		if json.Valid(body) {
			return body, nil
		}
		s, _ := json.Marshal(string(body)) // a text answer becomes a JSON string
		return s, nil
	case code == http.StatusRequestTimeout || code == http.StatusGatewayTimeout:
		return nil, &domain.Failure{Class: domain.ClassTimeout, Message: fmt.Sprintf("POST %s answered %d", target, code)}
	case code == http.StatusTooManyRequests || code >= 500:
		return nil, &domain.Failure{
			Class:      domain.ClassRetryable,
			Message:    fmt.Sprintf("POST %s answered %d", target, code),
			RetryAfter: retryAfter(res.Header.Get("Retry-After"), time.Now()),
		}
	default:
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("POST %s answered %d: %s", target, code, clip(string(body)))}
	}
}

// refused is the fatal failure of a destination the guard refuses: target
// is the step's URL, where the URL refused (a redirect's, or the same).
func refused(target, where string, err error) *domain.Failure {
	rule := err.Error()
	var re *netguard.RefusedError
	if errors.As(err, &re) {
		rule = re.Rule
	}
	msg := fmt.Sprintf("POST %s refused: %s", target, rule)
	if where != "" && clip(where) != target {
		msg = fmt.Sprintf("POST %s refused: redirect to %s: %s", target, clip(where), rule)
	}
	return &domain.Failure{Class: domain.ClassFatal, Message: msg}
}

// redact hides a URL's password, as net/http does in its errors.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// retryAfter reads a Retry-After header, seconds or an HTTP date, and caps
// it at MaxRetryAfter.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(h, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs >= int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	} else if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(h, "-") {
		return MaxRetryAfter
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}
