// Package actions runs the built-in step actions: pass, sleep, fail, http
// and lambda. (worker steps run elsewhere, on external workers through
// claim.)
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
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/netguard"
)

// MaxOutputBytes bounds what an http or lambda action may answer: what a
// worker may complete with. The engine keeps an output over the inline
// limit in the blob store, so the job's item holds only its reference; a
// pass step answers its input, which the engine bounds as it composes it
// (engine.MaxComposedInputBytes).
const MaxOutputBytes = engine.MaxOutputBytes

// MaxRetryAfter bounds the Retry-After an http step's callee may ask for:
// a longer wait is cut to this.
const MaxRetryAfter = time.Hour

// DefaultHTTPTimeout bounds one http call made with the guarded default
// client (the step's timeout_seconds bounds it too).
const DefaultHTTPTimeout = time.Duration(domain.MaxBuiltinSeconds) * time.Second

// maxQuote bounds how much of a URL or a response body a failure message
// quotes.
const maxQuote = 200

// Runner runs built-in actions.
type Runner struct {
	// Guard decides which destinations the http action may reach; the zero
	// Policy refuses loopback, link-local (cloud metadata), private and
	// other non-public addresses. It is also what Submit checks step URLs
	// against (see Policy).
	Guard netguard.Policy
	// HTTP, when set, replaces the client built from Guard. Guard's static
	// URL check still applies, but the dial-time check (DNS answers,
	// redirects) only does if the client comes from Guard.Client.
	HTTP *http.Client
	// Lambda invokes the lambda action's functions; without it a lambda
	// step fails fatal, saying so.
	Lambda LambdaInvoker
	// LambdaAllow lists the function-name prefixes a lambda step may call
	// (STEPFLOW_LAMBDA_ALLOW); empty allows any the IAM role allows.
	LambdaAllow []string
	// LambdaHome is the stack's partition, region and account: a lambda
	// step's ARN must name them.
	LambdaHome LambdaHome

	once   sync.Once
	client *http.Client
}

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

// Run runs the call until it ends or ctx is done, and answers its output or
// the failure that decides what happens next. A ctx that expires is a
// timeout.
func (r *Runner) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	out, f := r.run(ctx, c)
	if f == nil && len(out) > MaxOutputBytes && c.Spec.Action.Type != domain.ActionPass {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("output is %d bytes; the limit is %d", len(out), MaxOutputBytes)}
	}
	if f != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, &domain.Failure{Class: domain.ClassTimeout, Message: fmt.Sprintf("ran past timeout_seconds (%d)", c.Spec.TimeoutSeconds)}
	}
	return out, f
}

func (r *Runner) run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	a := c.Spec.Action
	switch a.Type {
	case domain.ActionPass:
		return c.Input, nil
	case domain.ActionFail:
		msg := a.Message
		if msg == "" {
			msg = "step failed as its spec asked (action fail, class " + a.Class + ")"
		}
		return nil, &domain.Failure{Class: domain.FailureClass(a.Class), Message: msg, Prompt: a.Prompt, Steps: a.Steps}
	case domain.ActionHTTP:
		return r.post(ctx, c)
	case domain.ActionLambda:
		return r.invokeLambda(ctx, c)
	}
	// Sleeps, waits and gates are timers and decisions, never run.
	return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("action type %q cannot run in the built-in executor", a.Type)}
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

// clip bounds a quoted string to maxQuote bytes (at a rune boundary).
func clip(s string) string {
	if len(s) <= maxQuote {
		return s
	}
	cut := maxQuote
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
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
