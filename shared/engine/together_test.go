package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

const threeBranches = `{"steps":[
	{"id":"a","action":{"type":"pass"}},
	{"id":"b","action":{"type":"pass"}},
	{"id":"nap","action":{"type":"sleep","seconds":60}},
	{"id":"join","depends_on":["a","b","nap"],"action":{"type":"pass"}}]}`

// First deliveries of one job's branches are leased and recorded in one
// write; a group it cannot take together (a step twice, a step that is
// no executed one) writes nothing and is left to run alone.
func TestExecuteTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, threeBranches)
	d := func(step string) engine.Delivery {
		return engine.Delivery{Message: engine.Message{Tenant: tenantA, Job: j.ID, Step: step}, Receives: 1}
	}
	version := b.job(t, tenantA, j.ID).Version

	for name, group := range map[string][]engine.Delivery{
		"a step twice":     {d("a"), d("a")},
		"a sleep":          {d("a"), d("nap")},
		"another job":      {d("a"), {Message: engine.Message{Tenant: tenantA, Job: "other", Step: "a"}, Receives: 1}},
		"a redelivery":     {d("a"), {Message: engine.Message{Tenant: tenantA, Job: j.ID, Step: "b"}, Receives: 2}},
		"a single message": {d("a")},
	} {
		_, _, ok := b.e.ExecuteTogether(b.ctx, group)
		require.False(t, ok, name)
		require.Equal(t, version, b.job(t, tenantA, j.ID).Version, "%s: nothing written", name)
	}

	res, errs, ok := b.e.ExecuteTogether(b.ctx, []engine.Delivery{d("a"), d("b")})
	require.True(t, ok)
	require.Equal(t, []engine.ExecuteResult{engine.Executed, engine.Executed}, res)
	require.Equal(t, []error{nil, nil}, errs)
	got := b.job(t, tenantA, j.ID)
	require.Equal(t, version+1, got.Version, "one write for both")
	require.Equal(t, domain.StepSucceeded, got.Steps[0].State)
	require.Equal(t, domain.StepSucceeded, got.Steps[1].State)
	require.NoError(t, domain.CheckReplay(got))
}

// What each step of a group releases is sent: two branches leased and
// recorded in one write each release the step after them (a dispatch of
// one overwrote the other's, which then waited a minute for the sweep).
func TestExecuteTogetherSendsWhatEachStepReleases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, tenantA, `{"steps":[
		{"id":"a","action":{"type":"pass"}},
		{"id":"b","action":{"type":"pass"}},
		{"id":"a2","depends_on":["a"],"action":{"type":"pass"}},
		{"id":"b2","depends_on":["b"],"action":{"type":"pass"}}]}`)
	ds := b.queue.TakeReady(10)
	require.Len(t, ds, 2)
	_, _, ok := b.e.ExecuteTogether(b.ctx, ds)
	require.True(t, ok)
	var next []string
	for _, d := range b.queue.TakeReady(10) {
		next = append(next, d.Message.Step)
		b.execute(t, d)
	}
	require.ElementsMatch(t, []string{"a2", "b2"}, next)
	require.Equal(t, domain.JobCompleted, b.job(t, tenantA, j.ID).State)
}
