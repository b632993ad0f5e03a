package devstack_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// make dev's STEPFLOW_DEV_STATE: a stack stopped and started again on a
// fresh emulator table keeps its jobs, their data in S3, resources and the
// sample job, and work whose message was lost in between is sent again.
func TestStateSurvivesARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	withState := func(o *devstack.Options) {
		o.StatePath = path
		o.SampleJob = true
		o.APIKeys["dev-key"] = devstack.SampleTenant
	}
	// Started by hand: stacktest's cleanup would check the jobs of a stack
	// this test closes itself.
	o := devstack.Options{
		EndpointURL: stacktest.Endpoint(t), StackName: "t-state-first",
		APIKeys:       map[string]string{keyA: tenantA},
		ScheduleEvery: time.Hour, PollWait: time.Second,
	}
	withState(&o)
	st, err := devstack.Start(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(st.Close) // after the Close below, does nothing
	first := &stacktest.Harness{Stack: st, Clock: &stacktest.Clock{}, HTTP: &http.Client{Timeout: time.Minute}}
	require.Zero(t, first.Restored, "no file yet: nothing restored")

	big := largeJSON(t, 20_000) // over the inline limit: kept in S3
	done := first.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}, "payload": big})
	first.AwaitState(t, keyA, done.ID, domain.JobCompleted)
	doneEvents := first.EventTypes(t, keyA, done.ID)
	waiting := first.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "restart"}}}})
	first.JSON(t, http.StatusCreated, http.MethodPut, "/v1/resources/gpu-1", keyA, map[string]any{"capacity": 2}, nil)
	first.AwaitState(t, "dev-key", devstack.SampleJobID, domain.JobCompleted)

	sampleEvents := first.EventTypes(t, "dev-key", devstack.SampleJobID)
	first.Close() // saves
	info, err := os.Stat(path)
	require.NoError(t, err, "Close saved the state")
	require.NotZero(t, info.Size())

	second := stacktest.New(t, withState) // a table of its own, empty until restored
	require.NotEqual(t, first.Resources.Env["STEPFLOW_TABLE"], second.Resources.Env["STEPFLOW_TABLE"])
	require.Nil(t, second.RestoreSkipped)
	require.Positive(t, second.Restored.Items)
	require.Equal(t, 2, second.Restored.Objects, "the large payload and the pass step's output of it")

	again := second.Get(t, keyA, done.ID)
	require.Equal(t, domain.JobCompleted, again.State)
	require.Equal(t, doneEvents, second.EventTypes(t, keyA, done.ID), "the event log as it was")
	status, out := second.Call(t, http.MethodGet, "/v1/jobs/"+done.ID+"/steps/a/output", keyA, nil)
	require.Equal(t, http.StatusOK, status, "%.300s", out)
	require.JSONEq(t, string(big), string(out), "the output, read back from the restored bucket")
	second.JSON(t, http.StatusOK, http.MethodGet, "/v1/resources/gpu-1", keyA, nil, nil)
	require.Equal(t, sampleEvents, second.EventTypes(t, "dev-key", devstack.SampleJobID), "the sample job is the restored one, not made again")

	// The worker step's message stayed in the first stack's queue; the
	// sweep sends it again once it is due, and the job goes on.
	require.Equal(t, domain.JobQueued, second.Get(t, keyA, waiting.ID).State)
	second.Clock.Advance(2 * time.Minute)
	rep := second.Sweep(t)
	require.Positive(t, rep.Redispatched)
	leases := claim(t, second, keyA, "restart", "w1", 1, 5)
	require.Len(t, leases, 1)
	require.Equal(t, waiting.ID, leases[0].JobID)
	var res wire.OutcomeResult
	second.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+leases[0].LeaseID+"/complete", keyA, map[string]any{"output": 1}, &res)
	second.AwaitState(t, keyA, waiting.ID, domain.JobCompleted)
	second.CheckReplay(t, tenantA, waiting.ID)
}

// A table that already holds items (an emulator that kept its own state)
// is never overwritten by an older saved state.
func TestStateIsNotRestoredOverATableInUse(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	path := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"items":[{"pk":{"S":"J#tenant-a#0"},"sk":{"S":"x"}}],"objects":[]}`), 0o600))
	st, err := devstack.Start(context.Background(), devstack.Options{
		EndpointURL: stacktest.Endpoint(t), StackName: h.Name, NoRunner: true, StatePath: path,
	})
	require.NoError(t, err)
	require.ErrorIs(t, st.RestoreSkipped, devstack.ErrStateNotRestored)
	require.Zero(t, st.Restored)
	require.Equal(t, domain.JobCompleted, h.Get(t, keyA, j.ID).State)

	st.Close() // saves the table as it is
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(raw), j.ID)
	require.NotContains(t, string(raw), `"sk":{"S":"x"}`)
}

// A corrupt state file fails the start, naming the file, and is left as
// it was.
func TestCorruptStateFailsTheStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"items":[`), 0o600))
	_, err := devstack.Start(context.Background(), devstack.Options{
		EndpointURL: stacktest.Endpoint(t), StackName: "t-corrupt-state", NoRunner: true, StatePath: path,
	})
	require.ErrorContains(t, err, path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, `{"items":[`, string(raw))
}
