package devstack_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// logBuffer collects what the stack's functions write, safe for the
// runner's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// scrape answers a tenant's GET /v1/metrics as Prometheus reads it, after
// checking it as `promtool check metrics` does.
func scrape(t *testing.T, h *stacktest.Harness, key string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := h.Raw(t, http.MethodGet, "/v1/metrics", nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "text/plain; version=0.0.4; charset=utf-8", resp.Header.Get("Content-Type"))
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "%s", body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "%s", body)
	return fams
}

// moves answers step_state_transitions_total as "FROM>TO": count.
func moves(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fams["step_state_transitions_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out[l["from_state"]+">"+l["to_state"]] = m.GetCounter().GetValue()
	}
	return out
}

// Failures past the thresholds turn the tenant's health degraded, then
// unhealthy, naming why; /v1/metrics counts exactly the moves and retries
// its jobs made; the functions' EMF records hold them, each record as the
// EMF specification has it; the other tenant sees none of it.
func TestHealthAndMetricsFollowTheWork(t *testing.T) {
	t.Parallel()
	emf := &logBuffer{}
	h := stacktest.New(t, func(o *devstack.Options) {
		o.MetricsOutput = emf
		// Graded from 5 finished jobs rather than 20, so that a few jobs show it.
		o.Parameters = map[string]string{"HealthSuccessRateMinJobs": "5"}
	})
	start := time.Now()
	health := func(key string) engine.Health {
		var out engine.Health
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/health", key, nil, &out)
		return out
	}
	b0 := health(stacktest.KeyB)
	run := func(spec string, want domain.JobState) {
		j := h.Submit(t, stacktest.KeyA, spec)
		h.AwaitState(t, stacktest.KeyA, j.ID, want)
	}
	const pass = `{"steps":[{"id":"p","action":{"type":"pass"}}]}`
	for range 4 {
		run(pass, domain.JobCompleted)
	}
	a := health(stacktest.KeyA)
	require.Equal(t, "ok", a.Status, "4 of 4 is not graded yet: %v", a.Reasons)
	require.Equal(t, []string{"too few finished jobs (4 of 5) to grade the success rate"}, a.Notes)
	run(`{"steps":[{"id":"f","action":{"type":"fail","class":"fatal","message":"boom"}}]}`, domain.JobFailed)
	a = health(stacktest.KeyA)
	require.Equal(t, "degraded", a.Status, "4 of 5: 80%% is degraded: %v", a.Reasons)
	require.Equal(t, []string{"success rate 80.0%"}, a.Reasons)

	// One retry, then the retries are spent: 4 of 6 is unhealthy.
	run(`{"steps":[{"id":"r","action":{"type":"fail","class":"retryable","message":"busy"},"retry":{"max_attempts":2,"initial_delay_ms":100}}]}`, domain.JobFailed)
	a = health(stacktest.KeyA)
	require.Equal(t, "unhealthy", a.Status, "%v", a.Reasons)
	require.Equal(t, []string{"success rate 66.7%"}, a.Reasons)
	require.EqualValues(t, 2, a.Failed)
	require.NotNil(t, a.AvgDuration, "six finished jobs, each with a run time")
	require.Equal(t, b0, health(stacktest.KeyB), "tenant b's health did not move")

	// Every move of a's six jobs, exactly: each step leased, running,
	// then succeeded (4), failed fatal (1) or failed retryable, retried,
	// running again and failed for good (1).
	fa := scrape(t, h, stacktest.KeyA)
	require.Equal(t, map[string]float64{
		"PENDING>LEASED":            6,
		"LEASED>RUNNING":            6,
		"RUNNING>SUCCEEDED":         4,
		"RUNNING>FAILED_FATAL":      2,
		"FAILED_FATAL>FAILED":       2,
		"RUNNING>FAILED_RETRYABLE":  1,
		"FAILED_RETRYABLE>RETRYING": 1,
		"RETRYING>RUNNING":          1,
	}, moves(fa))
	require.InDelta(t, 1, fa["step_retries_total"].GetMetric()[0].GetCounter().GetValue(), 0)
	byState := map[string]float64{}
	for _, m := range fa["steps_by_state"].GetMetric() {
		byState[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	require.InDelta(t, 4, byState["SUCCEEDED"], 0)
	require.InDelta(t, 2, byState["FAILED"], 0)
	require.InDelta(t, 0, byState["RUNNING"], 0)
	attempts := map[string]uint64{}
	for _, m := range fa["step_duration_seconds"].GetMetric() {
		attempts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
	}
	require.Equal(t, map[string]uint64{"succeeded": 4, "failed": 3}, attempts)

	// Tenant b made nothing: no move, no retry.
	fb := scrape(t, h, stacktest.KeyB)
	require.Empty(t, moves(fb))
	require.Zero(t, fb["step_retries_total"].GetMetric()[0].GetCounter().GetValue())

	// The heartbeat's sweep is named, and hands the sink steps by state.
	h.Sweep(t)
	a = health(stacktest.KeyA)
	require.NotNil(t, a.LastHeartbeat)

	// The functions' EMF records: each a JSON object on its own line, as
	// the specification has it; together they hold every move a made.
	emfMoves := map[string]float64{}
	var retries float64
	states := 0
	sc := bufio.NewScanner(bytes.NewReader(emf.Bytes()))
	lines := 0
	for sc.Scan() {
		lines++
		r := checkEMFRecord(t, sc.Bytes(), start, h.Clock.Now())
		switch {
		case r["step_state_transitions_total"] != nil:
			emfMoves[r["from_state"].(string)+">"+r["to_state"].(string)] += r["step_state_transitions_total"].(float64)
		case r["step_retries_total"] != nil:
			retries += r["step_retries_total"].(float64)
		case r["steps_by_state"] != nil:
			states++
		}
	}
	require.NoError(t, sc.Err())
	require.NotZero(t, lines)
	require.Equal(t, moves(fa), emfMoves, "b made none, so the stack's moves are a's")
	require.InDelta(t, 1, retries, 0)
	require.Equal(t, len(domain.AllStepStates()), states, "one steps_by_state record per state from the sweep")
}

// checkEMFRecord checks one line against the CloudWatch Embedded Metric
// Format specification: a JSON object whose _aws member holds Timestamp
// (milliseconds since the epoch) and CloudWatchMetrics directives; each
// directive's Namespace is set, each of its dimension keys is a string
// member of the root, and each metric it names is a root member holding a
// number or an array of at most 100 numbers.
func checkEMFRecord(t *testing.T, line []byte, from, to time.Time) map[string]any {
	t.Helper()
	var r map[string]any
	require.NoError(t, json.Unmarshal(line, &r), "not a JSON object: %s", line)
	meta, ok := r["_aws"].(map[string]any)
	require.True(t, ok, "no _aws: %s", line)
	ts, ok := meta["Timestamp"].(float64)
	require.True(t, ok, "Timestamp: %s", line)
	require.GreaterOrEqual(t, int64(ts), from.Add(-time.Minute).UnixMilli(), "Timestamp in ms: %s", line)
	require.LessOrEqual(t, int64(ts), to.Add(time.Minute).UnixMilli(), "Timestamp in ms: %s", line)
	dirs, ok := meta["CloudWatchMetrics"].([]any)
	require.True(t, ok, "CloudWatchMetrics: %s", line)
	require.NotEmpty(t, dirs)
	for _, d := range dirs {
		dir := d.(map[string]any)
		require.NotEmpty(t, dir["Namespace"], "%s", line)
		sets, ok := dir["Dimensions"].([]any)
		require.True(t, ok, "Dimensions: %s", line)
		for _, s := range sets {
			keys := s.([]any)
			require.LessOrEqual(t, len(keys), 30)
			for _, k := range keys {
				require.IsType(t, "", r[k.(string)], "dimension %v: %s", k, line)
			}
		}
		defs, ok := dir["Metrics"].([]any)
		require.True(t, ok, "Metrics: %s", line)
		require.NotEmpty(t, defs)
		for _, m := range defs {
			name, _ := m.(map[string]any)["Name"].(string)
			require.NotEmpty(t, name, "%s", line)
			switch v := r[name].(type) {
			case float64:
			case []any:
				require.NotEmpty(t, v)
				require.LessOrEqual(t, len(v), 100)
				for _, x := range v {
					require.IsType(t, float64(0), x, "%s", line)
				}
			default:
				require.Failf(t, "metric not at the root", "%s: %s", name, line)
			}
		}
	}
	return r
}

// The operator's view on the stack: the heartbeat's sweep reads the
// queues (the dead-letter queue, a worker queue nobody claims from) and
// keeps its readings; GET /v1/metrics answers them, what the sweep did and
// the requests per route to the operator key, and only to it; the
// functions' EMF records hold the same.
func TestOperatorMetricsOnTheStack(t *testing.T) {
	t.Parallel()
	const operatorKey = "op-key"
	emf := &logBuffer{}
	h := stacktest.New(t, func(o *devstack.Options) {
		o.MetricsOutput = emf
		o.OperatorKeys = []string{operatorKey}
	})
	start := time.Now()
	ctx := t.Context()
	h.Submit(t, stacktest.KeyA, `{"steps":[{"id":"w","action":{"type":"worker","queue":"gpu"}}]}`)
	_, err := h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.Resources.QueueURLs["DeadLetterQueue"]), MessageBody: aws.String("{}")})
	require.NoError(t, err)
	for _, id := range []string{"01KDVDNA00SAMP1E0J0B000001", "01KDVDNA00SAMP1E0J0B000002"} {
		status, body := h.Call(t, http.MethodGet, "/v1/jobs/"+id, stacktest.KeyB, nil)
		require.Equal(t, http.StatusNotFound, status, "%s", body)
	}
	rep := h.Sweep(t)

	op := scrape(t, h, operatorKey)
	gauge := func(name string, want map[string]string) float64 {
		t.Helper()
		require.Contains(t, op, name)
		for _, m := range op[name].GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && l[k] == v
			}
			if match {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
		require.Failf(t, "no such sample", "%s%v", name, want)
		return 0
	}
	require.InDelta(t, 1, gauge("queue_messages", map[string]string{"queue": "DLQ", "state": "visible"}), 0, "the sweep's reading of the DLQ")
	lane := h.Name + "-w-8-tenant-a-gpu"
	require.InDelta(t, 1, gauge("worker_queue_messages", map[string]string{"queue": lane, "state": "visible"}), 0, "the worker step nobody claimed")
	require.InDelta(t, 1, gauge("queue_messages", map[string]string{"queue": "workers", "state": "visible"}), 0)
	require.InDelta(t, 1, gauge("worker_queue_lanes", nil), 0)
	require.InDelta(t, float64(rep.Due), gauge("sweep_due", nil), 0)
	require.InDelta(t, float64(rep.Reclaimed), gauge("sweep_reclaimed", nil), 0)
	require.Positive(t, gauge("sweep_duration_seconds", nil))
	require.InDelta(t, float64(h.Clock.Now().Unix()), gauge("sweep_timestamp_seconds", nil), 60)
	require.InDelta(t, 2, gauge("api_requests_total", map[string]string{"route": "GET /v1/jobs/{id}", "code": "4xx"}), 0, "by route key, not by path")
	require.InDelta(t, 2, gauge("api_request_duration_seconds", map[string]string{"route": "GET /v1/jobs/{id}"}), 0)
	require.InDelta(t, 1, gauge("api_requests_total", map[string]string{"route": "POST /v1/jobs", "code": "2xx"}), 0)
	require.Contains(t, op, "steps_by_state", "the stack's step families too")

	// A tenant's key answers its own step metrics, as before, and nothing
	// of the stack's; a wrong key nothing; the operator key no other route.
	for _, key := range []string{stacktest.KeyA, stacktest.KeyB} {
		for name := range scrape(t, h, key) {
			require.Contains(t, []string{"step_state_transitions_total", "step_duration_seconds", "step_retries_total", "steps_by_state"}, name, "tenant key %s", key)
		}
	}
	status, _ := h.Call(t, http.MethodGet, "/v1/metrics", "op-key-wrong", nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = h.Call(t, http.MethodGet, "/v1/jobs", operatorKey, nil)
	require.Equal(t, http.StatusUnauthorized, status, "an operator key is no tenant's")

	// The EMF records hold the sweep's figures and the requests.
	var sweep map[string]any
	dlq := -1.0
	notFound := 0.0
	sc := bufio.NewScanner(bytes.NewReader(emf.Bytes()))
	for sc.Scan() {
		r := checkEMFRecord(t, sc.Bytes(), start, h.Clock.Now())
		switch {
		case r["sweep_duration_seconds"] != nil:
			sweep = r
		case r["queue_messages"] != nil && r["queue"] == "DLQ" && r["state"] == "visible":
			dlq = r["queue_messages"].(float64)
		case r["api_requests_total"] != nil && r["route"] == "GET /v1/jobs/{id}" && r["code"] == "4xx":
			notFound += r["api_requests_total"].(float64)
		}
	}
	require.NoError(t, sc.Err())
	require.NotNil(t, sweep, "the sweep's record")
	require.InDelta(t, float64(rep.Due), sweep["sweep_due"], 0)
	require.InDelta(t, 1, dlq, 0)
	require.InDelta(t, 2, notFound, 0)
}
