package httpapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/engine"
)

// The operator's side of the API: GET /v1/metrics answers the stack's
// operator metrics to an operator key, and every request is counted by
// its route for them (docs/metrics.md#operator-metrics).

// defaultRoute is the route key API Gateway sends what no route matches
// under (an unknown path or method).
const defaultRoute = "$default"

// operatorKey reports whether the request's bearer is an operator key. An
// operator key is no tenant's: it opens GET /v1/metrics' operator view and
// nothing else (on any other route it is an unknown key, 401).
func (a *API) operatorKey(r *request) bool {
	if len(a.OperatorKeyHashes) == 0 {
		return false
	}
	scheme, key, ok := strings.Cut(strings.TrimSpace(r.header("Authorization")), " ")
	key = strings.TrimSpace(key)
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" || !wellFormedKey(key) {
		return false
	}
	hashed := []byte(engine.HashKey(key))
	found := 0
	for _, h := range a.OperatorKeyHashes {
		found |= subtle.ConstantTimeCompare(hashed, []byte(h))
	}
	return found == 1
}

// operatorMetrics answers the stack's operator metrics in the Prometheus
// text exposition format: two reads of the table (the stack's step
// counters; the sweep's last readings with the routes' request counters),
// never SQS.
func (a *API) operatorMetrics(ctx context.Context, _ *request) (int, any, error) {
	a.flushRequests(ctx, true) // this process's own requests, before reading them back
	m, err := a.Engine.OperatorMetrics(ctx, countedRoutes)
	if err != nil {
		return 0, nil, err
	}
	if a.OperatorText == nil {
		return 0, nil, errors.New("metrics: no operator exposition encoder wired (set API.OperatorText)")
	}
	var buf bytes.Buffer
	contentType, err := a.OperatorText(&buf, m)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, text{contentType: contentType, body: buf.Bytes()}, nil
}

// countedRoutes are the route keys requests are counted under: every
// route's, and $default for what matches none. A bounded set, whatever the
// paths asked for. (Set by init: routes names operatorMetrics, which reads
// it.)
var countedRoutes []string

func init() {
	for _, rt := range routes {
		countedRoutes = append(countedRoutes, rt.key)
	}
	countedRoutes = append(countedRoutes, defaultRoute)
}

// requestMeter gathers this process's requests by route until they are
// flushed: at most every engine.StatsFlushEvery, by the request that finds
// that time passed (no goroutine: a Lambda instance is frozen between
// invocations), so a process that stops loses at most that many seconds
// of them, as the step counters do.
type requestMeter struct {
	mu      sync.Mutex
	pending map[string]*engine.RouteBatch
	flushed time.Time
}

// observe counts one request to routeKey (as API Gateway named it; one
// the API does not serve counts as $default) that answered status after
// d, and flushes what was gathered when it is time.
func (a *API) observe(ctx context.Context, routeKey string, status int, d time.Duration) {
	if a.Engine == nil {
		return
	}
	if _, ok := routeOf[routeKey]; !ok {
		routeKey = defaultRoute
	}
	m := &a.requests
	m.mu.Lock()
	if m.pending == nil {
		m.pending = map[string]*engine.RouteBatch{}
	}
	b := m.pending[routeKey]
	if b == nil {
		b = &engine.RouteBatch{}
		m.pending[routeKey] = b
	}
	b.Observe(status, d)
	m.mu.Unlock()
	a.flushRequests(ctx, false)
}

// flushRequests hands the gathered requests to the engine (the stack's
// counters and the metrics sink) when forced or StatsFlushEvery has
// passed since the last flush.
func (a *API) flushRequests(ctx context.Context, force bool) {
	m := &a.requests
	now := a.now()
	m.mu.Lock()
	if len(m.pending) == 0 || !force && now.Sub(m.flushed) < engine.StatsFlushEvery {
		m.mu.Unlock()
		return
	}
	pending := m.pending
	m.pending, m.flushed = nil, now
	m.mu.Unlock()
	a.Engine.RecordRequests(ctx, now, pending)
}
