package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

func TestResourcePlanIsValidSeededAndApart(t *testing.T) {
	t.Parallel()
	f := New(9, DefaultProbabilities())
	main := PlanDigest(f.Plan(30))
	p := f.ResourcePlan(30, ResourceConfig{Jobs: 200})
	require.Equal(t, main, PlanDigest(New(9, DefaultProbabilities()).Plan(30)), "the resource plan leaves the plan as it was")
	require.Equal(t, PlanDigest(p.all()), PlanDigest(New(9, Probabilities{}).ResourcePlan(30, ResourceConfig{Jobs: 200}).all()), "the same seed, the same resource jobs")
	require.NotEqual(t, PlanDigest(p.all()), PlanDigest(New(10, Probabilities{}).ResourcePlan(30, ResourceConfig{Jobs: 200}).all()))

	require.Len(t, p, 2)
	require.Zero(t, p[0].After)
	require.Positive(t, p[1].After)
	kinds := map[string]int{}
	scripts := map[string]int{}
	for i, jp := range p.all() {
		require.Equal(t, 30+i, jp.N)
		spec, err := domain.ParseJobSpec(jp.Body)
		require.NoError(t, err, "%s", jp.Body)
		var payload struct {
			Script []string `json:"chaos_script"`
			Marker string   `json:"chaos_worker"`
		}
		require.NoError(t, json.Unmarshal(spec.Payload, &payload))
		kinds[jp.Kind]++
		for _, s := range spec.Steps {
			require.NotNil(t, s.Requires, "step %s of %s requires a resource", s.ID, jp.Body)
			matches := matching(s.Requires)
			require.Positive(t, matches, "%s", jp.Body)
			if s.Action.Type != domain.ActionWorker {
				continue
			}
			// A script fails with class resource on fewer resources than
			// match, ends in success, and leaves two attempts to spare.
			require.Less(t, strings.Count(strings.Join(payload.Script, " "), ScriptResource), matches, "%v", payload.Script)
			require.Contains(t, []string{ScriptHold, ScriptComplete}, payload.Script[len(payload.Script)-1])
			require.Equal(t, len(payload.Script)+2, s.Retry.MaxAttempts)
			require.Equal(t, WorkerResource, payload.Marker)
			for _, x := range payload.Script {
				scripts[x]++
			}
		}
	}
	for _, k := range resourceKinds {
		require.Positive(t, kinds[k.kind], "kind %s never planned", k.kind)
	}
	for _, x := range []string{ScriptKill, ScriptResource, ScriptHold, ScriptComplete} {
		require.Positive(t, scripts[x], "script %s never planned", x)
	}
	require.Empty(t, f.ResourcePlan(230, ResourceConfig{Off: true, Jobs: 5}).all())
}

func TestScriptByAttempt(t *testing.T) {
	t.Parallel()
	var in leaseInput
	require.NoError(t, json.Unmarshal([]byte(`{"chaos_worker":"resource","chaos_script":["kill","resource"]}`), &in))
	require.Equal(t, WorkerResource, in.Marker)
	require.Equal(t, ScriptKill, script(in.Script, 1))
	require.Equal(t, ScriptResource, script(in.Script, 2))
	require.Equal(t, ScriptComplete, script(in.Script, 3), "beyond the script: complete")
}

// poolItemOf is a resource item as the store writes it.
func poolItemOf(t *testing.T, r domain.Resource) map[string]ddb.AttributeValue {
	t.Helper()
	it, err := attributevalue.MarshalMap(r)
	require.NoError(t, err)
	it["pk"] = &ddb.AttributeValueMemberS{Value: "R#" + Tenant}
	it["sk"] = &ddb.AttributeValueMemberS{Value: r.ID}
	return it
}

