// Package bootstrap derives a local stack from template.yaml, the single
// source of truth for stepflow's resources: Parse reads the SAM template,
// Functions lists what a local runner must play (HTTP routes, SQS event source
// mappings, schedules), and Provision creates the template's DynamoDB tables
// and SQS queues on an emulator (moto, LocalStack) and resolves the functions'
// environment exactly as CloudFormation would (Ref, Fn::GetAtt, Fn::Sub).
package bootstrap

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Resource types this package knows about.
const (
	typeFunction = "AWS::Serverless::Function"
	typeTable    = "AWS::DynamoDB::Table"
	typeQueue    = "AWS::SQS::Queue"
)

// Template is a parsed SAM template. Intrinsic functions are kept in their
// long JSON form whether the file used short tags or not: !Ref X is
// map{"Ref": "X"}, !GetAtt A.B is map{"Fn::GetAtt": ["A", "B"]}, !Sub s is
// map{"Fn::Sub": s}, any other !Tag v is map{"Fn::Tag": v}.
type Template struct {
	Path      string
	Resources map[string]Resource

	params    map[string]any // parameter logical id -> Default (nil when none)
	globalFn  map[string]any // Globals.Function
	functions []Function     // parsed and validated by Parse, sorted by logical id
}

// Resource is one entry of the template's Resources section.
type Resource struct {
	Type       string
	Properties map[string]any
}

// Function is an AWS::Serverless::Function as a local runner needs it.
type Function struct {
	LogicalID string      // "EnqueueFunction"
	Timeout   int         // seconds (function's own, else Globals, else Lambda's default 3)
	Routes    []Route     // from HttpApi (and Api) events, sorted by path then method
	SQS       []SQSSource // from SQS events, sorted by queue logical id
	Schedules []Schedule  // from Schedule / ScheduleV2 events, sorted by expression
}

// Route is one API Gateway route. Method is upper case ("ANY" when the event
// gives none); an HttpApi event without Path is the catch-all route "$default".
type Route struct{ Method, Path string }

// SQSSource is one SQS event source mapping.
type SQSSource struct {
	QueueLogicalID          string
	BatchSize               int // 10 when the template gives none (Lambda's default)
	ReportBatchItemFailures bool
	QueueURL                string // filled by Provision
}

// Schedule is one Schedule / ScheduleV2 event: Expression as written,
// Every its period. Only rate(...) expressions are accepted.
type Schedule struct {
	Expression string
	Every      time.Duration
}

// Parse reads a SAM template (YAML, with CloudFormation short tags) and
// validates its functions' events: an SQS event must name a queue of the
// template, a schedule must be a rate(...) expression.
func Parse(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse template %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("parse template %s: empty document", path)
	}
	v, err := convert(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("parse template %s: %w", path, err)
	}
	root, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("parse template %s: top level is not a mapping", path)
	}
	t := &Template{Path: path, Resources: map[string]Resource{}, params: map[string]any{}}

	resources, ok := root["Resources"].(map[string]any)
	if !ok || len(resources) == 0 {
		return nil, fmt.Errorf("parse template %s: no Resources", path)
	}
	for id, rv := range resources {
		rm, ok := rv.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("parse template %s: resource %s is not a mapping", path, id)
		}
		typ, _ := rm["Type"].(string)
		if typ == "" {
			return nil, fmt.Errorf("parse template %s: resource %s has no Type", path, id)
		}
		props, _ := rm["Properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		t.Resources[id] = Resource{Type: typ, Properties: props}
	}
	if params, ok := root["Parameters"].(map[string]any); ok {
		for id, pv := range params {
			pm, _ := pv.(map[string]any)
			t.params[id] = pm["Default"]
		}
	}
	if globals, ok := root["Globals"].(map[string]any); ok {
		t.globalFn, _ = globals["Function"].(map[string]any)
	}

	for _, id := range sortedKeys(t.Resources) {
		if t.Resources[id].Type != typeFunction {
			continue
		}
		fn, err := t.parseFunction(id)
		if err != nil {
			return nil, fmt.Errorf("parse template %s: function %s: %w", path, id, err)
		}
		t.functions = append(t.functions, fn)
	}
	return t, nil
}

// Functions lists the template's AWS::Serverless::Function resources, sorted
// by logical id. The slices are copies: callers may modify them.
func (t *Template) Functions() []Function {
	out := make([]Function, len(t.functions))
	for i, f := range t.functions {
		out[i] = f.clone()
	}
	return out
}

func (f Function) clone() Function {
	f.Routes = append([]Route(nil), f.Routes...)
	f.SQS = append([]SQSSource(nil), f.SQS...)
	f.Schedules = append([]Schedule(nil), f.Schedules...)
	return f
}

