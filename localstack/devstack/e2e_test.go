package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/wire"
)

const (
	keyA    = stacktest.KeyA
	tenantA = stacktest.TenantA
)

func TestPassJobCompletes(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "hello", "action": map[string]any{"type": "pass"}}}, "payload": map[string]any{"hi": 1}})
	require.Equal(t, domain.JobQueued, j.State)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Equal(t, domain.StepSucceeded, j.Steps[0].State)
	require.JSONEq(t, `{"hi":1}`, string(j.Steps[0].Output))
	require.Len(t, j.Steps[0].Attempts, 1)
	require.Equal(t, domain.AttemptSucceeded, j.Steps[0].Attempts[0].State)
	require.Equal(t, []string{"job_created", "step_leased", "step_running", "job_running", "step_succeeded", "job_completed"}, h.EventTypes(t, keyA, j.ID))
	h.CheckReplay(t, tenantA, j.ID)
}

func TestThreeStepsRunInOrder(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{
		"steps":   []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}, map[string]any{"id": "b", "action": map[string]any{"type": "pass"}}, map[string]any{"id": "c", "action": map[string]any{"type": "pass"}}},
		"payload": map[string]any{"n": 3},
	})
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	// Each step starts only after the one before it succeeded, and runs on
	// its output.
	var order []string
	for _, e := range h.Events(t, keyA, j.ID) {
		if e.Type == "step_running" || e.Type == "step_succeeded" {
			order = append(order, e.Step+":"+e.Type)
		}
	}
	require.Equal(t, []string{"a:step_running", "a:step_succeeded", "b:step_running", "b:step_succeeded", "c:step_running", "c:step_succeeded"}, order)
	for i, s := range j.Steps {
		require.Equal(t, domain.StepSucceeded, s.State, "step %d", i)
		require.JSONEq(t, `{"n":3}`, string(s.Output))
		if i > 0 {
			require.False(t, s.Attempts[0].StartedAt.Before(*j.Steps[i-1].Attempts[0].EndedAt), "step %s started before %s ended", s.ID, j.Steps[i-1].ID)
		}
	}
	h.CheckReplay(t, tenantA, j.ID)
}

func TestRetryableFailureRetriesAfterBackoffThenFails(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{
		"id": "flaky", "action": map[string]any{"type": "fail", "class": "retryable"},
		"retry": map[string]any{"max_attempts": 3, "backoff": "exponential", "initial_delay_ms": 1000, "max_delay_ms": 2000},
	}}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)

	s := j.Steps[0]
	require.Equal(t, domain.StepFailed, s.State)
	require.Len(t, s.Attempts, 3, "exactly max_attempts attempts")
	for i, a := range s.Attempts {
		require.Equal(t, i+1, a.N)
		require.Equal(t, domain.AttemptFailed, a.State)
		require.Equal(t, domain.ClassRetryable, a.Error.Class)
	}
	// The backoff is 1 s, then 2 s: no retry started before its delay ran out.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second} {
		prev, next := s.Attempts[i], s.Attempts[i+1]
		require.GreaterOrEqual(t, next.StartedAt.Sub(*prev.EndedAt), wait, "attempt %d started too soon after %d", next.N, prev.N)
	}
	require.Equal(t, []string{
		"job_created", "step_leased", "step_running", "job_running",
		"step_failed_retryable", "step_retrying", "job_retrying", "step_running", "job_running",
		"step_failed_retryable", "step_retrying", "job_retrying", "step_running", "job_running",
		"step_failed_fatal", "step_failed", "job_failed",
	}, h.EventTypes(t, keyA, j.ID))
	h.CheckReplay(t, tenantA, j.ID)
}

func TestFatalFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "boom", "action": map[string]any{"type": "fail", "class": "fatal", "message": "no such customer"}},
		map[string]any{"id": "never", "action": map[string]any{"type": "pass"}},
	}})
	j = h.AwaitState(t, keyA, j.ID, domain.JobFailed)
	require.Len(t, j.Steps[0].Attempts, 1)
	require.Equal(t, "no such customer", j.Steps[0].Error.Message)
	require.Equal(t, domain.StepCancelled, j.Steps[1].State, "the step after a failed one never runs, and is not left waiting")
	require.Empty(t, j.Steps[1].Attempts)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestSleepingJobIsCancelled(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 2}}}})
	require.Equal(t, domain.JobWaiting, j.State, "a sleep holds its job without a function running")
	require.Equal(t, domain.StepWaiting, j.Steps[0].State)

	var cancelled stacktest.Job
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", keyA, nil, &cancelled)
	require.Equal(t, domain.JobCancelled, cancelled.State)
	require.Equal(t, domain.StepCancelled, cancelled.Steps[0].State)
	require.Empty(t, cancelled.Steps[0].Attempts, "nothing ever ran it")

	// The sleep's timer arrives after the cancel and does nothing: wait for
	// the ready queue to hold nothing, then the job is still cancelled.
	queueURL := h.Resources.QueueURLs["ReadyQueueP1"]
	require.Eventually(t, func() bool {
		out, err := h.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(queueURL),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
				sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed},
		})
		require.NoError(t, err)
		return out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" && out.Attributes["ApproximateNumberOfMessages"] == "0" &&
			out.Attributes["ApproximateNumberOfMessagesDelayed"] == "0"
	}, 30*time.Second, 50*time.Millisecond)
	j = h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobCancelled, j.State)
	types := h.EventTypes(t, keyA, j.ID)
	require.Equal(t, "job_cancelled", types[len(types)-1])
	h.CheckReplay(t, tenantA, j.ID)
}

type claimed struct {
	Leases []wire.ClaimedLease `json:"leases"`
}

func claim(t *testing.T, h *stacktest.Harness, key, queue, worker string, max, wait int) []wire.ClaimedLease {
	t.Helper()
	var c claimed
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/claim", key, map[string]any{"queue": queue, "max": max, "wait_seconds": wait, "worker": worker}, &c)
	return c.Leases
}

func TestExternalWorkerClaimsHeartbeatsAndCompletes(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "render", "action": map[string]any{"type": "worker", "queue": "gpu", "lease_seconds": 30}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}, "payload": map[string]any{"frame": 7}})

	leases := claim(t, h, keyA, "gpu", "w1", 1, 5)
	require.Len(t, leases, 1)
	l := leases[0]
	require.Equal(t, j.ID, l.JobID)
	require.Equal(t, "render", l.StepID)
	require.Equal(t, 1, l.Attempt)
	require.JSONEq(t, `{"frame":7}`, string(l.Input))
	require.Equal(t, j.ID+"/render/1", l.IdempotencyKey)

	var hb wire.HeartbeatResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/heartbeat", keyA, map[string]any{"extend_seconds": 60}, &hb)
	require.False(t, hb.CancelRequested)
	require.True(t, hb.ExpiresAt.After(l.ExpiresAt), "heartbeat extends the lease")

	var res wire.OutcomeResult
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": map[string]any{"png": "s3://x"}}, &res)
	require.Equal(t, domain.StepSucceeded, res.StepState)

	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.JSONEq(t, `{"png":"s3://x"}`, string(j.Steps[1].Output), "the next step ran on the worker's output")
	require.Equal(t, "w1", j.Steps[0].Attempts[0].Worker)
	types := h.EventTypes(t, keyA, j.ID)
	require.Contains(t, types, "job_leased", "a worker's claim is job_leased")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestExpiredLeaseGoesToTheNextWorkerAndFencesTheFirst(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "slow", "lease_seconds": 1}}}})

	first := claim(t, h, keyA, "slow", "zombie", 1, 5)
	require.Len(t, first, 1)
	// The first worker goes silent. Once its lease expires SQS hands the
	// message out again and the next claim reclaims the step: attempt 2.
	var second []wire.ClaimedLease
	require.Eventually(t, func() bool {
		second = claim(t, h, keyA, "slow", "healthy", 1, 2)
		return len(second) == 1
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, second[0].Attempt)
	require.NotEqual(t, first[0].LeaseID, second[0].LeaseID)

	for _, op := range []struct{ path, body string }{
		{"/heartbeat", `{}`},
		{"/complete", `{"output":{"late":true}}`},
		{"/fail", `{"class":"retryable"}`},
	} {
		status, body := h.Call(t, http.MethodPost, "/v1/leases/"+first[0].LeaseID+op.path, keyA, op.body)
		require.Equal(t, http.StatusConflict, status, "%s: %s", op.path, body)
		require.Contains(t, string(body), `"lease_lost"`)
	}
	before := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobRunning, before.State, "the zombie changed nothing")
	require.Equal(t, domain.AttemptTimeout, before.Steps[0].Attempts[0].State)

	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+second[0].LeaseID+"/complete", keyA, `{"output":1}`, nil)
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Len(t, j.Steps[0].Attempts, 2)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestSixWorkersNeverShareALease(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	const jobs, workers = 20, 6
	ids := map[string]bool{}
	for range jobs {
		j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "pool", "lease_seconds": 120}}}})
		ids[j.ID] = true
	}

	var mu sync.Mutex
	var all []wire.ClaimedLease
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(all) >= jobs
				mu.Unlock()
				if done {
					return
				}
				got := claim(t, h, keyA, "pool", fmt.Sprintf("w%d", w), 3, 1)
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	require.Len(t, all, jobs, "every job claimed exactly once")
	seen := map[string]bool{}
	for _, l := range all {
		require.False(t, seen[l.JobID], "job %s was leased twice", l.JobID)
		seen[l.JobID] = true
		require.True(t, ids[l.JobID])
		require.Equal(t, 1, l.Attempt)
	}
	for _, l := range all {
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, nil, nil)
	}
	for id := range ids {
		j := h.AwaitState(t, keyA, id, domain.JobCompleted)
		require.Len(t, j.Steps[0].Attempts, 1)
		h.CheckReplay(t, tenantA, id)
	}
}

