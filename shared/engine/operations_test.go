package engine_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

func (b *bundle) putResource(t *testing.T, tenant, id, body string) *domain.Resource {
	t.Helper()
	r, _, err := b.e.PutResource(b.ctx, tenant, id, []byte(body))
	require.NoError(t, err)
	return r
}

// inUse answers how many live leases of every job of tenant hold each
// resource: what the resource pool must never let exceed its capacity.
func (b *bundle) inUse(t *testing.T, tenant string, jobs []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	now := b.clock.Now()
	for _, id := range jobs {
		for _, s := range b.job(t, tenant, id).Steps {
			if s.Lease != nil && now.Before(s.Lease.ExpiresAt) {
				out[s.Lease.Resource]++
			}
		}
	}
	return out
}

func TestResourcePoolSlotsSwitchAndWake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putResource(t, tenantA, "gpu-1", `{"capabilities":["gpu"],"labels":{"zone":"a"},"capacity":1}`)
	b.putResource(t, tenantA, "gpu-2", `{"capabilities":["gpu"],"labels":{"zone":"a"},"capacity":1}`)
	b.putResource(t, tenantA, "cpu-1", `{"capabilities":["cpu"],"capacity":5}`)
	_, err := b.e.GetResource(b.ctx, tenantB, "gpu-1")
	require.ErrorIs(t, err, domain.ErrNotFound, "another tenant's resource is not found")

	var jobs []string
	for i := range 4 {
		j := b.submit(t, tenantA, fmt.Sprintf(`{"steps":[{"id":"train","action":{"type":"worker","queue":"ml","lease_seconds":60},"requires":{"capabilities":["gpu"],"labels":{"zone":"a"}}}],"payload":{"n":%d}}`, i))
		jobs = append(jobs, j.ID)
	}
	first := b.claim(t, tenantA, "ml")
	require.Len(t, first, 2, "two resources of one slot each: two leases, the other steps wait")
	got := map[string]bool{}
	for _, l := range first {
		require.NotNil(t, l.Resource)
		require.Equal(t, []string{"gpu"}, l.Resource.Capabilities, "the claim shows what the resource has")
		require.Equal(t, map[string]string{"zone": "a"}, l.Resource.Labels)
		got[l.Resource.ID] = true
	}
	require.Equal(t, map[string]bool{"gpu-1": true, "gpu-2": true}, got)
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, b.inUse(t, tenantA, jobs))
	require.Empty(t, b.claim(t, tenantA, "ml"), "nothing more runs: every slot is held")
	waiting := 0
	for _, id := range jobs {
		if w := b.job(t, tenantA, id).Steps[0].ResourceWait; w != nil {
			require.ElementsMatch(t, []string{"gpu-1", "gpu-2"}, w.On)
			waiting++
		}
	}
	require.Equal(t, 2, waiting)

	// A resource failure: the step switches to the other resource, the
	// first on its avoid list.
	failed := first[0]
	res, err := b.e.Fail(b.ctx, tenantA, failed.LeaseID, engine.Outcome{Class: "resource", Message: "CUDA error"})
	require.NoError(t, err)
	require.Equal(t, domain.StepSwitchingResource, res.StepState)
	fj := b.job(t, tenantA, failed.JobID)
	require.Equal(t, []string{failed.Resource.ID}, fj.Steps[0].Avoid)

	// The freed slot woke the first waiter, which takes it; the switching
	// step waits for the other resource, never the one it avoids.
	next := b.claim(t, tenantA, "ml")
	require.Len(t, next, 1)
	require.Equal(t, failed.Resource.ID, next[0].Resource.ID)
	require.NotEqual(t, failed.JobID, next[0].JobID)
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, b.inUse(t, tenantA, jobs))

	// The holder of the other resource dies: its slot comes back when its
	// lease expires, and the sweep's reclaim wakes the steps in line.
	other := first[1]
	_, err = b.e.Heartbeat(b.ctx, tenantA, next[0].LeaseID, 0)
	require.NoError(t, err)
	b.clock.Advance(61 * time.Second)
	_, err = b.e.Heartbeat(b.ctx, tenantA, next[0].LeaseID, 0)
	require.ErrorIs(t, err, domain.ErrLeaseLost, "its lease expired too: the heartbeat came late")
	b.clock.Advance(domain.DispatchGrace)
	require.Equal(t, 2, b.sweep(t).Reclaimed)
	var again []engine.ClaimedLease
	for range 3 {
		again = append(again, b.claim(t, tenantA, "ml")...)
	}
	require.Len(t, again, 2, "both slots came back")
	require.Equal(t, map[string]int{"gpu-1": 1, "gpu-2": 1}, b.inUse(t, tenantA, jobs), "capacity is never exceeded")
	for _, l := range again {
		if l.JobID == failed.JobID {
			require.NotEqual(t, failed.Resource.ID, l.Resource.ID, "never the resource it avoids")
		}
	}
	_ = other

	r, err := b.e.GetResource(b.ctx, tenantA, "gpu-1")
	require.NoError(t, err)
	require.Equal(t, 1, r.Live(b.clock.Now()))
	require.Equal(t, domain.CodeConflict, domain.CodeOf(b.e.DeleteResource(b.ctx, tenantA, "gpu-1")), "a held resource is not deleted")
	require.NoError(t, b.e.DeleteResource(b.ctx, tenantA, "cpu-1"))
	for _, l := range again {
		_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`))
		require.NoError(t, err)
	}
	last := b.claim(t, tenantA, "ml")
	for _, l := range last {
		_, err := b.e.Complete(b.ctx, tenantA, l.LeaseID, json.RawMessage(`{}`))
		require.NoError(t, err)
	}
}

func TestResourceFailureWithNoOtherResourceFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putResource(t, tenantA, "only", `{"capabilities":["gpu"]}`)
	j := b.submit(t, tenantA, `{"steps":[{"id":"s","action":{"type":"worker","queue":"ml"},"requires":{"capabilities":["gpu"]}}]}`)
	ls := b.claim(t, tenantA, "ml")
	require.Len(t, ls, 1)
	res, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "resource"})
	require.NoError(t, err)
	require.Equal(t, domain.StepFailed, res.StepState, "no other resource matches: nothing to switch to")
	require.Equal(t, domain.JobFailed, b.job(t, tenantA, j.ID).State)
	r, err := b.e.GetResource(b.ctx, tenantA, "only")
	require.NoError(t, err)
	require.Zero(t, r.Live(b.clock.Now()), "the slot was given back")
}

func TestBuiltinStepWaitsForASlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putResource(t, tenantA, "lic", `{"labels":{"kind":"license"},"capacity":1}`)
	j1 := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"},"requires":{"labels":{"kind":"license"}}}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	j2 := b.submit(t, tenantA, `{"steps":[{"id":"p","action":{"type":"pass"},"requires":{"labels":{"kind":"license"}}}]}`)
	require.Equal(t, []engine.ExecuteResult{engine.Waiting}, b.drain(t))
	require.NotNil(t, b.job(t, tenantA, j2.ID).Steps[0].ResourceWait)
	_, err := b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, nil)
	require.NoError(t, err)
	require.Equal(t, []engine.ExecuteResult{engine.Executed}, b.drain(t), "the freed slot woke it")
	got := b.job(t, tenantA, j2.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Equal(t, "lic", got.Steps[0].Attempts[0].Resource)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j1.ID).State)
}

func TestNetworkFailureRetriesOnItsOwnSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"}}]}`)
	var delays []time.Duration
	for range 3 {
		ls := b.claim(t, tenantA, "default")
		require.Len(t, ls, 1)
		_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "network", Message: "connection refused"})
		require.NoError(t, err)
		s := b.job(t, tenantA, j.ID).Steps[0]
		require.Equal(t, domain.StepRetrying, s.State)
		delays = append(delays, s.ReadyAt.Sub(b.clock.Now()))
		require.Empty(t, b.claim(t, tenantA, "default"), "not before its backoff")
		b.clock.Advance(delays[len(delays)-1])
	}
	require.Equal(t, []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second}, delays, "the quality platform's network rule, with no policy on the step")
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	require.Equal(t, 4, ls[0].Attempt)
	res, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "network"})
	require.NoError(t, err)
	require.Equal(t, domain.StepFailed, res.StepState, "three retries, then it fails")
}