// observed runs a write through the observer as the SDK would: the call,
// then one attempt answered status, the call ending in callErr.
func observed(p *resourcePool, params any, status int, callErr error) {
	attempt := middleware.DeserializeHandlerFunc(func(ctx context.Context, _ middleware.DeserializeInput) (middleware.DeserializeOutput, middleware.Metadata, error) {
		return middleware.DeserializeOutput{RawResponse: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}}, middleware.Metadata{}, nil
	})
	call := middleware.InitializeHandlerFunc(func(ctx context.Context, _ middleware.InitializeInput) (middleware.InitializeOutput, middleware.Metadata, error) {
		_, md, _ := p.observeAttempt(ctx, middleware.DeserializeInput{}, attempt)
		return middleware.InitializeOutput{}, md, callErr
	})
	_, _, _ = p.observeCall(context.Background(), middleware.InitializeInput{Parameters: params}, call)
}

func TestObserverSeesAppliedWrites(t *testing.T) {
	t.Parallel()
	clock := &Clock{}
	p := newResourcePool(nil, clock, &notes{})
	now := clock.Now()
	h := domain.Holder{Job: "j1", Step: "w", Since: now, ExpiresAt: now.Add(time.Second)}
	ccf := &ddb.ConditionalCheckFailedException{}
	put := func(v int64, holders map[string]domain.Holder) *dynamodb.PutItemInput {
		return &dynamodb.PutItemInput{Item: poolItemOf(t, domain.Resource{Tenant: Tenant, ID: "gpu-1", Capacity: 1, Version: v, Holders: holders})}
	}
	observed(p, put(2, map[string]domain.Holder{"j1/w/1": h}), http.StatusOK, nil)
	observed(p, put(2, map[string]domain.Holder{"j2/w/1": h}), http.StatusBadRequest, ccf) // lost the race
	observed(p, put(3, nil), http.StatusOK, ccf)                                           // applied, its answer lost, its retry refused
	observed(p, &dynamodb.PutItemInput{Item: map[string]ddb.AttributeValue{"pk": &ddb.AttributeValueMemberS{Value: "J#" + Tenant}}}, http.StatusOK, nil)
	observed(p, &dynamodb.UpdateItemInput{Key: poolItemOf(t, domain.Resource{ID: "gpu-1"}), ExpressionAttributeNames: map[string]string{"#k": "j1/w/1"}}, http.StatusBadRequest, ccf) // a slot's extension: no put

	require.Len(t, p.applied, 2, "the pool's writes that were applied, not a job's")
	hs := p.holdings()
	got := hs["gpu-1"]["j1/w/1"]
	require.NotNil(t, got)
	require.True(t, got.since.Equal(now))
	require.NotNil(t, got.dropped, "the applied write without it gave it back")
	require.EqualValues(t, 3, got.dropped.Version)
	require.Nil(t, hs["gpu-1"]["j2/w/1"], "a write that lost its race held nothing")
}

// attemptAt is a worker attempt from from to to (its lease's end).
func attemptAt(n int, res string, from, to time.Time, state domain.AttemptState, class domain.FailureClass) domain.Attempt {
	a := domain.Attempt{N: n, State: state, Lease: res + "-lease-" + string(rune('0'+n)), Resource: res, StartedAt: &from, EndedAt: &to, LeaseUntil: &to}
	if class != "" {
		a.Error = &domain.StepError{Class: class, Message: "x"}
	}
	return a
}

