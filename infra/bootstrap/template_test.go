package bootstrap

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const realTemplate = "../../template.yaml"

func TestParseRealTemplate(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)

	fns := tpl.Functions()
	ids := make([]string, len(fns))
	byID := map[string]Function{}
	for i, f := range fns {
		ids[i] = f.LogicalID
		byID[f.LogicalID] = f
	}
	require.Equal(t, []string{"ClaimFunction", "EnqueueFunction", "ExecuteFunction", "HeartbeatFunction"}, ids, "the examples only with DeployExamples=true")

	enq := byID["EnqueueFunction"]
	require.Equal(t, 30, enq.Timeout, "Globals timeout")
	require.Equal(t, []Route{
		{"ANY", "$default"},
		{"GET", "/ui"},
		{"GET", "/ui/{asset}"},
		{"GET", "/v1/budget"},
		{"GET", "/v1/health"},
		{"GET", "/v1/jobs"},
		{"POST", "/v1/jobs"},
		{"POST", "/v1/jobs/batch"},
		{"GET", "/v1/jobs/{id}"},
		{"POST", "/v1/jobs/{id}/budget"},
		{"POST", "/v1/jobs/{id}/cancel"},
		{"GET", "/v1/jobs/{id}/events"},
		{"POST", "/v1/jobs/{id}/redrive"},
		{"POST", "/v1/jobs/{id}/signal"},
		{"POST", "/v1/jobs/{id}/steps/{step}/approve"},
		{"GET", "/v1/jobs/{id}/steps/{step}/output"},
		{"POST", "/v1/jobs/{id}/steps/{step}/reject"},
		{"POST", "/v1/jobs/{id}/steps/{step}/resume"},
		{"GET", "/v1/metrics"},
		{"GET", "/v1/openapi.json"},
		{"GET", "/v1/queues"},
		{"GET", "/v1/resources"},
		{"DELETE", "/v1/resources/{id}"},
		{"GET", "/v1/resources/{id}"},
		{"PUT", "/v1/resources/{id}"},
		{"GET", "/v1/schedules"},
		{"POST", "/v1/schedules"},
		{"DELETE", "/v1/schedules/{id}"},
		{"GET", "/v1/schedules/{id}"},
		{"PUT", "/v1/schedules/{id}"},
		{"POST", "/v1/schedules/{id}/pause"},
		{"POST", "/v1/schedules/{id}/resume"},
	}, enq.Routes, "sorted by path, then method; which function serves which route is pinned in shared/httpapi")
	require.Empty(t, enq.SQS)
	require.Empty(t, enq.Schedules)

	claim := byID["ClaimFunction"]
	require.Equal(t, 30, claim.Timeout)
	require.Equal(t, []Route{
		{"POST", "/v1/claim"},
		{"POST", "/v1/leases/batch"},
		{"POST", "/v1/leases/{lease}/complete"},
		{"POST", "/v1/leases/{lease}/fail"},
		{"POST", "/v1/leases/{lease}/heartbeat"},
	}, claim.Routes)

	exec := byID["ExecuteFunction"]
	require.Equal(t, 300, exec.Timeout)
	require.Empty(t, exec.Routes)
	require.Equal(t, []SQSSource{
		{QueueLogicalID: "ReadyQueueP0", BatchSize: 10, ReportBatchItemFailures: true, MaximumConcurrency: 20},
		{QueueLogicalID: "ReadyQueueP1", BatchSize: 10, ReportBatchItemFailures: true, MaximumConcurrency: 10},
		{QueueLogicalID: "ReadyQueueP2", BatchSize: 10, ReportBatchItemFailures: true, MaximumConcurrency: 5},
	}, exec.SQS)

	hb := byID["HeartbeatFunction"]
	require.Equal(t, 60, hb.Timeout)
	require.Equal(t, []Schedule{{Expression: "rate(1 minute)", Every: time.Minute}}, hb.Schedules)

	examples, err := Parse(realTemplate)
	require.NoError(t, err)
	require.NoError(t, examples.SetParameter("DeployExamples", "true"))
	ids = nil
	for _, f := range examples.Functions() {
		ids = append(ids, f.LogicalID)
		byID[f.LogicalID] = f
	}
	require.Equal(t, []string{"ClaimFunction", "EchoFunction", "EnqueueFunction", "ExecuteFunction", "FlakyFunction", "HeartbeatFunction"}, ids)
	require.Equal(t, Function{LogicalID: "EchoFunction", Timeout: 30}, byID["EchoFunction"], "a lambda action's function: no event, only invoked")
	require.True(t, examples.included("EchoLogGroup") && !tpl.included("EchoLogGroup"), "its log group with it")
	require.Equal(t, map[string]any{"Fn::Sub": "${LambdaActionPrefix}${AWS::StackName}-echo"}, examples.Resources["EchoFunction"].Properties["FunctionName"],
		"named per stack, under the prefix the execute function's role and STEPFLOW_LAMBDA_ALLOW allow")
	require.Equal(t, map[string]any{"Fn::Sub": "${LambdaActionPrefix}${AWS::StackName}-flaky"}, examples.Resources["FlakyFunction"].Properties["FunctionName"])

	// Resource types and short tags survive parsing.
	require.Equal(t, "AWS::DynamoDB::Table", tpl.Resources["JobsTable"].Type)
	require.Equal(t, map[string]any{"Fn::GetAtt": []any{"DeadLetterQueue", "Arn"}},
		tpl.Resources["ReadyQueueP0"].Properties["RedrivePolicy"].(map[string]any)["deadLetterTargetArn"])
	env := envVars(tpl.globalFn)
	require.Equal(t, map[string]any{"Ref": "JobsTable"}, env["STEPFLOW_TABLE"])
	require.Equal(t, map[string]any{"Ref": "LambdaActionPrefix"}, env["STEPFLOW_LAMBDA_ALLOW"])
	require.Equal(t, map[string]any{"Fn::Sub": "${AWS::StackName}-w-"}, env["STEPFLOW_WORKER_QUEUE_PREFIX"])
	require.Equal(t, "1800", env["STEPFLOW_LEASE_SECONDS"])
}