func TestCrashBetweenWriteAndSendLosesNothing(t *testing.T) {
	t.Parallel()
	faults := &stacktest.FaultSQS{}
	h := stacktest.New(t, stacktest.WithFaultSQS(faults))

	// Submit: the job is written, then the process "dies" before the send.
	faults.FailNextSends(1, "a")
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}, map[string]any{"id": "b", "action": map[string]any{"type": "pass"}}}})
	require.EqualValues(t, 1, faults.Failed.Load())
	require.Equal(t, domain.JobQueued, h.Get(t, keyA, j.ID).State)

	// Nothing is due until the dispatch grace has passed.
	require.Zero(t, h.Sweep(t).Redispatched)
	h.Clock.Advance(domain.DispatchGrace + time.Second)

	// After step a completes, the send of step b is lost too.
	faults.FailNextSends(1, "b")
	rep := h.Sweep(t)
	require.Equal(t, 1, rep.Redispatched, "the heartbeat re-sends the lost first dispatch")
	j = h.Await(t, keyA, j.ID, "stuck after step a", func(j stacktest.Job) bool {
		return j.Steps[0].State == domain.StepSucceeded && j.Steps[1].State == domain.StepPending
	})
	require.EqualValues(t, 2, faults.Failed.Load())

	h.Clock.Advance(domain.DispatchGrace + time.Second)
	rep = h.Sweep(t)
	require.Equal(t, 1, rep.Redispatched, "the heartbeat re-sends step b")
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	require.Len(t, j.Steps[1].Attempts, 1)
	require.Zero(t, h.Sweep(t).Due, "a finished job leaves the due index")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestSweepReclaimsAnExpiredLease(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "q", "lease_seconds": 600}}}})
	l := claim(t, h, keyA, "q", "doomed", 1, 5)
	require.Len(t, l, 1)

	h.Clock.Advance(600*time.Second + domain.DispatchGrace)
	rep := h.Sweep(t)
	require.Equal(t, 1, rep.Reclaimed)
	j = h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobQueued, j.State)
	require.Equal(t, domain.StepPending, j.Steps[0].State)
	require.Equal(t, domain.AttemptTimeout, j.Steps[0].Attempts[0].State)

	next := claim(t, h, keyA, "q", "fresh", 1, 5)
	require.Len(t, next, 1, "the reclaimed step was dispatched again")
	require.Equal(t, 2, next[0].Attempt)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestTwoInstancesDoNotShareData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	endpoint := stacktest.Endpoint(t)
	keys := map[string]string{"same-key": "dev"}
	a, err := devstack.Start(ctx, devstack.Options{EndpointURL: endpoint, StackName: "iso-a", APIKeys: keys, PollWait: time.Second})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := devstack.Start(ctx, devstack.Options{EndpointURL: endpoint, StackName: "iso-b", APIKeys: keys, PollWait: time.Second})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NotEqual(t, a.URL, b.URL)

	ha, hb := &stacktest.Harness{Stack: a, HTTP: http.DefaultClient}, &stacktest.Harness{Stack: b, HTTP: http.DefaultClient}
	j := ha.Submit(t, "same-key", map[string]any{"steps": []any{map[string]any{"id": "x", "action": map[string]any{"type": "pass"}}}})
	ha.AwaitState(t, "same-key", j.ID, domain.JobCompleted)
	status, _ := hb.Call(t, http.MethodGet, "/v1/jobs/"+j.ID, "same-key", nil)
	require.Equal(t, http.StatusNotFound, status)
	var list struct{ Jobs []json.RawMessage }
	hb.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", "same-key", nil, &list)
	require.Empty(t, list.Jobs)
}

