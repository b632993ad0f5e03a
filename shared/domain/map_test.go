package domain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runItem leases a step as a worker and completes it with out at now.
func runItem(t *testing.T, j *Job, id, out string, now time.Time) {
	t.Helper()
	l := mustLease(t, j, id, viaWorker("w", id), now)
	_, err := j.Complete(id, l.ID, json.RawMessage(out), now)
	require.NoError(t, err)
}

func running(j *Job, mapID string) (n int) {
	for _, s := range j.Steps {
		if s.MapOf == mapID && (s.State.leasable() || s.State.leased()) {
			n++
		}
	}
	return n
}

// A map runs a child per item, at most max_concurrency at once, each on
// its item, and succeeds with their outputs in item order; what depends
// on it runs on that list.
func TestAMapRunsAChildPerItemWithinItsConcurrency(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"urls":["a","b","c","d","e"]},"steps":[
		{"id":"each","action":{"type":"map","items":"payload.urls","max_concurrency":2,"step":{"action":{"type":"worker"}}}},
		{"id":"after","action":{"type":"worker"}}]}`)
	replayOK(t, j)
	require.Equal(t, StepWaitingDeps, j.Steps[0].State)
	require.Equal(t, 5, j.Steps[0].Children)
	require.Equal(t, 2, running(j, "each"))
	in := j.Input(2)
	require.JSONEq(t, `{"item":"a","index":0,"input":{"urls":["a","b","c","d","e"]}}`, string(in))

	now := t0
	for n := range 5 {
		id := fmt.Sprintf("each[%d]", n)
		now = now.Add(time.Second)
		runItem(t, j, id, fmt.Sprintf(`"out-%d"`, n), now)
		replayOK(t, j)
		require.LessOrEqual(t, running(j, "each"), 2)
	}
	require.Equal(t, StepSucceeded, j.Steps[0].State)
	require.JSONEq(t, `["out-0","out-1","out-2","out-3","out-4"]`, string(j.Input(1)))
	require.Equal(t, StepPending, j.Steps[1].State)
}

// A child failing past the tolerated number fails the map and its job,
// and cancels the rest; a redrive runs the failed child and those it
// cancelled, not those that succeeded.
func TestAMapFailsPastItsToleranceAndRedriveRunsTheRest(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"xs":[1,2,3,4]},"steps":[
		{"id":"m","action":{"type":"map","items":"payload.xs","max_concurrency":2,"step":{"action":{"type":"worker"},"retry":{"max_attempts":1}}}}]}`)
	runItem(t, j, "m[0]", `0`, at(time.Second))
	l1 := mustLease(t, j, "m[1]", viaWorker("w", "1"), at(time.Second))
	_, err := j.Fail("m[1]", l1.ID, Failure{Class: ClassFatal, Message: "bad item"}, at(2*time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, StepFailed, j.Steps[0].State)
	require.Equal(t, JobFailed, j.State)
	require.Contains(t, j.Steps[0].Error.Message, "1 of 4 items failed (tolerated 0); m[1]: bad item")
	require.Equal(t, StepCancelled, j.Steps[3].State, "m[2] was running: cancelled")

	_, err = j.Redrive(at(3 * time.Second))
	require.NoError(t, err)
	replayOK(t, j)
	require.Equal(t, StepSucceeded, j.Steps[1].State, "m[0] is not run again")
	require.Equal(t, StepWaitingDeps, j.Steps[0].State)
	now := at(3 * time.Second)
	for n := 1; n < 4; n++ {
		id := fmt.Sprintf("m[%d]", n)
		require.LessOrEqual(t, running(j, "m"), 2)
		now = now.Add(time.Second)
		runItem(t, j, id, `1`, now)
	}
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	require.Equal(t, 1, j.Steps[1].Attempt, "m[0] ran once")
}