func TestSlotGivenBackAndCapacityExceededAreFound(t *testing.T) {
	t.Parallel()
	clock := &Clock{}
	p := newResourcePool(nil, clock, &notes{})
	t0 := clock.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Attempt 1 of j1 takes gpu-1's one slot at 0 with a lease to 2000; a
	// release gives it back at 500; j2 takes it at 600.
	p.applied = []poolWrite{
		{Res: "gpu-1", Version: 2, Start: at(0), End: at(10), Holders: map[string]domain.Holder{"gpu-1-lease-1": {Since: at(0), ExpiresAt: at(2000)}}},
		{Res: "gpu-1", Version: 3, Start: at(500), End: at(510), Holders: map[string]domain.Holder{}},
		{Res: "gpu-1", Version: 4, Start: at(600), End: at(610), Holders: map[string]domain.Holder{"j2-lease": {Since: at(600), ExpiresAt: at(1600)}}},
	}
	hs := p.holdings()
	step := func(job string, a domain.Attempt) (*domain.Job, *domain.Step) {
		s := &domain.Step{Spec: domain.StepSpec{ID: "w", Action: domain.ActionSpec{Type: domain.ActionWorker}}, Attempts: []domain.Attempt{a}}
		return &domain.Job{ID: job, Steps: []*domain.Step{s}}, s
	}
	a1 := attemptAt(1, "gpu-1", at(-50), at(2000), domain.AttemptSucceeded, "")
	a2 := attemptAt(1, "gpu-1", at(590), at(1200), domain.AttemptSucceeded, "")
	a2.Lease = "j2-lease"
	leases := map[string]bool{a1.Lease: true}
	j1, s1 := step("j1", a1)
	sp1, ok := spanOf(j1, s1, a1, leases, hs)
	require.True(t, ok)
	require.True(t, sp1.from.Equal(at(0)), "from the slot's taking, not the attempt's earlier start")
	require.NotNil(t, sp1.held.dropped)
	require.True(t, sp1.held.dropped.Start.Before(sp1.to), "given back at 500 while the lease ran to 2000")
	require.Contains(t, p.describe(sp1), "given back by write v3 [+0.500s")

	j2, s2 := step("j2", a2)
	_, ok = spanOf(j2, s2, a2, leases, hs)
	require.False(t, ok, "an attempt no worker was handed held nothing")
	leases[a2.Lease] = true
	sp2, ok := spanOf(j2, s2, a2, leases, hs)
	require.True(t, ok)
	over := overlaps([]span{sp1, sp2}, 1)
	require.Len(t, over, 1)
	require.True(t, over[0].at.Equal(at(600)))
	require.True(t, over[0].until.Equal(at(1200)))
	require.Empty(t, overlaps([]span{sp1, sp2}, 2))
	require.Contains(t, p.describeOverlap(ResourcePool[0], over[0]), "gpu-1 (1 slots) ran 2 attempts at once for 600ms from +0.600s")

	// A slot taken only after its lease ran out held nothing; one no
	// write showed starts with its attempt.
	late := attemptAt(1, "gpu-1", at(3000), at(3100), domain.AttemptSucceeded, "")
	late.Lease = "j3-lease"
	p.applied = append(p.applied, poolWrite{Res: "gpu-1", Version: 5, Start: at(3200), Holders: map[string]domain.Holder{"j3-lease": {Since: at(3150)}}})
	j3, s3 := step("j3", late)
	leases[late.Lease] = true
	sp3, ok := spanOf(j3, s3, late, leases, p.holdings())
	require.False(t, ok)
	require.True(t, sp3.late)
	late.Lease = "j4-lease"
	leases[late.Lease] = true
	j4, s4 := step("j4", late)
	sp4, ok := spanOf(j4, s4, late, leases, p.holdings())
	require.True(t, ok)
	require.Nil(t, sp4.held)
	require.True(t, sp4.from.Equal(at(3000)))
	// A slot kept from an earlier decision holds for the lease from the
	// attempt's start.
	late.Lease = "j5-lease"
	leases[late.Lease] = true
	p.applied = append(p.applied, poolWrite{Res: "gpu-1", Version: 6, Start: at(2500), Holders: map[string]domain.Holder{"j5-lease": {Since: at(2500)}}})
	j5, s5 := step("j5", late)
	sp5, ok := spanOf(j5, s5, late, leases, p.holdings())
	require.True(t, ok)
	require.True(t, sp5.from.Equal(at(3000)))

	// A decision took gpu-2's slot for j6-lease and lost its race; the
	// slot expired and was pruned; the change's next decision (the clock
	// had jumped) took it again only after the lease it wrote had ended.
	// The lease held no slot while it ran: late, not a slot given back.
	late.Lease, late.Resource = "j6-lease", "gpu-2"
	leases[late.Lease] = true
	p.applied = append(p.applied,
		poolWrite{Res: "gpu-2", Version: 2, Start: at(100), Holders: map[string]domain.Holder{"j6-lease": {Since: at(100), ExpiresAt: at(1100)}}},
		poolWrite{Res: "gpu-2", Version: 3, Start: at(2000), Holders: map[string]domain.Holder{}},
		poolWrite{Res: "gpu-2", Version: 4, Start: at(3150), Holders: map[string]domain.Holder{"j6-lease": {Since: at(3150), ExpiresAt: at(3100)}}})
	j6, s6 := step("j6", late)
	sp6, ok := spanOf(j6, s6, late, leases, p.holdings())
	require.False(t, ok)
	require.True(t, sp6.late, "the lease's own take came after it ended; the earlier stretch was another decision's")
	// Taken again in time, the second stretch is the lease's slot.
	p.applied[len(p.applied)-1].Holders["j6-lease"] = domain.Holder{Since: at(3050), ExpiresAt: at(3100)}
	sp6, ok = spanOf(j6, s6, late, leases, p.holdings())
	require.True(t, ok)
	require.True(t, sp6.from.Equal(at(3050)))
	require.EqualValues(t, 4, sp6.held.added)
}

