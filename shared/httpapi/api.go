// Package httpapi serves stepflow's HTTP API v1 as an API Gateway HTTP API
// (payload format 2.0) Lambda handler. Routes are matched on the event's
// routeKey, which API Gateway sets from template.yaml's routes.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/oklog/ulid/v2"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/logging"
	"github.com/stepflow/stepflow/shared/views"
	"github.com/stepflow/stepflow/shared/wire"
)

// statusOf maps each error code to its HTTP status: the one table.
var statusOf = map[domain.Code]int{
	domain.CodeInvalid:             http.StatusBadRequest,
	domain.CodeUnauthorized:        http.StatusUnauthorized,
	domain.CodeBudgetExceeded:      http.StatusPaymentRequired,
	domain.CodeNotFound:            http.StatusNotFound,
	domain.CodeMethodNotAllowed:    http.StatusMethodNotAllowed,
	domain.CodeConflict:            http.StatusConflict,
	domain.CodeLeaseLost:           http.StatusConflict,
	domain.CodeTooLarge:            http.StatusRequestEntityTooLarge,
	domain.CodeIdempotencyMismatch: http.StatusUnprocessableEntity,
	domain.CodeThrottled:           http.StatusTooManyRequests,
	domain.CodeInternal:            http.StatusInternalServerError,
	domain.CodeContended:           http.StatusServiceUnavailable,
}

// API is the HTTP handler over an engine.
type API struct {
	Engine *engine.Engine
	Log    *slog.Logger
	// MetricsText writes GET /v1/metrics' body and answers its content
	// type (prometheus.Exposition). Main wires it, so this package,
	// and its fuzz build, carry no exposition encoder (protobuf).
	MetricsText func(w io.Writer, c engine.StepCounts) (contentType string, err error)
	// OperatorText writes GET /v1/metrics' body for an operator key
	// (prometheus.OperatorExposition), as MetricsText does a tenant's.
	OperatorText func(w io.Writer, m engine.OperatorMetrics) (contentType string, err error)
	// OperatorKeyHashes are the SHA-256 (engine.HashKey) of the operator
	// keys (STEPFLOW_OPERATOR_KEY_HASHES): with one of them GET
	// /v1/metrics answers the stack's operator metrics (operator.go).
	OperatorKeyHashes []string
	keys              keyCache
	serves            map[Function]bool // the functions whose routes this one serves; nil: every route
	requests          requestMeter
}

// Function names an HTTP function of template.yaml. Each serves exactly its
// own routes: its IAM policy is scoped to them, so a route put under the
// wrong function must fail here as it would on AWS.
type Function string

// The HTTP functions.
const (
	EnqueueFunction Function = "EnqueueFunction" // jobs and health; also the $default route
	ClaimFunction   Function = "ClaimFunction"   // the worker protocol
)

// route is one route of the API: its key as API Gateway sends it (from
// template.yaml), the function that serves it, whether it answers without
// an API key, and its handler. template.yaml and api/openapi.yaml must
// agree with the table (tests compare them).
type route struct {
	key   string
	owner Function
	// keyless: the web UI's page and its files and the API's description
	// hold nothing of any tenant (the page asks its user for a key and
	// sends it with each call).
	keyless bool
	serve   func(a *API, ctx context.Context, tenant string, req *request) (int, any, error)
	// operator, when set, serves the route instead of serve to a request
	// with an operator key (operator.go).
	operator func(a *API, ctx context.Context, req *request) (int, any, error)
}

