package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// The racers' checks, on jobs the domain moves as the engine would: what
// landed first decides, and every answer must agree with it.

func newJob(t *testing.T, body string) *domain.Job {
	t.Helper()
	spec, err := domain.ParseJobSpec([]byte(body))
	require.NoError(t, err)
	j, err := domain.NewJob(Tenant, "j1", spec, "k", t0)
	require.NoError(t, err)
	return j
}

func calls(cs ...call) []call { return cs }

func sent(name string, statuses ...int) call { return call{Op: name, Statuses: statuses} }

func sig(k int, id string, statuses ...int) call {
	return call{Op: "signal", K: k, SignalID: id, Statuses: statuses}
}

// answered sets what the last answer to a signal says became of it.
func answered(c call, outcome string) call {
	c.Body = []byte(`{"signal":{"outcome":"` + outcome + `"}}`)
	return c
}

// raceProblems holds a job to its kind's row, as the run does.
func raceProblems(j *domain.Job, kind string, cs []call) []string { return problems(rows[kind], j, cs) }

const gateJob = `{"steps":[{"id":"gate","action":{"type":"approval","timeout_seconds":2}}]}`
const gateThenPass = `{"steps":[{"id":"gate","action":{"type":"approval"}},{"id":"after","action":{"type":"pass"}}]}`

func TestCheckApproval(t *testing.T) {
	t.Parallel()
	by := domain.Decision{By: "chaos-racer"}

	// Approve landed first: the second approve and the reject lost.
	j := newJob(t, gateJob)
	_, changed, err := j.Approve("gate", by, t0)
	require.NoError(t, err)
	require.True(t, changed)
	_, changed, err = j.Approve("gate", by, t0)
	require.NoError(t, err)
	require.False(t, changed, "a second approve writes nothing")
	require.Equal(t, domain.JobCompleted, j.State)
	ok := calls(sent("approve", 200), sent("approve", 500, 200), sent("reject", 409), sent("cancel", 409))
	require.Empty(t, raceProblems(j, "approval", ok))
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("approve", 200), sent("reject", 200))), "a reject that lost answered 200")
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("approve", 200), sent("approve", 409))), "a repeated approve answers 200")
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("approve", 500, 500))), "never answered but with a 5xx")
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("approve", 200), sent("cancel", 200))), "a cancel answered 200 on a completed job")
	twice := newJob(t, gateJob)
	_, _, err = twice.Approve("gate", by, t0)
	require.NoError(t, err)
	// Decided twice: one decision takes effect, and the replay invariant
	// finds the second.
	twice.Events = append(twice.Events[:len(twice.Events)-1], domain.Event{Seq: 99, Type: "step_succeeded", Step: "gate", Detail: "approved again"}, twice.Events[len(twice.Events)-1])
	require.Contains(t, checkReplay(twice), "step gate cannot go from SUCCEEDED to SUCCEEDED")

	// Reject landed first.
	j = newJob(t, gateJob)
	_, err = j.Reject("gate", by, t0)
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, j.State)
	require.Empty(t, raceProblems(j, "approval", calls(sent("reject", 200), sent("approve", 409), sent("approve", 409), sent("cancel", 409))))
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("reject", 200), sent("approve", 200))))

	// The deadline came first.
	j = newJob(t, gateJob)
	_, err = j.Fire("gate", t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, domain.JobFailed, j.State)
	require.Empty(t, raceProblems(j, "approval", calls(sent("approve", 409), sent("reject", 409), sent("cancel", 409))))
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("reject", 200))))

	// The cancel came first.
	j = newJob(t, gateJob)
	_, err = j.Cancel(t0)
	require.NoError(t, err)
	require.Empty(t, raceProblems(j, "approval", calls(sent("cancel", 200), sent("approve", 409), sent("reject", 409))))
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("cancel", 409), sent("approve", 409))))
	require.NotEmpty(t, raceProblems(j, "approval", calls(sent("approve", 409))), "cancelled, but no cancel was sent")

	// Approve, then the cancel before the step after the gate ran.
	j = newJob(t, gateThenPass)
	_, _, err = j.Approve("gate", by, t0)
	require.NoError(t, err)
	_, err = j.Cancel(t0)
	require.NoError(t, err)
	require.Empty(t, raceProblems(j, "approval", calls(sent("approve", 200), sent("cancel", 200), sent("reject", 409))))
}

