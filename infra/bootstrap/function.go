package bootstrap

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Function is an AWS::Serverless::Function as a local runner needs it.
type Function struct {
	LogicalID string      // "EnqueueFunction"
	Timeout   int         // seconds (function's own, else Globals, else Lambda's default 3)
	Routes    []Route     // from HttpApi events, sorted by path then method
	SQS       []SQSSource // from SQS events, sorted by queue logical id
	Schedules []Schedule  // from Schedule events, sorted by expression
}

// Route is one API Gateway route. Method is upper case ("ANY" when the event
// gives none); an HttpApi event without Path is the catch-all route "$default".
type Route struct{ Method, Path string }

// SQSSource is one SQS event source mapping.
type SQSSource struct {
	QueueLogicalID          string
	BatchSize               int // 10 when the template gives none (Lambda's default)
	ReportBatchItemFailures bool
	// MaximumConcurrency is ScalingConfig's cap on the mapping's concurrent
	// invocations (0: none given; the runner uses its default).
	MaximumConcurrency int
	// BatchingWindow is MaximumBatchingWindowInSeconds: how long a batch
	// short of BatchSize gathers before the function is invoked (0: at once).
	BatchingWindow time.Duration
	QueueURL       string // filled by Provision
}

// Schedule is one Schedule event: Expression as written, Every its period.
// Only rate(...) expressions are accepted.
type Schedule struct {
	Expression string
	Every      time.Duration
}

// Why function settings that matter to Lambda are ignored locally.
const inProcess = "the local runner calls the Go handlers in process, in no Lambda runtime"

// globalsFunctionKeys declares the Globals.Function settings bootstrap reads
// (Timeout, the environment) and those it knowingly ignores.
var globalsFunctionKeys = keySet{
	"Timeout":               handled,
	"Environment":           handled,
	"Environment.Variables": handled,
	"Runtime":               inProcess,
	"Architectures":         inProcess,
	"Handler":               inProcess,
	"MemorySize":            inProcess,
	"Tracing":               "X-Ray is AWS's: nothing is traced locally",
	"LoggingConfig":         cloudWatchLogs,
}

// functionKeys declares an AWS::Serverless::Function's properties.
var functionKeys = keySet{
	"Timeout":             handled,
	"Events":              handled,
	"Events.*":            handled,
	"Events.*.Type":       handled,
	"Events.*.Properties": handled, // checked against eventKeys of its Type
	"CodeUri":             inProcess,
	"Description":         "documentation",
	"Policies":            "IAM only matters on AWS: the emulator allows every call",
	"LoggingConfig":       cloudWatchLogs,
	"FunctionName":        "a lambda action's example function (DeployExamples), named per stack on AWS: the local Lambda service (localstack/lambdaemu) serves examples/functions/<name> as <name> and under STEPFLOW_LAMBDA_ALLOW's prefix",
}

// eventKeys declares, per event type, the event properties.
var eventKeys = map[string]keySet{
	"HttpApi": {
		"Method": handled,
		"Path":   handled,
		"ApiId":  "the template has one HTTP API, and the runner serves every route on one address",
	},
	"SQS": {
		"Queue":                            handled,
		"BatchSize":                        handled,
		"FunctionResponseTypes":            handled,
		"MaximumBatchingWindowInSeconds":   handled,
		"ScalingConfig":                    handled,
		"ScalingConfig.MaximumConcurrency": handled,
	},
	"Schedule": {
		"Schedule":    handled,
		"Description": "documentation",
	},
}

// httpAPIKeys declares an AWS::Serverless::HttpApi's properties: the runner
// plays the API from the functions' HttpApi events, so none matters locally.
var httpAPIKeys = keySet{
	"StageName":            "the runner serves every route at the root, as the $default stage does",
	"FailOnWarnings":       "a deploy-time check of the API definition",
	"DefaultRouteSettings": "throttling is API Gateway's; the runner does not throttle",
}

// Functions lists the template's AWS::Serverless::Function resources, sorted
// by logical id. The slices are copies: callers may modify them.
func (t *Template) Functions() []Function {
	out := make([]Function, len(t.functions))
	for i, f := range t.functions {
		f.Routes = append([]Route(nil), f.Routes...)
		f.SQS = append([]SQSSource(nil), f.SQS...)
		f.Schedules = append([]Schedule(nil), f.Schedules...)
		out[i] = f
	}
	return out
}