func TestClassPoliciesAndOverrides(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// blocked: every 5 minutes; the step's own policy for class timeout.
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker"},"retry":{"max_attempts":2,"classes":{"blocked":{"max_attempts":50,"backoff":"fixed","initial_delay_ms":300000}}}}]}`)
	for range 5 {
		ls := b.claim(t, tenantA, "default")
		require.Len(t, ls, 1)
		_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "blocked", Message: "upstream build not ready"})
		require.NoError(t, err)
		s := b.job(t, tenantA, j.ID).Steps[0]
		require.Equal(t, domain.StepRetrying, s.State, "blocked failures count against their own policy, not max_attempts 2")
		require.Equal(t, 5*time.Minute, s.ReadyAt.Sub(b.clock.Now()))
		b.clock.Advance(5 * time.Minute)
	}
	ls := b.claim(t, tenantA, "default")
	_, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "retryable"})
	require.NoError(t, err)
	require.Equal(t, domain.StepRetrying, b.job(t, tenantA, j.ID).Steps[0].State, "the first retryable failure: one attempt of two under the step's policy")
	b.clock.Advance(time.Hour)
	ls = b.claim(t, tenantA, "default")
	res, err := b.e.Fail(b.ctx, tenantA, ls[0].LeaseID, engine.Outcome{Class: "network"})
	require.NoError(t, err)
	require.Equal(t, domain.StepFailed, res.StepState, "the step's one policy replaces the class defaults: network is under max_attempts 2")

	_, _, err = b.e.Submit(b.ctx, tenantA, []byte(`{"steps":[{"id":"w","action":{"type":"pass"},"retry":{"classes":{"fatal":{"max_attempts":2}}}}]}`), "")
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "steps[0].retry.classes.fatal", de.Field)
}

