// Package lambdaemu serves Lambda's Invoke API on this machine for Go
// functions kept as source (examples/functions/<name>), as `sam local
// start-lambda` does: each function is built with `go build -tags
// lambda.norpc` and run as its own process under the Lambda Runtime API,
// which this package serves to it, so the function's code runs exactly as
// on Lambda's provided.al2023 runtime, never called in process. The SDK's
// Lambda client pointed at Service.URL (BaseEndpoint) invokes them.
//
// What it answers, as Lambda does: 200 with the function's answer; 200 with
// X-Amz-Function-Error: Unhandled and {"errorType", "errorMessage"} when the
// function fails, panics, exits or runs past its timeout; 404
// ResourceNotFoundException for a function (or a qualifier other than
// $LATEST) it does not serve; 429 TooManyRequestsException when the
// function's concurrency is taken; 400 InvalidRequestContentException for a
// payload that is not JSON; 413 RequestTooLargeException past 6 MB.
package lambdaemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Defaults of Options.
const (
	DefaultTimeout     = 30 * time.Second // template.yaml's Globals.Function.Timeout
	DefaultConcurrency = 4
	DefaultAccount     = "123456789012" // moto's
	// MaxPayloadBytes is Lambda's limit on a synchronous invocation's
	// request.
	MaxPayloadBytes = 6 * 1024 * 1024
)

// Options configure a Service.
type Options struct {
	// Dirs each hold functions: every subdirectory with Go files is one
	// function, named after the subdirectory.
	Dirs []string
	// Prefixes: each function is served under its own name and under each
	// prefix followed by it (stepflow-fn-echo), as template.yaml names the
	// functions it deploys. The first makes its AWS_LAMBDA_FUNCTION_NAME.
	Prefixes []string
	Region   string // default us-east-1
	Account  string // in ARNs; default DefaultAccount
	// Timeout is each invocation's bound (DefaultTimeout when zero): past
	// it the process is killed and the invocation answers Sandbox.Timedout.
	Timeout time.Duration
	// Concurrency is how many processes one function may run at once
	// (DefaultConcurrency when zero); one more invocation answers 429.
	Concurrency int
	// Env is added to each function's environment (e.g. AWS_ENDPOINT_URL
	// and credentials for a function that calls the emulator).
	Env map[string]string
	// Output receives the functions' stdout and stderr; nil discards them.
	Output io.Writer
	Log    *slog.Logger
}

// Service is a running local Lambda Invoke API.
type Service struct {
	URL string // the endpoint, for the SDK client's BaseEndpoint

	o       Options
	byName  map[string]*function // every name served, prefixed or not
	funcs   []*function
	cache   string
	srv     *http.Server
	done    chan struct{}
	closing sync.Once
}

// Start builds every function of o.Dirs and serves the Invoke API on addr
// ("127.0.0.1:0" for any port). A function that does not build fails
// Start, naming it. Close it when done.
func Start(ctx context.Context, addr string, o Options) (*Service, error) {
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Account == "" {
		o.Account = DefaultAccount
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cache, err := os.MkdirTemp("", "stepflow-lambda-")
	if err != nil {
		return nil, fmt.Errorf("lambda service: %w", err)
	}
	s := &Service{o: o, byName: map[string]*function{}, cache: cache, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(cache)
		}
	}()
	if err := s.discover(); err != nil {
		return nil, err
	}
	if err := s.buildAll(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("lambda service: listen on %s: %w", addr, err)
	}
	s.URL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{function}/invocations", s.invokeHandler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "UnknownOperationException", "the local Lambda service serves Invoke only")
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("lambda service stopped", "err", err)
		}
	}()
	ok = true
	return s, nil
}

// Names answers every function name served, sorted.
func (s *Service) Names() []string {
	out := make([]string, 0, len(s.byName))
	for n := range s.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close stops serving, kills every function process and waits for them.
func (s *Service) Close() {
	s.closing.Do(func() {
		if s.srv != nil {
			_ = s.srv.Close()
			<-s.done
		}
		for _, f := range s.funcs {
			f.close()
		}
		_ = os.RemoveAll(s.cache)
	})
}

// discover finds the functions of o.Dirs.
func (s *Service) discover() error {
	for _, dir := range s.o.Dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("lambda service: functions in %s: %w", dir, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			src := filepath.Join(dir, e.Name())
			if gofiles, _ := filepath.Glob(filepath.Join(src, "*.go")); len(gofiles) == 0 {
				continue
			}
			name := e.Name()
			if f, ok := domain.ParseLambdaFunction(name); !ok || f.Name != name || f.Qualifier != "" {
				return fmt.Errorf("lambda service: %s: %q is not a Lambda function name (letters, digits, '-', '_')", src, name)
			}
			canonical := name
			if len(s.o.Prefixes) > 0 {
				canonical = s.o.Prefixes[0] + name
			}
			f := &function{s: s, name: canonical, src: src, bin: filepath.Join(s.cache, name, "bootstrap"), changed: make(chan struct{})}
			for _, n := range append([]string{name}, prefixed(s.o.Prefixes, name)...) {
				if other, dup := s.byName[n]; dup {
					return fmt.Errorf("lambda service: %s and %s would both be %s", other.src, src, n)
				}
				s.byName[n] = f
			}
			s.funcs = append(s.funcs, f)
		}
	}
	return nil
}

