package metrics_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
)

func counts() engine.StepCounts {
	var c engine.StepCounts
	c.Move(engine.StepMove{From: domain.StepPending, To: domain.StepRunning}, 3)
	c.Move(engine.StepMove{From: domain.StepRunning, To: domain.StepSucceeded}, 2)
	c.Move(engine.StepMove{From: domain.StepRunning, To: domain.StepFailedRetryable}, 1)
	c.Move(engine.StepMove{From: domain.StepFailedRetryable, To: domain.StepRetrying}, 1)
	c.Retries = 1
	c.Gauge(domain.StepSucceeded, 2)
	c.Gauge(domain.StepRetrying, 1)
	c.Gauge(domain.StepFailed, -1) // drift from a lost count shows as 0
	c.Observe(domain.AttemptSucceeded, 300*time.Millisecond)
	c.Observe(domain.AttemptSucceeded, 2*time.Hour)
	c.Observe(domain.AttemptFailed, 7*time.Second)
	return c
}

// parse reads an exposition as Prometheus does.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err, text)
	return fams
}

func TestPrometheusExpositionIsValid(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]engine.StepCounts{"counted": counts(), "nothing yet": {}} {
		var buf bytes.Buffer
		require.NoError(t, prometheus.WritePrometheus(&buf, c))
		problems, err := promlint.New(bytes.NewReader(buf.Bytes())).Lint()
		require.NoError(t, err, name)
		require.Empty(t, problems, "%s: promtool check metrics would complain:\n%s", name, buf.String())
		fams := parse(t, buf.String())
		for _, n := range []string{metrics.Retries, metrics.StepsByState} {
			require.Contains(t, fams, n, name)
		}
	}
}

func TestPrometheusFigures(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, prometheus.WritePrometheus(&buf, counts()))
	fams := parse(t, buf.String())

	moves := map[string]float64{}
	for _, m := range fams[metrics.Transitions].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		moves[l["from_state"]+">"+l["to_state"]] = m.GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{"PENDING>RUNNING": 3, "RUNNING>SUCCEEDED": 2, "RUNNING>FAILED_RETRYABLE": 1, "FAILED_RETRYABLE>RETRYING": 1}, moves)
	require.InDelta(t, 1, fams[metrics.Retries].GetMetric()[0].GetCounter().GetValue(), 0)

	byState := map[string]float64{}
	for _, m := range fams[metrics.StepsByState].GetMetric() {
		byState[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	require.Len(t, byState, len(domain.AllStepStates()), "every state, zero or not")
	require.InDelta(t, 2, byState["SUCCEEDED"], 0)
	require.InDelta(t, 0, byState["FAILED"], 0, "never below zero")

	hist := map[string]*dto.Histogram{}
	for _, m := range fams[metrics.Duration].GetMetric() {
		hist[m.GetLabel()[0].GetValue()] = m.GetHistogram()
	}
	ok := hist["succeeded"]
	require.EqualValues(t, 2, ok.GetSampleCount())
	require.InDelta(t, 7200.3, ok.GetSampleSum(), 1e-9)
	for _, b := range ok.GetBucket() {
		want := uint64(0)
		switch {
		case math.IsInf(b.GetUpperBound(), 1):
			want = 2
		case b.GetUpperBound() >= 0.5:
			want = 1 // 0.3 s falls in the 0.5 s bucket; 2 h only in +Inf
		}
		require.Equal(t, want, b.GetCumulativeCount(), "le=%v", b.GetUpperBound())
	}
	require.EqualValues(t, 1, hist["failed"].GetSampleCount())
}

// checkEMF checks a record against the EMF specification: _aws with a
// millisecond Timestamp and CloudWatchMetrics directives, each naming a
// namespace, dimension sets whose keys are root members holding strings,
// and metrics that are root members holding a number or at most 100.
func checkEMF(t *testing.T, line []byte, at time.Time) map[string]any {
	t.Helper()
	var r map[string]any
	require.NoError(t, json.Unmarshal(line, &r), "%s", line)
	aws, ok := r["_aws"].(map[string]any)
	require.True(t, ok, "%s", line)
	ts, ok := aws["Timestamp"].(float64)
	require.True(t, ok, "Timestamp is a number: %s", line)
	require.EqualValues(t, at.UnixMilli(), ts, "Timestamp in ms")
	dirs, ok := aws["CloudWatchMetrics"].([]any)
	require.True(t, ok, "%s", line)
	require.NotEmpty(t, dirs)
	for _, d := range dirs {
		dir := d.(map[string]any)
		require.NotEmpty(t, dir["Namespace"])
		sets := dir["Dimensions"].([]any)
		require.NotEmpty(t, sets)
		for _, s := range sets {
			require.LessOrEqual(t, len(s.([]any)), 30)
			for _, k := range s.([]any) {
				require.IsType(t, "", r[k.(string)], "dimension %v is a root string member: %s", k, line)
			}
		}
		defs := dir["Metrics"].([]any)
		require.NotEmpty(t, defs)
		for _, m := range defs {
			name := m.(map[string]any)["Name"].(string)
			switch v := r[name].(type) {
			case float64:
			case []any:
				require.NotEmpty(t, v)
				require.LessOrEqual(t, len(v), metrics.MaxValues)
				for _, x := range v {
					require.IsType(t, float64(0), x)
				}
			default:
				require.Failf(t, "metric is not a root number", "%s in %s", name, line)
			}
		}
	}
	return r
}

func TestEMFRecords(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := metrics.NewEMF(&buf, "stepflow/test")
	at := time.Date(2026, 1, 27, 10, 0, 0, 123e6, time.UTC)
	c := counts()
	many := make([]float64, 150)
	for i := range many {
		many[i] = float64(i) / 10
	}
	m.Emit(t.Context(), engine.MetricsBatch{At: at, Moves: c.Moves, Retries: c.Retries,
		Durations: map[domain.AttemptState][]float64{domain.AttemptSucceeded: many, domain.AttemptFailed: {7}}})
	m.Emit(t.Context(), engine.MetricsBatch{At: at, InState: engine.StepsByState(c)})

	moves := map[string]float64{}
	var retries float64
	durations := map[string]int{}
	states := 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		r := checkEMF(t, sc.Bytes(), at)
		switch {
		case r[metrics.Transitions] != nil:
			moves[r["from_state"].(string)+">"+r["to_state"].(string)] = r[metrics.Transitions].(float64)
		case r[metrics.Retries] != nil:
			retries = r[metrics.Retries].(float64)
			require.Equal(t, []any{[]any{}}, r["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"], "no dimension")
		case r[metrics.Duration] != nil:
			durations[r["status"].(string)] += len(r[metrics.Duration].([]any))
		case r[metrics.StepsByState] != nil:
			states++
		}
		require.NotContains(t, r, "tenant")
	}
	require.Equal(t, map[string]float64{"PENDING>RUNNING": 3, "RUNNING>SUCCEEDED": 2, "RUNNING>FAILED_RETRYABLE": 1, "FAILED_RETRYABLE>RETRYING": 1}, moves)
	require.InDelta(t, 1, retries, 0)
	require.Equal(t, map[string]int{"succeeded": 150, "failed": 1}, durations, "150 values split over two records")
	require.Equal(t, len(domain.AllStepStates()), states)
}
