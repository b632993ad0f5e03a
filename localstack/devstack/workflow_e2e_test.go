package devstack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// The workflows, over HTTP against a whole local stack on the emulator.

func TestWaitResumesOnItsSignal(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "paid", "action": map[string]any{"type": "wait", "signal": "payment", "timeout_seconds": 3600}},
		map[string]any{"id": "ship", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobParked, j.State, "its deadline is beyond the timer threshold: parked")
	require.Equal(t, domain.StepWaiting, j.Steps[0].State)
	require.Zero(t, h.Sweep(t).Due, "the sweep never touches a waiting job")

	status, _ := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", stacktest.KeyB, map[string]any{"name": "payment"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, body := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "pay ment"})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"name"`)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "payment", "payload": map[string]any{"amount": 5}, "id": "pay-1"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"amount":5}`, string(j.Steps[1].Output), "the payload is the wait's output, the next step's input")
	types := h.EventTypes(t, keyA, j.ID)
	require.Contains(t, types, "wait_completed")
	require.Contains(t, types, domain.NoteSignalReceived)

	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "payment"})
	require.Equal(t, http.StatusConflict, status, "a finished job takes no signal")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestSignalSentBeforeItsWaitIsKept(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "first", "action": map[string]any{"type": "worker", "queue": "slow"}},
		map[string]any{"id": "paid", "action": map[string]any{"type": "wait", "signal": "payment"}},
	}})
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/signal", keyA, map[string]any{"name": "payment", "payload": "early"}, nil)
	require.Equal(t, domain.StepWaitingDeps, h.Get(t, keyA, j.ID).Steps[1].State, "kept: its wait is not reached yet")

	l := claim(t, h, keyA, "slow", "w", 1, 5)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, nil, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `"early"`, string(j.Steps[1].Output))
	h.CheckReplay(t, tenantA, j.ID)
}

// A sleep longer than the timer threshold goes through a Step Functions
// execution: the emulator runs the state machine, which waits and then
// sends the message that wakes the step.
func TestLongSleepGoesThroughStepFunctions(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t, func(o *devstack.Options) { o.TimerThreshold = 2 * time.Second })
	arn := h.Resources.Env["STEPFLOW_TIMER_STATE_MACHINE"]
	require.NotEmpty(t, arn)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 5}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobParked, j.State, "beyond the threshold: parked")
	submitted := time.Now()

	cfg, err := devstack.AWSConfig(context.Background(), h.Endpoint, "us-east-1")
	require.NoError(t, err)
	execs, err := sfn.NewFromConfig(cfg).ListExecutions(context.Background(), &sfn.ListExecutionsInput{StateMachineArn: aws.String(arn)})
	require.NoError(t, err)
	require.Len(t, execs.Executions, 1, "one timer execution")
	require.Contains(t, aws.ToString(execs.Executions[0].Name), j.ID)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var woke time.Time
	for _, e := range h.Events(t, keyA, j.ID) {
		if e.Step == "nap" && e.Type == "step_succeeded" {
			woke = e.At
		}
	}
	require.False(t, woke.Before(submitted.Add(4*time.Second)), "woke at %s, submitted at %s", woke, submitted)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestRunAtHoldsTheJobUntilThen(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	runAt := time.Now().UTC().Add(3 * time.Second).Truncate(time.Second)
	j := h.Submit(t, keyA, map[string]any{"run_at": runAt.Format(time.RFC3339), "steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}})
	require.Equal(t, domain.JobQueued, j.State)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.False(t, j.Steps[0].Attempts[0].StartedAt.Before(runAt), "started %s, run_at %s", j.Steps[0].Attempts[0].StartedAt, runAt)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestCancelStopsARunningWorkerAndAGate(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "work", "action": map[string]any{"type": "worker", "queue": "c"}},
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}},
		map[string]any{"id": "end", "action": map[string]any{"type": "pass"}, "depends_on": []string{"work", "gate"}},
	}})
	l := claim(t, h, keyA, "c", "w", 1, 5)
	require.Len(t, l, 1)
	var cancelled stacktest.Job
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", keyA, nil, &cancelled)
	require.Equal(t, domain.JobCancelled, cancelled.State)
	for _, s := range cancelled.Steps {
		require.Equal(t, domain.StepCancelled, s.State, s.ID)
	}
	var hb wire.HeartbeatResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/heartbeat", keyA, nil, &hb)
	require.True(t, hb.CancelRequested)
	status, _ := h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": 1})
	require.Equal(t, http.StatusConflict, status, "the late outcome is refused")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/gate/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, http.StatusConflict, status, "the gate is closed")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestRedriveRunsAFailedJobToCompletion(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "prep", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "work", "action": map[string]any{"type": "worker", "queue": "r"}, "retry": map[string]any{"max_attempts": 1}},
	}})
	l := claim(t, h, keyA, "r", "w", 1, 10)
	require.Len(t, l, 1)
	status, _ := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", keyA, nil)
	require.Equal(t, http.StatusConflict, status, "only a FAILED job is redriven")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "fatal", "message": "disk full"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)

	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", stacktest.KeyB, nil)
	require.Equal(t, http.StatusNotFound, status)
	var redriven stacktest.Job
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/redrive", keyA, nil, &redriven)
	require.Equal(t, domain.JobQueued, redriven.State)
	l = claim(t, h, keyA, "r", "w", 1, 10)
	require.Len(t, l, 1)
	require.Equal(t, 2, l[0].Attempt, "attempts number on")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": "ok"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Len(t, j.Steps[0].Attempts, 1, "the succeeded step did not run again")
	require.Contains(t, h.EventTypes(t, keyA, j.ID), "job_requeued")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestReplanAddsStepsThatRun(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "plan", "action": map[string]any{"type": "worker", "queue": "planner"}},
		map[string]any{"id": "report", "action": map[string]any{"type": "pass"}},
	}})
	l := claim(t, h, keyA, "planner", "w", 1, 10)
	require.Len(t, l, 1)
	status, body := h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan",
		"steps": []any{map[string]any{"id": "report", "action": map[string]any{"type": "pass"}}}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"steps[0].id"`)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "replan", "message": "split in two",
		"steps": []any{
			map[string]any{"id": "part-1", "action": map[string]any{"type": "pass"}},
			map[string]any{"id": "part-2", "action": map[string]any{"type": "worker", "queue": "parts"}},
		}}, nil)
	l = claim(t, h, keyA, "parts", "w", 1, 10)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/complete", keyA, map[string]any{"output": "p2"}, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	var deps struct {
		Deps map[string]json.RawMessage `json:"deps"`
	}
	require.NoError(t, json.Unmarshal(j.Steps[1].Output, &deps))
	require.Len(t, deps.Deps, 2, "report ran on both new steps")
	require.Equal(t, domain.StepFailed, j.Steps[0].State, "the replanned step")
	h.CheckReplay(t, tenantA, j.ID)
}
