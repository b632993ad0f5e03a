package stacktest

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/embedded"
)

// NewInMemory serves the stack's HTTP API over the engine on the
// in-memory adapters (shared/memory) instead of the emulator: the
// embedded dev stack (localstack/embedded) that `make dev` runs without
// one, with template.yaml's routes, each to its own function's handler,
// and the ready queues' event source mapping played over the memory
// queue. A test of the API's behaviour runs on it in milliseconds, with
// the race detector; what only the emulator has (the timer state machine,
// S3, the event bus, Lambda, the stack's options) is New's. The settings
// are the template's; the clock is real time plus what the test advances,
// as New's, and the heartbeat is left to the test (Sweep). Only the
// Harness's URL, Engine and API are set in its Stack.
func NewInMemory(t testing.TB) *Harness {
	t.Helper()
	clock := &Clock{}
	st, err := embedded.Start(context.Background(), embedded.Options{
		APIKeys: map[string]string{KeyA: TenantA, KeyB: TenantB}, Now: clock.Now, ScheduleEvery: time.Hour,
		Log: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	h := &Harness{Stack: &devstack.Stack{URL: st.URL, Engine: st.Engine, API: st.API}, Clock: clock, HTTP: &http.Client{Timeout: 60 * time.Second}}
	t.Cleanup(func() { h.checkEveryJob(t) })
	return h
}

// testLog sends the engine's warnings to the test's log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
