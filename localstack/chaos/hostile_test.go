package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/wire"
)

func TestHostileNamesCollidedUnderTheOldNaming(t *testing.T) {
	t.Parallel()
	const prefix = "stack-w-"
	names := queue.New(nil, queue.Config{WorkerQueuePrefix: prefix})
	colliding := CollidingQueues()
	require.Equal(t, []string{"0", "1"}, colliding)
	for i, q := range WorkerQueues {
		// The old naming: <prefix><tenant>-<queue>.
		require.Equal(t, prefix+Tenant+"-"+q, prefix+HostileTenant+"-"+colliding[i],
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

	require.Len(t, p.Flood, 40)
	keys := map[string]bool{}
	for i, jp := range p.Flood {
		require.Equal(t, i, jp.N)
		require.False(t, keys[jp.Key], "key %s twice", jp.Key)
		keys[jp.Key] = true
		_, err := domain.ParseJobSpec(jp.Body)
		require.NoError(t, err, "%.200s", jp.Body)
	}
	require.Contains(t, string(p.Flood[0].Body), strings.Repeat("[", 63), "the first pass job nests its payload as deep as allowed")

	require.Len(t, p.Unknown, 20)
	seen := map[string]bool{}
	for _, q := range p.Unknown {
		require.True(t, domain.ValidName(q), q)
		require.False(t, seen[q], "%s twice", q)
		seen[q] = true
		require.NotContains(t, CollidingQueues(), q)
	}

	for _, pb := range p.Poison {
		var err error
		if pb.Complete {
			err = domain.DecodeStrict(pb.Body, &wire.Outcome{})
		} else {
			_, err = domain.ParseJobSpec(pb.Body)
		}
		require.Error(t, err, pb.Name)
		require.Equal(t, domain.CodeInvalid, domain.CodeOf(err), "%s: %v", pb.Name, err)
	}
}

// cleanFacts answers the facts of a run in which the hostile tenant met
// nothing wrong: a pass job of its flood finished.
func cleanFacts(t *testing.T) hostileFacts {
	t.Helper()
	names := queue.New(nil, queue.Config{WorkerQueuePrefix: "s-w-"})
	done := workerJob(t, `{"hostile":true}`)
	f := hostileFacts{
		Plan: HostilePlan{Flood: []JobPlan{{N: 0, Kind: "pass", Key: "k1"}}},
		Exchanges: map[string][]exchange{
			checkNothing: {
				{what: "claim on colliding queue 0", statuses: []int{200}, want: 200, once: true, kind: claimColliding},
				{what: "claim on colliding queue 1", statuses: []int{502}, want: 200, once: true, kind: claimColliding},
				{what: "claim on unknown queue u2-1234", statuses: []int{200}, want: 200, once: true, kind: claimUnknown},
			},
			checkPoison: {
				{what: "deep", statuses: []int{500, 400}, want: 400},
				{what: "deep", statuses: []int{400}, want: 400, strict: true},
			},
			checkIsolated: {{what: "GET x", statuses: []int{503, 404}, want: 404}, {what: "GET x", statuses: []int{404}, want: 404, strict: true}},
		},
		Subs:   []*submission{{plan: JobPlan{N: 0, Kind: "pass"}, id: done.ID, ids: map[string]int{done.ID: 1}, finished: true}},
		Stored: map[string]*domain.Job{done.ID: done},
		Listed: map[string]bool{done.ID: true},
		Prefix: "s-w-",
		Queues: []string{names.WorkerQueueName(Tenant, "wq-0"), names.WorkerQueueName(Tenant, "wq-1")},
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
	require.Equal(t, 3, r.Claims)
	require.Equal(t, 2, r.CollidingClaims)
	require.Equal(t, 1, r.UnknownClaims)
	require.Equal(t, 1, r.ClaimErrors)
	require.Zero(t, r.ForeignLeases)
	require.Equal(t, 2, r.Queues)
	require.Zero(t, r.QueuesCreated)
	require.Equal(t, 2, r.PoisonSent)
	require.Equal(t, 1, r.FloodFinished)
	require.True(t, (&Result{Hostile: r}).Passed())
}

func TestJudgeHostileFailsAForeignLease(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Exchanges[checkNothing][0].leases = []string{"01RUNSJOB"} // a colliding name handed out the run's job
	r := judgeHostile(f)
	require.Equal(t, 1, r.ForeignLeases)
	require.Equal(t, []string{"hostile: " + checkNothing}, keys(failedChecks(r)))
	require.False(t, (&Result{Hostile: r}).Passed(), "a foreign lease fails the run")

	f = cleanFacts(t)
	f.Exchanges[checkNothing][0].statuses = []int{400}
	require.Contains(t, failedChecks(judgeHostile(f)), "hostile: "+checkNothing)
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
		f.Exchanges[checkPoison] = append(f.Exchanges[checkPoison], exchange{what: name, strict: strings.HasPrefix(name, "strict"), statuses: statuses, want: 400})
		r := judgeHostile(f)
		require.Equal(t, []string{"hostile: " + checkPoison}, keys(failedChecks(r)), name)
		require.Equal(t, has2xx(statuses), r.PoisonAccepted == 1, name)
	}

	// A poison body that got through is stored: the tenant's table holds
	// a job no submit of it was answered.
	f := cleanFacts(t)
	extra := workerJob(t, `{}`)
	extra.ID = "01POISON"
	f.Listed[extra.ID], f.Stored[extra.ID] = true, extra
	require.Equal(t, []string{"hostile: no job beyond those submitted"}, keys(failedChecks(judgeHostile(f))))
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
	f.Subs[0].finished = false
	require.Equal(t, []string{"hostile: every job finished within the bound"}, keys(failedChecks(judgeHostile(f))))

	f = cleanFacts(t)
	f.Exchanges[checkIsolated] = append(f.Exchanges[checkIsolated], exchange{what: "cancel x", statuses: []int{500, 200}, want: 404})
	require.Equal(t, []string{"hostile: " + checkIsolated}, keys(failedChecks(judgeHostile(f))))

	f = cleanFacts(t)
	f.Exchanges[checkIsolated] = append(f.Exchanges[checkIsolated], exchange{what: "GET x", strict: true, statuses: []int{500}, want: 404})
	require.Equal(t, []string{"hostile: " + checkIsolated}, keys(failedChecks(judgeHostile(f))))
}

func TestHostileReport(t *testing.T) {
	t.Parallel()
	f := cleanFacts(t)
	f.Exchanges[checkNothing][0].leases = []string{"01RUNSJOB"}
	res := &Result{Seed: 1, Jobs: 1, Hostile: judgeHostile(f)}
	var b strings.Builder
	res.Report(&b, false)
	require.Contains(t, b.String(), "seed 1: FAILED")
	require.Contains(t, b.String(), "hostile FAILED 1: 1 foreign leases in 3 claims")
	require.Contains(t, b.String(), "FAIL hostile: "+checkNothing)
	require.Equal(t, "chaos: 1 runs, 0 faults injected, 1 jobs, lost 0, duplicated 0, mismatched 0; "+
		"hostile tenant: 3 claims, foreign leases 1, queues made 0, poison accepted 0, checks failed 1", Summary([]*Result{res}))
}

func keys[V any](m map[string]V) []string { return sortedKeys(m) }