// The lease is the ready queues' visibility timeout, which Lambda wants to be
// at least six times the executor's timeout.
func TestTemplateLeaseInvariants(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	lease, err := strconv.Atoi(envVars(tpl.globalFn)["STEPFLOW_LEASE_SECONDS"].(string))
	require.NoError(t, err)
	for _, f := range tpl.Functions() {
		for _, src := range f.SQS {
			vis, err := intValue(tpl.Resources[src.QueueLogicalID].Properties["VisibilityTimeout"])
			require.NoError(t, err)
			require.Equal(t, lease, vis, "%s VisibilityTimeout", src.QueueLogicalID)
			require.GreaterOrEqual(t, vis, 6*f.Timeout, "%s VisibilityTimeout vs %s Timeout", src.QueueLogicalID, f.LogicalID)
		}
	}
}

// The timer state machine exists only with LongTimers StepFunctions (by
// default the sweep sends long delays); it may send only to the stack's
// ready and worker queues; every function, since each dispatches, may
// start it, under the same condition, and no other.
func TestTemplateTimerPermissions(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	env := envVars(tpl.globalFn)
	timer := map[string]any{"Ref": "TimerStateMachine"}
	long := tpl.doc["Parameters"].(map[string]any)["LongTimers"].(map[string]any)
	require.Equal(t, "Sweep", long["Default"])
	require.Equal(t, []any{"Sweep", "StepFunctions"}, long["AllowedValues"])
	require.Equal(t, map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "LongTimers"}, "StepFunctions"}},
		tpl.doc["Conditions"].(map[string]any)["StepFunctionsTimers"])
	require.Equal(t, "StepFunctionsTimers", tpl.Resources["TimerStateMachine"].Condition)
	require.Equal(t, map[string]any{"Fn::If": []any{"StepFunctionsTimers", timer, ""}}, env["STEPFLOW_TIMER_STATE_MACHINE"])
	require.Equal(t, map[string]any{"Ref": "TimerThresholdSeconds"}, env["STEPFLOW_TIMER_THRESHOLD"])
	threshold := tpl.doc["Parameters"].(map[string]any)["TimerThresholdSeconds"].(map[string]any)
	require.Equal(t, map[string]any{"Type": "Number", "Default": 900, "MinValue": 1, "MaxValue": 900},
		map[string]any{"Type": threshold["Type"], "Default": threshold["Default"], "MinValue": threshold["MinValue"], "MaxValue": threshold["MaxValue"]},
		"SQS delays a message at most 900 s")

	// statements answers each Allow statement of a resource's Policies as
	// its actions and its resources; a statement under a condition is
	// answered only for that condition, which must hold none but it.
	statements := func(id, condition string) (out []struct{ actions, resources []any }) {
		for _, p := range tpl.Resources[id].Properties["Policies"].([]any) {
			for _, st := range p.(map[string]any)["Statement"].([]any) {
				st := st.(map[string]any)
				if c, ok := st["Fn::If"].([]any); ok {
					if c[0] != condition {
						continue // X-Ray's, with tracing on (TestTemplateTracing)
					}
					require.Equal(t, map[string]any{"Ref": "AWS::NoValue"}, c[2], id)
					st = c[1].(map[string]any)
				} else if condition != "" {
					continue
				}
				require.Equal(t, "Allow", st["Effect"], id)
				res, ok := st["Resource"].([]any)
				if !ok {
					res = []any{st["Resource"]}
				}
				out = append(out, struct{ actions, resources []any }{st["Action"].([]any), res})
			}
		}
		return out
	}

	var sends []any
	for _, st := range statements("TimerStateMachine", "") {
		require.Equal(t, []any{"sqs:SendMessage"}, st.actions)
		sends = append(sends, st.resources...)
	}
	prefix := env["STEPFLOW_WORKER_QUEUE_PREFIX"].(map[string]any)["Fn::Sub"].(string)
	require.ElementsMatch(t, []any{
		map[string]any{"Fn::GetAtt": []any{env["STEPFLOW_QUEUE_P0"].(map[string]any)["Ref"], "Arn"}},
		map[string]any{"Fn::GetAtt": []any{env["STEPFLOW_QUEUE_P1"].(map[string]any)["Ref"], "Arn"}},
		map[string]any{"Fn::GetAtt": []any{env["STEPFLOW_QUEUE_P2"].(map[string]any)["Ref"], "Arn"}},
		map[string]any{"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + prefix + "*"},
	}, sends)

	for _, f := range tpl.Functions() {
		if len(f.Routes)+len(f.SQS)+len(f.Schedules) == 0 {
			continue // a lambda action's function (EchoFunction) dispatches nothing
		}
		starts := func(condition string) []any {
			var out []any
			for _, st := range statements(f.LogicalID, condition) {
				if stateMachineAction(st.resources) {
					continue // the stepfunctions action's rights: TestTemplateStateMachineActionPermissions
				}
				for _, a := range st.actions {
					if strings.HasPrefix(a.(string), "states:") {
						require.Equal(t, []any{"states:StartExecution"}, st.actions, f.LogicalID)
						out = append(out, st.resources...)
					}
				}
			}
			return out
		}
		require.Equal(t, []any{timer}, starts("StepFunctionsTimers"), f.LogicalID)
		require.Empty(t, starts(""), "%s: no right to start a timer unless LongTimers is StepFunctions", f.LogicalID)
	}
}

