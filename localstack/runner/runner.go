// Package runner plays, on one machine, the parts of AWS that no local
// emulator runs: API Gateway's HTTP API (a real payload 2.0 event per
// request), the SQS event source mapping (batches, partial batch failures,
// redelivery) and the EventBridge schedule. It calls the same handler
// functions Lambda calls, with the same JSON, and takes every route, queue
// and schedule from template.yaml through the bootstrap.
package runner

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stepflow/stepflow/infra/bootstrap"
)

// Handlers are the Lambda handlers by function logical id.
type Handlers struct {
	HTTP     map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
	SQS      map[string]func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	Schedule map[string]func(context.Context, events.EventBridgeEvent) error
}

// SQSAPI is the part of the SQS client the event source mapping uses.
type SQSAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Runner serves one stack.
type Runner struct {
	invocations sync.Map // function logical id -> *atomic.Int64

	Stack    *bootstrap.Stack
	Handlers Handlers
	SQS      SQSAPI
	Log      *slog.Logger
	Region   string
	// ScheduleEvery overrides every schedule's period (0 keeps the template's).
	ScheduleEvery time.Duration
	// PollWait is the event source mapping's long-poll wait.
	PollWait time.Duration
	// Concurrency bounds the batches in flight per queue, as Lambda's
	// scaling would run them side by side, where the mapping's
	// ScalingConfig gives no MaximumConcurrency.
	Concurrency int
	// MachineInvocations fits a function's mappings to one machine: when
	// their caps (MaximumConcurrency, else Concurrency) add up to more,
	// each is scaled down by the same factor (to at least one), so their
	// ratios hold as on AWS (MappingInvocations). On AWS every invocation has its own CPU and
	// DynamoDB serves them all; here they share a few cores and one
	// emulator, and 35 invocations of ten records each would let a P2
	// backlog take the emulator from the P0 mapping's work. 0: no fitting.
	MachineInvocations int
}

// MappingInvocations answers how many invocations each of f's event
// source mappings runs at once, by queue logical id, fitted to
// MachineInvocations.
func (r *Runner) MappingInvocations(f bootstrap.Function) map[string]int {
	out, sum := map[string]int{}, 0
	for _, src := range f.SQS {
		out[src.QueueLogicalID] = cmp.Or(src.MaximumConcurrency, r.Concurrency, 10)
		sum += out[src.QueueLogicalID]
	}
	if r.MachineInvocations <= 0 || sum <= r.MachineInvocations {
		return out
	}
	for id, c := range out {
		out[id] = max(1, c*r.MachineInvocations/sum)
	}
	return out
}

// count records one Lambda invocation of fn.
func (r *Runner) count(fn string) {
	c, _ := r.invocations.LoadOrStore(fn, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// Invocations answers how often each function was invoked: what Lambda
// would bill as requests.
func (r *Runner) Invocations() map[string]int64 {
	out := map[string]int64{}
	r.invocations.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// invokeSafely runs a handler as Lambda does: a panic ends the invocation
// with an error (the event is retried or the caller gets a 5xx), never the
// runner.
func invokeSafely[T any](call func() (T, error)) (out T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("function crashed: %v", p)
		}
	}()
	return call()
}

// route is one HTTP route of a function.
type route struct {
	fn       string
	method   string
	segments []string
	key      string
}

// defaultRoute is API Gateway's catch-all route key.
const defaultRoute = "$default"

func (r *Runner) routes() []route {
	var out []route
	for _, f := range r.Stack.Functions {
		for _, rt := range f.Routes {
			key := strings.ToUpper(rt.Method) + " " + rt.Path
			if rt.Path == defaultRoute {
				key = defaultRoute
			}
			out = append(out, route{fn: f.LogicalID, method: strings.ToUpper(rt.Method), segments: strings.Split(strings.Trim(rt.Path, "/"), "/"), key: key})
		}
	}
	return out
}

// match finds the route for a request and its path parameters, as API
// Gateway does: a declared route first, else the $default route. Without
// a $default route, a path declared for other methods answers those.
//
// path is the request path decoded once, as API Gateway HTTP APIs route
// it: an encoded slash (%2F) is a separator by then, so it can never end
// up inside a {param}. Segments are taken as they are, with no trimming:
// a trailing slash or a doubled one makes an empty segment, which no
// declared route has, so such a path goes to $default.
func match(routes []route, method, path string) (*route, map[string]string, []string) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var allowed []string
	var fallback *route
	for i := range routes {
		rt := &routes[i]
		if rt.key == defaultRoute {
			fallback = rt
			continue
		}
		params, ok := matchSegments(rt.segments, segs)
		if !ok {
			continue
		}
		if rt.method != method && rt.method != "ANY" {
			allowed = append(allowed, rt.method)
			continue
		}
		return rt, params, nil
	}
	if fallback != nil {
		return fallback, nil, nil
	}
	return nil, nil, allowed
}

