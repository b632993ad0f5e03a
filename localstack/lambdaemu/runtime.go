package lambdaemu

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// errThrottled answers an invocation when every process the function may
// run is busy: Lambda's 429.
var errThrottled = errors.New("the function's concurrency is taken")

var errClosed = errors.New("the local Lambda service is closing")

// function is one function's pool of processes: started on demand, kept
// warm between invocations, at most Options.Concurrency at once.
type function struct {
	s         *Service
	name      string // AWS_LAMBDA_FUNCTION_NAME
	src, bin  string
	mu        sync.Mutex
	live      []*instance
	idle      []*instance // waiting in GET next: ready for an invocation
	finishing int         // answered, not back at GET next yet: warm in a moment
	changed   chan struct{}
	closed    bool
}

// invocation is one invoke, handed to a process through GET next.
type invocation struct {
	id            string
	payload       []byte
	arn           string // the ARN it was invoked by
	clientContext []byte
	deadline      time.Time
	done          chan result // buffered: the runtime's answer
}

// result is a function's answer: its payload, or with err its error
// ({"errorType", "errorMessage"}).
type result struct {
	payload []byte
	err     bool
}

// instance is one process of a function and the Runtime API it alone
// talks to (on Lambda each sandbox has its own).
type instance struct {
	f      *function
	srv    *http.Server
	work   chan *invocation
	exited chan struct{} // closed once the process has exited and left the pool
	// waitErr is how the process exited; read after exited is closed.
	waitErr error

	// Guarded by f.mu.
	reserved  bool // a new process whose first invocation is promised already
	finishing bool

	mu      sync.Mutex
	cmd     *exec.Cmd
	killed  bool
	current *invocation
	initErr []byte
}

// notify wakes invocations waiting for a process. f.mu held.
func (f *function) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// invoke runs one invocation on a warm process or a new one, within the
// function's timeout.
func (f *function) invoke(ctx context.Context, inv *invocation) (result, error) {
	timeout := f.s.o.Timeout
	inv.deadline = time.Now().Add(timeout)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		in, fresh, err := f.acquire(ctx)
		if err != nil {
			return result{}, err
		}
		select {
		case in.work <- inv:
		case <-in.exited:
			if fresh {
				return in.exitResult(inv), nil // it died starting: its init failed
			}
			continue // a warm one died meanwhile: take another
		case <-timer.C:
			in.kill()
			return timedOut(inv, timeout), nil
		case <-ctx.Done():
			in.kill()
			return result{}, ctx.Err()
		}
		select {
		case res := <-inv.done:
			return res, nil
		case <-in.exited:
			select {
			case res := <-inv.done: // answered, then exited (a panic does)
				return res, nil
			default:
				return in.exitResult(inv), nil
			}
		case <-timer.C:
			in.kill() // as Lambda does: the sandbox of a timed-out invocation is not reused
			return timedOut(inv, timeout), nil
		case <-ctx.Done():
			in.kill()
			return result{}, ctx.Err()
		}
	}
}

