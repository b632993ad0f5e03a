package bootstrap

import (
	"fmt"
	"strings"
)

// handled marks a declared key bootstrap acts on. Any other value in a
// keySet is the reason bootstrap knowingly ignores the key.
const handled = ""

// keySet declares the keys of one part of a template, as dotted paths from
// that part's root ("RedrivePolicy.maxReceiveCount"). A list's items share
// the list's path; "*" stands for any name. The check descends into a
// handled key's value only when the set declares keys beneath it: the keys
// of Environment.Variables or Events.*.Properties are names, or are checked
// against another set.
type keySet map[string]string

const stackLifecycle = "the CloudFormation stack's lifecycle: the local stack reuses resources by name"

// templateKeys declares the template's top level and resource entries.
var templateKeys = keySet{
	"AWSTemplateFormatVersion":        "a format marker",
	"Transform":                       "bootstrap reads the SAM resource types itself",
	"Description":                     "documentation",
	"Parameters":                      handled,
	"Parameters.*":                    handled,
	"Parameters.*.Default":            handled,
	"Parameters.*.Type":               "bootstrap uses a parameter's Default as written",
	"Parameters.*.MinValue":           "CloudFormation checks values passed on deploy; locally the Default is used",
	"Parameters.*.MaxValue":           "CloudFormation checks values passed on deploy; locally the Default is used",
	"Parameters.*.AllowedValues":      "CloudFormation checks values passed on deploy; locally the Default is used",
	"Conditions":                      handled,
	"Conditions.*":                    handled, // evaluated by conditions.go: Fn::Equals of parameters' values
	"Parameters.*.Description":        "documentation",
	"Globals":                         handled,
	"Globals.Function":                handled, // checked against globalsFunctionKeys
	"Resources":                       handled,
	"Resources.*":                     handled,
	"Resources.*.Type":                handled, // one of resourceKeys
	"Resources.*.Properties":          handled, // checked against resourceKeys of its Type
	"Resources.*.Condition":           handled, // a resource whose condition is false is not created
	"Resources.*.Metadata":            "sam build settings",
	"Resources.*.DeletionPolicy":      stackLifecycle,
	"Resources.*.UpdateReplacePolicy": stackLifecycle,
	"Outputs":                         "the local stack reports its own URL and resources",

	"Parameters.*.AllowedPattern":        "CloudFormation checks values passed on deploy; locally the Default is used",
	"Parameters.*.ConstraintDescription": "what CloudFormation says of a value its AllowedPattern refuses",
}

// resourceKeys declares, per resource type bootstrap knows, its properties.
var resourceKeys = map[string]keySet{
	typeTable:        tableKeys,
	typeQueue:        queueKeys,
	typeStateMachine: stateMachineKeys,
	typeBucket:       bucketKeys,
	typeEventBus:     eventBusKeys,
	typeFunction:     functionKeys,
	typeHttpApi:      httpAPIKeys,
	typeLogGroup:     logGroupKeys,
	typeDashboard:    dashboardKeys,
	typeAlarm:        alarmKeys,
}

// intrinsics declares the intrinsic functions resolver implements. Any other
// is refused wherever it appears, even under an ignored key.
var intrinsics = keySet{
	"Ref":        handled,
	"Fn::GetAtt": handled,
	"Fn::Sub":    handled,
	"Fn::If":     handled,
	"Fn::Equals": "evaluated in Conditions only; anywhere else the dry run refuses it",
}

// keySets names every declaration, as the check's problems and records do.
func keySets() map[string]keySet {
	sets := map[string]keySet{"template": templateKeys, "Globals.Function": globalsFunctionKeys, "intrinsics": intrinsics}
	for typ, keys := range resourceKeys {
		sets[typ] = keys
	}
	for typ, keys := range eventKeys {
		sets[typ+" event"] = keys
	}
	return sets
}

// checkSupport returns an error naming everything the template uses that
// bootstrap neither handles nor declares ignored.
func (t *Template) checkSupport() error {
	s := t.survey()
	if len(s.problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s uses what infra/bootstrap does not handle (handle it there, or declare it ignored with the reason):\n\t%s",
		t.Path, strings.Join(s.problems, "\n\t"))
}

// survey is one walk of a template against the declarations.
type survey struct {
	t        *Template
	problems []string        // "<where in the template>: <what>"
	used     map[string]bool // "<set>" and "<set>: <key>" of each declaration met
}