func TestResourceRows(t *testing.T) {
	t.Parallel()
	t1, t2 := t0, t0.Add(time.Second)
	worker := domain.StepSpec{ID: "train", Action: domain.ActionSpec{Type: domain.ActionWorker}, Requires: &domain.Requirements{Capabilities: []string{ResourceCapability}}, Retry: &domain.RetryPolicy{MaxAttempts: 4}}
	job := func(js domain.JobState, ss domain.StepState, as ...domain.Attempt) *domain.Job {
		return &domain.Job{ID: "j", State: js, Steps: []*domain.Step{{Spec: worker, State: ss, Attempts: as}}}
	}
	killed := attemptAt(1, "gpu-1", t1, t2, domain.AttemptTimeout, domain.ClassTimeout)
	done := attemptAt(2, "gpu-2", t1, t2, domain.AttemptSucceeded, "")
	row := rows["res-worker"]
	require.Empty(t, problems(row, job(domain.JobCompleted, domain.StepSucceeded, killed, done), nil))
	failed := job(domain.JobFailed, domain.StepFailed, killed, attemptAt(2, "gpu-2", t1, t2, domain.AttemptFailed, domain.ClassFatal))
	require.Contains(t, strings.Join(problems(row, failed, nil), "; "), "not COMPLETED", "failed on its own, not on a lost lease")
	lost := job(domain.JobFailed, domain.StepFailed, killed, attemptAt(2, "gpu-2", t1, t2, domain.AttemptTimeout, domain.ClassTimeout))
	lost.Steps[0].Error = &domain.StepError{Class: domain.ClassTimeout}
	require.Empty(t, problems(row, lost, nil), "its attempts spent on lost leases")

	sw := domain.StepSpec{ID: "flaky", Action: domain.ActionSpec{Type: domain.ActionFail}, Requires: &domain.Requirements{Labels: map[string]string{"zone": "a"}}, Retry: &domain.RetryPolicy{MaxAttempts: 5}}
	swJob := func(as ...domain.Attempt) *domain.Job {
		return &domain.Job{ID: "j", State: domain.JobFailed, Steps: []*domain.Step{{Spec: sw, State: domain.StepFailed, Attempts: as}}}
	}
	f1 := attemptAt(1, "gpu-1", t1, t2, domain.AttemptFailed, domain.ClassResource)
	f2 := attemptAt(2, "gpu-2", t1, t2, domain.AttemptFailed, domain.ClassResource)
	require.Empty(t, problems(rows["res-switch"], swJob(f1, f2), nil), "failed on both resources of zone a")
	require.NotEmpty(t, problems(rows["res-switch"], &domain.Job{ID: "j", State: domain.JobCompleted, Steps: []*domain.Step{{Spec: sw, State: domain.StepSucceeded}}}, nil), "a switch job COMPLETED")
}

func TestResourceReport(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	(&Result{Resources: &ResourceResult{Jobs: 12, Registered: 3, Ran: 5}}).Report(&b, false)
	require.Contains(t, b.String(), "resources: 12 jobs, 3 of 3 resources registered; 5 attempts run on a slot")
	require.True(t, slices.Contains(Kinds[:], KindSlotRace))
}