// stateMachineAction reports whether resources are the stepfunctions
// action's: state machines and executions under StateMachineActionPrefix.
func stateMachineAction(resources []any) bool {
	for _, r := range resources {
		m, _ := r.(map[string]any)
		sub, _ := m["Fn::Sub"].(string)
		if !strings.Contains(sub, ":states:") || !strings.Contains(sub, "${StateMachineActionPrefix}*") {
			return false
		}
	}
	return len(resources) > 0
}

// The stepfunctions action's rights reach only the stack's state machines
// under StateMachineActionPrefix and their executions: the execute and
// heartbeat functions start, look at and stop them; the API's function
// only stops them (a cancel); no other function has any.
func TestTemplateStateMachineActionPermissions(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	want := map[string][]string{
		"ExecuteFunction":   {"states:DescribeExecution", "states:GetExecutionHistory", "states:StartExecution", "states:StopExecution"},
		"HeartbeatFunction": {"states:DescribeExecution", "states:GetExecutionHistory", "states:StartExecution", "states:StopExecution"},
		"EnqueueFunction":   {"states:DescribeExecution", "states:StopExecution"},
	}
	for _, f := range tpl.Functions() {
		var got []string
		policies, _ := tpl.Resources[f.LogicalID].Properties["Policies"].([]any)
		for _, p := range policies {
			for _, raw := range p.(map[string]any)["Statement"].([]any) {
				st, _ := raw.(map[string]any)
				res, ok := st["Resource"].([]any)
				if !ok {
					res = []any{st["Resource"]}
				}
				if !stateMachineAction(res) {
					continue
				}
				require.Equal(t, "Allow", st["Effect"])
				for _, a := range st["Action"].([]any) {
					got = append(got, a.(string))
				}
				for _, r := range res {
					sub := r.(map[string]any)["Fn::Sub"].(string)
					require.True(t, strings.HasPrefix(sub, "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:"), "%s: the stack's own account and region: %s", f.LogicalID, sub)
				}
			}
		}
		slices.Sort(got)
		require.Equal(t, want[f.LogicalID], got, f.LogicalID)
	}
}