func TestIdempotentReplayDispatchesAJobThatNeverStarted(t *testing.T) {
	t.Parallel()
	faults := &stacktest.FaultSQS{}
	h := stacktest.New(t, stacktest.WithFaultSQS(faults))
	spec := map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}

	// The first request writes the job and dies before its send.
	faults.FailNextSends(1, "a")
	var first, again stacktest.Job
	h.JSON(t, http.StatusCreated, http.MethodPost, "/v1/jobs", keyA, spec, &first, "Idempotency-Key", "retry-me")
	require.EqualValues(t, 1, faults.Failed.Load())
	// The client retries with the same key: the same job, sent this time,
	// with no sweep needed.
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs", keyA, spec, &again, "Idempotency-Key", "retry-me")
	require.Equal(t, first.ID, again.ID)
	h.AwaitState(t, keyA, again.ID, domain.JobCompleted)
}

func TestCancelledWorkerHearsItButAnExpiredOrForgedLeaseDoesNot(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	live := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "c", "lease_seconds": 300}}}})
	l := claim(t, h, keyA, "c", "w1", 1, 5)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+live.ID+"/cancel", keyA, nil, nil)

	var hb map[string]any
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/heartbeat", keyA, nil, &hb)
	require.Equal(t, true, hb["cancel_requested"])
	require.NotContains(t, hb, "expires_at", "a cancelled lease has no expiry to report")

	forged := l[0].LeaseID[:len(l[0].LeaseID)-4] + "beef"
	status, body := h.Call(t, http.MethodPost, "/v1/leases/"+forged+"/heartbeat", keyA, nil)
	require.Equal(t, http.StatusConflict, status, "%s", body)

	// A lease that had expired before the cancel was already lost.
	old := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "c", "lease_seconds": 1}}}})
	l = claim(t, h, keyA, "c", "w2", 1, 5)
	require.Len(t, l, 1)
	require.Equal(t, old.ID, l[0].JobID)
	h.Clock.Advance(2 * time.Second)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+old.ID+"/cancel", keyA, nil, nil)
	status, body = h.Call(t, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/heartbeat", keyA, nil)
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Equal(t, domain.AttemptTimeout, h.Get(t, keyA, old.ID).Steps[0].Attempts[0].State)
	h.CheckReplay(t, tenantA, old.ID)
}

func TestDuplicateDeliveryOfALeasedStepIsHeldNotDropped(t *testing.T) {
	t.Parallel()
	// A slow endpoint keeps the first run's lease out while the duplicate
	// arrives; it answers once the duplicate has been handled.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`"slow"`))
	}))
	t.Cleanup(slow.Close)
	h := stacktest.New(t, func(o *devstack.Options) { o.NoRunner = true; o.HTTPAllow = "127.0.0.1/32" })
	ctx := context.Background()
	j, _, err := h.Engine.Submit(ctx, tenantA, []byte(`{"steps":[{"id":"nap","action":{"type":"http","url":"`+slow.URL+`"}}]}`), "")
	require.NoError(t, err)
	m := engine.Message{Tenant: tenantA, Job: j.ID, Step: "nap"}

	done := make(chan engine.ExecuteResult, 1)
	go func() {
		res, err := h.Engine.Execute(ctx, engine.Delivery{Message: m})
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool {
		got, err := h.Engine.Get(ctx, tenantA, j.ID)
		require.NoError(t, err)
		return got.Steps[0].State == domain.StepRunning
	}, 10*time.Second, 10*time.Millisecond)

	// The same message again while the first run holds the lease: kept for
	// later, not deleted, and nothing runs twice.
	res, err := h.Engine.Execute(ctx, engine.Delivery{Message: m})
	require.NoError(t, err)
	require.Equal(t, engine.Held, res)
	close(release)
	require.Equal(t, engine.Executed, <-done)
	got, err := h.Engine.Get(ctx, tenantA, j.ID)
	require.NoError(t, err)
	require.Len(t, got.Steps[0].Attempts, 1)
	require.Equal(t, domain.JobCompleted, got.State)
}

