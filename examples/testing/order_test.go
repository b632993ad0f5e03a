// An example of testing a job spec and its worker handlers with
// sdk/stepflowtest: copy this file next to your own spec and handlers.
// It runs in milliseconds with no emulator (go test ./examples/...): the
// harness runs stepflow's engine in-process on a clock the test moves, so
// a day-long approval timeout or a retry's backoff takes no time.
package order_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/sdk/stepflowtest"
	"github.com/stepflow/stepflow/shared/domain"
)

// orderSpec is the job under test: reserve stock, charge the card (a
// flaky gateway, so retried with backoff), wait up to a day for a person
// to approve, then tell the carrier over http what was charged and who
// approved it. In your code it would live where you submit it from.
const orderSpec = `{
  "payload": {"order": 42, "sku": "mug", "cents": 1299},
  "steps": [
    {"id": "reserve", "action": {"type": "worker", "queue": "inventory"}},
    {"id": "charge",  "action": {"type": "worker", "queue": "payments"}, "depends_on": ["reserve"],
     "retry": {"max_attempts": 4, "backoff": "exponential", "initial_delay_ms": 2000, "max_delay_ms": 60000}},
    {"id": "review",  "action": {"type": "approval", "timeout_seconds": 86400}, "depends_on": ["charge"]},
    {"id": "ship",    "action": {"type": "http", "url": "CARRIER_URL"}, "depends_on": ["charge", "review"]}
  ]
}`

// gateway stands in for a card processor that is busy for its first
// calls, or declines; it notes each charge under its idempotency key.
type gateway struct {
	mu      sync.Mutex
	busyFor int
	calls   int
	charged map[string]bool
	decline bool
}

// charge is the payments worker's handler: in a DAG a step's input is
// {"payload": <the job's>, "deps": {<step>: <its output>}}. (The SDK's worker package is to take
// handlers of this signature, so the function tested is the one run.)
func (g *gateway) charge(_ context.Context, task *stepflowtest.Task) (any, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.decline {
		return nil, stepflowtest.Fail("fatal", "card declined")
	}
	if g.calls <= g.busyFor {
		return nil, stepflowtest.Fail("retryable", "gateway busy")
	}
	g.charged[task.IdempotencyKey] = true
	var in struct {
		Deps struct {
			Reserve struct{ Cents int } `json:"reserve"`
		} `json:"deps"`
	}
	if err := json.Unmarshal(task.Input, &in); err != nil {
		return nil, stepflowtest.Fail("fatal", "bad input: "+err.Error())
	}
	return map[string]any{"charged_cents": in.Deps.Reserve.Cents, "charge_id": task.IdempotencyKey}, nil
}

// reserve is the inventory worker's handler; a root of the DAG, it runs
// on the job's payload.
func reserve(_ context.Context, task *stepflowtest.Task) (any, error) {
	var order struct {
		Order int    `json:"order"`
		SKU   string `json:"sku"`
		Cents int    `json:"cents"`
	}
	if err := json.Unmarshal(task.Input, &order); err != nil {
		return nil, stepflowtest.Fail("fatal", err.Error())
	}
	return map[string]any{"order": order.Order, "cents": order.Cents, "bin": "A-" + order.SKU}, nil
}

// bundle is one test's harness with the handlers served and a carrier
// answering on a local test server.
type bundle struct {
	env     *stepflowtest.Env
	gw      *gateway
	spec    string
	shipped chan string
	start   time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	shipped := make(chan string, 10)
	carrier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		shipped <- string(body)
		_, _ = w.Write([]byte(`{"tracking":"TRK-1"}`))
	}))
	t.Cleanup(carrier.Close)

	env := stepflowtest.New(t)
	gw := &gateway{charged: map[string]bool{}}
	env.HandleQueue("inventory", reserve)
	env.HandleQueue("payments", gw.charge)
	return &bundle{env: env, gw: gw, spec: strings.Replace(orderSpec, "CARRIER_URL", carrier.URL, 1), shipped: shipped, start: env.Now()}
}

func TestOrderShipsOnceApproved(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.gw.busyFor = 2
	job := s.env.Submit(s.spec)

	// Runs until the gate opens: the charge is retried 2 s and then 4 s
	// after its failures, on the harness's clock.
	s.env.AwaitState(job.ID, domain.JobWaiting)
	require.Equal(t, s.start.Add(6*time.Second), s.env.Now())
	charge := s.env.Step(job.ID, "charge")
	require.Len(t, charge.Attempts, 3)
	require.Len(t, s.gw.charged, 1, "charged once")

	s.env.Approve(job.ID, "review")
	got := s.env.AwaitState(job.ID, domain.JobCompleted)
	require.JSONEq(t, `{"tracking":"TRK-1"}`, string(got.Steps[3].Output))
	var sent struct {
		Deps struct {
			Charge json.RawMessage `json:"charge"`
			Review struct {
				Approved bool   `json:"approved"`
				By       string `json:"by"`
			} `json:"review"`
		} `json:"deps"`
	}
	require.NoError(t, json.Unmarshal([]byte(<-s.shipped), &sent))
	require.JSONEq(t, `{"charged_cents":1299,"charge_id":"`+job.ID+`/charge/3"}`, string(sent.Deps.Charge))
	require.True(t, sent.Deps.Review.Approved)
	require.Equal(t, "stepflowtest", sent.Deps.Review.By)
}

func TestUnapprovedOrderFailsAfterADay(t *testing.T) {
	t.Parallel()
	s := setup(t)
	job := s.env.Submit(s.spec)
	s.env.AwaitState(job.ID, domain.JobWaiting)

	s.env.Advance(23 * time.Hour)
	require.Equal(t, domain.JobWaiting, s.env.Get(job.ID).State, "still waiting for a person")
	got := s.env.AwaitState(job.ID, domain.JobFailed)
	require.Equal(t, s.start.Add(24*time.Hour), s.env.Now(), "the gate times out exactly a day after it opened")
	require.Equal(t, domain.ClassTimeout, got.Steps[2].Error.Class)
	require.Empty(t, s.shipped, "nothing shipped")
}

func TestDeclinedCardFailsTheOrderAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.gw.decline = true
	job := s.env.Submit(s.spec)
	got := s.env.AwaitState(job.ID, domain.JobFailed)
	require.Equal(t, s.start, s.env.Now(), "fatal: no retry, no waiting")
	require.Equal(t, "card declined", got.Steps[1].Error.Message)
	require.Equal(t, 1, s.gw.calls)
	require.Equal(t, domain.StepCancelled, got.Steps[2].State)
}