// routes is every route: the one table.
var routes = []route{
	{key: "POST /v1/jobs", owner: EnqueueFunction, serve: (*API).submit},
	{key: "POST /v1/jobs/batch", owner: EnqueueFunction, serve: (*API).submitBatch},
	{key: "GET /v1/jobs", owner: EnqueueFunction, serve: (*API).list},
	{key: "GET /v1/jobs/{id}", owner: EnqueueFunction, serve: (*API).get},
	{key: "GET /v1/jobs/{id}/events", owner: EnqueueFunction, serve: (*API).events},
	{key: "POST /v1/jobs/{id}/cancel", owner: EnqueueFunction, serve: (*API).cancel},
	{key: "POST /v1/jobs/{id}/budget", owner: EnqueueFunction, serve: (*API).setBudget},
	{key: "GET /v1/budget", owner: EnqueueFunction, serve: (*API).budget},
	{key: "POST /v1/jobs/{id}/steps/{step}/resume", owner: EnqueueFunction, serve: (*API).resume},
	{key: "POST /v1/jobs/{id}/signal", owner: EnqueueFunction, serve: (*API).signal},
	{key: "POST /v1/jobs/{id}/redrive", owner: EnqueueFunction, serve: (*API).redrive},
	{key: "POST /v1/jobs/{id}/steps/{step}/approve", owner: EnqueueFunction, serve: (*API).approve},
	{key: "POST /v1/jobs/{id}/steps/{step}/reject", owner: EnqueueFunction, serve: (*API).reject},
	{key: "GET /v1/jobs/{id}/steps/{step}/output", owner: EnqueueFunction, serve: (*API).output},
	{key: "GET /v1/health", owner: EnqueueFunction, serve: (*API).health},
	{key: "GET /v1/metrics", owner: EnqueueFunction, serve: (*API).metrics, operator: (*API).operatorMetrics},
	{key: "GET /v1/openapi.json", owner: EnqueueFunction, keyless: true, serve: (*API).openapi},
	{key: "PUT /v1/resources/{id}", owner: EnqueueFunction, serve: (*API).putResource},
	{key: "GET /v1/resources/{id}", owner: EnqueueFunction, serve: (*API).getResource},
	{key: "GET /v1/resources", owner: EnqueueFunction, serve: (*API).listResources},
	{key: "DELETE /v1/resources/{id}", owner: EnqueueFunction, serve: (*API).deleteResource},
	{key: "POST /v1/schedules", owner: EnqueueFunction, serve: (*API).createSchedule},
	{key: "GET /v1/schedules", owner: EnqueueFunction, serve: (*API).listSchedules},
	{key: "GET /v1/schedules/{id}", owner: EnqueueFunction, serve: (*API).getSchedule},
	{key: "PUT /v1/schedules/{id}", owner: EnqueueFunction, serve: (*API).replaceSchedule},
	{key: "DELETE /v1/schedules/{id}", owner: EnqueueFunction, serve: (*API).deleteSchedule},
	{key: "POST /v1/schedules/{id}/pause", owner: EnqueueFunction, serve: (*API).pauseSchedule},
	{key: "POST /v1/schedules/{id}/resume", owner: EnqueueFunction, serve: (*API).resumeSchedule},
	{key: "GET /v1/queues", owner: EnqueueFunction, serve: (*API).listQueues},
	{key: "GET /ui", owner: EnqueueFunction, keyless: true, serve: (*API).uiPage},
	{key: "GET /ui/{asset}", owner: EnqueueFunction, keyless: true, serve: (*API).uiAsset},
	{key: "POST /v1/claim", owner: ClaimFunction, serve: (*API).claim},
	{key: "POST /v1/leases/{lease}/heartbeat", owner: ClaimFunction, serve: (*API).heartbeat},
	{key: "POST /v1/leases/{lease}/complete", owner: ClaimFunction, serve: (*API).complete},
	{key: "POST /v1/leases/{lease}/fail", owner: ClaimFunction, serve: (*API).failLease},
	{key: "POST /v1/leases/batch", owner: ClaimFunction, serve: (*API).outcomes},
}

// routeOf finds a route by its key.
var routeOf = func() map[string]route {
	out := make(map[string]route, len(routes))
	for _, rt := range routes {
		if _, dup := out[rt.key]; dup {
			panic("httpapi: route " + rt.key + " twice")
		}
		out[rt.key] = rt
	}
	return out
}()

// Routes answers the route keys fn serves, sorted.
func Routes(fn Function) []string {
	var out []string
	for _, rt := range routes {
		if rt.owner == fn {
			out = append(out, rt.key)
		}
	}
	slices.Sort(out)
	return out
}

// New answers the API of the functions named: the routes they serve. With
// none named it serves every route, as one process playing the whole API
// (tests) does.
func New(e *engine.Engine, log *slog.Logger, fns ...Function) *API {
	if log == nil {
		log = slog.Default()
	}
	a := &API{Engine: e, Log: log}
	if len(fns) > 0 {
		a.serves = map[Function]bool{}
		for _, fn := range fns {
			a.serves[fn] = true
		}
	}
	return a
}

// Handle is the Lambda handler for every HTTP route. It counts each
// request by its route (operator.go).
func (a *API) Handle(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	began := time.Now()
	resp, err := a.handle(ctx, ev)
	status := resp.StatusCode
	if err != nil {
		status = http.StatusInternalServerError // what API Gateway answers a failed invocation
	}
	a.observe(ctx, ev.RouteKey, status, time.Since(began))
	return resp, err
}

func (a *API) handle(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	ctx = logging.With(ctx, slog.String("request_id", ev.RequestContext.RequestID))
	// Each job this request writes counts its part of it (engine.WithTab).
	ctx = engine.WithTab(ctx, engine.Request(1))
	req := &request{ev: ev}
	rt, ok := routeOf[ev.RouteKey]
	if namesIDWithSlash(ev) {
		// A resource's or a schedule's id is the client's own: one holding
		// a slash is bad input naming the field, once the key is good.
		if _, err := a.authenticate(ctx, req); err != nil {
			return a.fail(ev, err), nil
		}
		return a.fail(ev, domain.Invalid("id", "may not hold a slash (%s)", domain.IDRule)), nil
	}
	if !ok || !cleanPath(ev) {
		return a.noRoute(ev), nil
	}
	if a.serves != nil && !a.serves[rt.owner] {
		// API Gateway sent a route of another function here: template.yaml
		// and the routes table disagree, a deployment fault no request can fix.
		a.Log.Error("route served by another function", "route", ev.RouteKey, "owner", rt.owner)
		return a.fail(ev, &domain.Error{Code: domain.CodeInternal, Message: fmt.Sprintf("route %s is served by %s, not this function: check template.yaml", ev.RouteKey, rt.owner)}), nil
	}
	if rt.keyless {
		status, body, err := rt.serve(a, ctx, "", req)
		if err != nil {
			return a.fail(ev, err), nil
		}
		return respond(status, body, req.extraHeaders), nil
	}
	if rt.operator != nil && a.operatorKey(req) {
		status, body, err := rt.operator(a, ctx, req)
		if err != nil {
			return a.fail(ev, err), nil
		}
		return respond(status, body, req.extraHeaders), nil
	}
	tenant, err := a.authenticate(ctx, req)
	if err != nil {
		return a.fail(ev, err), nil
	}
	status, body, err := rt.serve(a, ctx, tenant, req)
	if err != nil {
		return a.fail(ev, err), nil
	}
	return respond(status, body, req.extraHeaders), nil
}

