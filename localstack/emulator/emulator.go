// Package emulator runs the local AWS emulator: a moto server behind a
// proxy that serialises its DynamoDB requests. moto applies conditional
// writes without a lock (8 threads racing one conditional UpdateItem gave
// two winners in 14 of 200 rounds); one lock around each DynamoDB request
// gives DynamoDB's real atomicity, which the engine's fencing relies on.
// The proxy also counts requests by service and operation.
//
// Start launches moto and the proxy; Front puts the same proxy in front
// of an emulator that is already running (AWS_ENDPOINT_URL: another moto,
// LocalStack), since nothing proves that one atomic either.
//
// Both turn on moto's execution of Step Functions state machines (off by
// default: moto only records them), which the timer state machine needs to
// deliver. A state machine's SQS task sends through a boto3 client moto
// aims at localhost:$MOTO_PORT (5000 when unset), and its Wait state
// compares the instant it waits for, in UTC, with the local clock. Start
// sets both MOTO_PORT and TZ=UTC; a moto started elsewhere for Front must
// be started with MOTO_PORT equal to its own port (or listen on 5000) and
// TZ=UTC (or run on a UTC machine), or its timers send nowhere or at the
// wrong hour.
package emulator

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/localstack/toolchain"
)

// Emulator is a serialising proxy in front of an emulator: a moto server
// it started (Start) or one that was already running (Front).
type Emulator struct {
	// URL is the proxy's address: the AWS_ENDPOINT_URL for clients.
	URL string
	// MotoURL is the emulator's own address behind the proxy (moto's, for
	// its /moto-api, when Start launched it).
	MotoURL string

	cmd    *exec.Cmd
	proxy  *Proxy
	server *http.Server
	ln     net.Listener
}