func matchSegments(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return nil, false
			}
			params[strings.Trim(p, "{}")] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// eventPath is what API Gateway HTTP APIs hand the function as rawPath and
// path parameters: the path decoded once more after routing (live captures
// show /a%252Fb arriving as rawPath /a/b, and /a%25zz refused with 400).
func eventPath(routed string) (string, bool) {
	p, err := url.PathUnescape(routed)
	return p, err == nil
}

// maxPayload is API Gateway's request payload limit.
const maxPayload = 10 * 1024 * 1024

// Lambda's synchronous invocation limits, which bind before API Gateway's:
// the event (the body escaped inside it) and the function's response, as
// JSON. Past them AWS answers 413, and 502 for a response.
const (
	maxLambdaRequest  = 6 * 1024 * 1024
	maxLambdaResponse = 6*1024*1024 + 100
)

// ServeHTTP turns a request into an API Gateway HTTP API payload 2.0 event,
// round-trips it through JSON as Lambda would, calls the route's handler
// and writes its response.
func (r *Runner) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rawPath, ok := eventPath(req.URL.Path)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"message":"Bad Request"}`)
		return
	}
	rt, params, allowed := match(r.routes(), req.Method, req.URL.Path)
	if rt == nil {
		w.Header().Set("Content-Type", "application/json")
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = io.WriteString(w, `{"error":{"code":"method_not_allowed","message":"`+req.Method+` is not allowed here; use `+strings.Join(allowed, ", ")+`"}}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"Not Found"}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPayload+1))
	if err != nil || len(body) > maxPayload {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"message":"Request Entity Too Large"}`)
		return
	}
	for k, v := range params {
		params[k], _ = eventPath(v) // a part of a path that decoded whole
	}
	ev := r.event(req, rt, rawPath, params, body)
	raw, err := json.Marshal(ev)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if len(raw) > maxLambdaRequest {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"message":"Request Entity Too Large"}`)
		return
	}
	var lambdaEv events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &lambdaEv); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := r.Handlers.HTTP[rt.fn]
	if h == nil {
		http.Error(w, "no handler for function "+rt.fn, http.StatusBadGateway)
		return
	}
	r.count(rt.fn)
	resp, err := invokeSafely(func() (events.APIGatewayV2HTTPResponse, error) { return h(req.Context(), lambdaEv) })
	if err != nil {
		r.Log.Error("function error", "function", rt.fn, "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		return
	}
	if out, err := json.Marshal(resp); err != nil || len(out) > maxLambdaResponse {
		r.Log.Error("function response over Lambda's payload limit", "function", rt.fn, "bytes", len(out))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if out, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			http.Error(w, "function answered bad base64", http.StatusBadGateway)
			return
		}
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

func (r *Runner) event(req *http.Request, rt *route, rawPath string, params map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	for k, vs := range req.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	headers["host"] = req.Host
	// API Gateway tells the function how the client reached it; the API's
	// description names that address.
	scheme, port := "http", "80"
	if req.TLS != nil {
		scheme, port = "https", "443"
	}
	if _, p, err := net.SplitHostPort(req.Host); err == nil {
		port = p
	}
	headers["x-forwarded-proto"], headers["x-forwarded-port"] = scheme, port
	var query map[string]string
	if len(req.URL.Query()) > 0 {
		query = map[string]string{}
		for k, vs := range req.URL.Query() {
			query[k] = strings.Join(vs, ",")
		}
	}
	if len(params) == 0 {
		params = nil
	}
	now := time.Now().UTC()
	ip, _, _ := net.SplitHostPort(req.RemoteAddr)
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: rt.key, RawPath: rawPath, RawQueryString: req.URL.RawQuery,
		Headers: headers, QueryStringParameters: query, PathParameters: params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: rt.key, AccountID: "000000000000", Stage: "$default", RequestID: requestID(),
			APIID: "local", DomainName: req.Host, DomainPrefix: strings.Split(req.Host, ".")[0],
			Time: now.Format("02/Jan/2006:15:04:05 -0700"), TimeEpoch: now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: req.Method, Path: rawPath, Protocol: req.Proto, SourceIP: ip, UserAgent: req.UserAgent(),
			},
		},
	}
	for _, c := range req.Cookies() {
		ev.Cookies = append(ev.Cookies, c.String())
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return ev
}

func requestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run serves HTTP on ln and runs every event source mapping and schedule
// until ctx ends.
func (r *Runner) Run(ctx context.Context, ln net.Listener) error {
	// Concurrency's default (10) is MappingInvocations', read as it goes:
	// a test may ask it while Run starts.
	if r.PollWait == 0 {
		r.PollWait = time.Second
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	// If serving fails, the pollers and schedules stop too: Run returns
	// the error instead of waiting for a ctx no one will cancel.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, f := range r.Stack.Functions {
		caps := r.MappingInvocations(f)
		if r.MachineInvocations > 0 && len(f.SQS) > 0 && r.Log != nil {
			r.Log.Debug("event source mappings fitted to the machine", "function", f.LogicalID, "invocations", caps)
		}
		for _, src := range f.SQS {
			if h := r.Handlers.SQS[f.LogicalID]; h != nil {
				wg.Go(func() { r.poll(ctx, f.LogicalID, src, caps[src.QueueLogicalID], h) })
			}
		}
		for _, s := range f.Schedules {
			if h := r.Handlers.Schedule[f.LogicalID]; h != nil {
				every := s.Every
				if r.ScheduleEvery > 0 {
					every = r.ScheduleEvery
				}
				wg.Go(func() { r.schedule(ctx, f.LogicalID, every, h) })
			}
		}
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	err := srv.Serve(ln)
	stop()
	wg.Wait()
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

// poll is one SQS event source mapping: receive a batch, hand it to the
// handler, delete what it did not report as failed. A failed item, or a
// whole batch whose handler erred, stays and comes back after its
// visibility timeout, as on Lambda. Messages are received ahead into a
// fairBuffer and handed out round-robin across message groups, as an SQS
// fair queue would serve them.
func (r *Runner) poll(ctx context.Context, fn string, src bootstrap.SQSSource, invocations int, h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) {
	arn := r.Stack.QueueARNs[src.QueueLogicalID]
	batch := min(max(src.BatchSize, 1), 10)
	buf := newFairBuffer()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.receive(ctx, fn, src, buf) })
	wg.Go(func() { r.keepHidden(ctx, fn, src, buf) })
	// ScalingConfig.MaximumConcurrency caps the mapping as it does on
	// Lambda (fitted to the machine by MappingInvocations); it keeps a P2
	// backlog from taking every invocation.
	sem := make(chan struct{}, invocations)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msgs := gather(ctx, buf, batch, src.BatchingWindow)
		if len(msgs) == 0 {
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.deliver(ctx, fn, src, arn, msgs, h)
		})
	}
}

// gather forms one batch as the mapping's poller does: it waits for a
// first message, then, under a batching window, goes on gathering until
// the batch is full or the window since that message has passed.
func gather(ctx context.Context, buf *fairBuffer, batch int, window time.Duration) []sqstypes.Message {
	msgs := buf.take(batch)
	for len(msgs) == 0 && ctx.Err() == nil {
		waitFor(ctx, buf.ready)
		msgs = buf.take(batch)
	}
	if window <= 0 || len(msgs) == 0 {
		return msgs
	}
	t := time.NewTimer(window)
	defer t.Stop()
	for len(msgs) < batch {
		select {
		case <-buf.ready:
			msgs = append(msgs, buf.take(batch-len(msgs))...)
		case <-t.C:
			return msgs
		case <-ctx.Done():
			return msgs
		}
	}
	return msgs
}