// Every function changes jobs, so each may put stepflow's own events on
// the stack's bus, and on no other; nothing else may put events.
func TestTemplateEventBusPermissions(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"Ref": "StepflowBus"}, envVars(tpl.globalFn)["STEPFLOW_EVENT_BUS"])
	require.Equal(t, typeEventBus, tpl.Resources["StepflowBus"].Type)
	want := map[string]any{
		"Sid": "PublishJobStateChanges", "Effect": "Allow", "Action": []any{"events:PutEvents"},
		"Resource":  map[string]any{"Fn::GetAtt": []any{"StepflowBus", "Arn"}},
		"Condition": map[string]any{"StringEquals": map[string]any{"events:source": "stepflow", "events:detail-type": "Job State Change"}},
	}
	for _, id := range sortedKeys(tpl.Resources) {
		var puts []any
		policies, _ := tpl.Resources[id].Properties["Policies"].([]any)
		for _, p := range policies {
			for _, st := range p.(map[string]any)["Statement"].([]any) {
				if strings.Contains(fmt.Sprint(st), "events:") {
					puts = append(puts, st)
				}
			}
		}
		fn := slices.IndexFunc(tpl.Functions(), func(f Function) bool { return f.LogicalID == id })
		if fn >= 0 && len(tpl.Functions()[fn].Routes)+len(tpl.Functions()[fn].SQS)+len(tpl.Functions()[fn].Schedules) > 0 {
			require.Equal(t, []any{want}, puts, id)
		} else {
			require.Empty(t, puts, id)
		}
	}
}

// Job State Change events are off unless asked for, and a stack deployed
// with the old Enabled still updates: the parameter allows it (read as
// All by shared/config).
func TestTemplateJobStateEvents(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	param := tpl.doc["Parameters"].(map[string]any)["JobStateEvents"].(map[string]any)
	require.Equal(t, "Disabled", param["Default"])
	require.Equal(t, []any{"Disabled", "Terminal", "All", "Enabled"}, param["AllowedValues"])
	require.Equal(t, map[string]any{"Ref": "JobStateEvents"}, envVars(tpl.globalFn)["STEPFLOW_JOB_STATE_EVENTS"])
}

