// Package bootstrap derives a local stack from template.yaml, the single
// source of truth for stepflow's resources: Parse reads the SAM template,
// Functions lists what a local runner must play (HTTP routes, SQS event source
// mappings, schedules), and Provision creates the template's DynamoDB table,
// SQS queues, Step Functions state machine, S3 bucket and EventBridge bus on
// an emulator (moto, LocalStack) and resolves the functions' environment as CloudFormation
// would.
//
// It handles what template.yaml uses and nothing more. Each part declares the
// keys it handles and those it knowingly ignores (tableKeys, queueKeys,
// functionKeys, ...); support.go checks a template against them, and
// Provision refuses a template that steps outside them.
package bootstrap

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Resource types this package knows about.
const (
	typeFunction     = "AWS::Serverless::Function"
	typeHttpApi      = "AWS::Serverless::HttpApi"
	typeTable        = "AWS::DynamoDB::Table"
	typeQueue        = "AWS::SQS::Queue"
	typeStateMachine = "AWS::Serverless::StateMachine"
	typeBucket       = "AWS::S3::Bucket"
	typeEventBus     = "AWS::Events::EventBus"
	typeLogGroup     = "AWS::Logs::LogGroup"
	typeDashboard    = "AWS::CloudWatch::Dashboard"
	typeAlarm        = "AWS::CloudWatch::Alarm"
)

// Template is a parsed SAM template. Intrinsic functions are kept in their
// long form whether the file used short tags or not: !Ref X is
// map{"Ref": "X"}, !GetAtt A.B is map{"Fn::GetAtt": ["A", "B"]}, !Sub s is
// map{"Fn::Sub": s}, and any other !Tag v is map{"Fn::Tag": v}, so that the
// support check can name it.
type Template struct {
	Path      string
	Resources map[string]Resource

	doc       map[string]any // the whole document, for the support check
	params    map[string]any // parameter logical id -> its value: its Default (nil when none), or SetParameter's
	globalFn  map[string]any // Globals.Function
	functions []Function     // sorted by logical id
}

// Resource is one entry of the template's Resources section.
type Resource struct {
	Type       string
	Properties map[string]any
	// Condition names the condition under which it exists ("" always).
	Condition string
}

// Parse reads a SAM template (YAML, with CloudFormation short tags) and its
// functions' events. Whether bootstrap handles everything the template uses
// is Provision's check, so that Parse can read any template to report on it.
func Parse(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("parse template %s: %w", path, err)
	}
	if len(node.Content) == 0 {
		return nil, fmt.Errorf("parse template %s: empty document", path)
	}
	v, err := convert(node.Content[0])
	if err != nil {
		return nil, fmt.Errorf("parse template %s: %w", path, err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("parse template %s: top level is not a mapping", path)
	}
	t := &Template{Path: path, Resources: map[string]Resource{}, doc: doc, params: map[string]any{}}

	resources, ok := doc["Resources"].(map[string]any)
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
		cond, _ := rm["Condition"].(string)
		t.Resources[id] = Resource{Type: typ, Properties: props, Condition: cond}
	}
	if params, ok := doc["Parameters"].(map[string]any); ok {
		for id, pv := range params {
			pm, _ := pv.(map[string]any)
			t.params[id] = pm["Default"]
		}
	}
	if globals, ok := doc["Globals"].(map[string]any); ok {
		t.globalFn, _ = globals["Function"].(map[string]any)
	}

	if err := t.parseFunctions(); err != nil {
		return nil, err
	}
	return t, nil
}

// parseFunctions reads the template's functions as its parameters stand
// (again after SetParameter: a mapping's batching window may name one).
func (t *Template) parseFunctions() error {
	t.functions = nil
	for _, id := range t.ids(typeFunction) {
		fn, err := t.parseFunction(id)
		if err != nil {
			return fmt.Errorf("parse template %s: function %s: %w", t.Path, id, err)
		}
		t.functions = append(t.functions, fn)
	}
	return nil
}

// ids lists the logical ids of the template's resources of one type that
// exist on this stack (included), sorted.
func (t *Template) ids(typ string) []string {
	var out []string
	for _, id := range t.allIDs(typ) {
		if t.included(id) {
			out = append(out, id)
		}
	}
	return out
}

// allIDs lists them whatever their Condition.
func (t *Template) allIDs(typ string) []string {
	var out []string
	for _, id := range sortedKeys(t.Resources) {
		if t.Resources[id].Type == typ {
			out = append(out, id)
		}
	}
	return out
}

// convert turns a yaml.v3 node into plain Go values, rewriting CloudFormation
// short tags into their long form.
func convert(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			cv, err := convert(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = cv
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
	default: // aliases: template.yaml has none
		return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
	}

	if !isShortTag(n.Tag) {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref":
		return map[string]any{"Ref": v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			id, attr, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q: want Resource.Attribute", n.Line, s)
			}
			return map[string]any{"Fn::GetAtt": []any{id, attr}}, nil
		}
	}
	return map[string]any{"Fn::" + name: v}, nil
}

// isShortTag reports a local tag such as !Ref (not a YAML core tag like !!str).
func isShortTag(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

// intValue reads an integer the template writes as a YAML number.
// paramDefault answers the Default of the parameter a {Ref: name} names,
// as a stack deployed without it would have; any other value as it is.
func (t *Template) paramDefault(v any) any {
	call, _ := v.(map[string]any)
	name, _ := call["Ref"].(string)
	if def, ok := t.params[name]; ok && len(call) == 1 && def != nil {
		return def
	}
	return v
}

func intValue(v any) (int, error) {
	n, ok := v.(int)
	if !ok {
		return 0, fmt.Errorf("want an integer, got %v (%T)", v, v)
	}
	return n, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