// Start launches `moto_server` (from PATH, else the project's virtualenv:
// localstack/toolchain) on a free loopback port and a serialising
// proxy in front of it on addr ("127.0.0.1:0" for any free port). moto's
// output goes to logFile when it is not nil.
func Start(ctx context.Context, addr string, logFile *os.File) (*Emulator, error) {
	tc := toolchain.New()
	bin, ok := tc.Find(toolchain.MotoServer)
	if !ok {
		return nil, fmt.Errorf("%w; or set AWS_ENDPOINT_URL to a running emulator", tc.NotFound(toolchain.MotoServer))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := motoCommand(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Env = append(os.Environ(), fmt.Sprintf("MOTO_PORT=%d", port), "TZ=UTC") // see the package comment
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setDeathSignal(cmd)
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto_server: %w", err)
	}
	e := &Emulator{MotoURL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	if err := waitReady(ctx, "moto_server", e.MotoURL+"/moto-api/", 30*time.Second); err != nil {
		e.Close()
		return nil, err
	}
	if err := executeStateMachines(ctx, e.MotoURL); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.serve(addr); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

//go:embed motopatch.py
var motoPatch string

// motoCommand runs moto_server's own Python with motopatch.py, which fixes
// moto's failure to start an execution while another of the same state
// machine runs (see the script), when that Python imports moto; else
// moto_server as it is, whose timers then go one at a time. The Python
// beside moto_server comes first: a virtualenv's (make setup) is the one
// that imports its moto.
func motoCommand(motoServer string, args ...string) *exec.Cmd {
	dir := filepath.Dir(motoServer)
	for _, py := range []string{filepath.Join(dir, "python3"), filepath.Join(dir, "python"), "python3", "python"} {
		if bin, err := exec.LookPath(py); err == nil && exec.Command(bin, "-c", "import moto.server, moto.stepfunctions.models").Run() == nil {
			return exec.Command(bin, append([]string{"-c", motoPatch}, args...)...)
		}
	}
	log.Printf("emulator: no python imports moto; running %s unpatched (Step Functions timers cannot overlap)", motoServer)
	return exec.Command(motoServer, args...)
}

// Front puts a serialising proxy on addr ("127.0.0.1:0" for any free port)
// in front of the emulator already running at endpoint (an http or https
// base URL), once it answers. Close stops the proxy, never the emulator.
func Front(ctx context.Context, addr, endpoint string) (*Emulator, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("emulator endpoint %q is not an http(s) URL", endpoint)
	}
	if err := waitReady(ctx, "the emulator", endpoint, 10*time.Second); err != nil {
		return nil, err
	}
	e := &Emulator{MotoURL: strings.TrimSuffix(endpoint, "/")}
	// LocalStack runs state machines anyway and has no /moto-api: a failure
	// here only means the emulator is not moto.
	_ = executeStateMachines(ctx, e.MotoURL)
	if err := e.serve(addr); err != nil {
		return nil, err
	}
	return e, nil
}

// serve starts the proxy to e.MotoURL on addr.
func (e *Emulator) serve(addr string) error {
	target, err := url.Parse(e.MotoURL)
	if err != nil {
		return fmt.Errorf("emulator address %q: %w", e.MotoURL, err)
	}
	e.proxy = NewProxy(target)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for the emulator proxy on %s: %w", addr, err)
	}
	e.ln = ln
	e.URL = "http://" + ln.Addr().String()
	e.server = &http.Server{Handler: e.proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.server.Serve(ln) }()
	return nil
}

// Launched reports whether this Emulator started moto itself (Start)
// rather than fronting a running emulator (Front).
func (e *Emulator) Launched() bool { return e.cmd != nil }

// Counts answers the requests the proxy has passed, by "service.Operation".
func (e *Emulator) Counts() map[string]int64 { return e.proxy.Counts() }

// Close stops the proxy, and moto if Start launched it.
func (e *Emulator) Close() {
	if e.server != nil {
		_ = e.server.Close()
	}
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// executeStateMachines turns on moto's execution of state machines. It
// must precede the first CreateStateMachine: moto keeps state machines
// created before it in another backend, which never runs them.
func executeStateMachines(ctx context.Context, motoURL string) error {
	const config = `{"stepfunctions": {"execute_state_machine": true}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, motoURL+"/moto-api/config", strings.NewReader(config))
	if err != nil {
		return fmt.Errorf("configure moto at %s: %w", motoURL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("configure moto at %s to run state machines: %w", motoURL, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("configure moto at %s to run state machines: %s", motoURL, res.Status)
	}
	return nil
}

// waitReady polls u until it answers anything at all over HTTP.
func waitReady(ctx context.Context, what, u string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not answer at %s within %s: %w", what, u, limit, errors.Join(err, ctx.Err()))
		}
		time.Sleep(50 * time.Millisecond) // polling a process start-up; there is no event to wait on
	}
}

// Proxy forwards to an emulator, holding one lock around every DynamoDB
// request, and counts requests. The lock is the proxy's own: clients that
// share an emulator are serialised with each other only when they share
// a proxy too.
type Proxy struct {
	rp     *httputil.ReverseProxy
	dynamo sync.Mutex

	mu     sync.Mutex
	counts map[string]int64
}

// NewProxy answers a proxy to target.
func NewProxy(target *url.URL) *Proxy {
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil { // a client that hung up needs no answer or log line
			log.Printf("emulator proxy: %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	return &Proxy{rp: rp, counts: map[string]int64{}}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := operation(r)
	p.mu.Lock()
	p.counts[op]++
	p.mu.Unlock()
	if strings.HasPrefix(op, "dynamodb.") {
		p.dynamo.Lock()
		defer p.dynamo.Unlock()
	}
	p.rp.ServeHTTP(w, r)
}

// Counts answers a copy of the request counts.
func (p *Proxy) Counts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// operation names a request "service.Operation" from its JSON-protocol
// target header (DynamoDB_20120810.PutItem, AmazonSQS.SendMessage), an S3
// request from its method and path (s3.PutObject: its key is no part of
// the name, so counts stay few), or its path for anything else.
func operation(r *http.Request) string {
	if op := s3Operation(r); op != "" {
		return "s3." + op
	}
	t := r.Header.Get("X-Amz-Target")
	svc, op, ok := strings.Cut(t, ".")
	switch {
	case ok && strings.HasPrefix(svc, "DynamoDB"):
		return "dynamodb." + op
	case ok && svc == "AmazonSQS":
		return "sqs." + op
	case ok && strings.HasPrefix(svc, "AWSStepFunctions"):
		return "states." + op
	case ok:
		return strings.ToLower(svc) + "." + op
	}
	return "other." + r.Method + " " + r.URL.Path
}

// s3Operation names an S3 request (signed for service s3, in its
// Authorization header or, presigned, in its query), path-style: /bucket
// or /bucket/key. It answers "" for a request of another service.
func s3Operation(r *http.Request) string {
	if !strings.Contains(r.Header.Get("Authorization"), "/s3/aws4_request") &&
		!strings.Contains(r.URL.Query().Get("X-Amz-Credential"), "/s3/aws4_request") {
		return ""
	}
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	object := key != ""
	switch {
	case r.Method == http.MethodPut && object:
		return "PutObject"
	case r.Method == http.MethodGet && object:
		return "GetObject"
	case r.Method == http.MethodHead && object:
		return "HeadObject"
	case r.Method == http.MethodDelete && object:
		return "DeleteObject"
	case r.Method == http.MethodPut:
		return "CreateBucket"
	case r.Method == http.MethodHead:
		return "HeadBucket"
	case r.Method == http.MethodGet:
		return "ListObjects"
	}
	return r.Method
}

// SortedCounts renders counts one per line, for reports.
func SortedCounts(c map[string]int64) []string {
	out := make([]string, 0, len(c))
	for k, v := range c {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return out
}
