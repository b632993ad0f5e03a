package actions_test

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

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

func seconds(s float64) *float64 { return &s }

func TestBuiltinActions(t *testing.T) {
	t.Parallel()
	r := &actions.Runner{}
	in := json.RawMessage(`{"a":1}`)

	out, f := r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionPass}}, Input: in})
	require.Nil(t, f)
	require.JSONEq(t, `{"a":1}`, string(out))

	_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionFail, FailAction: domain.FailAction{Class: "resource"}}}})
	require.Equal(t, domain.ClassResource, f.Class)
	require.NotEmpty(t, f.Message)

	replan := []domain.StepSpec{{ID: "x", Action: domain.ActionSpec{Type: domain.ActionPass}}}
	_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionFail, FailAction: domain.FailAction{Class: "replan", Steps: replan}}}})
	require.Equal(t, domain.ClassReplan, f.Class)
	require.Equal(t, replan, f.Steps)

	_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionFail, FailAction: domain.FailAction{Class: "needs_user", Prompt: "which box?"}}}})
	require.Equal(t, domain.ClassNeedsUser, f.Class)
	require.Equal(t, "which box?", f.Prompt)

	// Sleeps, waits and gates are timers and people: never run.
	for _, typ := range []string{domain.ActionSleep, domain.ActionWait, domain.ActionApproval} {
		_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: typ, SleepAction: domain.SleepAction{Seconds: seconds(1)}}}, Input: in})
		require.Equal(t, domain.ClassFatal, f.Class, typ)
	}
}

func TestActionPastItsTimeoutIsATimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	r := &actions.Runner{Guard: allow(t, "127.0.0.1/32")}
	_, f := r.Run(ctx, engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionHTTP, HTTPAction: domain.HTTPAction{URL: srv.URL}}, TimeoutSeconds: 1}})
	require.NotNil(t, f)
	require.Equal(t, domain.ClassTimeout, f.Class)
}

func TestHTTPAction(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var gotKey, gotBody, gotType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		gotKey, gotBody, gotType = r.Header.Get("Idempotency-Key"), string(b), r.Header.Get("Content-Type")
		mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"done":true}`))
		case "/text":
			_, _ = w.Write([]byte(`plain words`))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/slow-down":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/timeout":
			w.WriteHeader(http.StatusRequestTimeout)
		case "/gateway-timeout":
			w.WriteHeader(http.StatusGatewayTimeout)
		case "/broken":
			w.WriteHeader(http.StatusBadGateway)
		case "/bad":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":"no"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	r := &actions.Runner{Guard: allow(t, "127.0.0.1/32")} // the test server, on loopback
	call := func(path string) (json.RawMessage, *domain.Failure) {
		return r.Run(context.Background(), engine.ActionCall{
			Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionHTTP, HTTPAction: domain.HTTPAction{URL: srv.URL + path}}}, Input: json.RawMessage(`{"x":2}`), IdempotencyKey: "job/step/1",
		})
	}

	out, f := call("/ok")
	require.Nil(t, f)
	require.JSONEq(t, `{"done":true}`, string(out))
	mu.Lock()
	require.Equal(t, "job/step/1", gotKey, "the attempt's idempotency key is passed on")
	require.JSONEq(t, `{"x":2}`, gotBody, "the step input is the request body")
	require.Equal(t, "application/json", gotType)
	mu.Unlock()

	out, f = call("/text")
	require.Nil(t, f)
	require.JSONEq(t, `"plain words"`, string(out))
	out, f = call("/empty")
	require.Nil(t, f)
	require.JSONEq(t, `null`, string(out))

	_, f = call("/busy")
	require.Equal(t, domain.ClassRetryable, f.Class)
	require.Equal(t, 7*time.Second, f.RetryAfter)
	for _, p := range []string{"/slow-down", "/broken"} {
		_, f = call(p)
		require.Equal(t, domain.ClassRetryable, f.Class, p)
	}
	for _, p := range []string{"/timeout", "/gateway-timeout"} {
		_, f = call(p)
		require.Equal(t, domain.ClassTimeout, f.Class, p)
	}
	for _, p := range []string{"/bad", "/missing"} {
		_, f = call(p)
		require.Equal(t, domain.ClassFatal, f.Class, p)
	}

	// A connection refused is class network: the far end may come back.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, f = r.Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionHTTP, HTTPAction: domain.HTTPAction{URL: closed.URL}}}, Input: json.RawMessage(`{}`)})
	require.Equal(t, domain.ClassNetwork, f.Class)
}

func TestPassAnswersALargeInputWhole(t *testing.T) {
	t.Parallel()
	// A fan-in of large outputs: the engine keeps it in the blob store.
	in, _ := json.Marshal(strings.Repeat("a", actions.MaxOutputBytes+10))
	out, f := (&actions.Runner{}).Run(context.Background(), engine.ActionCall{Spec: domain.StepSpec{Action: domain.ActionSpec{Type: domain.ActionPass}}, Input: in})
	require.Nil(t, f)
	require.Equal(t, json.RawMessage(in), out)
}