func (t *Template) parseFunction(id string) (Function, error) {
	props := t.Resources[id].Properties
	fn := Function{LogicalID: id, Timeout: 3}
	if v, ok := props["Timeout"]; ok {
		n, err := intValue(v)
		if err != nil {
			return fn, fmt.Errorf("Timeout: %w", err)
		}
		fn.Timeout = n
	} else if v, ok := t.globalFn["Timeout"]; ok {
		n, err := intValue(v)
		if err != nil {
			return fn, fmt.Errorf("Globals.Function.Timeout: %w", err)
		}
		fn.Timeout = n
	}

	events, _ := props["Events"].(map[string]any)
	for _, name := range sortedKeys(events) {
		ev, _ := events[name].(map[string]any)
		ep, _ := ev["Properties"].(map[string]any)
		switch ev["Type"] {
		case "HttpApi":
			method, _ := ep["Method"].(string)
			path, _ := ep["Path"].(string)
			if method == "" {
				method = "ANY"
			}
			if path == "" {
				path = "$default"
			}
			fn.Routes = append(fn.Routes, Route{Method: strings.ToUpper(method), Path: path})
		case "SQS":
			src, err := t.sqsSource(ep)
			if err != nil {
				return fn, fmt.Errorf("event %s: %w", name, err)
			}
			fn.SQS = append(fn.SQS, src)
		case "Schedule":
			expr, _ := ep["Schedule"].(string)
			every, err := ParseRate(expr)
			if err != nil {
				return fn, fmt.Errorf("event %s: %w", name, err)
			}
			fn.Schedules = append(fn.Schedules, Schedule{Expression: expr, Every: every})
		default:
			// Provision's support check refuses any other event type.
		}
	}
	sort.Slice(fn.Routes, func(i, j int) bool {
		a, b := fn.Routes[i], fn.Routes[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Method < b.Method
	})
	sort.SliceStable(fn.SQS, func(i, j int) bool { return fn.SQS[i].QueueLogicalID < fn.SQS[j].QueueLogicalID })
	sort.SliceStable(fn.Schedules, func(i, j int) bool { return fn.Schedules[i].Expression < fn.Schedules[j].Expression })
	return fn, nil
}

// sqsSource reads an SQS event, whose Queue must be !GetAtt <queue>.Arn of
// a queue of this template: the runner polls the queue Provision created.
func (t *Template) sqsSource(ep map[string]any) (SQSSource, error) {
	var src SQSSource
	call, _ := ep["Queue"].(map[string]any)
	att, _ := call["Fn::GetAtt"].([]any)
	if len(call) != 1 || len(att) != 2 || att[1] != "Arn" {
		return src, fmt.Errorf("Queue must be !GetAtt <queue>.Arn of a queue of this template, got %v", ep["Queue"])
	}
	id, _ := att[0].(string)
	r, ok := t.Resources[id]
	if !ok {
		return src, fmt.Errorf("Queue refers to unknown resource %s", id)
	}
	if r.Type != typeQueue {
		return src, fmt.Errorf("Queue refers to %s of type %s, not %s", id, r.Type, typeQueue)
	}
	src = SQSSource{QueueLogicalID: id, BatchSize: 10}
	if v, ok := ep["BatchSize"]; ok {
		n, err := intValue(v)
		if err != nil {
			return src, fmt.Errorf("BatchSize: %w", err)
		}
		src.BatchSize = n
	}
	if sc, ok := ep["ScalingConfig"].(map[string]any); ok {
		if v, ok := sc["MaximumConcurrency"]; ok {
			n, err := intValue(v)
			if err != nil {
				return src, fmt.Errorf("ScalingConfig.MaximumConcurrency: %w", err)
			}
			src.MaximumConcurrency = n
		}
	}
	if v, ok := ep["MaximumBatchingWindowInSeconds"]; ok {
		n, err := intValue(t.paramDefault(v))
		if err != nil || n < 0 || n > 300 {
			return src, fmt.Errorf("MaximumBatchingWindowInSeconds: %v is not 0-300 seconds", v)
		}
		src.BatchingWindow = time.Duration(n) * time.Second
	}
	types, _ := ep["FunctionResponseTypes"].([]any)
	for _, rt := range types {
		if rt == "ReportBatchItemFailures" {
			src.ReportBatchItemFailures = true
		}
	}
	return src, nil
}

var rateRE = regexp.MustCompile(`^rate\(\s*(\d+)\s+(second|seconds|minute|minutes|hour|hours|day|days)\s*\)$`)

// ParseRate turns an EventBridge rate expression into its period:
// "rate(1 minute)" is one minute. Units: second(s), minute(s), hour(s), day(s).
// cron(...) and at(...) expressions are refused: the local runner only ticks.
func ParseRate(expr string) (time.Duration, error) {
	m := rateRE.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return 0, fmt.Errorf("schedule %q: only rate(N second|minute|hour|day[s]) is supported", expr)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("schedule %q: rate must be a positive integer", expr)
	}
	unit := map[string]time.Duration{
		"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	}[strings.TrimSuffix(m[2], "s")]
	return time.Duration(n) * unit, nil
}

// envVars returns Environment.Variables of a function's settings.
func envVars(settings map[string]any) map[string]any {
	env, _ := settings["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	return vars
}

// env resolves environment variables to the strings Lambda would see.
func (r *resolver) env(vars map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(vars))
	for _, k := range sortedKeys(vars) {
		s, err := r.str(vars[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}