func TestDiamondDAGRunsBranchesTogetherAndJoinsLast(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"order": 7}, "steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "worker", "queue": "branch"}, "depends_on": []string{"a"}},
		map[string]any{"id": "c", "action": map[string]any{"type": "worker", "queue": "branch"}, "depends_on": []string{"a"}},
		map[string]any{"id": "d", "action": map[string]any{"type": "pass"}, "depends_on": []string{"b", "c"}},
	}})
	// b and c are out at the same time: two workers hold both leases at once.
	var leases []wire.ClaimedLease
	require.Eventually(t, func() bool {
		leases = append(leases, claim(t, h, keyA, "branch", "w", 2-len(leases), 1)...)
		return len(leases) == 2
	}, 30*time.Second, 10*time.Millisecond)
	running := h.Get(t, keyA, j.ID)
	require.Equal(t, domain.StepRunning, running.Steps[1].State)
	require.Equal(t, domain.StepRunning, running.Steps[2].State)
	require.Equal(t, domain.StepWaitingDeps, running.Steps[3].State, "d waits for both")
	for _, l := range leases {
		require.JSONEq(t, `{"payload":{"order":7},"deps":{"a":{"order":7}}}`, string(l.Input))
		h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l.LeaseID+"/complete", keyA, map[string]any{"output": l.StepID + "-done"}, nil)
	}
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	b, c, d := j.Steps[1].Attempts[0], j.Steps[2].Attempts[0], j.Steps[3].Attempts[0]
	require.False(t, d.StartedAt.Before(*b.EndedAt) || d.StartedAt.Before(*c.EndedAt), "d ran last")
	require.JSONEq(t, `{"payload":{"order":7},"deps":{"b":"b-done","c":"c-done"}}`, string(j.Steps[3].Output), "d ran on both outputs")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestDependsOnErrorsNameTheSteps(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	status, body := h.Call(t, http.MethodPost, "/v1/jobs", keyA, map[string]any{"steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "pass"}, "depends_on": []string{"b"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "pass"}, "depends_on": []string{"a"}},
	}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `"field":"steps"`)
	require.Contains(t, string(body), "steps a, b can never start")
}

func TestNeedsUserStepResumesWithThePersonsInput(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"doc": "x"}, "steps": []any{
		map[string]any{"id": "review", "action": map[string]any{"type": "worker", "queue": "people"}},
		map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
	}})
	l := claim(t, h, keyA, "people", "w1", 1, 5)
	require.Len(t, l, 1)
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+l[0].LeaseID+"/fail", keyA, map[string]any{"class": "needs_user", "prompt": "Which locale?"}, nil)

	var got struct {
		State domain.JobState `json:"state"`
		Steps []struct {
			State     domain.StepState `json:"state"`
			Prompt    string           `json:"prompt"`
			UserInput json.RawMessage  `json:"user_input"`
		} `json:"steps"`
	}
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.Equal(t, domain.JobWaiting, got.State)
	require.Equal(t, domain.StepNeedsUser, got.Steps[0].State)
	require.Equal(t, "Which locale?", got.Steps[0].Prompt)

	path := "/v1/jobs/" + j.ID + "/steps/review/resume"
	status, _ := h.Call(t, http.MethodPost, path, stacktest.KeyB, map[string]any{"input": "fr"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/nope/resume", keyA, map[string]any{"input": "fr"})
	require.Equal(t, http.StatusNotFound, status, "an unknown step")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/after/resume", keyA, map[string]any{"input": "fr"})
	require.Equal(t, http.StatusConflict, status, "a step that is not waiting")

	got.Steps = nil // decode afresh: an absent prompt must read empty
	h.JSON(t, http.StatusOK, http.MethodPost, path, keyA, map[string]any{"input": map[string]any{"locale": "fr"}}, &got)
	require.Equal(t, domain.StepPending, got.Steps[0].State)
	require.Empty(t, got.Steps[0].Prompt)
	status, _ = h.Call(t, http.MethodPost, path, keyA, map[string]any{"input": "again"})
	require.Equal(t, http.StatusConflict, status, "resumed already")

	again := claim(t, h, keyA, "people", "w2", 1, 5)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempt)
	require.JSONEq(t, `{"doc":"x","user_input":{"locale":"fr"}}`, string(again[0].Input))
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/leases/"+again[0].LeaseID+"/complete", keyA, map[string]any{"output": "done"}, nil)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	h.CheckReplay(t, tenantA, j.ID)
}

