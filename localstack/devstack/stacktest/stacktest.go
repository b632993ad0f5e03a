// Package stacktest starts local stacks for tests: one moto emulator per
// test binary, and a stack of its own (its own tables and queues) per test,
// with an HTTP client and helpers that poll for conditions instead of
// sleeping; or, for tests of the API's behaviour (NewInMemory), the
// stack's routes and handlers over the engine on the in-memory adapters.
package stacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/emulator"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/views"
)

// API keys every test stack knows.
const (
	KeyA    = "key-a"
	TenantA = "tenant-a"
	KeyB    = "key-b"
	TenantB = "tenant-b"
)

var (
	emuOnce sync.Once
	emu     *emulator.Emulator
	emuErr  error
	seq     atomic.Int64
)

// Endpoint answers the test binary's shared emulator, starting it once.
// STEPFLOW_TEST_ENDPOINT names a running one instead.
func Endpoint(t testing.TB) string {
	t.Helper()
	if ep := os.Getenv("STEPFLOW_TEST_ENDPOINT"); ep != "" {
		return ep
	}
	emuOnce.Do(func() { emu, emuErr = emulator.Start(context.Background(), "127.0.0.1:0", nil) })
	require.NoError(t, emuErr, "start the emulator")
	return emu.URL
}

// Clock is a test clock: real time plus an offset tests can move forward.
type Clock struct{ offset atomic.Int64 }

// Now answers the clock's time.
func (c *Clock) Now() time.Time { return time.Now().UTC().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Harness is one test's stack.
type Harness struct {
	*devstack.Stack
	Clock *Clock
	HTTP  *http.Client
}

// Option adjusts a test stack's options.
type Option func(*devstack.Options)

// New starts a stack of the test's own on the shared emulator; it stops
// when the test ends. The heartbeat schedule is left to the test (Sweep).
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	clock := &Clock{}
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	o := devstack.Options{
		EndpointURL: Endpoint(t), StackName: fmt.Sprintf("t%d-%s", seq.Add(1), strings.Trim(name, "-")),
		APIKeys:       map[string]string{KeyA: TenantA, KeyB: TenantB},
		ScheduleEvery: time.Hour, PollWait: time.Second, Now: clock.Now,
	}
	for _, f := range opts {
		f(&o)
	}
	st, err := devstack.Start(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	h := &Harness{Stack: st, Clock: clock, HTTP: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(func() { h.checkEveryJob(t) })
	return h
}

// checkEveryJob requires of every job the test made, in any state, that
// its events replay to its stored state: each event legal in the
// transition tables, in order; and that its log, read in each
// vocabulary's words (shared/views), moves only as that vocabulary allows.
func (h *Harness) checkEveryJob(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for _, tenant := range []string{TenantA, TenantB} {
		cursor := ""
		for {
			jobs, next, err := h.Engine.List(ctx, tenant, engine.ListFilter{Limit: 100, Cursor: cursor})
			require.NoError(t, err)
			for _, js := range jobs {
				j, err := h.Engine.Get(ctx, tenant, js.ID)
				if errors.Is(err, domain.ErrUnreadable) {
					continue // a test that corrupts a job on purpose
				}
				require.NoError(t, err)
				require.NoError(t, domain.CheckReplay(j), "job %s of %s", j.ID, tenant)
				require.NoError(t, domain.CheckFormal(j.Events), "job %s of %s", j.ID, tenant)
				require.NoError(t, views.CheckAll(j), "job %s of %s in every vocabulary", j.ID, tenant)
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
}

// Call makes an HTTP request to the stack's API. body is sent as is when it
// is a string or []byte, as JSON otherwise.
func (h *Harness) Call(t testing.TB, method, path, key string, body any, headers ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		r = bytes.NewReader(raw)
	}
	if key != "" {
		headers = append([]string{"Authorization", "Bearer " + key}, headers...)
	}
	res, out := h.Raw(t, method, path, r, headers...)
	return res.StatusCode, out
}

// Raw makes an HTTP request with the given headers (name, value, ...) and
// answers the response, its body read.
func (h *Harness) Raw(t testing.TB, method, path string, body io.Reader, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.URL+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := h.HTTP.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, out
}

// JSON makes a call and decodes its answer into out, requiring status.
func (h *Harness) JSON(t testing.TB, wantStatus int, method, path, key string, body any, out any, headers ...string) {
	t.Helper()
	status, raw := h.Call(t, method, path, key, body, headers...)
	require.Equal(t, wantStatus, status, "%s %s answered %s", method, path, raw)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "decode %s", raw)
	}
}

// Job is GET /v1/jobs/{id}'s answer.
type Job struct {
	ID    string          `json:"id"`
	State domain.JobState `json:"state"`
	Steps []struct {
		ID        string           `json:"id"`
		State     domain.StepState `json:"state"`
		Attempt   int              `json:"attempt"`
		Output    json.RawMessage  `json:"output"`
		Error     *domain.StepError
		Attempts  []domain.Attempt `json:"attempts"`
		Child     string           `json:"child"`
		Execution string           `json:"execution"`
	} `json:"steps"`
	Parent *struct {
		Job     string `json:"job"`
		Step    string `json:"step"`
		Attempt int    `json:"attempt"`
	} `json:"parent"`
	Children []string `json:"children"`
}

// Submit posts a job for key and answers it.
func (h *Harness) Submit(t testing.TB, key string, spec any) Job {
	t.Helper()
	var j Job
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/jobs", key, spec, &j)
	return j
}

// Get answers a job.
func (h *Harness) Get(t testing.TB, key, id string) Job {
	t.Helper()
	var j Job
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id, key, nil, &j)
	return j
}

// Events answers a job's event log.
func (h *Harness) Events(t testing.TB, key, id string) []domain.Event {
	t.Helper()
	var out struct{ Events []domain.Event }
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+id+"/events", key, nil, &out)
	return out.Events
}