const waitJob = `{"steps":[{"id":"wait","action":{"type":"wait","signal":"go"}}]}`
const napThenWait = `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":1}},{"id":"wait","action":{"type":"wait","signal":"go"}}]}`

func signal(t *testing.T, j *domain.Job, k int, id string, at time.Time) bool {
	t.Helper()
	_, changed, err := j.Signal(domain.SignalRequest{Name: SignalName, Payload: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k)), ID: id}, at)
	require.NoError(t, err)
	return changed
}

func TestCheckSignals(t *testing.T) {
	t.Parallel()
	j := newJob(t, waitJob)
	require.True(t, signal(t, j, 1, "sig-same", t0))
	require.Equal(t, domain.JobCompleted, j.State)
	require.Empty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 200), sig(2, "sig-same", 409), sig(3, "", 409))))
	require.NotEmpty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 200), sig(3, "", 200))), "a signal answered 200 was never recorded")
	require.NotEmpty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 409))), "a signal answered 409, sent once, was recorded")
	// One id, recorded twice: each answered 200, yet an id lands once.
	twice := newJob(t, napThenWait)
	require.True(t, signal(t, twice, 1, "sig-same", t0))
	twice.Signals = append(twice.Signals, twice.Signals[0])
	require.NotEmpty(t, raceProblems(twice, "signal", calls(sig(1, "sig-same", 200), sig(2, "sig-same", 200))), "an id recorded twice")

	// Kept before the wait was reached, taken when it was; a repeated id
	// wrote nothing; another signal, the wait's one kept already, was
	// dropped (200, written nowhere).
	j = newJob(t, napThenWait)
	require.True(t, signal(t, j, 1, "sig-same", t0))
	require.False(t, signal(t, j, 1, "sig-same", t0))
	require.False(t, signal(t, j, 2, "", t0))
	_, err := j.Fire("nap", t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, j.State)
	dropped := answered(sig(2, "", 200), domain.SignalDropped)
	require.Empty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 502, 200), dropped)))
	require.NotEmpty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 200), sig(2, "", 200))), "answered 200 as written, never recorded")
	dropped.K = 1
	require.NotEmpty(t, raceProblems(j, "signal", calls(sig(1, "sig-same", 200), dropped)), "answered dropped, sent once, yet recorded")

	// The cancel landed before any signal.
	j = newJob(t, waitJob)
	_, err = j.Cancel(t0)
	require.NoError(t, err)
	require.Empty(t, raceProblems(j, "signal", calls(sig(1, "", 409), sent("cancel", 200))))
	require.NotEmpty(t, raceProblems(j, "signal", calls(sig(1, "", 200), sent("cancel", 200))))
}

const redriveJob = `{"steps":[{"id":"work","action":{"type":"worker","queue":"wq-0","lease_seconds":2},"retry":{"max_attempts":1}}],"payload":{"chaos_worker":"fail_first"}}`

// runWorker leases the job's worker step and reports an outcome: ok
// completes it, else it fails with class and message.
func runWorker(t *testing.T, j *domain.Job, ok bool, class domain.FailureClass, msg string) {
	t.Helper()
	l, err := j.Lease("work", domain.LeaseRequest{Worker: "w", ViaWorker: true, Nonce: "n", Duration: 2 * time.Second}, t0)
	require.NoError(t, err)
	if ok {
		_, err = j.Complete("work", l.ID, json.RawMessage(`{}`), t0)
	} else {
		_, err = j.Fail("work", l.ID, domain.Failure{Class: class, Message: msg}, t0, rand.New(rand.NewPCG(1, 2)))
	}
	require.NoError(t, err)
}

