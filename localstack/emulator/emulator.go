// Package emulator runs the local AWS emulator: a moto server behind a
// proxy that serialises its DynamoDB requests. moto applies conditional
// writes without a lock (8 threads racing one conditional UpdateItem gave
// two winners in 14 of 200 rounds); one lock around each DynamoDB request
// gives DynamoDB's real atomicity, which the engine's fencing relies on.
// The proxy also counts requests by service and operation.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// Emulator is a running moto server and its proxy.
type Emulator struct {
	// URL is the proxy's address: the AWS_ENDPOINT_URL for clients.
	URL string
	// MotoURL is moto's own address, for its /moto-api.
	MotoURL string

	cmd    *exec.Cmd
	proxy  *Proxy
	server *http.Server
	ln     net.Listener
}

// Start launches `moto_server` on a free loopback port and a serialising
// proxy in front of it on addr ("127.0.0.1:0" for any free port). moto's
// output goes to logFile when it is not nil.
func Start(ctx context.Context, addr string, logFile *os.File) (*Emulator, error) {
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, fmt.Errorf("moto_server is not on PATH (pip install \"moto[server]\"), or set AWS_ENDPOINT_URL to a running emulator: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto_server: %w", err)
	}
	e := &Emulator{MotoURL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	if err := waitReady(ctx, e.MotoURL+"/moto-api/", 30*time.Second); err != nil {
		e.Close()
		return nil, err
	}
	target, _ := url.Parse(e.MotoURL)
	e.proxy = NewProxy(target)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("listen for the emulator proxy on %s: %w", addr, err)
	}
	e.ln = ln
	e.URL = "http://" + ln.Addr().String()
	e.server = &http.Server{Handler: e.proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.server.Serve(ln) }()
	return e, nil
}

// Counts answers the requests the proxy has passed, by "service.Operation".
func (e *Emulator) Counts() map[string]int64 { return e.proxy.Counts() }

// Close stops the proxy and moto.
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

func waitReady(ctx context.Context, u string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("moto_server did not answer at %s within %s: %w", u, limit, errors.Join(err, ctx.Err()))
		}
		time.Sleep(50 * time.Millisecond) // polling a process start-up; there is no event to wait on
	}
}

// Proxy forwards to an emulator, holding one lock around every DynamoDB
// request, and counts requests.
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
// target header (DynamoDB_20120810.PutItem, AmazonSQS.SendMessage), or its
// path for anything else.
func operation(r *http.Request) string {
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

// SortedCounts renders counts one per line, for reports.
func SortedCounts(c map[string]int64) []string {
	out := make([]string, 0, len(c))
	for k, v := range c {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return out
}