func TestWorkerTimeoutEndsAHeartbeatingAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[{"id":"w","action":{"type":"worker","lease_seconds":60},"timeout_seconds":3}]}`)
	ls := b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	require.Equal(t, b.clock.Now().Add(3*time.Second), ls[0].ExpiresAt, "the lease stops at the deadline")
	b.clock.Advance(2 * time.Second)
	hb, err := b.e.Heartbeat(b.ctx, tenantA, ls[0].LeaseID, 0)
	require.NoError(t, err)
	require.Equal(t, *ls[0].Deadline, *hb.ExpiresAt, "a heartbeat never extends past timeout_seconds")
	b.clock.Advance(time.Second)
	_, err = b.e.Heartbeat(b.ctx, tenantA, ls[0].LeaseID, 0)
	require.ErrorIs(t, err, domain.ErrLeaseLost, "past timeout_seconds the worker hears 409")
	s := b.job(t, tenantA, j.ID).Steps[0]
	require.Equal(t, domain.StepRetrying, s.State, "TIMED_OUT, then the timeout policy: one retry after 5 minutes")
	require.Equal(t, domain.AttemptTimeout, s.Attempts[0].State)
	require.Equal(t, 5*time.Minute, s.ReadyAt.Sub(b.clock.Now()))
	_, err = b.e.Complete(b.ctx, tenantA, ls[0].LeaseID, nil)
	require.ErrorIs(t, err, domain.ErrLeaseLost)

	// A worker that goes quiet past the deadline is timed out by the next
	// taker, not merely reclaimed.
	b.clock.Advance(5 * time.Minute)
	ls = b.claim(t, tenantA, "default")
	require.Len(t, ls, 1)
	b.clock.Advance(4 * time.Second)
	b.clock.Advance(domain.DispatchGrace)
	b.sweep(t)
	s = b.job(t, tenantA, j.ID).Steps[0]
	require.Equal(t, domain.StepFailed, s.State, "the second timeout spends the timeout policy's one retry")
	require.Equal(t, domain.AttemptTimeout, s.Attempts[1].State)
}

func TestP0WorkerJobIsClaimedFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 15 {
		b.submit(t, tenantA, `{"priority":"P2","steps":[{"id":"w","action":{"type":"worker","queue":"qa"}}]}`)
	}
	urgent := b.submit(t, tenantA, `{"priority":"P0","steps":[{"id":"w","action":{"type":"worker","queue":"qa"}}]}`)
	require.Equal(t, 0, urgent.Priority)
	ls, err := b.e.Claim(b.ctx, tenantA, engine.ClaimRequest{Queue: "qa", Max: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, urgent.ID, ls[0].JobID, "P0 first, though submitted last")
	// Every tenth take serves the lowest priority first: P2 is not starved.
	served := map[bool]int{}
	for range 9 {
		more, err := b.e.Claim(b.ctx, tenantA, engine.ClaimRequest{Queue: "qa", Max: 1})
		require.NoError(t, err)
		served[len(more) == 1]++
	}
	require.Equal(t, 9, served[true])
}