func TestCheckRedrive(t *testing.T) {
	t.Parallel()
	j := newJob(t, redriveJob)
	runWorker(t, j, false, domain.ClassFatal, PlannedFatal)
	require.Equal(t, domain.JobFailed, j.State)
	_, err := j.Redrive(t0)
	require.NoError(t, err)
	runWorker(t, j, true, "", "")
	require.Equal(t, domain.JobCompleted, j.State)

	require.Empty(t, checkRuns(j), "one terminal event per run, each last in its run")
	require.Empty(t, checkReplay(j))

	redrive := func(round int, statuses ...int) call {
		return call{Op: "redrive", Round: round, Statuses: statuses}
	}
	require.Empty(t, raceProblems(j, "redrive", calls(redrive(1, 200), redrive(1, 409))))
	// The bug the suite must go on catching: the redrive ran (the job was
	// requeued and completed) yet every redrive of the round answered 409.
	msgs := raceProblems(j, "redrive", calls(redrive(1, 409), redrive(1, 409)))
	require.Len(t, msgs, 1, "%v", msgs)
	require.Contains(t, msgs[0], "redrive round 1 took effect, yet none of its calls answered 200")
	require.Empty(t, raceProblems(j, "redrive", calls(redrive(1, 502, 409))), "a retried redrive may answer its own first send")
	require.NotEmpty(t, raceProblems(j, "redrive", calls(redrive(1, 200), redrive(2, 200))), "round 2 answered 200, yet one requeue")

	// The re-run failed on its own: not what the plan implies.
	j = newJob(t, redriveJob)
	runWorker(t, j, false, domain.ClassFatal, PlannedFatal)
	_, err = j.Redrive(t0)
	require.NoError(t, err)
	runWorker(t, j, false, domain.ClassFatal, "boom")
	require.NotEmpty(t, raceProblems(j, "redrive", calls(redrive(1, 200))))

	// Every round its racer may send re-ran the job onto a lost lease: it
	// ends FAILED, its last failure not redriven.
	j = newJob(t, redriveJob)
	runWorker(t, j, false, domain.ClassFatal, PlannedFatal)
	var rounds []call
	for round := 1; round <= maxRedriveRounds; round++ {
		at := t0.Add(time.Duration(round) * time.Minute)
		_, err = j.Redrive(at)
		require.NoError(t, err)
		_, err = j.Lease("work", domain.LeaseRequest{Nonce: fmt.Sprint(round), Duration: time.Second, ViaWorker: true}, at)
		require.NoError(t, err)
		_, err = j.Reclaim("work", at.Add(2*time.Second))
		require.NoError(t, err)
		rounds = append(rounds, redrive(round, 200))
	}
	require.Equal(t, domain.JobFailed, j.State)
	require.Empty(t, raceProblems(j, "redrive", rounds))
	// Every redrive refused: the job is left FAILED on its planned failure.
	j = newJob(t, redriveJob)
	runWorker(t, j, false, domain.ClassFatal, PlannedFatal)
	require.NotEmpty(t, raceProblems(j, "redrive", calls(redrive(1, 409), redrive(2, 409))), "FAILED, not on a lost lease")

	// checkRuns still finds a second terminal event within a run.
	j = workerJob(t, `{}`)
	j.Events = append(j.Events, domain.Event{Seq: len(j.Events) + 1, Type: string(domain.JobEvCompleted), At: t0})
	require.Contains(t, checkRuns(j), "2 terminal events")
}

