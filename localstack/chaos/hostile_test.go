package chaos

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/queue"
)

func TestHostileNamesCollidedUnderTheOldNaming(t *testing.T) {
	t.Parallel()
	const prefix = "stack-w-"
	names := queue.New(nil, queue.Config{WorkerQueuePrefix: prefix})
	colliding := CollidingQueues()
	require.Equal(t, []string{"0", "1"}, colliding)
	for i, q := range WorkerQueues {
		require.Equal(t, oldWorkerQueueName(prefix, Tenant, q), oldWorkerQueueName(prefix, HostileTenant, colliding[i]),
			"under the old naming the hostile tenant's %q was the run's %q", colliding[i], q)
		require.NotEqual(t, names.WorkerQueueName(Tenant, q), names.WorkerQueueName(HostileTenant, colliding[i]))
	}
	require.True(t, domain.ValidName(HostileTenant))
}

func TestHostilePlanIsSeededValidAndPoisonous(t *testing.T) {
	t.Parallel()
	p := New(3, DefaultProbabilities()).HostilePlan(HostileConfig{})
	require.Equal(t, p, New(3, Probabilities{}).HostilePlan(HostileConfig{}), "the plan depends on the seed alone")
	require.NotEqual(t, p.Flood, New(4, DefaultProbabilities()).HostilePlan(HostileConfig{}).Flood)

	require.Len(t, p.Flood, 3+1+40)
	require.Len(t, p.Parked, 3)
	kinds := map[string]int{}
	keys := map[string]bool{}
	for i, jp := range append(append([]JobPlan(nil), p.Flood...), p.Parked...) {
		require.Equal(t, i, jp.N)
		require.False(t, keys[jp.Key], "key %s twice", jp.Key)
		keys[jp.Key] = true
		spec, err := domain.ParseJobSpec(jp.Body)
		require.NoError(t, err, "%.200s", jp.Body)
		kinds[jp.Kind]++
		if jp.Kind != "pass" {
			want := map[bool]string{true: HostileParkedQueue, false: HostileOwnQueue}[jp.Kind == stepParked]
			require.Equal(t, want, spec.Steps[0].Action.Queue)
			require.Equal(t, jp.Kind, spec.Steps[0].ID, "the step id tells the hostile worker what to do")
		}
	}
	require.Equal(t, map[string]int{stepPoisoned: 1, stepWork: 2, stepBigFail: 1, "pass": 40, stepParked: 3}, kinds)
	require.Contains(t, string(p.Flood[4].Body), strings.Repeat("[", 63), "the first pass job nests its payload as deep as allowed")

	require.Len(t, p.Unknown, 20)
	seen := map[string]bool{}
	for _, q := range p.Unknown {
		require.True(t, domain.ValidName(q), q)
		require.False(t, seen[q], "%s twice", q)
		seen[q] = true
		require.NotContains(t, append(CollidingQueues(), HostileOwnQueue, HostileParkedQueue), q)
	}

	for _, pb := range p.Poison {
		var err error
		if pb.Complete {
			err = domain.DecodeStrict(pb.Body, &engine.Outcome{})
		} else {
			_, err = domain.ParseJobSpec(pb.Body)
		}
		require.Error(t, err, pb.Name)
		require.Equal(t, domain.CodeInvalid, domain.CodeOf(err), "%s: %v", pb.Name, err)
	}
	var fail engine.Outcome
	require.NoError(t, json.Unmarshal(p.BigFail, &fail))
	require.Equal(t, "fatal", fail.Class)
	require.Len(t, fail.Message, BigFailBytes)
}