// X-Ray is one parameter: the functions' mode, and the timer state
// machine's tracing with the permission it needs, on when Active.
func TestTemplateTracing(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	param := tpl.doc["Parameters"].(map[string]any)["Tracing"].(map[string]any)
	require.Equal(t, "PassThrough", param["Default"])
	require.Equal(t, []any{"Active", "PassThrough"}, param["AllowedValues"])
	require.Equal(t, map[string]any{"Ref": "Tracing"}, tpl.globalFn["Tracing"])
	require.Equal(t, map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "Tracing"}, "Active"}},
		tpl.doc["Conditions"].(map[string]any)["TracingActive"])
	timer := tpl.Resources["TimerStateMachine"].Properties
	require.Equal(t, map[string]any{"Enabled": map[string]any{"Fn::If": []any{"TracingActive", true, false}}}, timer["Tracing"])
	var xray []any
	for _, p := range timer["Policies"].([]any) {
		for _, st := range p.(map[string]any)["Statement"].([]any) {
			if c, ok := st.(map[string]any)["Fn::If"].([]any); ok {
				require.Equal(t, "TracingActive", c[0])
				require.Equal(t, map[string]any{"Ref": "AWS::NoValue"}, c[2])
				xray = append(xray, c[1].(map[string]any)["Action"].([]any)...)
			}
		}
	}
	require.ElementsMatch(t, []any{"xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets"}, xray)
}

// Logs are priced (docs/costs.md#logs): every function writes JSON lines
// at the LogLevel parameter (INFO: no line per job transition), Lambda's
// own lines only from WARN, to a log group of its own that keeps them
// LogRetentionDays, not for ever. The state machines log nowhere.
func TestTemplateLogging(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	params := tpl.doc["Parameters"].(map[string]any)
	level := params["LogLevel"].(map[string]any)
	require.Equal(t, "INFO", level["Default"])
	require.Equal(t, []any{"DEBUG", "INFO", "WARN", "ERROR"}, level["AllowedValues"])
	retention := params["LogRetentionDays"].(map[string]any)
	require.Equal(t, "14", fmt.Sprint(retention["Default"]))
	var allowed []string
	for _, v := range retention["AllowedValues"].([]any) {
		allowed = append(allowed, fmt.Sprint(v))
	}
	// CloudWatch Logs' retentions, in days.
	require.Equal(t, strings.Fields("1 3 5 7 14 30 60 90 120 150 180 365 400 545 731 1096 1827 2192 2557 2922 3288 3653"), allowed)

	groups := map[string]string{} // log group id -> the function writing to it
	for _, id := range tpl.ids(typeFunction) {
		// SAM merges a function's LoggingConfig map into Globals'.
		cfg := map[string]any{}
		if g, ok := tpl.globalFn["LoggingConfig"].(map[string]any); ok {
			maps.Copy(cfg, g)
		}
		if f, ok := tpl.Resources[id].Properties["LoggingConfig"].(map[string]any); ok {
			maps.Copy(cfg, f)
		}
		require.Equal(t, "JSON", cfg["LogFormat"], id)
		require.Equal(t, map[string]any{"Ref": "LogLevel"}, cfg["ApplicationLogLevel"], id)
		require.Equal(t, "WARN", cfg["SystemLogLevel"], id)
		ref, ok := cfg["LogGroup"].(map[string]any)
		require.True(t, ok, "%s: LoggingConfig.LogGroup is not a Ref to its own log group: %v", id, cfg["LogGroup"])
		group, _ := ref["Ref"].(string)
		require.Equal(t, typeLogGroup, tpl.Resources[group].Type, "%s: LoggingConfig.LogGroup", id)
		require.NotContains(t, groups, group, "%s shares %s with %s", id, group, groups[group])
		groups[group] = id
	}
	names := map[string]bool{}
	for _, id := range tpl.ids(typeLogGroup) {
		require.Contains(t, groups, id, "log group %s: no function writes to it", id)
		props := tpl.Resources[id].Properties
		require.Equal(t, map[string]any{"Ref": "LogRetentionDays"}, props["RetentionInDays"], id)
		name := fmt.Sprint(props["LogGroupName"])
		require.False(t, names[name], "%s: name %s taken", id, name)
		names[name] = true
	}
	for _, id := range tpl.ids(typeStateMachine) {
		require.NotContains(t, tpl.Resources[id].Properties, "Logging", "%s logs: give it a log group with a retention, and test it here", id)
	}
}

