package metrics_test

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
)

func readings(at time.Time) *engine.Readings {
	return &engine.Readings{
		At: at, Took: 1250 * time.Millisecond, LeasesLive: 4, TimersWaiting: 2, OldestDue: 90 * time.Second,
		Sweep: engine.SweepReport{Due: 12, Reclaimed: 2, Redispatched: 1, Left: 3},
		Queues: &engine.QueueReadings{
			Stack: []engine.QueueDepth{{Queue: "P0", Visible: 5}, {Queue: "P1", InFlight: 3}, {Queue: "P2", Delayed: 1}, {Queue: "DLQ", Visible: 2}},
			Workers: []engine.QueueDepth{
				{Queue: "prod-w-8-tenant-a-gpu", Visible: 7, InFlight: 1},
				{Queue: "prod-w-p08-tenant-a-gpu", Visible: 1, Delayed: 4},
			},
			WorkerLanes: 60,
		},
	}
}

func requests() map[string]engine.RequestCounts {
	var jobs, get engine.RequestCounts
	jobs.Observe(201, 20*time.Millisecond)
	jobs.Observe(201, 3*time.Second)
	jobs.Observe(500, 40*time.Millisecond)
	get.Observe(404, time.Millisecond)
	return map[string]engine.RequestCounts{"POST /v1/jobs": jobs, "GET /v1/jobs/{id}": get, "GET /v1/health": {}}
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func TestOperatorExpositionIsValid(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 27, 10, 0, 0, 0, time.UTC)
	for name, m := range map[string]engine.OperatorMetrics{
		"read":               {Steps: counts(), Readings: readings(at), Requests: requests()},
		"before any sweep":   {Steps: counts()},
		"no queues read":     {Readings: &engine.Readings{At: at}},
		"no worker queues":   {Readings: &engine.Readings{At: at, Queues: &engine.QueueReadings{Stack: []engine.QueueDepth{{Queue: "P0"}}}}},
		"nothing at all yet": {},
	} {
		var buf bytes.Buffer
		require.NoError(t, prometheus.WriteOperator(&buf, m))
		problems, err := promlint.New(bytes.NewReader(buf.Bytes())).Lint()
		require.NoError(t, err, name)
		require.Empty(t, problems, "%s: promtool check metrics would complain:\n%s", name, buf.String())
		fams := parse(t, buf.String())
		for _, n := range []string{metrics.StepsByState, metrics.Retries, metrics.LeasesLive, metrics.TimersWaiting} {
			require.Contains(t, fams, n, name)
		}
	}
}