// cleanFacts answers the facts of a run in which the hostile tenant met
// nothing wrong: one worker job of each kind it completes or fails, one
// parked, and both tenants' health as it should read.
func cleanFacts(t *testing.T) hostileFacts {
	t.Helper()
	names := queue.New(nil, queue.Config{WorkerQueuePrefix: "s-w-"})
	done := workerJob(t, `{"hostile":true}`)
	parkedSpec, err := domain.ParseJobSpec([]byte(`{"steps":[{"id":"parked","action":{"type":"worker","queue":"parked","lease_seconds":1}}]}`))
	require.NoError(t, err)
	parked, err := domain.NewJob(HostileTenant, "p1", parkedSpec, "k2", t0)
	require.NoError(t, err)
	f := hostileFacts{
		Plan: HostilePlan{
			Flood:  []JobPlan{{N: 0, Kind: stepPoisoned, Key: "k1"}},
			Parked: []JobPlan{{N: 1, Kind: stepParked, Key: "k2"}},
		},
		Claims: []claimRecord{
			{Queue: "0", Kind: claimColliding, Status: 200},
			{Queue: "1", Kind: claimColliding, Status: 502},
			{Queue: "u2-1234", Kind: claimUnknown, Status: 200},
			{Queue: HostileOwnQueue, Kind: claimOwn, Status: 200, Jobs: []string{done.ID}},
		},
		Subs: []*submission{
			{plan: JobPlan{N: 0, Kind: stepPoisoned}, id: done.ID, ids: map[string]int{done.ID: 1}, statuses: []int{201}},
			{plan: JobPlan{N: 1, Kind: stepParked}, id: "p1", ids: map[string]int{"p1": 1}, statuses: []int{201}},
		},
		Stored:   map[string]*domain.Job{done.ID: done, "p1": parked},
		Listed:   map[string]bool{done.ID: true, "p1": true},
		Finished: map[string]bool{done.ID: true},
		Poison: []poisonRecord{
			{Name: "deep", Statuses: []int{500, 400}},
			{Name: "deep", Strict: true, Statuses: []int{400}},
		},
		Legit: map[string]bool{}, Required: nil,
		BigFail: &bigFailRecord{Statuses: []int{200}, AnswerState: domain.JobFailed, Stored: domain.JobFailed, AttemptEnd: true,
			Message: domain.Truncate(strings.Repeat("€", BigFailBytes/3), domain.MaxErrorMessageBytes)},
		Isolation: []isoRecord{{What: "GET /v1/jobs/x", Statuses: []int{503, 404}}, {What: "GET /v1/jobs/x", Strict: true, Statuses: []int{404}}},
		Health:    healthRecord{Read: true, ChaosBefore: 0, ChaosAfter: 0, HostileBefore: 0, HostileAfter: 1, Parked: 1},
	}
	for _, n := range []string{names.WorkerQueueName(Tenant, "wq-0"), names.WorkerQueueName(Tenant, "wq-1"),
		names.WorkerQueueName(HostileTenant, HostileOwnQueue), names.WorkerQueueName(HostileTenant, HostileParkedQueue)} {
		f.Legit[n] = true
		f.Required = append(f.Required, n)
		f.Queues = append(f.Queues, n)
	}
	return f
}

// failedChecks answers the failures of each hostile check that failed.
func failedChecks(r *HostileResult) map[string][]string {
	out := map[string][]string{}
	for _, c := range r.Checks {
		if c.Failed > 0 {
			out[c.Name] = c.Examples
		}
	}
	return out
}

func TestJudgeHostilePassesACleanRun(t *testing.T) {
	t.Parallel()
	r := judgeHostile(cleanFacts(t))
	require.Empty(t, failedChecks(r))
	require.Zero(t, r.Failed())
	require.Equal(t, 4, r.Claims)
	require.Equal(t, 2, r.CollidingClaims)
	require.Equal(t, 1, r.UnknownClaims)
	require.Equal(t, 1, r.ClaimErrors)
	require.Equal(t, 1, r.Leases)
	require.Zero(t, r.ForeignLeases)
	require.Equal(t, 4, r.Queues)
	require.Zero(t, r.QueuesCreated)
	require.Equal(t, 2, r.PoisonRefused)
	require.Equal(t, 1, r.PoisonResent)
	require.Equal(t, 1, r.FloodFinished)
	require.Equal(t, 1, r.Parked)
	res := &Result{Hostile: r}
	require.True(t, res.Passed())
}