func TestFunctionsReturnsCopies(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	fns := tpl.Functions()
	for i := range fns {
		for j := range fns[i].SQS {
			fns[i].SQS[j].QueueURL = "mutated"
		}
	}
	for _, f := range tpl.Functions() {
		for _, s := range f.SQS {
			require.Empty(t, s.QueueURL)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]time.Duration{
		"rate(1 minute)":    time.Minute,
		"rate(5 minutes)":   5 * time.Minute,
		"rate(1 hour)":      time.Hour,
		"rate(2 hours)":     2 * time.Hour,
		"rate(1 second)":    time.Second,
		"rate(30 seconds)":  30 * time.Second,
		"rate(1 day)":       24 * time.Hour,
		" rate( 3 minutes)": 3 * time.Minute,
	} {
		got, err := ParseRate(expr)
		require.NoError(t, err, expr)
		require.Equal(t, want, got, expr)
	}
	for _, bad := range []string{"", "rate(0 minutes)", "rate(1 week)", "rate(-1 minute)", "rate(1.5 minutes)", "cron(0 12 * * ? *)", "at(2030-01-01T00:00:00)"} {
		_, err := ParseRate(bad)
		require.Error(t, err, bad)
	}
}

func writeTemplate(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "template.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// An SQS event's batching window may be a parameter's Ref (the ready
// queues' ReadyBatchingWindowSeconds): the local stack runs its Default.
func TestBatchingWindowFromParameter(t *testing.T) {
	t.Parallel()
	p := writeTemplate(t, `
Parameters:
  Window: {Type: Number, Default: 7, MinValue: 0, MaxValue: 300}
Resources:
  Q:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn, MaximumBatchingWindowInSeconds: !Ref Window}}
`)
	tpl, err := Parse(p)
	require.NoError(t, err)
	fns := tpl.Functions()
	require.Len(t, fns, 1)
	require.Equal(t, []SQSSource{{QueueLogicalID: "Q", BatchSize: 10, BatchingWindow: 7 * time.Second}}, fns[0].SQS)

	// An override, as a deploy's (devstack's Parameters), reaches the mapping.
	require.NoError(t, tpl.SetParameter("Window", "1"))
	require.Equal(t, time.Second, tpl.Functions()[0].SQS[0].BatchingWindow)
	require.ErrorContains(t, tpl.SetParameter("Window", "soon"), `parameter Window: "soon" is not a Number`)
	require.Equal(t, time.Second, tpl.Functions()[0].SQS[0].BatchingWindow)
}

func TestParseEventsAndDefaults(t *testing.T) {
	t.Parallel()
	p := writeTemplate(t, `
Resources:
  Q:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 45
      Events:
        Any:
          Type: HttpApi
        Post:
          Type: HttpApi
          Properties: {Method: post, Path: /x}
        Queue:
          Type: SQS
          Properties:
            Queue:
              Fn::GetAtt: [Q, Arn]
            BatchSize: 4
            MaximumBatchingWindowInSeconds: 20
            ScalingConfig: {MaximumConcurrency: 2}
        Tick:
          Type: Schedule
          Properties: {Schedule: rate(10 seconds)}
  Bare:
    Type: AWS::Serverless::Function
`)
	tpl, err := Parse(p)
	require.NoError(t, err)
	fns := tpl.Functions()
	require.Len(t, fns, 2)
	require.Equal(t, Function{LogicalID: "Bare", Timeout: 3}, fns[0], "Lambda's default timeout")
	require.Equal(t, Function{
		LogicalID: "Fn",
		Timeout:   45,
		Routes:    []Route{{"ANY", "$default"}, {"POST", "/x"}},
		SQS:       []SQSSource{{QueueLogicalID: "Q", BatchSize: 4, BatchingWindow: 20 * time.Second, MaximumConcurrency: 2}},
		Schedules: []Schedule{{Expression: "rate(10 seconds)", Every: 10 * time.Second}},
	}, fns[1])
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	_, err := Parse(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)

	for name, body := range map[string]string{
		"no resources": "Description: nothing\n",
		"not yaml":     "Resources: [\n",
		"no type":      "Resources:\n  X:\n    Properties: {}\n",
		"cron": `
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Tick: {Type: Schedule, Properties: {Schedule: "cron(0 12 * * ? *)"}}
`,
		"sqs literal arn": `
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Q: {Type: SQS, Properties: {Queue: "arn:aws:sqs:us-east-1:123456789012:elsewhere"}}
`,
		"sqs batching window past Lambda's 300 s": `
Resources:
  Q:
    Type: AWS::SQS::Queue
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn, MaximumBatchingWindowInSeconds: 301}}
`,
		"sqs not a queue": `
Resources:
  T:
    Type: AWS::SNS::Topic
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Q: {Type: SQS, Properties: {Queue: !GetAtt T.Arn}}
`,
		"timeout not a literal": `
Parameters:
  Secs: {Type: Number, Default: 45}
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: !Ref Secs
`,
		"bad getatt": `
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment: {Variables: {X: !GetAtt NoDot}}
`,
	} {
		_, err := Parse(writeTemplate(t, body))
		require.Error(t, err, name)
	}
}

// Short tags become the long form; one bootstrap does not handle keeps its
// name, so that the support check can name it.
func TestShortTagsBecomeLongForm(t *testing.T) {
	t.Parallel()
	p := writeTemplate(t, `
Resources:
  R:
    Type: Custom::Thing
    Properties:
      A: !Ref X
      B: !GetAtt Y.Arn
      C: !Sub "${AWS::StackName}-x"
      D: [!Ref X]
      E: !Join [",", [a, !Ref X]]
      G: 7
      H: "7"
      I: true
`)
	tpl, err := Parse(p)
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"A": map[string]any{"Ref": "X"},
		"B": map[string]any{"Fn::GetAtt": []any{"Y", "Arn"}},
		"C": map[string]any{"Fn::Sub": "${AWS::StackName}-x"},
		"D": []any{map[string]any{"Ref": "X"}},
		"E": map[string]any{"Fn::Join": []any{",", []any{"a", map[string]any{"Ref": "X"}}}},
		"G": 7,
		"H": "7",
		"I": true,
	}, tpl.Resources["R"].Properties)
}