func prefixed(prefixes []string, name string) []string {
	var out []string
	for _, p := range prefixes {
		out = append(out, p+name)
	}
	return out
}

// buildAll builds the functions two at a time (a build is CPU-bound, and
// the Go build cache makes a rebuild of unchanged code quick).
func (s *Service) buildAll(ctx context.Context) error {
	errs := make([]error, len(s.funcs))
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, f := range s.funcs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = f.build(ctx)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// build compiles the function for this machine, as `sam build` would for
// Lambda (provided.al2023 runs a bootstrap built with lambda.norpc).
func (f *function) build(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-o", f.bin, ".")
	cmd.Dir = f.src
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOOS=") || strings.HasPrefix(kv, "GOARCH=")
	}), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lambda service: build %s: %w\n%s", f.src, err, out)
	}
	return nil
}

// invokeHandler serves POST /2015-03-31/functions/{function}/invocations.
func (s *Service) invokeHandler(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("function")
	fn, ok := domain.ParseLambdaFunction(ref)
	name, qualifier := fn.Name, fn.Qualifier
	if !ok {
		apiError(w, http.StatusBadRequest, "ValidationException", fmt.Sprintf("1 validation error detected: Value '%s' at 'functionName' failed to satisfy constraint", ref))
		return
	}
	if q := r.URL.Query().Get("Qualifier"); q != "" {
		if qualifier != "" && qualifier != q {
			apiError(w, http.StatusBadRequest, "InvalidParameterValueException", "The derived qualifier from the function name does not match the specified qualifier.")
			return
		}
		qualifier = q
	}
	arn := fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", s.o.Region, s.o.Account, name)
	if qualifier != "" {
		arn += ":" + qualifier
	}
	f := s.byName[name]
	if f == nil || (qualifier != "" && qualifier != "$LATEST") {
		// Only $LATEST exists here: no versions are published, no aliases made.
		apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+arn)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes+1))
	if err != nil {
		apiError(w, http.StatusBadRequest, "InvalidRequestContentException", "could not read the request body: "+err.Error())
		return
	}
	if len(payload) > MaxPayloadBytes {
		apiError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException", fmt.Sprintf("Request must be smaller than %d bytes for the InvokeFunction operation", MaxPayloadBytes))
		return
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = []byte(`{}`)
	} else if !json.Valid(payload) {
		apiError(w, http.StatusBadRequest, "InvalidRequestContentException", "Could not parse request body into json")
		return
	}
	var clientContext []byte
	if cc := r.Header.Get("X-Amz-Client-Context"); cc != "" {
		raw, err := base64.StdEncoding.DecodeString(cc)
		if err != nil || !json.Valid(raw) {
			apiError(w, http.StatusBadRequest, "InvalidRequestContentException", "Client context must be a valid Base64-encoded JSON object.")
			return
		}
		clientContext = raw
	}
	inv := &invocation{id: requestID(), payload: payload, arn: arn, clientContext: clientContext, done: make(chan result, 1)}
	switch typ := r.Header.Get("X-Amz-Invocation-Type"); typ {
	case "", "RequestResponse":
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
		return
	case "Event":
		// Queued on Lambda; here run at once, its answer dropped.
		go func() {
			res, err := f.invoke(context.WithoutCancel(r.Context()), inv)
			if err != nil || res.err {
				s.o.Log.Warn("asynchronous invocation failed", "function", name, "err", err, "answer", string(res.payload))
			}
		}()
		w.WriteHeader(http.StatusAccepted)
		return
	default:
		apiError(w, http.StatusBadRequest, "InvalidParameterValueException", fmt.Sprintf("invocation type %q is not RequestResponse, Event or DryRun", typ))
		return
	}
	res, err := f.invoke(r.Context(), inv)
	switch {
	case errors.Is(err, errThrottled):
		apiError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate Exceeded.", "Reason", "ReservedFunctionConcurrentInvocationLimitExceeded")
		return
	case r.Context().Err() != nil:
		return // the caller left; the process was killed
	case err != nil:
		s.o.Log.Error("invocation failed", "function", name, "err", err)
		apiError(w, http.StatusInternalServerError, "ServiceException", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if res.err {
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
	}
	_, _ = w.Write(res.payload)
}

// apiError answers one of Lambda's errors as its REST-JSON protocol does:
// the code in X-Amzn-ErrorType, {"Type", "message"} in the body, and any
// further members (name, value, ...).
func apiError(w http.ResponseWriter, status int, code, msg string, more ...string) {
	body := map[string]string{"Type": "User", "message": msg}
	if status >= 500 {
		body["Type"] = "Service"
	}
	for i := 0; i+1 < len(more); i += 2 {
		body[more[i]] = more[i+1]
	}
	w.Header().Set("X-Amzn-ErrorType", code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// requestID answers a random UUID, as Lambda's request ids are.
func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