func eventsOf(t *testing.T, h *stacktest.Harness, id string) []domain.Event {
	t.Helper()
	return h.Events(t, keyA, id)
}

func TestApprovalGateHoldsItsJobUntilApproved(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "build", "action": map[string]any{"type": "pass"}},
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}},
		map[string]any{"id": "deploy", "action": map[string]any{"type": "pass"}},
	}})
	j = h.Await(t, keyA, j.ID, "at the gate", func(j stacktest.Job) bool { return j.Steps[1].State == domain.StepNeedsUser })
	require.Equal(t, domain.JobWaiting, j.State)
	require.Equal(t, domain.StepWaitingDeps, j.Steps[2].State, "nothing runs past a closed gate")
	require.Empty(t, j.Steps[1].Attempts, "no executor ever runs a gate")

	gate := "/v1/jobs/" + j.ID + "/steps/gate/"
	status, _ := h.Call(t, http.MethodPost, gate+"approve", stacktest.KeyB, map[string]any{"by": "mallory"})
	require.Equal(t, http.StatusNotFound, status, "another tenant's job")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/nope/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, http.StatusNotFound, status, "an unknown step")
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/deploy/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, http.StatusConflict, status, "a step that is no gate")

	h.JSON(t, http.StatusOK, http.MethodPost, gate+"approve", keyA, map[string]any{"by": "ann", "comment": "ship it"}, nil)
	n := len(eventsOf(t, h, j.ID))
	h.JSON(t, http.StatusOK, http.MethodPost, gate+"approve", keyA, map[string]any{"by": "ann"}, nil)
	status, _ = h.Call(t, http.MethodPost, gate+"reject", keyA, map[string]any{"by": "bob"})
	require.Equal(t, http.StatusConflict, status, "reject after approve")
	j = h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	evs := eventsOf(t, h, j.ID)
	var approved []domain.Event
	for _, e := range evs {
		if e.Step == "gate" && e.Type == "step_succeeded" {
			approved = append(approved, e)
		}
	}
	require.Len(t, approved, 1, "the second approve wrote nothing")
	require.Regexp(t, `^approved by ann \(key key_[0-9a-f]{12}\): ship it$`, approved[0].Detail)
	require.GreaterOrEqual(t, len(evs), n)
	h.CheckReplay(t, tenantA, j.ID)
}

func TestRejectedGateFailsItsJob(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{
		map[string]any{"id": "gate", "action": map[string]any{"type": "approval"}},
		map[string]any{"id": "deploy", "action": map[string]any{"type": "pass"}},
	}})
	require.Equal(t, domain.JobWaiting, j.State, "a gate that opens first holds the job from the start")
	h.JSON(t, http.StatusOK, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/gate/reject", keyA, map[string]any{"by": "bob", "comment": "not today"}, nil)
	j = h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobFailed, j.State)
	require.Equal(t, domain.StepFailed, j.Steps[0].State)
	require.Equal(t, domain.StepCancelled, j.Steps[1].State)
	status, _ := h.Call(t, http.MethodPost, "/v1/jobs/"+j.ID+"/steps/gate/approve", keyA, map[string]any{"by": "ann"})
	require.Equal(t, http.StatusConflict, status, "approve after reject")
	h.CheckReplay(t, tenantA, j.ID)
}

func TestGatePastItsTimeoutFailsItsJob(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": []any{map[string]any{"id": "gate", "action": map[string]any{"type": "approval", "timeout_seconds": 600}}}})
	// Its timer message comes at the deadline (an SQS delay here, on the
	// wall clock); the sweep backs it up a minute later, which the test
	// clock reaches at once.
	h.Clock.Advance(600*time.Second + domain.DispatchGrace - time.Second)
	require.Zero(t, h.Sweep(t).Due)
	h.Clock.Advance(time.Second)
	h.Sweep(t)
	j = h.Get(t, keyA, j.ID)
	require.Equal(t, domain.JobFailed, j.State)
	require.Equal(t, domain.StepFailed, j.Steps[0].State)
	require.Contains(t, j.Steps[0].Error.Message, "approval gate timed out")
	// A gate first reached passes through job_running, as the formal job
	// machine goes into Waiting (docs/model.md#formal-job-machine).
	var types []string
	for _, e := range eventsOf(t, h, j.ID) {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"job_created", "step_needs_user", "job_running", "job_waiting", "step_timed_out", "step_failed", "job_failed"}, types)
	h.CheckReplay(t, tenantA, j.ID)
}