// Only the execute function may invoke the lambda action's functions, and
// only those named under LambdaActionPrefix, which every function reads as
// STEPFLOW_LAMBDA_ALLOW (the check at submit); the example functions the
// template deploys are named under it, from a directory of
// examples/functions.
func TestTemplateLambdaActionPermissions(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(realTemplate)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"Ref": "LambdaActionPrefix"}, envVars(tpl.globalFn)["STEPFLOW_LAMBDA_ALLOW"])
	const fn = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${LambdaActionPrefix}*"
	for _, f := range tpl.Functions() {
		props := tpl.Resources[f.LogicalID].Properties
		var invokes []any
		policies, _ := props["Policies"].([]any)
		for _, p := range policies {
			for _, st := range p.(map[string]any)["Statement"].([]any) {
				st := st.(map[string]any)
				if c, ok := st["Fn::If"].([]any); ok {
					st = c[1].(map[string]any) // a statement under a condition (StartTimers)
				}
				for _, a := range st["Action"].([]any) {
					if strings.HasPrefix(a.(string), "lambda:") {
						require.Equal(t, []any{"lambda:InvokeFunction"}, st["Action"], f.LogicalID)
						invokes = append(invokes, st["Resource"].([]any)...)
					}
				}
			}
		}
		if f.LogicalID == "ExecuteFunction" {
			require.Equal(t, []any{map[string]any{"Fn::Sub": fn}, map[string]any{"Fn::Sub": fn + ":*"}}, invokes)
		} else {
			require.Empty(t, invokes, f.LogicalID)
		}
		name, ok := props["FunctionName"]
		if len(f.Routes)+len(f.SQS)+len(f.Schedules) > 0 {
			require.False(t, ok, "%s: stepflow's own functions keep their generated names", f.LogicalID)
			continue
		}
		sub, _ := name.(map[string]any)["Fn::Sub"].(string)
		dir, ok := strings.CutPrefix(sub, "${LambdaActionPrefix}")
		require.True(t, ok, "%s: FunctionName %v is not under LambdaActionPrefix", f.LogicalID, name)
		require.Equal(t, strings.ToLower(strings.TrimSuffix(f.LogicalID, "Function")), dir, "the Makefile's build-%% finds the code by the logical id")
		_, err := os.Stat(filepath.Join("../../examples/functions", dir, "main.go"))
		require.NoError(t, err, f.LogicalID)
	}
}