// acquire answers a warm process, or starts one (fresh) if the function
// may run one more; a process that just answered is waited for rather
// than starting another beside it.
func (f *function) acquire(ctx context.Context) (in *instance, fresh bool, err error) {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, false, errClosed
		}
		if n := len(f.idle); n > 0 {
			in = f.idle[n-1]
			f.idle = f.idle[:n-1]
			f.mu.Unlock()
			return in, false, nil
		}
		if f.finishing == 0 {
			if len(f.live) >= f.s.o.Concurrency {
				f.mu.Unlock()
				return nil, false, errThrottled
			}
			in = &instance{f: f, work: make(chan *invocation), exited: make(chan struct{}), reserved: true}
			f.live = append(f.live, in)
			f.mu.Unlock()
			if err := in.start(); err != nil {
				f.gone(in)
				return nil, false, err
			}
			return in, true, nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// gone takes an exited process out of the pool.
func (f *function) gone(in *instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = remove(f.live, in)
	f.idle = remove(f.idle, in)
	if in.finishing {
		in.finishing = false
		f.finishing--
	}
	f.notify()
}

func remove(list []*instance, in *instance) []*instance {
	for i, x := range list {
		if x == in {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// close kills every process of the function and waits for them.
func (f *function) close() {
	f.mu.Lock()
	f.closed = true
	live := append([]*instance(nil), f.live...)
	f.mu.Unlock()
	for _, in := range live {
		in.kill()
		<-in.exited
	}
}

// start runs the process with AWS_LAMBDA_RUNTIME_API naming a Runtime API
// of its own.
func (in *instance) start() error {
	f := in.f
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("runtime API for %s: %w", f.name, err)
	}
	const api = "/2018-06-01/runtime"
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api+"/invocation/next", in.next)
	mux.HandleFunc("POST "+api+"/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) { in.answer(w, r, false) })
	mux.HandleFunc("POST "+api+"/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) { in.answer(w, r, true) })
	mux.HandleFunc("POST "+api+"/init/error", in.initError)
	in.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = in.srv.Serve(ln) }()

	cmd := exec.Command(f.bin)
	cmd.Dir = filepath.Dir(f.bin)
	cmd.Env = f.env(ln.Addr().String())
	if out := f.s.o.Output; out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = in.srv.Close()
		close(in.exited)
		return fmt.Errorf("start %s: %w", f.name, err)
	}
	in.mu.Lock()
	in.cmd = cmd
	if in.killed { // the service closed while it started
		_ = cmd.Process.Kill()
	}
	in.mu.Unlock()
	go func() {
		in.waitErr = cmd.Wait()
		_ = in.srv.Close()
		f.gone(in)
		close(in.exited)
	}()
	return nil
}

// env is the process's environment, as Lambda's provided.al2023 runtime
// sets it (no variable of the machine leaks in).
func (f *function) env(runtimeAPI string) []string {
	o := f.s.o
	vars := map[string]string{
		"AWS_LAMBDA_RUNTIME_API":          runtimeAPI,
		"AWS_LAMBDA_FUNCTION_NAME":        f.name,
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + f.name,
		"AWS_LAMBDA_LOG_STREAM_NAME":      time.Now().UTC().Format("2006/01/02") + "/[$LATEST]" + requestID(),
		"AWS_EXECUTION_ENV":               "AWS_Lambda_provided.al2023",
		"AWS_REGION":                      o.Region,
		"AWS_DEFAULT_REGION":              o.Region,
		"_HANDLER":                        "bootstrap",
		"LAMBDA_TASK_ROOT":                filepath.Dir(f.bin),
		"LAMBDA_RUNTIME_DIR":              filepath.Dir(f.bin),
		"PATH":                            "/usr/local/bin:/usr/bin:/bin",
		"LANG":                            "en_US.UTF-8",
		"TZ":                              ":UTC",
	}
	for k, v := range o.Env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	return out
}

func (in *instance) kill() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.killed = true
	if in.cmd != nil {
		_ = in.cmd.Process.Kill()
	}
}

// next serves GET .../invocation/next: the process is ready (its previous
// invocation complete); it waits here for the next one.
func (in *instance) next(w http.ResponseWriter, r *http.Request) {
	f := in.f
	f.mu.Lock()
	if in.finishing {
		in.finishing = false
		f.finishing--
	}
	if in.reserved {
		in.reserved = false // its invoker is handing it work already
	} else {
		f.idle = append(f.idle, in)
	}
	f.notify()
	f.mu.Unlock()
	select {
	case inv := <-in.work:
		in.mu.Lock()
		in.current = inv
		in.mu.Unlock()
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", inv.arn)
		h.Set("Lambda-Runtime-Trace-Id", traceID())
		if inv.clientContext != nil {
			h.Set("Lambda-Runtime-Client-Context", string(inv.clientContext))
		}
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(inv.payload)
	case <-r.Context().Done(): // the process exited, or the service is closing
		f.mu.Lock()
		f.idle = remove(f.idle, in)
		f.mu.Unlock()
	}
}

// answer serves POST .../invocation/{id}/response and .../error.
func (in *instance) answer(w http.ResponseWriter, r *http.Request, isErr bool) {
	id := r.PathValue("id")
	in.mu.Lock()
	inv := in.current
	if inv != nil && inv.id == id {
		in.current = nil
	} else {
		inv = nil
	}
	in.mu.Unlock()
	if inv == nil {
		runtimeError(w, http.StatusBadRequest, "InvalidRequestID", "no invocation "+id+" is in flight")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes+1))
	status := http.StatusAccepted
	switch {
	case err != nil:
		isErr, body = true, errorPayload("Runtime.InvalidResponse", "could not read the response: "+err.Error())
	case len(body) > MaxPayloadBytes:
		status = http.StatusRequestEntityTooLarge
		isErr, body = true, errorPayload("Function.ResponseSizeTooLarge", fmt.Sprintf("Response payload size exceeded maximum allowed payload size (%d bytes).", MaxPayloadBytes))
	case isErr && !json.Valid(body):
		body = errorPayload(r.Header.Get("Lambda-Runtime-Function-Error-Type"), string(body))
	case !isErr && r.Trailer.Get("Lambda-Runtime-Function-Error-Type") != "":
		// A response whose body failed while streaming: the runtime names
		// the error in trailers.
		isErr = true
		body, err = base64.StdEncoding.DecodeString(r.Trailer.Get("Lambda-Runtime-Function-Error-Body"))
		if err != nil || !json.Valid(body) {
			body = errorPayload(r.Trailer.Get("Lambda-Runtime-Function-Error-Type"), "the response failed while streaming")
		}
	}
	// Marked before the answer is seen, so the next invocation waits for
	// this process rather than starting another.
	in.f.mu.Lock()
	in.finishing = true
	in.f.finishing++
	in.f.mu.Unlock()
	inv.done <- result{payload: body, err: isErr}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"status":"OK"}`))
}

// initError serves POST .../init/error: the runtime could not start; it
// answers the invocation waiting for it once the process exits.
func (in *instance) initError(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes))
	if !json.Valid(body) {
		body = errorPayload(r.Header.Get("Lambda-Runtime-Function-Error-Type"), string(body))
	}
	in.mu.Lock()
	in.initErr = body
	in.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"OK"}`))
}

// exitResult answers an invocation whose process exited without answering.
func (in *instance) exitResult(inv *invocation) result {
	in.mu.Lock()
	initErr := in.initErr
	in.mu.Unlock()
	if initErr != nil {
		return result{payload: initErr, err: true}
	}
	return result{payload: errorPayload("Runtime.ExitError", fmt.Sprintf("RequestId: %s Error: Runtime exited with error: %v", inv.id, in.waitErr)), err: true}
}

func timedOut(inv *invocation, timeout time.Duration) result {
	return result{payload: errorPayload("Sandbox.Timedout", fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", inv.id, timeout.Seconds())), err: true}
}

func errorPayload(typ, msg string) []byte {
	if typ == "" {
		typ = "Runtime.Unknown"
	}
	b, _ := json.Marshal(map[string]string{"errorType": typ, "errorMessage": msg})
	return b
}

func runtimeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorPayload(typ, msg))
}

// traceID answers an X-Ray trace header as Lambda passes one.
func traceID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%s;Sampled=0", time.Now().Unix(), hex.EncodeToString(b))
}