func (t *Template) parseFunction(id string) (Function, error) {
	props := t.Resources[id].Properties
	fn := Function{LogicalID: id, Timeout: 3}
	if v, ok := props["Timeout"]; ok {
		n, err := t.staticInt(v)
		if err != nil {
			return fn, fmt.Errorf("Timeout: %w", err)
		}
		fn.Timeout = n
	} else if v, ok := t.globalFn["Timeout"]; ok {
		n, err := t.staticInt(v)
		if err != nil {
			return fn, fmt.Errorf("Globals.Function.Timeout: %w", err)
		}
		fn.Timeout = n
	}

	events, _ := props["Events"].(map[string]any)
	for _, name := range sortedKeys(events) {
		ev, _ := events[name].(map[string]any)
		typ, _ := ev["Type"].(string)
		ep, _ := ev["Properties"].(map[string]any)
		if ep == nil {
			ep = map[string]any{}
		}
		if disabled(ep) {
			continue
		}
		switch typ {
		case "HttpApi", "Api":
			method, _ := ep["Method"].(string)
			path, _ := ep["Path"].(string)
			method = strings.ToUpper(method)
			if method == "" || method == "X-AMAZON-APIGATEWAY-ANY-METHOD" {
				method = "ANY"
			}
			if path == "" {
				if typ == "Api" {
					return fn, fmt.Errorf("event %s: Api event without Path", name)
				}
				path = "$default"
			}
			fn.Routes = append(fn.Routes, Route{Method: method, Path: path})
		case "SQS":
			q, err := t.queueOf(ep["Queue"])
			if err != nil {
				return fn, fmt.Errorf("event %s: %w", name, err)
			}
			src := SQSSource{QueueLogicalID: q, BatchSize: 10}
			if v, ok := ep["BatchSize"]; ok {
				n, err := t.staticInt(v)
				if err != nil {
					return fn, fmt.Errorf("event %s: BatchSize: %w", name, err)
				}
				src.BatchSize = n
			}
			types, _ := ep["FunctionResponseTypes"].([]any)
			for _, rt := range types {
				if rt == "ReportBatchItemFailures" {
					src.ReportBatchItemFailures = true
				}
			}
			fn.SQS = append(fn.SQS, src)
		case "Schedule", "ScheduleV2":
			key := "Schedule"
			if typ == "ScheduleV2" {
				key = "ScheduleExpression"
			}
			expr, _ := ep[key].(string)
			every, err := ParseRate(expr)
			if err != nil {
				return fn, fmt.Errorf("event %s: %w", name, err)
			}
			fn.Schedules = append(fn.Schedules, Schedule{Expression: expr, Every: every})
		default:
			// Other event types (S3, DynamoDB streams, ...) have no local player.
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

// disabled reports an event switched off with Enabled: false or State: DISABLED.
func disabled(ep map[string]any) bool {
	if b, ok := ep["Enabled"].(bool); ok && !b {
		return true
	}
	s, _ := ep["State"].(string)
	return strings.EqualFold(s, "DISABLED")
}

// queueOf returns the logical id of the template queue an SQS event's Queue
// property points at (!GetAtt Q.Arn).
func (t *Template) queueOf(v any) (string, error) {
	id, attr, ok := getAtt(v)
	if !ok || attr != "Arn" {
		return "", fmt.Errorf("Queue must be !GetAtt <queue>.Arn of a queue of this template, got %v", v)
	}
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("Queue refers to unknown resource %s", id)
	}
	if r.Type != typeQueue {
		return "", fmt.Errorf("Queue refers to %s of type %s, not %s", id, r.Type, typeQueue)
	}
	return id, nil
}

// staticInt reads an integer known before provisioning: a literal, a numeric
// string, or a Ref to a parameter with a numeric Default.
func (t *Template) staticInt(v any) (int, error) {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if name, ok := m["Ref"].(string); ok {
			def, found := t.params[name]
			if !found || def == nil {
				return 0, fmt.Errorf("Ref %s: not a parameter with a Default", name)
			}
			v = def
		}
	}
	return toInt(v)
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

// convert turns a yaml.v3 node into plain Go values, rewriting CloudFormation
// short tags into their long form.
func convert(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return convert(n.Alias)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return convert(n.Content[0])
	}

	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			cv, err := convert(val)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		v = m
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			cv, err := convert(c)
			if err != nil {
				return nil, err
			}
			s = append(s, cv)
		}
		v = s
	case yaml.ScalarNode:
		if isShortTag(n.Tag) {
			v = n.Value // a tagged scalar is the intrinsic's string argument
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
	}

	if !isShortTag(n.Tag) {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref", "Condition":
		return map[string]any{name: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			id, attr, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q: want Resource.Attribute", n.Line, s)
			}
			return map[string]any{"Fn::GetAtt": []any{id, attr}}, nil
		}
		return map[string]any{"Fn::GetAtt": v}, nil
	default:
		return map[string]any{"Fn::" + name: v}, nil
	}
}

// isShortTag reports a local tag such as !Ref (not a YAML core tag like !!str).
func isShortTag(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

// getAtt recognises {"Fn::GetAtt": [id, attr]} and {"Fn::GetAtt": "id.attr"}.
func getAtt(v any) (id, attr string, ok bool) {
	m, isMap := v.(map[string]any)
	if !isMap || len(m) != 1 {
		return "", "", false
	}
	switch a := m["Fn::GetAtt"].(type) {
	case []any:
		if len(a) != 2 {
			return "", "", false
		}
		id, ok1 := a[0].(string)
		attr, ok2 := a[1].(string)
		return id, attr, ok1 && ok2
	case string:
		id, attr, found := strings.Cut(a, ".")
		return id, attr, found
	}
	return "", "", false
}

func toInt(v any) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case uint64:
		return int(x), nil
	case float64:
		if x == float64(int(x)) {
			return int(x), nil
		}
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("want an integer, got %v (%T)", v, v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