// Tolerated failures leave a null in the output, and the lane goes on.
func TestAMapToleratesFailures(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"xs":[1,2,3]},"steps":[
		{"id":"m","action":{"type":"map","items":"payload.xs","max_concurrency":1,"tolerated_failures":1,"step":{"action":{"type":"worker"},"retry":{"max_attempts":1}}}}]}`)
	l0 := mustLease(t, j, "m[0]", viaWorker("w", "0"), t0)
	_, err := j.Fail("m[0]", l0.ID, Failure{Class: ClassFatal, Message: "bad"}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, StepPending, j.Steps[2].State, "its lane goes on")
	require.Len(t, j.TakeReleased(), 1)
	for n, id := range []string{"m[1]", "m[2]"} {
		runItem(t, j, id, `"ok"`, at(time.Duration(2+n)*time.Second))
	}
	replayOK(t, j)
	require.Equal(t, JobCompleted, j.State)
	out, _ := j.OutputData(0)
	raw, err := out.Compose(nil)
	require.NoError(t, err)
	require.JSONEq(t, `[null,"ok","ok"]`, string(raw))
}

func TestMapsAreCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, field string }{
		{`{"steps":[{"id":"m","action":{"type":"map","step":{"action":{"type":"pass"}}}}]}`, "steps[0].action.items"},
		{`{"steps":[{"id":"m","action":{"type":"map","items":"payload.xs"}}]}`, "steps[0].action.step"},
		{`{"steps":[{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"sleep","seconds":1}}}}]}`, "steps[0].action.step.action.type"},
		{`{"steps":[{"id":"m","action":{"type":"map","items":"payload.xs","max_concurrency":0.5,"step":{"action":{"type":"pass"}}}}]}`, "steps[0].action.max_concurrency"},
		{`{"steps":[{"id":"m","action":{"type":"map","items":"payload.xs","max_concurrency":1001,"step":{"action":{"type":"pass"}}}}]}`, "steps[0].action.max_concurrency"},
		{`{"steps":[{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"http"}}}}]}`, "steps[0].action.step.action.url"},
	} {
		_, err := ParseJobSpec([]byte(c.body))
		require.Error(t, err, c.body)
		require.Equal(t, c.field, err.(*Error).Field, "%s: %v", c.body, err)
	}
}

// Items of an instant action with small outputs run in the map's own
// change: a map of pass items ends at submit, its outputs in order.
func TestInstantItemsRunAtOnce(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"xs":[1,2,3]},"steps":[
		{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"pass"},"output":"output.item * 10.0"}}},
		{"id":"after","action":{"type":"worker"}}]}`)
	replayOK(t, j)
	require.Equal(t, StepSucceeded, j.Steps[0].State)
	require.Equal(t, StepPending, j.Steps[1].State)
	require.JSONEq(t, `[10,20,30]`, string(j.Input(1)))
	require.Len(t, j.Steps[2].Attempts, 1, "each item is an attempt, leased and recorded")

	// An item whose output is large runs as a step of its own.
	j = newJob(t, `{"payload":{"xs":[1,2,3],"pad":"`+strings.Repeat("x", 600)+`"},"steps":[
		{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"pass"}}}}]}`)
	require.Equal(t, StepWaitingDeps, j.Steps[0].State)
	require.Equal(t, 3, running(j, "m"))
}

// A map's item is not replanned: its replan is a final failure, counted
// against the map's tolerance.
func TestAMapItemIsNotReplanned(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"payload":{"xs":[1,2]},"steps":[
		{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"worker"}}}}]}`)
	l := mustLease(t, j, "m[0]", viaWorker("w", "0"), t0)
	_, err := j.Fail("m[0]", l.ID, Failure{Class: ClassReplan, Message: "split it", Steps: []StepSpec{{ID: "x", Action: ActionSpec{Type: "pass"}}}}, at(time.Second), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	replayOK(t, j)
	require.Len(t, j.Steps, 3, "no step added")
	require.Equal(t, StepFailed, j.Steps[1].State)
	require.Contains(t, j.Steps[1].Error.Message, "a map's item is not replanned")
	require.Equal(t, JobFailed, j.State)
}

// A map's items are bounded, each and in all: they are held in its job.
func TestAMapsItemsAreBounded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ payload, says string }{
		{`{"xs":["` + strings.Repeat("x", 9000) + `"]}`, "items: item 0 is 9002 bytes; the limit is 8192"},
		{`{"xs":[` + strings.Repeat(`"`+strings.Repeat("x", 8000)+`",`, 140) + `"x"]}`, "items: are 1120283 bytes in all; the limit is 1048576"},
		{`{"xs":{"a":1}}`, "items: is {\"a\":1}, not a list"},
	} {
		j := newJob(t, `{"payload":`+c.payload+`,"steps":[{"id":"m","action":{"type":"map","items":"payload.xs","step":{"action":{"type":"worker"}}}}]}`)
		replayOK(t, j)
		require.Equal(t, JobFailed, j.State)
		require.Contains(t, j.Steps[0].Error.Message, c.says)
		require.Len(t, j.Steps, 1, "no item was made")
	}
}