func TestJudgeHostileFailsAForeignLease(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Claims[0].Jobs = []string{"01RUNSJOB"} // a colliding name handed out the run's job
	r := judgeHostile(f)
	require.Equal(t, 1, r.ForeignLeases)
	failed := failedChecks(r)
	require.Contains(t, failed, "hostile: claims on colliding or unknown names hand out nothing")
	require.Contains(t, failed, "hostile: every lease names a job it submitted")
	require.False(t, (&Result{Hostile: r}).Passed(), "a foreign lease fails the run")

	f = cleanFacts(t)
	f.Claims[3].Jobs = append(f.Claims[3].Jobs, "01RUNSJOB") // its own queue, another tenant's job
	r = judgeHostile(f)
	require.Equal(t, 1, r.ForeignLeases)
	require.Equal(t, []string{"hostile: every lease names a job it submitted"}, keys(failedChecks(r)))

	f = cleanFacts(t)
	f.Claims[2].Status, f.Claims[2].Answer = 400, `{"error":{"code":"invalid"}}`
	require.Contains(t, failedChecks(judgeHostile(f)), "hostile: claims on colliding or unknown names hand out nothing")
}

func TestJudgeHostileFailsAnAcceptedPoisonBody(t *testing.T) {
	t.Parallel()
	for name, statuses := range map[string][]int{
		"accepted":                 {201},
		"accepted after a 5xx":     {500, 201},
		"a 5xx to the end":         {500, 502},
		"413 instead of 400":       {413},
		"accepted then refused":    {200, 400},
		"strict: a 5xx first":      {500, 400},
		"strict: refused with 404": {404},
	} {
		f := cleanFacts(t)
		f.Poison = append(f.Poison, poisonRecord{Name: name, Strict: strings.HasPrefix(name, "strict"), Statuses: statuses})
		r := judgeHostile(f)
		require.Equal(t, []string{"hostile: every poison body answers 400"}, keys(failedChecks(r)), name)
		require.Equal(t, has2xx(statuses), r.PoisonAccepted == 1, name)
	}

	// A poison body that got through is stored: the tenant's table holds
	// a job no submit of it was answered.
	f := cleanFacts(t)
	extra := workerJob(t, `{}`)
	extra.ID = "01POISON"
	f.Listed[extra.ID], f.Stored[extra.ID] = true, extra
	require.Contains(t, failedChecks(judgeHostile(f)), "hostile: it stores only jobs a submit was answered")

	// A refused output that was written all the same.
	f = cleanFacts(t)
	f.Stored[f.Subs[0].id] = workerJob(t, `{"poison":true,"a":2}`)
	require.Contains(t, failedChecks(judgeHostile(f)), "hostile: refused outputs are not written")
}

func TestJudgeHostileFailsAQueueMadeByAClaim(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Queues = append(f.Queues, "s-w-8-chaos-wq-u2-1234")
	r := judgeHostile(f)
	require.Equal(t, 1, r.QueuesCreated)
	require.Equal(t, []string{"hostile: no worker queue but those jobs named"}, keys(failedChecks(r)))

	f = cleanFacts(t)
	f.Queues = f.Queues[1:] // one of the run's queues is gone
	require.Contains(t, failedChecks(judgeHostile(f)), "hostile: no worker queue but those jobs named")
}

func TestJudgeHostileFailsAnUnfinishedFloodOrALeak(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Finished = map[string]bool{}
	require.Equal(t, []string{"hostile: its flood finishes within the bound"}, keys(failedChecks(judgeHostile(f))))

	f = cleanFacts(t)
	f.Isolation = append(f.Isolation, isoRecord{What: "POST /v1/jobs/x/cancel", Statuses: []int{500, 200}})
	require.Equal(t, []string{"hostile: the run's jobs answer it 404"}, keys(failedChecks(judgeHostile(f))))

	f = cleanFacts(t)
	f.Isolation = append(f.Isolation, isoRecord{What: "GET /v1/jobs/x", Strict: true, Statuses: []int{500}})
	require.Equal(t, []string{"hostile: the run's jobs answer it 404"}, keys(failedChecks(judgeHostile(f))))
}