// EventTypes answers the types of a job's events, in order.
func (h *Harness) EventTypes(t testing.TB, key, id string) []string {
	t.Helper()
	var out []string
	for _, e := range h.Events(t, key, id) {
		out = append(out, e.Type)
	}
	return out
}

// Await polls a job until cond holds (30 s at most) and answers it.
func (h *Harness) Await(t testing.TB, key, id string, what string, cond func(Job) bool) Job {
	t.Helper()
	var j Job
	require.Eventually(t, func() bool {
		j = h.Get(t, key, id)
		return cond(j)
	}, 30*time.Second, 20*time.Millisecond, "job %s never became %s; last seen %+v", id, what, j)
	return j
}

// AwaitState polls a job until it is in state.
func (h *Harness) AwaitState(t testing.TB, key, id string, state domain.JobState) Job {
	t.Helper()
	return h.Await(t, key, id, string(state), func(j Job) bool { return j.State == state })
}

// CheckReplay requires that the job's events replay to its stored state,
// and that its job events are legal in the formal job table plus the
// documented widenings.
func (h *Harness) CheckReplay(t testing.TB, tenant, id string) {
	t.Helper()
	j, err := h.Engine.Get(context.Background(), tenant, id)
	require.NoError(t, err)
	require.NoError(t, domain.CheckReplay(j))
	require.NoError(t, domain.CheckFormal(j.Events), "job %s", id)
}

// Sweep runs the heartbeat function's handler once, as the schedule would.
func (h *Harness) Sweep(t testing.TB) engine.SweepReport {
	t.Helper()
	rep, err := handlers.Heartbeat(h.Engine)(context.Background(), events.EventBridgeEvent{DetailType: "Scheduled Event", Source: "aws.events"})
	require.NoError(t, err)
	return rep
}

// FaultSQS fails the engine's sends on demand: the process "dies" after
// its DynamoDB write and before its SQS send. It is a middleware at the
// front of the SQS client's Initialize step (awsfault.Around), so a failed
// send makes no request and the SDK retries nothing.
type FaultSQS struct {
	mu        sync.Mutex
	failStep  string
	failSends int
	Failed    atomic.Int32
	Sent      atomic.Int32 // messages sent through it
}

// FailNextSends makes the next n SendMessageBatch calls that dispatch step
// fail.
func (f *FaultSQS) FailNextSends(n int, step string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSends, f.failStep = n, step
}

// sendMessageBatch fails while failures are due, else sends.
func (f *FaultSQS) sendMessageBatch(_ context.Context, in any, send func() (any, error)) (any, error) {
	batch := in.(*sqs.SendMessageBatchInput)
	f.mu.Lock()
	fail := false
	if f.failSends > 0 {
		for _, e := range batch.Entries {
			if strings.Contains(aws.ToString(e.MessageBody), `"step":"`+f.failStep+`"`) {
				fail = true
			}
		}
	}
	if fail {
		f.failSends--
	}
	f.mu.Unlock()
	if fail {
		f.Failed.Add(1)
		return nil, fmt.Errorf("injected fault: process died before SendMessageBatch")
	}
	out, err := send()
	if err == nil {
		f.Sent.Add(int32(len(batch.Entries)))
	}
	return out, err
}

// WithFaultSQS installs f in the engine's SQS client.
func WithFaultSQS(f *FaultSQS) Option {
	return WithAPIOptions(awsfault.Around("SQS", "SendMessageBatch", f.sendMessageBatch))
}

// WithAPIOptions adds middleware to the engine's AWS clients
// (devstack.Options.APIOptions), e.g. awsfault.FailOperation's.
func WithAPIOptions(opts ...func(*middleware.Stack) error) Option {
	return func(o *devstack.Options) { o.APIOptions = append(o.APIOptions, opts...) }
}

// ReadyTokens makes the queue's token of a message received from one of the
// stack's ready queues, as the execute function's wiring does.
func (h *Harness) ReadyTokens() func(queueARN, receipt string) string {
	env := h.Resources.Env
	return queue.ReadyTokens([domain.MaxPriority + 1]string{env["STEPFLOW_QUEUE_P0"], env["STEPFLOW_QUEUE_P1"], env["STEPFLOW_QUEUE_P2"]})
}
