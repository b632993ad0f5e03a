package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// resolver replaces the intrinsic functions template.yaml uses (Ref,
// Fn::GetAtt, Fn::Sub, Fn::If) with their values on the local stack. Their
// targets are what it creates or knows: parameters with a value (their
// Default, or SetParameter's), AWS::StackName,
// AWS::AccountId and AWS::Partition (the emulator's), and the tables, queues, state machines, buckets and event buses
// Provision created so far.
type resolver struct {
	t     *Template
	stack string
	refs  map[string]string // logical id -> what Ref returns: a table's name, a queue's URL, a state machine's ARN, a bucket's or an event bus's name
	arns  map[string]string // logical id -> what Fn::GetAtt .Arn returns
	names map[string]string // logical id -> what Fn::GetAtt .Name returns (state machines)
}

func newResolver(t *Template, stack string) *resolver {
	return &resolver{t: t, stack: stack, refs: map[string]string{}, arns: map[string]string{}, names: map[string]string{}}
}

// resolve returns v with every intrinsic function replaced by its value.
func (r *resolver) resolve(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if fn, arg, ok := intrinsicCall(x); ok {
			return r.intrinsic(fn, arg)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			rv, err := r.resolve(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = rv
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			rv, err := r.resolve(e)
			if err != nil {
				return nil, err
			}
			out = append(out, rv)
		}
		return out, nil
	}
	return v, nil
}

// str resolves v to the string CloudFormation would pass on (an
// environment variable, a queue attribute).
func (r *resolver) str(v any) (string, error) {
	rv, err := r.resolve(v)
	if err != nil {
		return "", err
	}
	return scalarString(rv)
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int:
		return strconv.Itoa(x), nil
	}
	return "", fmt.Errorf("want a string or an integer, got %v (%T)", v, v)
}

// intrinsicCall recognises {"Ref": arg} and {"Fn::Name": arg}.
func intrinsicCall(m map[string]any) (fn string, arg any, ok bool) {
	if len(m) != 1 {
		return "", nil, false
	}
	for k, v := range m {
		if k == "Ref" || strings.HasPrefix(k, "Fn::") {
			return k, v, true
		}
	}
	return "", nil, false
}

func (r *resolver) intrinsic(fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Ref: want a name, got %v", arg)
		}
		return r.ref(name)
	case "Fn::GetAtt":
		a, _ := arg.([]any)
		if len(a) == 2 {
			id, ok1 := a[0].(string)
			attr, ok2 := a[1].(string)
			if ok1 && ok2 {
				return r.getAtt(id, attr)
			}
		}
		return nil, fmt.Errorf("Fn::GetAtt: want [Resource, Attribute], got %v", arg)
	case "Fn::If":
		return r.ifBranch(arg)
	case "Fn::Sub":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Fn::Sub: want a string (the [string, {vars}] form is not handled), got %v", arg)
		}
		return r.sub(s)
	}
	return nil, fmt.Errorf("%s is not handled", fn)
}

func (r *resolver) ref(name string) (any, error) {
	switch name {
	case "AWS::StackName":
		return r.stack, nil
	case "AWS::AccountId":
		return accountOf(r.arns), nil // the ARNs of what it created name the emulator's account
	case "AWS::Partition":
		return "aws", nil // the only one the emulators know
	}
	if strings.HasPrefix(name, "AWS::") {
		return nil, fmt.Errorf("Ref %s: the pseudo parameters handled are AWS::StackName, AWS::AccountId and AWS::Partition", name)
	}
	if def, ok := r.t.params[name]; ok {
		if def == nil {
			return nil, fmt.Errorf("Ref %s: parameter has no Default", name)
		}
		return def, nil
	}
	if v, ok := r.refs[name]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("Ref %s: %w", name, r.notCreated(name))
}

func (r *resolver) getAtt(id, attr string) (any, error) {
	var values map[string]string
	switch {
	case attr == "Arn":
		values = r.arns
	case attr == "Name" && r.t.Resources[id].Type == typeStateMachine:
		values = r.names
	default:
		return nil, fmt.Errorf("Fn::GetAtt %s.%s: the attributes handled are Arn, and a state machine's Name", id, attr)
	}
	if v, ok := values[id]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("Fn::GetAtt %s.%s: %w", id, attr, r.notCreated(id))
}

// notCreated explains why a reference to id has no value.
func (r *resolver) notCreated(id string) error {
	res, ok := r.t.Resources[id]
	switch {
	case !ok:
		return fmt.Errorf("no such parameter or resource")
	case !r.t.included(id):
		return fmt.Errorf("%s is not created: its condition %s does not hold", id, res.Condition)
	case res.Type == typeTable || res.Type == typeQueue || res.Type == typeStateMachine || res.Type == typeBucket || res.Type == typeEventBus:
		return fmt.Errorf("%s is not created yet", id) // a table referring to a queue: tables come first
	}
	return fmt.Errorf("%s is a %s, which is not created locally (only %s, %s, %s, %s and %s are)",
		id, res.Type, typeTable, typeQueue, typeStateMachine, typeBucket, typeEventBus)
}

// sub implements Fn::Sub's string form: "${Name}" is Ref Name,
// "${Resource.Attr}" is Fn::GetAtt.
func (r *resolver) sub(tmpl string) (any, error) {
	var b strings.Builder
	for rest := tmpl; ; {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return nil, fmt.Errorf("Fn::Sub: unterminated ${ in %q", tmpl)
		}
		name := rest[:j]
		rest = rest[j+1:]
		var val any
		var err error
		if id, attr, found := strings.Cut(name, "."); found {
			val, err = r.getAtt(id, attr)
		} else {
			val, err = r.ref(name)
		}
		if err != nil {
			return nil, fmt.Errorf("Fn::Sub: %w", err)
		}
		s, err := scalarString(val)
		if err != nil {
			return nil, fmt.Errorf("Fn::Sub ${%s}: %w", name, err)
		}
		b.WriteString(s)
	}
}