func TestJudgeHostileHealth(t *testing.T) {
	t.Parallel()
	const name = "hostile: each tenant's backlog is its own"
	for what, c := range map[string]struct {
		h    healthRecord
		fail bool
	}{
		"clean":                                  {healthRecord{Read: true, HostileAfter: 3, Parked: 3}, false},
		"the run's backlog counts parked jobs":   {healthRecord{Read: true, ChaosAfter: 3, ChaosQueued: 0, HostileAfter: 3, Parked: 3}, true},
		"its own backlog does not show them":     {healthRecord{Read: true, HostileBefore: 2, HostileAfter: 2, Parked: 3}, true},
		"a backlog with no job queued, no fault": {healthRecord{Read: true, ChaosBefore: 2, ChaosAfter: 2, HostileAfter: 3, Parked: 3}, true},
		"a backlog lost to faults":               {healthRecord{Read: true, ChaosBefore: 2, ChaosAfter: 2, HostileAfter: 3, Parked: 3, WriteFaults: 4}, false},
		"its counter under 0 after faults":       {healthRecord{Read: true, HostileAfter: 1, Parked: 3, WriteFaults: 4}, false},
		"its counter under 0 without faults":     {healthRecord{Read: true, HostileAfter: 1, Parked: 3}, true},
		"not read":                               {healthRecord{}, true},
		"health answered 500":                    {healthRecord{Read: true, Err: "health answered 500"}, true},
	} {
		f := cleanFacts(t)
		f.Health = c.h
		r := judgeHostile(f)
		if c.fail {
			require.Equal(t, []string{name}, keys(failedChecks(r)), what)
		} else {
			require.Empty(t, failedChecks(r), what)
		}
	}
	f := cleanFacts(t)
	f.Health = healthRecord{Read: true, ChaosBefore: 2, ChaosAfter: 2, HostileAfter: 3, Parked: 3, WriteFaults: 4}
	r := judgeHostile(f)
	require.Equal(t, 2, r.ChaosBacklogDrift)
	require.NotEmpty(t, r.Notes, "the drift is noted")
}

func TestJudgeBigFail(t *testing.T) {
	t.Parallel()
	good := func() *bigFailRecord {
		return &bigFailRecord{Statuses: []int{200}, AnswerState: domain.JobFailed, Stored: domain.JobFailed, AttemptEnd: true,
			Message: domain.Truncate(strings.Repeat("€", BigFailBytes/3), domain.MaxErrorMessageBytes)}
	}
	require.Empty(t, judgeBigFail(good()))
	require.Contains(t, judgeBigFail(nil), "never failed")
	for what, change := range map[string]func(r *bigFailRecord){
		"413":              func(r *bigFailRecord) { r.Statuses, r.Err = []int{http.StatusRequestEntityTooLarge}, "answered 413" },
		"answered RUNNING": func(r *bigFailRecord) { r.AnswerState = domain.JobRunning },
		"stored RUNNING":   func(r *bigFailRecord) { r.Stored = domain.JobRunning },
		"attempt open":     func(r *bigFailRecord) { r.AttemptEnd = false },
		"kept whole":       func(r *bigFailRecord) { r.Message = strings.Repeat("€", BigFailBytes/3) },
		"cut in a rune":    func(r *bigFailRecord) { r.Message = r.Message[:len(r.Message)-1] + "\xe2" },
		"cut silently":     func(r *bigFailRecord) { r.Message = strings.Repeat("€", 1000) },
	} {
		r := good()
		change(r)
		require.NotEmpty(t, judgeBigFail(r), what)
	}
}

func TestHostileReport(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Claims[0].Jobs = []string{"01RUNSJOB"}
	res := &Result{Seed: 1, Jobs: 1, Hostile: judgeHostile(f)}
	var b strings.Builder
	res.Report(&b, false)
	require.Contains(t, b.String(), "seed 1: FAILED")
	require.Contains(t, b.String(), "hostile FAILED 2: 1 foreign leases in 4 claims")
	require.Contains(t, b.String(), "FAIL hostile: every lease names a job it submitted")
	require.Equal(t, "chaos: 1 runs, 0 faults injected, 1 jobs, lost 0, duplicated 0, mismatched 0; "+
		"hostile tenant: 4 claims, foreign leases 1, queues made 0, poison accepted 0, checks failed 2", Summary([]*Result{res}))
}

func keys[V any](m map[string]V) []string { return sortedKeys(m) }