func TestOperatorFigures(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 27, 10, 0, 0, 0, time.UTC)
	c := counts()
	c.Gauge(domain.StepLeased, 1)
	c.Gauge(domain.StepRunning, 2)
	c.Gauge(domain.StepWaiting, 3)
	var buf bytes.Buffer
	require.NoError(t, prometheus.WriteOperator(&buf, engine.OperatorMetrics{Steps: c, Readings: readings(at), Requests: requests()}))
	fams := parse(t, buf.String())
	value := func(name string) float64 {
		t.Helper()
		require.Contains(t, fams, name)
		m := fams[name].GetMetric()[0]
		return m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}

	require.InDelta(t, 3, value(metrics.LeasesLive), 0, "LEASED and RUNNING, from the steps' counters")
	require.InDelta(t, 4, value(metrics.TimersWaiting), 0, "WAITING and RETRYING")
	require.InDelta(t, float64(at.Unix()), value(metrics.SweepTimestamp), 0)
	require.InDelta(t, 1.25, value(metrics.SweepDuration), 0)
	require.InDelta(t, 90, value(metrics.DueOldestAge), 0)
	for _, f := range metrics.SweepFigures(readings(at).Sweep) {
		require.InDelta(t, float64(f.Value), value(f.Name), 0, "every field of the report, zero or not")
	}
	require.InDelta(t, 12, value("sweep_due"), 0)
	require.InDelta(t, 60, value(metrics.WorkerQueueLanes), 0)
	require.InDelta(t, 2, value(metrics.WorkerQueueLanesRead), 0)

	queues := map[string]float64{}
	for _, m := range fams[metrics.QueueMessages].GetMetric() {
		l := labels(m)
		queues[l["queue"]+"/"+l["state"]] = m.GetGauge().GetValue()
	}
	require.Len(t, queues, 5*3, "P0, P1, P2, DLQ and the worker lanes summed; each state")
	require.InDelta(t, 5, queues["P0/visible"], 0)
	require.InDelta(t, 3, queues["P1/in_flight"], 0)
	require.InDelta(t, 1, queues["P2/delayed"], 0)
	require.InDelta(t, 2, queues["DLQ/visible"], 0)
	require.InDelta(t, 8, queues["workers/visible"], 0)
	require.InDelta(t, 4, queues["workers/delayed"], 0)
	lanes := map[string]float64{}
	for _, m := range fams[metrics.WorkerQueueMessages].GetMetric() {
		l := labels(m)
		lanes[l["queue"]+"/"+l["state"]] = m.GetGauge().GetValue()
	}
	require.InDelta(t, 7, lanes["prod-w-8-tenant-a-gpu/visible"], 0)
	require.InDelta(t, 4, lanes["prod-w-p08-tenant-a-gpu/delayed"], 0)

	reqs := map[string]float64{}
	for _, m := range fams[metrics.APIRequests].GetMetric() {
		l := labels(m)
		reqs[l["route"]+" "+l["code"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{"POST /v1/jobs 2xx": 2, "POST /v1/jobs 5xx": 1, "GET /v1/jobs/{id} 4xx": 1}, reqs,
		"each route and class that had a request; a route without any is left out")
	hist := map[string]*dto.Histogram{}
	for _, m := range fams[metrics.APIRequestDuration].GetMetric() {
		hist[labels(m)["route"]] = m.GetHistogram()
	}
	require.Len(t, hist, 2)
	jobs := hist["POST /v1/jobs"]
	require.EqualValues(t, 3, jobs.GetSampleCount())
	require.InDelta(t, 3.06, jobs.GetSampleSum(), 1e-9)
	for _, b := range jobs.GetBucket() {
		want := uint64(0)
		switch {
		case b.GetUpperBound() >= 5:
			want = 3
		case b.GetUpperBound() >= 0.05:
			want = 2
		case b.GetUpperBound() >= 0.025:
			want = 1
		}
		require.Equal(t, want, b.GetCumulativeCount(), "le=%v", b.GetUpperBound())
	}
}

// Every int field of the sweep's report is a metric, by its JSON name.
func TestSweepFiguresNameEveryField(t *testing.T) {
	t.Parallel()
	var rep engine.SweepReport
	v := reflect.ValueOf(&rep).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	figs := metrics.SweepFigures(rep)
	require.Len(t, figs, v.NumField())
	seen := map[string]bool{}
	for i, f := range figs {
		require.Equal(t, int64(i+1), f.Value, f.Name)
		require.Regexp(t, `^sweep_[a-z_]+$`, f.Name)
		require.False(t, seen[f.Name], f.Name)
		seen[f.Name] = true
	}
	require.Equal(t, "sweep_due", figs[0].Name)
}

func TestEMFOperatorRecords(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := metrics.NewEMF(&buf, "stepflow/test")
	at := time.Date(2026, 1, 27, 10, 0, 0, 123e6, time.UTC)
	m.Emit(t.Context(), engine.MetricsBatch{At: at, Readings: readings(at)})
	slow := &engine.RouteBatch{}
	for i := range 150 {
		slow.Observe(200, time.Duration(i)*time.Millisecond)
	}
	slow.Observe(503, time.Second)
	fast := &engine.RouteBatch{}
	fast.Observe(404, time.Millisecond)
	m.Emit(t.Context(), engine.MetricsBatch{At: at, Requests: map[string]*engine.RouteBatch{"GET /v1/jobs": slow, "$default": fast}})

	var sweep map[string]any
	queues := map[string]float64{}
	reqs := map[string]float64{}
	durations := map[string]int{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		r := checkEMF(t, sc.Bytes(), at)
		require.NotContains(t, r, "tenant")
		switch {
		case r[metrics.SweepDuration] != nil:
			require.Nil(t, sweep, "one sweep record")
			sweep = r
		case r[metrics.QueueMessages] != nil:
			queues[r["queue"].(string)+"/"+r["state"].(string)] = r[metrics.QueueMessages].(float64)
		case r[metrics.APIRequests] != nil:
			reqs[r["route"].(string)+" "+r["code"].(string)] = r[metrics.APIRequests].(float64)
		case r[metrics.APIRequestDuration] != nil:
			durations[r["route"].(string)] += len(r[metrics.APIRequestDuration].([]any))
		default:
			require.Failf(t, "unexpected record", "%s", sc.Bytes())
		}
	}
	require.NotNil(t, sweep)
	dims := sweep["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"]
	require.Equal(t, []any{[]any{}}, dims, "the sweep's figures have no dimension")
	require.InDelta(t, 1.25, sweep[metrics.SweepDuration], 0)
	require.InDelta(t, 4, sweep[metrics.LeasesLive], 0)
	require.InDelta(t, 2, sweep[metrics.TimersWaiting], 0)
	require.InDelta(t, 90, sweep[metrics.DueOldestAge], 0)
	require.InDelta(t, 12, sweep["sweep_due"], 0)
	require.InDelta(t, 2, sweep["sweep_reclaimed"], 0)
	require.NotContains(t, sweep, "sweep_quarantined", "a zero count is not written: no billed metric for it")
	require.InDelta(t, 60, sweep[metrics.WorkerQueueLanes], 0)

	require.Len(t, queues, 5*3)
	require.InDelta(t, 8, queues["workers/visible"], 0, "the lanes read, summed: no dimension value per worker queue")
	require.InDelta(t, 2, queues["DLQ/visible"], 0)
	require.Equal(t, map[string]float64{"GET /v1/jobs 2xx": 150, "GET /v1/jobs 5xx": 1, "$default 4xx": 1}, reqs)
	require.Equal(t, map[string]int{"GET /v1/jobs": 151, "$default": 1}, durations, "151 durations split over two records")
}