// receive keeps a mapping's buffer filled up to FairBufferCap, long-polling
// when the queue was found empty.
func (r *Runner) receive(ctx context.Context, fn string, src bootstrap.SQSSource, buf *fairBuffer) {
	wait := r.PollWait
	for ctx.Err() == nil {
		if buf.held() >= FairBufferCap {
			waitFor(ctx, buf.space)
			continue
		}
		out, err := r.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(src.QueueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: int32(wait / time.Second),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			if ctx.Err() == nil {
				r.Log.Warn("event source mapping receive failed", "function", fn, "err", err)
				sleepCtx(ctx, time.Second) // back off a failing poll, as the mapping does
			}
			continue
		}
		buf.add(out.Messages, time.Now())
		// A full receive may have left more behind: look again at once.
		// Else, while the function still has messages to take, let more
		// arrive first, as the mapping's batches gather under load: it
		// does not pay a receive for every message that trickles in.
		full := len(out.Messages) == 10
		wait = map[bool]time.Duration{true: 0, false: r.PollWait}[full]
		if !full && buf.held() > 0 {
			t := time.NewTimer(r.PollWait)
			select {
			case <-buf.space:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
}

// keepHidden hides again the messages the buffer has held for a third of
// the queue's visibility timeout. On AWS the mapping receives only what
// it is about to invoke with; here messages wait in the buffer (for
// fairness), and one whose visibility ran out there would be received
// again, each time counting towards the queue's maxReceiveCount, until a
// loaded machine dead-lettered messages no handler had failed.
func (r *Runner) keepHidden(ctx context.Context, fn string, src bootstrap.SQSSource, buf *fairBuffer) {
	visibility := 30 * time.Second // SQS's default
	out, err := r.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(src.QueueURL), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout}})
	if err == nil {
		if n, err := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)]); err == nil && n > 0 {
			visibility = time.Duration(n) * time.Second
		}
	}
	every := max(visibility/3, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		now := time.Now()
		msgs := buf.heldSince(now.Add(-every), now)
		for len(msgs) > 0 {
			n := min(len(msgs), 10)
			var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
			for i, m := range msgs[:n] {
				entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: int32(visibility / time.Second)})
			}
			msgs = msgs[n:]
			if _, err := r.SQS.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(src.QueueURL), Entries: entries}); err != nil && ctx.Err() == nil {
				r.Log.Warn("event source mapping could not hide held messages again; they may be received twice", "function", fn, "err", err)
			}
		}
	}
}

func (r *Runner) deliver(ctx context.Context, fn string, src bootstrap.SQSSource, arn string, msgs []sqstypes.Message, h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) {
	ev := events.SQSEvent{}
	for _, m := range msgs {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes, EventSource: "aws:sqs",
			EventSourceARN: arn, AWSRegion: r.Region,
		})
	}
	raw, _ := json.Marshal(ev)
	var lambdaEv events.SQSEvent
	_ = json.Unmarshal(raw, &lambdaEv)
	timeout := 300 * time.Second
	for _, f := range r.Stack.Functions {
		if f.LogicalID == fn && f.Timeout > 0 {
			timeout = time.Duration(f.Timeout) * time.Second
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	r.count(fn)
	resp, err := invokeSafely(func() (events.SQSEventResponse, error) { return h(callCtx, lambdaEv) })
	cancel()
	if err != nil {
		r.Log.Warn("batch failed; every message will be redelivered", "function", fn, "err", err)
		return
	}
	failed := map[string]bool{}
	if src.ReportBatchItemFailures {
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
	}
	var entries []sqstypes.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		if !failed[aws.ToString(m.MessageId)] {
			entries = append(entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		}
	}
	if len(entries) == 0 {
		return
	}
	if _, err := r.SQS.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(src.QueueURL), Entries: entries}); err != nil {
		r.Log.Warn("delete after batch failed; messages will be redelivered", "function", fn, "err", err)
	}
}

// schedule is the EventBridge rule: one event per period.
func (r *Runner) schedule(ctx context.Context, fn string, every time.Duration, h func(context.Context, events.EventBridgeEvent) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ev := events.EventBridgeEvent{
				Version: "0", ID: requestID(), DetailType: "Scheduled Event", Source: "aws.events",
				AccountID: "000000000000", Time: now.UTC(), Region: r.Region, Detail: json.RawMessage(`{}`),
				Resources: []string{fmt.Sprintf("arn:aws:events:%s:000000000000:rule/%s-%s", r.Region, r.Stack.Name, fn)},
			}
			r.count(fn)
			if _, err := invokeSafely(func() (struct{}, error) { return struct{}{}, h(ctx, ev) }); err != nil {
				r.Log.Warn("scheduled run failed", "function", fn, "err", err)
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