// noRoute answers a request API Gateway sent to the $default route: 405
// with the allowed methods when the path is a route of another method, 404
// otherwise.
func (a *API) noRoute(ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	method, path := ev.RequestContext.HTTP.Method, ev.RawPath
	if !cleanPath(ev) {
		return a.fail(ev, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no route %s %s", method, path)})
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var allowed []string
	for _, rt := range routes {
		m, pattern, _ := strings.Cut(rt.key, " ")
		ps := strings.Split(strings.Trim(pattern, "/"), "/")
		if len(ps) != len(segs) {
			continue
		}
		same := true
		for i, p := range ps {
			same = same && (p == segs[i] || strings.HasPrefix(p, "{") && segs[i] != "")
		}
		if same && m != method {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		slices.Sort(allowed)
		resp := a.fail(ev, &domain.Error{Code: domain.CodeMethodNotAllowed, Message: fmt.Sprintf("%s %s: use %s", method, path, strings.Join(allowed, ", "))})
		resp.Headers["allow"] = strings.Join(allowed, ", ")
		return resp
	}
	return a.fail(ev, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no route %s %s", method, path)})
}

// cleanPath reports a path that can name a route: no empty segment (a
// doubled or trailing slash), no encoded slash, and none of the route's
// {parameters} holding a slash. API Gateway decodes the path before it
// routes, and decodes it again for rawPath and the parameters (so %252F
// arrives as '/'): whatever a gateway does, an {id} that holds '/' is
// refused here.
func cleanPath(ev events.APIGatewayV2HTTPRequest) bool {
	raw := ev.RawPath
	if raw != "" && raw != "/" && (strings.HasSuffix(raw, "/") || strings.Contains(raw, "//")) {
		return false
	}
	if strings.Contains(strings.ToLower(raw), "%2f") {
		return false
	}
	_, pattern, _ := strings.Cut(ev.RouteKey, " ")
	for _, seg := range strings.Split(pattern, "/") {
		name, ok := strings.CutPrefix(seg, "{")
		if !ok {
			continue
		}
		v := ev.PathParameters[strings.TrimSuffix(name, "}")]
		if strings.Contains(v, "/") || strings.Contains(strings.ToLower(v), "%2f") {
			return false
		}
	}
	return true
}

// namesIDWithSlash reports a request for a resource or a schedule by an
// id holding a slash: sent encoded (%2F, %252F) it reaches us decoded,
// as a path of more segments than any route of the id has, or as the
// route with the slash in {id}. No id may hold one, so it is refused as
// an id (400 naming id) rather than as a path that names no route.
func namesIDWithSlash(ev events.APIGatewayV2HTTPRequest) bool {
	switch ev.RequestContext.HTTP.Method {
	case "GET", "PUT", "DELETE":
	default:
		return false
	}
	for _, prefix := range []string{"/v1/resources/", "/v1/schedules/"} {
		rest, ok := strings.CutPrefix(ev.RawPath, prefix)
		if !ok {
			continue
		}
		if id := strings.ToLower(ev.PathParameters["id"]); strings.Contains(id, "/") || strings.Contains(id, "%2f") {
			return true
		}
		segs := strings.Split(rest, "/")
		if len(segs) < 2 || slices.Contains(segs, "") {
			return false // no id, or a doubled or trailing slash: no route
		}
		last := segs[len(segs)-1]
		return prefix == "/v1/resources/" || last != "pause" && last != "resume"
	}
	return false
}

// request wraps the event with helpers.
type request struct {
	ev           events.APIGatewayV2HTTPRequest
	extraHeaders map[string]string
	keyHash      string // the stored hash of the API key it came with, once authenticated
}

// keyID names the API key a request came with, for the record of what a
// person decided (approve, reject): the first 12 hex digits of the key's
// stored hash, which say nothing of the key itself.
func (r *request) keyID() string { return "key_" + r.keyHash[:12] }

func (r *request) header(name string) string {
	for k, v := range r.ev.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (r *request) body() ([]byte, error) {
	if !r.ev.IsBase64Encoded {
		return []byte(r.ev.Body), nil
	}
	b, err := base64.StdEncoding.DecodeString(r.ev.Body)
	if err != nil {
		return nil, domain.Invalid("body", "is not valid base64")
	}
	return b, nil
}

// decode reads an optional JSON body into v, refusing unknown fields.
func (r *request) decode(v any) error { return r.decodeUpTo(v, domain.MaxBodyBytes) }

// decodeUpTo is decode with a body limit of its own.
func (r *request) decodeUpTo(v any, limit int) error {
	b, err := r.body()
	if err != nil {
		return err
	}
	if len(b) > limit {
		return &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("body is %d bytes; the limit is %d", len(b), limit)}
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	return domain.DecodeStrict(b, v)
}

func (r *request) setHeader(k, v string) {
	if r.extraHeaders == nil {
		r.extraHeaders = map[string]string{}
	}
	r.extraHeaders[k] = v
}

// keyCache remembers API keys a warm Lambda has checked, so a busy worker
// does not pay a DynamoDB read per request, and a flood of bad keys does
// not pay one per request either. Known and unknown keys are kept apart,
// each in its own bounded LRU keyed by the key's hash (never the key
// itself): unknown keys, however many, only ever evict other unknown keys.
// Expiry is checked on read rather than by a sweeper goroutine, so an API
// leaves nothing running behind it; an expired entry keeps its slot until
// it is looked up again or evicted, and the bounds hold either way.
type keyCache struct {
	once    sync.Once
	known   *lru.Cache[string, cachedKey] // hash -> tenant
	unknown *lru.Cache[string, time.Time] // hash -> refused until
	// knownMax and unknownMax override the bounds before first use (tests).
	knownMax, unknownMax int
}

type cachedKey struct {
	tenant string
	until  time.Time
}

const (
	keyCacheTTL = time.Minute
	// unknownKeyTTL is how long a key the table does not hold is refused
	// without a read: also how long a key just added may be refused, if it
	// was tried (unknown) shortly before.
	unknownKeyTTL = 30 * time.Second
	// knownKeysMax and unknownKeysMax bound each cache (a few MB at most).
	knownKeysMax   = 10_000
	unknownKeysMax = 10_000
	// maxKeyBytes: no key stepflow issues is near this long.
	maxKeyBytes = 256
)

func (c *keyCache) init() {
	c.once.Do(func() {
		var err error
		if c.known, err = lru.New[string, cachedKey](cmp.Or(c.knownMax, knownKeysMax)); err != nil {
			panic(err) // only for a size < 1, which the constants rule out
		}
		if c.unknown, err = lru.New[string, time.Time](cmp.Or(c.unknownMax, unknownKeysMax)); err != nil {
			panic(err)
		}
	})
}

// wellFormedKey reports a key worth looking up: at most maxKeyBytes, valid
// UTF-8, no control characters.
func wellFormedKey(key string) bool {
	if len(key) > maxKeyBytes || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// authenticate answers the tenant of the request's API key and notes the
// key's hash on the request.
func (a *API) authenticate(ctx context.Context, r *request) (string, error) {
	scheme, key, ok := strings.Cut(strings.TrimSpace(r.header("Authorization")), " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", &domain.Error{Code: domain.CodeUnauthorized, Message: "Authorization: Bearer <api key> is required"}
	}
	if !wellFormedKey(key) {
		return "", &domain.Error{Code: domain.CodeUnauthorized, Message: fmt.Sprintf("the API key is malformed (at most %d bytes, no control characters)", maxKeyBytes)}
	}
	c := &a.keys
	c.init()
	hashed := engine.HashKey(key)
	r.keyHash = hashed
	now := a.now()
	if k, ok := c.known.Get(hashed); ok && now.Before(k.until) {
		return k.tenant, nil
	}
	if until, ok := c.unknown.Get(hashed); ok && now.Before(until) {
		return "", domain.ErrUnauthorized
	}
	tenant, err := a.Engine.TenantForKey(ctx, key)
	switch {
	case errors.Is(err, domain.ErrUnauthorized):
		c.known.Remove(hashed) // a revoked key
		c.unknown.Add(hashed, now.Add(unknownKeyTTL))
		return "", err
	case err != nil:
		return "", err // a failed read says nothing about the key: not cached
	}
	c.unknown.Remove(hashed)
	c.known.Add(hashed, cachedKey{tenant: tenant, until: now.Add(keyCacheTTL)})
	return tenant, nil
}

// now is the engine's clock (tests move it), else the wall clock.
func (a *API) now() time.Time {
	if a.Engine != nil {
		return a.Engine.Clock()
	}
	return time.Now()
}

// ErrorBody is every error's JSON shape.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what an error says: its code, message and the field at
// fault.
type ErrorDetail struct {
	Code    domain.Code `json:"code"`
	Message string      `json:"message"`
	Field   string      `json:"field,omitempty"`
}

func (a *API) fail(ev events.APIGatewayV2HTTPRequest, err error) events.APIGatewayV2HTTPResponse {
	status, detail := a.errorDetail(ev, err)
	return respond(status, ErrorBody{Error: detail}, retryAfterHeader(err))
}

// errorDetail answers err's status and what the client is told of it.
func (a *API) errorDetail(ev events.APIGatewayV2HTTPRequest, err error) (int, ErrorDetail) {
	code := domain.CodeOf(err)
	status, ok := statusOf[code]
	if !ok {
		// A code the table lacks is our bug: it answers as internal (a 500,
		// logged), so a client only ever sees a code the API documents.
		code, status = domain.CodeInternal, statusOf[domain.CodeInternal]
	}
	body := ErrorDetail{Code: code}
	var de *domain.Error
	var ite *domain.IllegalTransitionError
	switch {
	case code == domain.CodeInternal:
		a.Log.Error("request failed", "route", ev.RouteKey, "request_id", ev.RequestContext.RequestID, "err", err)
		body.Message = "internal error; request id " + ev.RequestContext.RequestID
	case errors.As(err, &de):
		body.Message, body.Field = de.Error(), de.Field
		if de.Code == domain.CodeNotFound || de.Code == domain.CodeLeaseLost {
			body.Message = err.Error() // carries what was not found
		}
	case errors.As(err, &ite) && ite.Message != "":
		// What the client asked of the job is plain from its request: the
		// answer says the state and what is allowed, unwrapped.
		body.Message = ite.Message
	default:
		body.Message = err.Error()
	}
	return status, body
}

// retryAfterHeader answers the Retry-After header of an error that asks the
// client to wait (a 429, a 503), in whole seconds, rounded up.
func retryAfterHeader(err error) map[string]string {
	var de *domain.Error
	if !errors.As(err, &de) || de.RetryAfter <= 0 {
		return nil
	}
	return map[string]string{"retry-after": strconv.Itoa(int((de.RetryAfter + time.Second - 1) / time.Second))}
}

func respond(status int, body any, headers map[string]string) events.APIGatewayV2HTTPResponse {
	if f, ok := body.(uiFile); ok {
		return f.response(status, headers)
	}
	if t, ok := body.(text); ok {
		h := map[string]string{"content-type": t.contentType}
		for k, v := range headers {
			h[k] = v
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: h, Body: string(t.body)}
	}
	h := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	var b []byte
	var err error
	if v, ok := body.(verbatim); ok {
		b = v
	} else if b, err = json.Marshal(body); err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encode response"}}`)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: h, Body: string(b)}
}

// verbatim is a JSON body answered byte for byte (json.Marshal would
// compact it): a stored output, whose SHA-256 its reference gives.
type verbatim json.RawMessage

func (a *API) submit(ctx context.Context, tenant string, r *request) (int, any, error) {
	b, err := r.body()
	if err != nil {
		return 0, nil, err
	}
	j, created, err := a.Engine.Submit(ctx, tenant, b, r.header("Idempotency-Key"))
	if err != nil {
		return 0, nil, err
	}
	r.setHeader("location", "/v1/jobs/"+j.ID)
	if !created {
		r.setHeader("idempotent-replayed", "true")
		return http.StatusOK, jobView(j), nil
	}
	return http.StatusCreated, jobView(j), nil
}

func (a *API) get(ctx context.Context, tenant string, r *request) (int, any, error) {
	view, err := views.ParseView(r.ev.QueryStringParameters["view"])
	if err != nil {
		return 0, nil, err
	}
	j, err := a.Engine.Get(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	if view == views.Canonical {
		return http.StatusOK, jobView(j), nil
	}
	doc, err := views.Project(view, j)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, doc, nil
}

// Long-polling GET /v1/jobs/{id}/events: wait is at most maxEventsWait
// (well inside API Gateway's 30 s and the function's own timeout); a
// waiting poll holds one of the tenant's long-poll slots (429 past the
// bound) and reads the job's version alone after eventsPollFirst, each
// pause twice the last up to eventsPollMax, so a quiet wait of 20 s costs
// about 12 small reads, and the whole job is read again only once its
// version moved; the answer leaves eventsAnswerMargin before the
// function's deadline.
const (
	maxEventsWait      = 20
	eventsPollFirst    = 250 * time.Millisecond
	eventsPollMax      = 2 * time.Second
	eventsAnswerMargin = time.Second
)

// EventsView answers GET /v1/jobs/{id}/events: the events after the seq
// asked for, at most limit of them, and the seq from which a client asks
// again: the job's last, or with More the last answered.
type EventsView struct {
	JobID   string          `json:"job_id"`
	State   domain.JobState `json:"state"`
	Events  []domain.Event  `json:"events"`
	LastSeq int             `json:"last_seq"`
	// More: the job has events after these; ask again after LastSeq. A
	// job of thousands of steps has tens of thousands of events, and one
	// answer holds at most maxEventsPage (a Lambda answer is at most 6 MB).
	More bool `json:"more,omitempty"`
}

// maxEventsPage bounds the events one answer holds (?limit=).
const maxEventsPage = 1000

// events answers a job's events with seq > after. With none and wait > 0
// it holds a long-poll slot and looks at the job's version until one comes,
// wait runs out or the job's log is final.
func (a *API) events(ctx context.Context, tenant string, r *request) (int, any, error) {
	q := r.ev.QueryStringParameters
	after, err := queryInt(q, "after", 0, math.MaxInt32)
	if err != nil {
		return 0, nil, err
	}
	wait, err := queryInt(q, "wait", 0, maxEventsWait)
	if err != nil {
		return 0, nil, err
	}
	limit, err := queryInt(q, "limit", 1, maxEventsPage)
	if err != nil {
		return 0, nil, err
	}
	if _, set := q["limit"]; !set {
		limit = maxEventsPage
	}
	id := r.ev.PathParameters["id"]
	if wait > 0 {
		// A tenant known to be at its bound is refused before any read.
		if err := a.Engine.LongPollRefused(tenant); err != nil {
			return 0, nil, err
		}
	}
	j, err := a.Engine.Get(ctx, tenant, id)
	if err != nil {
		return 0, nil, err
	}
	// The wall clock, not the engine's (tests move that one).
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Add(-eventsAnswerMargin).Before(deadline) {
		deadline = d.Add(-eventsAnswerMargin)
	}
	if len(eventsAfter(j, after)) == 0 && !finalState(j.State) && time.Until(deadline) > 0 {
		release, err := a.Engine.HoldLongPoll(ctx, tenant, time.Until(deadline))
		if err != nil {
			return 0, nil, err
		}
		defer release()
	}
	for pause := eventsPollFirst; len(eventsAfter(j, after)) == 0 && !finalState(j.State); pause = min(2*pause, eventsPollMax) {
		left := time.Until(deadline)
		if left <= 0 || !engine.Sleep(ctx, min(pause, left)) {
			break
		}
		v, err := a.Engine.JobVersion(ctx, tenant, id)
		if err != nil {
			return 0, nil, err
		}
		if v <= j.Version {
			continue // unchanged (or a read that lags the one before)
		}
		if j, err = a.Engine.Get(ctx, tenant, id); err != nil {
			return 0, nil, err
		}
	}
	v := EventsView{JobID: j.ID, State: j.State, Events: eventsAfter(j, after)}
	if n := len(j.Events); n > 0 {
		v.LastSeq = j.Events[n-1].Seq
	}
	if len(v.Events) > limit {
		v.Events, v.More = v.Events[:limit], true
		v.LastSeq = v.Events[limit-1].Seq
	}
	return http.StatusOK, v, nil
}

// eventsAfter answers j's events with seq > after, never nil.
func eventsAfter(j *domain.Job, after int) []domain.Event {
	out := []domain.Event{}
	for _, e := range j.Events {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out
}

// finalState reports a job state no transition of the job table leaves
// (COMPLETED, CANCELLED; a FAILED job may be redriven): its log is final,
// so a long-poll on it answers at once.
func finalState(s domain.JobState) bool {
	for _, t := range domain.JobTable() {
		if slices.Contains(t.Sources, s) {
			return false
		}
	}
	return true
}

// queryInt reads an optional whole-number query parameter within [lo, hi];
// absent, it is lo.
func queryInt(q map[string]string, name string, lo, hi int) (int, error) {
	s, ok := q[name]
	if !ok {
		return lo, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, domain.Invalid(name, "must be a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

func (a *API) list(ctx context.Context, tenant string, r *request) (int, any, error) {
	f, view, keep, err := listFilter(r.ev.QueryStringParameters)
	if errors.Is(err, errNoJobCanMatch) {
		return http.StatusOK, map[string]any{"jobs": []any{}, "next_cursor": ""}, nil
	}
	if err != nil {
		return 0, nil, err
	}
	jobs, next, err := a.Engine.List(ctx, tenant, f)
	if err != nil {
		return 0, nil, err
	}
	if jobs == nil {
		jobs = []engine.JobSummary{}
	}
	if view == views.Canonical {
		return http.StatusOK, map[string]any{"jobs": jobs, "next_cursor": next}, nil
	}
	items, err := summaries(view, jobs, keep)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"jobs": items, "next_cursor": next}, nil
}

// errNoJobCanMatch: the listing's state filter names a word no stored job
// is ever in (a task's inbox), so there is nothing to read.
var errNoJobCanMatch = errors.New("no stored job can match the filter")

// listFilter reads GET /v1/jobs's query: the store's filter, the view, and
// for a view's state word the check each job of the page must pass (nil:
// all pass).
func listFilter(q map[string]string) (engine.ListFilter, string, func(*domain.Job) bool, error) {
	f := engine.ListFilter{Limit: 50, Queue: q["queue"], Cursor: q["cursor"], Schedule: q["schedule"]}
	if f.Schedule != "" && !domain.ValidScheduleID(f.Schedule) {
		return f, "", nil, domain.Invalid("schedule", "%.70q is not a schedule id", f.Schedule)
	}
	if f.Parent = q["parent"]; f.Parent != "" && !domain.ValidJobID(f.Parent) {
		return f, "", nil, domain.Invalid("parent", "%.70q is not a job id", f.Parent)
	}
	view, err := views.ParseView(q["view"])
	if err != nil {
		return f, view, nil, err
	}
	var keep func(*domain.Job) bool
	if s := q["state"]; s != "" && view != views.Canonical {
		vf, err := views.StateFilter(view, s)
		if err != nil {
			return f, view, nil, err
		}
		if len(vf.States) == 0 {
			return f, view, nil, errNoJobCanMatch
		}
		f.States, keep = vf.States, vf.Keep
	} else if s != "" {
		st := domain.JobState(strings.ToUpper(s))
		if !slices.Contains(domain.AllJobStates(), st) {
			return f, view, nil, domain.Invalid("state", "%q is not a job state", s)
		}
		f.State = st
	}
	if l := q["limit"]; l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return f, view, nil, domain.Invalid("limit", "must be a whole number from 1 to 100")
		}
		f.Limit = int32(n)
	}
	if err := listIDRange(q, &f); err != nil {
		return f, view, nil, err
	}
	f.Jobs = view != views.Canonical
	return f, view, keep, nil
}

// ulidDigits are the characters of a job id (a ULID, Crockford's base 32,
// as the engine writes it), in the order ids sort.
const ulidDigits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// listIDRange reads the listing's id filters into f as one range of ids
// (engine.ListFilter.IDFrom, IDBelow): id_prefix is the ids from the
// prefix up to the next prefix, and since a ULID's first 10 characters are
// its time in milliseconds, created_after and created_before bound it too.
func listIDRange(q map[string]string, f *engine.ListFilter) error {
	narrow := func(from, below string) {
		f.IDFrom = max(f.IDFrom, from)
		if below != "" && (f.IDBelow == "" || below < f.IDBelow) {
			f.IDBelow = below
		}
	}
	for _, name := range []string{"id_prefix", "created_after", "created_before"} {
		v := q[name]
		if v == "" {
			continue
		}
		if f.Parent != "" {
			// A job's children are listed from the job, in step order, not
			// read as a range of ids.
			return domain.Invalid(name, "cannot be given with parent")
		}
		if name == "id_prefix" {
			p := strings.ToUpper(v)
			if len(p) > ulid.EncodedSize || strings.Trim(p, ulidDigits) != "" {
				return domain.Invalid(name, "%.40q is not the start of a job id: 1 to 26 of 0-9 and A-Z but I, L, O and U", v)
			}
			narrow(p, p[:len(p)-1]+string(p[len(p)-1]+1))
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || at.Before(time.Unix(0, 0)) {
			return domain.Invalid(name, "%.40q is not an RFC 3339 time from 1970 on, such as 2025-06-01T09:30:00Z", v)
		}
		// An id holds its time in whole milliseconds, so the time given is
		// taken to its millisecond: spans that meet share no job.
		var u ulid.ULID
		_ = u.SetTime(uint64(at.UnixMilli())) // fails past the year 10889 only; RFC 3339 stops at 9999
		id := u.String()[:10]
		if name == "created_after" {
			narrow(id, "")
		} else {
			narrow("", id)
		}
	}
	return nil
}

// summaries renders a page of jobs in view. keep may drop jobs of the
// page: it is shorter, and the cursor still resumes right after the last
// job the store read, so none is skipped.
func summaries(view string, jobs []engine.JobSummary, keep func(*domain.Job) bool) ([]any, error) {
	items := []any{}
	for _, js := range jobs {
		j := js.Job
		if j == nil { // unreadable: listed by its attributes alone
			j = &domain.Job{ID: js.ID, State: js.State, Queue: js.Queue, ScheduleID: js.Schedule}
		}
		if keep != nil && !keep(j) {
			continue
		}
		item, err := views.Summarize(view, j)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return items, nil
}

func (a *API) cancel(ctx context.Context, tenant string, r *request) (int, any, error) {
	j, err := a.Engine.Cancel(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobView(j), nil
}

// setBudget sets a job's budget: {"usd": N}, above what it has cost so
// far; a job waiting at its budget gate goes on.
func (a *API) setBudget(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct {
		USD *float64 `json:"usd"`
	}
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	if body.USD == nil {
		return 0, nil, domain.Invalid("usd", "is required: the job's budget in US dollars, above what it has cost so far")
	}
	j, err := a.Engine.SetBudget(ctx, tenant, r.ev.PathParameters["id"], *body.USD, r.keyID())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobView(j), nil
}

// budget answers the calling tenant's daily budget and what it has spent
// today.
func (a *API) budget(ctx context.Context, tenant string, _ *request) (int, any, error) {
	b, err := a.Engine.Budget(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, TenantBudgetView{Tenant: b.Tenant, DailyUSD: b.DailyUSD, SpentTodayUSD: math.Round(b.SpentTodayUSD*1e9) / 1e9,
		ResetsAt: b.ResetsAt, Exceeded: b.Exceeded()}, nil
}

// resume answers a step waiting on a person: {"input": ...}.
func (a *API) resume(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct {
		Input json.RawMessage `json:"input"`
	}
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	j, err := a.Engine.Resume(ctx, tenant, r.ev.PathParameters["id"], r.ev.PathParameters["step"], body.Input)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobView(j), nil
}

// signal delivers a signal to a job's waits: {"name", "payload", "id"}.
// 200 whether a wait took it, it was kept for one not reached yet, it was
// dropped (no wait of the job can take it), or its id was delivered
// already: the job, with "signal" saying which.
func (a *API) signal(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body domain.SignalRequest
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	j, outcome, err := a.Engine.Signal(ctx, tenant, r.ev.PathParameters["id"], body)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, SignalAnswer{JobView: jobView(j), Signal: outcome}, nil
}

// SignalAnswer is the answer to a signal: the job as it left it, and what
// became of the signal.
type SignalAnswer struct {
	JobView
	Signal domain.SignalOutcome `json:"signal"`
}

// redrive runs a FAILED job again from its failed and cancelled steps.
func (a *API) redrive(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct{} // no members: anything else answers 400
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	j, err := a.Engine.Redrive(ctx, tenant, r.ev.PathParameters["id"])
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobView(j), nil
}

func (a *API) approve(ctx context.Context, tenant string, r *request) (int, any, error) {
	return a.decide(ctx, tenant, r, true)
}

func (a *API) reject(ctx context.Context, tenant string, r *request) (int, any, error) {
	return a.decide(ctx, tenant, r, false)
}

// decide answers a person's decision at an approval gate: {"by",
// "comment"}, recorded with the calling key's id. 200 whether it changed
// the job or repeated a decision made already.
func (a *API) decide(ctx context.Context, tenant string, r *request, approve bool) (int, any, error) {
	var d wire.Decision
	if err := r.decodeWire(&d, domain.MaxBodyBytes); err != nil {
		return 0, nil, err
	}
	id, step := r.ev.PathParameters["id"], r.ev.PathParameters["step"]
	decide := a.Engine.Reject
	if approve {
		decide = a.Engine.Approve
	}
	j, _, err := decide(ctx, tenant, id, step, decision(d, r.keyID()))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobView(j), nil
}

// output answers a step's whole output as its body, or, when Lambda's
// response could not carry it, 303 to a URL that fetches it.
func (a *API) output(ctx context.Context, tenant string, r *request) (int, any, error) {
	out, err := a.Engine.Output(ctx, tenant, r.ev.PathParameters["id"], r.ev.PathParameters["step"], fitsResponse)
	if err != nil {
		return 0, nil, err
	}
	if out.URL != "" {
		r.setHeader("location", out.URL)
		return http.StatusSeeOther, map[string]any{"output_ref": out.Ref, "url": out.URL}, nil
	}
	return http.StatusOK, verbatim(out.Data), nil
}

// maxResponseBytes is what a response body may take of Lambda's 6 MB
// response payload, the rest left to its envelope and headers.
const maxResponseBytes = 6<<20 - 64<<10

// fitsResponse reports whether Lambda can answer data as a body: the body
// is a string inside the function's JSON response, so it is measured as
// it goes there, escaped twice (respond's encoding, then Lambda's).
func fitsResponse(data json.RawMessage) bool {
	if len(data) > maxResponseBytes {
		return false
	}
	body, err := json.Marshal(data)
	if err != nil {
		return false
	}
	s, err := json.Marshal(string(body))
	return err == nil && len(s) <= maxResponseBytes
}

func (a *API) health(ctx context.Context, tenant string, _ *request) (int, any, error) {
	h, err := a.Engine.Health(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, h, nil
}

// text is a body answered as it is, under its own content type.
type text struct {
	contentType string
	body        []byte
}

// metrics answers the tenant's step metrics in the Prometheus text
// exposition format (one read of StatsShards items; docs/metrics.md).
func (a *API) metrics(ctx context.Context, tenant string, _ *request) (int, any, error) {
	c, err := a.Engine.StepMetrics(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	if a.MetricsText == nil {
		return 0, nil, errors.New("metrics: no exposition encoder wired (set API.MetricsText)")
	}
	var buf bytes.Buffer
	contentType, err := a.MetricsText(&buf, c)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, text{contentType: contentType, body: buf.Bytes()}, nil
}

func (a *API) claim(ctx context.Context, tenant string, r *request) (int, any, error) {
	var c wire.ClaimRequest
	if err := r.decodeWire(&c, domain.MaxBodyBytes); err != nil {
		return 0, nil, err
	}
	leases, err := a.Engine.Claim(ctx, tenant, claimRequest(c))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, claimed(leases), nil
}

func (a *API) heartbeat(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct {
		ExtendSeconds int `json:"extend_seconds"`
	}
	if err := r.decode(&body); err != nil {
		return 0, nil, err
	}
	if body.ExtendSeconds < 0 || body.ExtendSeconds > domain.MaxLeaseSeconds {
		return 0, nil, domain.Invalid("extend_seconds", "must be between 1 and %d", domain.MaxLeaseSeconds)
	}
	res, err := a.Engine.Heartbeat(ctx, tenant, r.ev.PathParameters["lease"], time.Duration(body.ExtendSeconds)*time.Second)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, heartbeatResult(res), nil
}

func (a *API) complete(ctx context.Context, tenant string, r *request) (int, any, error) {
	var o wire.Outcome
	// The output's own limit is the engine's (MaxOutputBytes with a blob
	// store); the body may carry it and its envelope.
	if err := r.decodeWire(&o, engine.MaxOutputBytes+4096); err != nil {
		return 0, nil, err
	}
	if o.Class != "" || o.Message != "" || o.RetryAfterSeconds != 0 {
		return 0, nil, domain.Invalid("class", "belongs on /fail; /complete takes only output")
	}
	res, err := a.Engine.CompleteReporting(ctx, tenant, r.ev.PathParameters["lease"], o.Output, o.Cost.Dollars())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, outcomeResult(res), nil
}

func (a *API) failLease(ctx context.Context, tenant string, r *request) (int, any, error) {
	var o wire.Outcome
	if err := r.decodeWire(&o, domain.MaxBodyBytes); err != nil {
		return 0, nil, err
	}
	if len(o.Output) > 0 {
		return 0, nil, domain.Invalid("output", "belongs on /complete")
	}
	res, err := a.Engine.Fail(ctx, tenant, r.ev.PathParameters["lease"], failure(o))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, outcomeResult(res), nil
}