func (t *Template) survey() *survey {
	s := &survey{t: t, used: map[string]bool{}}
	s.keys("template", templateKeys, "", t.doc)
	if globals, ok := t.doc["Globals"].(map[string]any); ok {
		s.keys("Globals.Function", globalsFunctionKeys, "Globals.Function", globals["Function"])
	}
	for _, id := range sortedKeys(t.Resources) {
		res, path := t.Resources[id], "Resources."+id
		keys, ok := resourceKeys[res.Type]
		if !ok {
			s.problem(path+".Type", "resource type "+res.Type)
			continue
		}
		s.keys(res.Type, keys, path+".Properties", res.Properties)
		events, _ := res.Properties["Events"].(map[string]any)
		for _, name := range sortedKeys(events) {
			ev, _ := events[name].(map[string]any)
			typ, _ := ev["Type"].(string)
			path := path + ".Properties.Events." + name
			if keys, ok := eventKeys[typ]; ok {
				s.keys(typ+" event", keys, path+".Properties", ev["Properties"])
			} else {
				s.problem(path+".Type", "event type "+typ)
			}
		}
	}
	s.used["intrinsics"] = true
	s.calls("", t.doc)
	if len(s.problems) == 0 {
		s.dryRun()
	}
	return s
}

func (s *survey) problem(where, what string) {
	s.problems = append(s.problems, where+": "+what)
}

// keys checks v, found at path, against one declared set.
func (s *survey) keys(set string, keys keySet, path string, v any) {
	s.used[set] = true
	s.walk(set, keys, path, "", v)
}

// walk checks the keys of v; decl is v's declared path within the set.
func (s *survey) walk(set string, keys keySet, path, decl string, v any) {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			s.walk(set, keys, fmt.Sprintf("%s[%d]", path, i), decl, e)
		}
	case map[string]any:
		if _, _, ok := intrinsicCall(x); ok {
			return // a value, not keys: resolved (or refused) by the dry run
		}
		for _, k := range sortedKeys(x) {
			at, d := join(path, k), join(decl, k)
			reason, ok := keys[d]
			if !ok {
				d = join(decl, "*")
				reason, ok = keys[d]
			}
			if !ok {
				s.problem(at, fmt.Sprintf("%s key %s", set, join(decl, k)))
				continue
			}
			s.used[set+": "+d] = true
			if reason == handled && keys.declaresUnder(d) {
				s.walk(set, keys, at, d, x[k])
			}
		}
	}
}

func (keys keySet) declaresUnder(path string) bool {
	for k := range keys {
		if strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// calls checks every intrinsic function call anywhere in v.
func (s *survey) calls(path string, v any) {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			s.calls(fmt.Sprintf("%s[%d]", path, i), e)
		}
	case map[string]any:
		if fn, _, ok := intrinsicCall(x); ok {
			if _, known := intrinsics[fn]; known {
				s.used["intrinsics: "+fn] = true
			} else {
				s.problem(path, "intrinsic function "+fn)
			}
		}
		for _, k := range sortedKeys(x) {
			s.calls(join(path, k), x[k])
		}
	}
}

// dryRun reads what Provision reads, with stand-ins for the ARNs and URLs
// of resources not created yet, so that a reference bootstrap cannot resolve
// (a pseudo parameter other than AWS::StackName, AWS::AccountId and
// AWS::Partition, a resource it does not create) or a value it does not
// take is refused before anything is created.
func (s *survey) dryRun() {
	t := s.t
	for _, id := range sortedKeys(t.Resources) {
		if c := t.Resources[id].Condition; c != "" {
			if _, err := t.condition(c); err != nil {
				s.problem("Resources."+id+".Condition", err.Error())
			}
		}
	}
	r := newResolver(t, "check")
	for _, typ := range []string{typeTable, typeQueue, typeStateMachine, typeBucket, typeEventBus} {
		for _, id := range t.ids(typ) {
			r.refs[id], r.arns[id] = "<"+id+">", "<"+id+".Arn>"
		}
	}
	for _, id := range t.ids(typeStateMachine) {
		r.names[id] = "<" + id + ".Name>"
	}
	for _, id := range t.ids(typeTable) {
		if _, err := readTable(r, t.Resources[id].Properties); err != nil {
			s.problem("Resources."+id+".Properties", err.Error())
		}
	}
	for _, id := range t.ids(typeQueue) {
		if _, err := queueAttributes(r, t.Resources[id].Properties); err != nil {
			s.problem("Resources."+id+".Properties", err.Error())
		}
	}
	for _, id := range t.allIDs(typeStateMachine) { // its definition, whether it is created or not
		if _, err := readStateMachine(t, t.Resources[id].Properties); err != nil {
			s.problem("Resources."+id+".Properties", err.Error())
		}
	}
	for _, id := range t.ids(typeEventBus) {
		if _, err := eventBusName(r, "check", id, t.Resources[id].Properties); err != nil {
			s.problem("Resources."+id+".Properties", err.Error())
		}
	}
	if _, err := r.env(envVars(t.globalFn)); err != nil {
		s.problem("Globals.Function.Environment.Variables", err.Error())
	}
}
