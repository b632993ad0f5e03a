package bootstrap

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/metrics"
)

// written are the metrics the functions write under their namespace
// (shared/metrics): what the dashboard and the alarms may watch there.
func written() map[string]bool {
	out := map[string]bool{}
	for _, n := range []string{
		metrics.Transitions, metrics.Duration, metrics.Retries, metrics.StepsByState,
		metrics.QueueMessages, metrics.LeasesLive, metrics.TimersWaiting, metrics.DueOldestAge,
		metrics.SweepDuration, metrics.WorkerQueueLanes, metrics.WorkerQueueLanesRead,
		metrics.APIRequests, metrics.APIRequestDuration,
	} {
		out[n] = true
	}
	for _, f := range metrics.SweepFigures(engine.SweepReport{}) {
		out[f.Name] = true
	}
	return out
}

// dashboardMetrics answers the (namespace, metric name) pairs the
// dashboard's widgets graph, its shorthand ("." the entry above, "..."
// all of it before what follows) resolved, and those its SEARCH
// expressions look for.
func dashboardMetrics(t *testing.T, body string) [][2]string {
	t.Helper()
	// ${...} are Fn::Sub's; the JSON parses with a stand-in for each.
	body = regexp.MustCompile(`\$\{AWS::StackName\}`).ReplaceAllString(body, "STACK")
	body = regexp.MustCompile(`\$\{[^}]+\}`).ReplaceAllString(body, "X")
	var doc struct {
		Widgets []struct {
			Type       string `json:"type"`
			Properties struct {
				Metrics [][]any `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc), "DashboardBody is JSON")
	search := regexp.MustCompile(`\{\\?"?([^,"\\]+)\\?"?,[^}]*\} MetricName=\\?"([^"\\]+)`)
	var out [][2]string
	for _, w := range doc.Widgets {
		var prev []any
		for _, m := range w.Properties.Metrics {
			if e, ok := m[0].(map[string]any); ok {
				s := search.FindStringSubmatch(e["expression"].(string))
				require.NotNil(t, s, "a SEARCH of one metric: %v", e["expression"])
				out = append(out, [2]string{s[1], s[2]})
				continue
			}
			if _, ok := m[len(m)-1].(map[string]any); ok {
				m = m[:len(m)-1] // rendering options
			}
			if m[0] == "..." {
				m = append(append([]any{}, prev[:len(prev)-(len(m)-1)]...), m[1:]...)
			}
			for i := range m {
				if m[i] == "." {
					m[i] = prev[i]
				}
			}
			out = append(out, [2]string{m[0].(string), m[1].(string)})
			prev = m
		}
	}
	return out
}

// The dashboard and the alarms watch metrics the functions write, under
// the namespace they are given: a metric renamed in shared/metrics fails
// here, not as a blank graph or an alarm that never fires.
func TestTemplateDashboardAndAlarmsWatchWrittenMetrics(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	ns := envVars(tpl.globalFn)["STEPFLOW_METRICS_NAMESPACE"]
	require.Equal(t, map[string]any{"Fn::Sub": "stepflow/${AWS::StackName}"}, ns)
	ours := written()

	body := tpl.Resources["Dashboard"].Properties["DashboardBody"].(map[string]any)["Fn::Sub"].(string)
	graphed := dashboardMetrics(t, body)
	mine := 0
	for _, m := range graphed {
		switch m[0] {
		case "stepflow/STACK":
			require.True(t, ours[m[1]], "the dashboard graphs %s, which nothing writes", m[1])
			mine++
		case "AWS/SQS", "AWS/ApiGateway":
		default:
			require.Failf(t, "a namespace neither the functions' nor AWS's", "%v", m)
		}
	}
	require.Greater(t, mine, 10)
	require.Contains(t, graphed, [2]string{"stepflow/STACK", metrics.QueueMessages})
	require.Contains(t, graphed, [2]string{"stepflow/STACK", metrics.APIRequestDuration})
	require.Contains(t, graphed, [2]string{"AWS/SQS", "ApproximateAgeOfOldestMessage"}, "the age of the oldest message is SQS's own")

	stale := tpl.Resources["SweepStaleAlarm"].Properties
	require.Equal(t, ns, stale["Namespace"])
	require.Equal(t, metrics.SweepDuration, stale["MetricName"], "written every sweep, whatever it did")
	require.Equal(t, "SampleCount", stale["Statistic"])
	require.Equal(t, "breaching", stale["TreatMissingData"], "no record is what a stale sweep looks like")

	dlq := tpl.Resources["DeadLetterQueueAlarm"].Properties
	require.Equal(t, "AWS/SQS", dlq["Namespace"])
	require.Equal(t, "ApproximateNumberOfMessagesVisible", dlq["MetricName"])
	require.Equal(t, []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{"DeadLetterQueue", "QueueName"}}}}, dlq["Dimensions"])
	require.Equal(t, 0, dlq["Threshold"])
	require.Equal(t, "GreaterThanThreshold", dlq["ComparisonOperator"])

	api := tpl.Resources["ApiErrorRateAlarm"].Properties
	var watched []string
	for _, m := range api["Metrics"].([]any) {
		if st, ok := m.(map[string]any)["MetricStat"].(map[string]any); ok {
			metric := st["Metric"].(map[string]any)
			require.Equal(t, "AWS/ApiGateway", metric["Namespace"])
			require.Equal(t, []any{map[string]any{"Name": "ApiId", "Value": map[string]any{"Ref": "HttpApi"}}}, metric["Dimensions"])
			watched = append(watched, metric["MetricName"].(string))
		}
	}
	require.ElementsMatch(t, []string{"5xx", "Count"}, watched)
	require.Equal(t, map[string]any{"Ref": "ApiErrorRateAlarmPercent"}, api["Threshold"])
}

// The heartbeat may read the dead-letter queue's depth and nothing more
// of it; no other function may touch it (the CLI's dlq commands run as the
// operator).
func TestTemplateDeadLetterQueueIsReadOnlyToTheHeartbeat(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	dlq := map[string]any{"Fn::GetAtt": []any{"DeadLetterQueue", "Arn"}}
	for _, f := range tpl.Functions() {
		policies, _ := tpl.Resources[f.LogicalID].Properties["Policies"].([]any)
		var on [][]any
		for _, p := range policies {
			for _, st := range p.(map[string]any)["Statement"].([]any) {
				st, _ := st.(map[string]any)
				res, ok := st["Resource"].([]any)
				if !ok {
					res = []any{st["Resource"]}
				}
				for _, r := range res {
					if r, ok := r.(map[string]any); ok && jsonEqual(r, dlq) {
						on = append(on, st["Action"].([]any))
					}
				}
			}
		}
		if f.LogicalID == "HeartbeatFunction" {
			require.Equal(t, [][]any{{"sqs:GetQueueAttributes"}}, on)
		} else {
			require.Empty(t, on, f.LogicalID)
		}
	}
	require.Equal(t, map[string]any{"Ref": "DeadLetterQueue"}, envVars(tpl.globalFn)["STEPFLOW_DLQ_URL"])
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