func TestCheckSleepsAndOutcome(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"steps":[{"id":"nap","action":{"type":"sleep","seconds":3}},{"id":"after","action":{"type":"pass"}}]}`)
	_, err := j.Fire("nap", t0.Add(2*time.Second))
	var notYet *domain.NotYetError
	require.ErrorAs(t, err, &notYet, "the domain refuses an early timer")
	_, err = j.Fire("nap", t0.Add(3*time.Second))
	require.NoError(t, err)
	l, err := j.Lease("after", domain.LeaseRequest{Nonce: "n", Duration: time.Second}, t0.Add(3500*time.Millisecond))
	require.NoError(t, err)
	_, err = j.Complete("after", l.ID, json.RawMessage(`{}`), t0.Add(3600*time.Millisecond))
	require.NoError(t, err)
	require.Empty(t, checkSleeps(j))

	early := *j
	early.Events = append([]domain.Event(nil), j.Events...)
	for i, ev := range early.Events {
		if ev.Step == "after" && ev.Type == "step_leased" {
			early.Events[i].At = t0.Add(2 * time.Second)
		}
	}
	msgs := checkSleeps(&early)
	require.Len(t, msgs, 1)
	require.Contains(t, msgs[0], "before step nap's wake time")

	require.Empty(t, raceProblems(j, "timer", nil))
	require.NotEmpty(t, raceProblems(j, "fatal", nil), "a fatal job COMPLETED")
	require.NotEmpty(t, raceProblems(j, "timer", calls(sent("cancel", http.StatusOK))), "its cancel answered 200")
	require.Empty(t, raceProblems(j, "timer", calls(sent("cancel", http.StatusConflict))))
	require.Empty(t, raceProblems(j, "worker", nil), "a worker job may end as its workers drew")
}

func TestRacePlans(t *testing.T) {
	t.Parallel()
	f := New(11, DefaultProbabilities())
	plan := f.Plan(400)
	require.Equal(t, plan, New(11, Probabilities{}).Plan(400), "racers depend on the seed alone")
	seen := map[string]int{}
	sfnSleeps := 0
	for _, p := range plan {
		spec, err := domain.ParseJobSpec(p.Body)
		require.NoError(t, err, "%s", p.Body)
		if racers[p.Kind] || p.Kind == "timer" {
			require.Zero(t, p.CancelAfter, "the racer cancels, or nothing does")
		}
		if !racers[p.Kind] {
			require.Nil(t, p.Race, p.Kind)
			if p.Kind == "timer" {
				secs := *spec.Steps[0].Action.Seconds
				require.GreaterOrEqual(t, secs, 1.0)
				require.LessOrEqual(t, secs, 3.0)
				if time.Duration(secs*float64(time.Second)) > RunTimerThreshold {
					sfnSleeps++
				}
			}
			continue
		}
		require.NotNil(t, p.Race, p.Kind)
		ops := map[string]int{}
		for _, o := range p.Race.Ops {
			ops[o.Op]++
			require.Less(t, o.After, 3*time.Second)
		}
		seen[p.Kind]++
		switch p.Kind {
		case "approval":
			require.Equal(t, "gate", spec.Steps[0].ID)
			if to := spec.Steps[0].Action.TimeoutSeconds; to != 0 {
				require.True(t, to >= 2 && to <= 4, "timeout %d", to)
			}
			require.True(t, len(p.Race.Ops) >= 2 && len(p.Race.Ops) <= 4, "%s", p.Race)
			require.LessOrEqual(t, ops["approve"], 2)
			require.LessOrEqual(t, ops["reject"], 1)
			require.LessOrEqual(t, ops["cancel"], 1)
			if ops["approve"] == 2 {
				seen["approve twice"]++
			}
		case "signal":
			require.Equal(t, "wait", spec.Steps[len(spec.Steps)-1].ID)
			require.True(t, ops["signal"] >= 1 && ops["signal"] <= 3, "%s", p.Race)
			ks := map[int]bool{}
			for _, o := range p.Race.Ops {
				if o.Op == "signal" {
					require.False(t, ks[o.K], "payloads are told apart")
					ks[o.K] = true
					if o.SignalID == "" {
						seen["signal without id"]++
					}
				}
			}
			if ops["cancel"] > 0 {
				seen["signal against cancel"]++
			}
			if len(spec.Steps) > 1 {
				seen["signal before the wait"]++
			}
		case "redrive":
			require.Empty(t, p.Race.Ops)
			require.Contains(t, []int{1, 2}, p.Race.Redrives)
			require.Equal(t, 1, spec.Steps[0].Retry.MaxAttempts)
			require.Contains(t, string(p.Body), `"chaos_worker":"fail_first"`)
			if p.Race.Redrives == 2 {
				seen["redrive twice"]++
			}
		}
	}
	for _, k := range []string{"approval", "signal", "redrive", "approve twice", "signal without id", "signal against cancel", "signal before the wait", "redrive twice"} {
		require.Positive(t, seen[k], "never planned: %s", k)
	}
	require.Positive(t, sfnSleeps, "some sleeps go through Step Functions")
}

func TestReplanAndFloodRows(t *testing.T) {
	t.Parallel()
	// A cycle-closing replan accepted stores a cycle: an invariant finds it.
	cycled := newJob(t, `{"steps":[{"id":"x","action":{"type":"pass"}},{"id":"s1","action":{"type":"pass"},"depends_on":["x"]},{"id":"n","action":{"type":"pass"},"depends_on":["s1"]}]}`)
	cycled.Steps[1].Spec.DependsOn = []string{"x", "n"}
	l := newLedger()
	l.judgeJob("job j1 (replan-worker)", rows["replan-worker"], &submission{finished: true}, cycled, nil)
	require.Equal(t, 1, l.byName["no job stores a dependency cycle"].Failed)
	// replan-fail's, accepted at submit, stores a job no submit answered.
	l = newLedger()
	l.judgeSubmits(nil, map[string]bool{"01ACCEPTED": true}, nil, nil, nil, nil)
	require.Equal(t, 1, l.failed(Duplicated), "no job beyond those submitted")
	// A child job its parent's attempt names is no stray; one it does not
	// name (a second child of that attempt) is.
	parent := newJob(t, `{"steps":[{"id":"sub","action":{"type":"job","spec":{"steps":[{"id":"c","action":{"type":"pass"}}]}}}]}`)
	_, err := parent.Lease("sub", domain.LeaseRequest{Nonce: "n", Duration: time.Minute}, t0)
	require.NoError(t, err)
	kid := newJob(t, `{"steps":[{"id":"c","action":{"type":"pass"}}]}`)
	kid.ID = parent.Steps[0].Child.ID
	kid.Parent = &domain.ParentRef{Job: parent.ID, Step: "sub", Attempt: 1}
	stray := *kid
	stray.ID = "01STRAY"
	l = newLedger()
	l.judgeSubmits(nil, map[string]bool{kid.ID: true, stray.ID: true}, nil, map[string]*domain.Job{parent.ID: parent},
		map[string]*domain.Job{kid.ID: kid, stray.ID: &stray}, nil)
	require.Equal(t, 1, l.failed(Duplicated), "the stray only")
	require.Equal(t, []string{"job 01STRAY: stored, but no submit answered it and no attempt of a submitted job's step made it"},
		l.byName["no job beyond those submitted and their steps' child jobs, one an attempt"].Examples)

	j := newJob(t, `{"steps":[{"id":"ready","action":{"type":"wait","signal":"ready"}},{"id":"wait","action":{"type":"wait","signal":"go"}}]}`)
	_, _, err = j.Signal(domain.SignalRequest{Name: SignalName, ID: "flood-own", Payload: json.RawMessage(`{"own":true}`)}, t0)
	require.NoError(t, err)
	_, _, err = j.Signal(domain.SignalRequest{Name: "ready"}, t0)
	require.NoError(t, err)
	require.Equal(t, domain.JobCompleted, j.State)
	own := func(statuses ...int) call { return call{Op: "signal", SignalID: "flood-own", Statuses: statuses} }
	require.Empty(t, raceProblems(j, "flood", calls(answered(own(200), domain.SignalKept))))
	require.NotEmpty(t, raceProblems(j, "flood", calls(own(409))), "its own signal answered 409, yet it was recorded")
}

// The bug the suite caught, planted: a redrive that ran (the job was
// requeued and completed) answered 409. Held to the redrive row as the
// run holds every job, it fails the run as mismatched.
func TestARedriveAnswered409ThoughItRanFailsTheRun(t *testing.T) {
	t.Parallel()
	j := newJob(t, redriveJob)
	runWorker(t, j, false, domain.ClassFatal, PlannedFatal)
	_, err := j.Redrive(t0)
	require.NoError(t, err)
	runWorker(t, j, true, "", "")
	judge := func(statuses ...int) *Result {
		s := &submission{plan: JobPlan{Kind: "redrive", Race: &RacePlan{Redrives: 1}}, id: j.ID, ids: map[string]int{j.ID: 1}, finished: true,
			calls: calls(call{Op: "redrive", Round: 1, Statuses: statuses})}
		l := newLedger()
		l.judgeSubmits([]*submission{s}, map[string]bool{j.ID: true}, nil, map[string]*domain.Job{j.ID: j}, nil, nil)
		return &Result{Checks: l.checks, Lost: l.failed(Lost), Duplicated: l.failed(Duplicated), Mismatched: l.failed(Mismatched)}
	}
	require.True(t, judge(http.StatusOK).Passed(), "answered 200: as it ran")
	res := judge(http.StatusConflict)
	require.False(t, res.Passed())
	require.Equal(t, 1, res.Mismatched)
}
