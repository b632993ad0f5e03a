package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// The example runs to its end against the whole local stack, with the
// stepflow CLI built from this tree as its worker, a real child process.
func TestQualityPlatform(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.ScheduleEvery = time.Second })
	cli, err := buildCLI(t.Context(), "../..", t.TempDir())
	require.NoError(t, err)
	var out strings.Builder
	var log syncBuilder
	err = run(t.Context(), config{URL: h.URL, APIKey: stacktest.KeyA, CLI: cli, Out: &out, Log: &log})
	require.NoError(t, err, "%s\nworker log:\n%s", out.String(), log.String())
	for _, line := range []string{
		"inbox -> todo as job", "(P0)", "nothing enqueued twice",
		"(blocked): the task is blocked", "run #1 failed (blocked: ./run-qa.sh exited 75: blocked: the staging environment is not up yet)",
		"succeeded", `"suite":"smoke"`, "retention: done at", "(30 days)", "worker: stopped",
	} {
		require.Contains(t, out.String(), line)
	}
	require.Contains(t, log.String(), "running the smoke suite", "the script's stderr is in the worker's log")
	t.Log(out.String())
}

// syncBuilder is a strings.Builder the worker's stdout and stderr copiers
// may write at once.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
