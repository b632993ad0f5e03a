package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
)

func init() { storeChecks = append(storeChecks, operatorChecks...) }

func operatorStore(t *testing.T, f StoreFixture) engine.OperatorStore {
	t.Helper()
	o, ok := f.Store.(engine.OperatorStore)
	require.True(t, ok, "the store keeps the operator's figures (engine.OperatorStore)")
	return o
}

var operatorChecks = []check[StoreFixture]{
	{"the operator readings: the last sweep's, whole", func(t *testing.T, f StoreFixture) {
		ctx := context.Background()
		o := operatorStore(t, f)
		r, reqs, err := o.OperatorFigures(ctx, []string{"GET /v1/jobs"})
		require.NoError(t, err)
		require.Nil(t, r, "none before the first sweep kept them")
		require.Empty(t, reqs)

		first := engine.Readings{At: f.Now, Took: time.Second, Sweep: engine.SweepReport{Due: 9}}
		workers := make([]engine.QueueDepth, engine.MaxWorkerLaneReadings)
		for i := range workers {
			workers[i] = engine.QueueDepth{Queue: "stack-w-" + string(rune('a'+i%26)) + "-lane", Visible: int64(i), InFlight: 1, Delayed: 2}
		}
		last := engine.Readings{
			At: f.Now.Add(time.Minute), Took: 1500 * time.Microsecond,
			Sweep:      engine.SweepReport{Due: 3, Reclaimed: 1, Redispatched: 2, Left: 4, Fired: 1, Errors: 1},
			LeasesLive: 7, TimersWaiting: 5, OldestDue: 90 * time.Second,
			Queues: &engine.QueueReadings{
				Stack:   []engine.QueueDepth{{Queue: "P0", Visible: 1}, {Queue: "P1", InFlight: 2}, {Queue: "P2", Delayed: 3}, {Queue: "DLQ", Visible: 4}},
				Workers: workers, WorkerLanes: 120,
			},
		}
		require.NoError(t, o.PutReadings(ctx, first))
		require.NoError(t, o.PutReadings(ctx, last))
		r, _, err = o.OperatorFigures(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, &last, r, "the last replaces the one before, every figure kept")

		last.Queues = nil // not read this time
		require.NoError(t, o.PutReadings(ctx, last))
		r, _, err = o.OperatorFigures(ctx, nil)
		require.NoError(t, err)
		require.Nil(t, r.Queues)
	}},
	{"the request counters add up per route", func(t *testing.T, f StoreFixture) {
		ctx := context.Background()
		o := operatorStore(t, f)
		counts := func(status int, ds ...time.Duration) engine.RequestCounts {
			var c engine.RequestCounts
			for _, d := range ds {
				c.Observe(status, d)
			}
			return c
		}
		require.NoError(t, o.RecordRequests(ctx, map[string]engine.RequestCounts{
			"POST /v1/jobs": counts(201, time.Millisecond, 40*time.Second),
			"$default":      counts(404, time.Millisecond),
		}))
		require.NoError(t, o.RecordRequests(ctx, map[string]engine.RequestCounts{"POST /v1/jobs": counts(500, 200*time.Millisecond)}))

		_, reqs, err := o.OperatorFigures(ctx, []string{"POST /v1/jobs", "GET /v1/jobs"})
		require.NoError(t, err)
		want := counts(201, time.Millisecond, 40*time.Second)
		want.Add(counts(500, 200*time.Millisecond))
		require.Equal(t, map[string]engine.RequestCounts{"POST /v1/jobs": want}, reqs, "the routes asked for that have requests, and no other")
		require.Equal(t, [5]int64{0, 2, 0, 0, 1}, want.Classes)
		require.Equal(t, int64(1), want.Counts[len(engine.RequestBuckets)], "40 s: past every bound")
	}},
}
