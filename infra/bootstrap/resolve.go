package bootstrap

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// resolver substitutes intrinsic functions the way CloudFormation does, for
// the resources Provision created.
type resolver struct {
	t         *Template
	stack     string
	region    string
	account   string
	partition string
	urlSuffix string

	tables map[string]*tableInfo // logical id -> created table
	queues map[string]*queueInfo // logical id -> created queue
}

type tableInfo struct{ name, arn, streamARN string }

type queueInfo struct{ name, url, arn string }

// notProvisionedError is wrapped when a reference targets a template resource
// that exists but has not been (or cannot be) provisioned locally.
type notProvisionedError struct{ id, typ string }

func (e *notProvisionedError) Error() string {
	if e.typ == typeTable || e.typ == typeQueue {
		return fmt.Sprintf("resource %s (%s) is not provisioned yet", e.id, e.typ)
	}
	return fmt.Sprintf("resource %s of type %s cannot be provisioned locally (only %s and %s)", e.id, e.typ, typeTable, typeQueue)
}

// resolve returns v with every intrinsic function replaced by its value.
func (r *resolver) resolve(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") {
					return r.intrinsic(k, arg)
				}
			}
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
	default:
		return v, nil
	}
}

// str resolves v and renders it as a string (as CloudFormation does for
// environment variables and queue attributes).
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
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("want a scalar, got %T", v)
}

func (r *resolver) intrinsic(fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Ref: want a name, got %T", arg)
		}
		return r.ref(name)
	case "Fn::GetAtt":
		id, attr, ok := getAtt(map[string]any{fn: arg})
		if !ok {
			return nil, fmt.Errorf("Fn::GetAtt: want [Resource, Attribute], got %v", arg)
		}
		return r.getAtt(id, attr)
	case "Fn::Sub":
		return r.sub(arg)
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("Fn::Join: want [delimiter, [values]]")
		}
		delim, ok := a[0].(string)
		if !ok {
			return nil, fmt.Errorf("Fn::Join: delimiter is not a string")
		}
		list, err := r.resolve(a[1])
		if err != nil {
			return nil, fmt.Errorf("Fn::Join: %w", err)
		}
		items, ok := list.([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Join: values are not a list")
		}
		parts := make([]string, len(items))
		for i, it := range items {
			s, err := scalarString(it)
			if err != nil {
				return nil, fmt.Errorf("Fn::Join: %w", err)
			}
			parts[i] = s
		}
		return strings.Join(parts, delim), nil
	case "Fn::Select":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("Fn::Select: want [index, [values]]")
		}
		idx, err := r.resolve(a[0])
		if err != nil {
			return nil, fmt.Errorf("Fn::Select: %w", err)
		}
		i, err := toInt(idx)
		if err != nil {
			return nil, fmt.Errorf("Fn::Select: index: %w", err)
		}
		list, err := r.resolve(a[1])
		if err != nil {
			return nil, fmt.Errorf("Fn::Select: %w", err)
		}
		items, ok := list.([]any)
		if !ok || i < 0 || i >= len(items) {
			return nil, fmt.Errorf("Fn::Select: index %d out of range", i)
		}
		return items[i], nil
	}
	return nil, fmt.Errorf("intrinsic function %s is not supported locally", fn)
}

func (r *resolver) ref(name string) (any, error) {
	switch name {
	case "AWS::StackName":
		return r.stack, nil
	case "AWS::Region":
		return r.region, nil
	case "AWS::AccountId":
		return r.account, nil
	case "AWS::Partition":
		return r.partition, nil
	case "AWS::URLSuffix":
		return r.urlSuffix, nil
	case "AWS::StackId":
		return fmt.Sprintf("arn:%s:cloudformation:%s:%s:stack/%s/local", r.partition, r.region, r.account, r.stack), nil
	}
	if def, ok := r.t.params[name]; ok {
		if def == nil {
			return nil, fmt.Errorf("Ref %s: parameter has no Default", name)
		}
		return def, nil
	}
	if t, ok := r.tables[name]; ok {
		return t.name, nil
	}
	if q, ok := r.queues[name]; ok {
		return q.url, nil
	}
	if res, ok := r.t.Resources[name]; ok {
		return nil, fmt.Errorf("Ref %s: %w", name, &notProvisionedError{name, res.Type})
	}
	return nil, fmt.Errorf("Ref %s: no such parameter or resource", name)
}

func (r *resolver) getAtt(id, attr string) (any, error) {
	if t, ok := r.tables[id]; ok {
		switch attr {
		case "Arn":
			return t.arn, nil
		case "StreamArn":
			if t.streamARN == "" {
				return nil, fmt.Errorf("GetAtt %s.StreamArn: table has no stream", id)
			}
			return t.streamARN, nil
		}
		return nil, fmt.Errorf("GetAtt %s.%s: unsupported attribute of a table", id, attr)
	}
	if q, ok := r.queues[id]; ok {
		switch attr {
		case "Arn":
			return q.arn, nil
		case "QueueName":
			return q.name, nil
		case "QueueUrl":
			return q.url, nil
		}
		return nil, fmt.Errorf("GetAtt %s.%s: unsupported attribute of a queue", id, attr)
	}
	if res, ok := r.t.Resources[id]; ok {
		return nil, fmt.Errorf("GetAtt %s.%s: %w", id, attr, &notProvisionedError{id, res.Type})
	}
	return nil, fmt.Errorf("GetAtt %s.%s: no such resource", id, attr)
}

// sub implements Fn::Sub: "${Name}", "${Resource.Attr}", "${!Literal}", with
// an optional variable map ([template, {Var: value}]).
func (r *resolver) sub(arg any) (any, error) {
	var tmpl string
	vars := map[string]any{}
	switch a := arg.(type) {
	case string:
		tmpl = a
	case []any:
		if len(a) != 2 {
			return nil, fmt.Errorf("Fn::Sub: want a string or [string, {vars}]")
		}
		s, ok := a[0].(string)
		m, ok2 := a[1].(map[string]any)
		if !ok || !ok2 {
			return nil, fmt.Errorf("Fn::Sub: want a string or [string, {vars}]")
		}
		tmpl, vars = s, m
	default:
		return nil, fmt.Errorf("Fn::Sub: want a string or [string, {vars}], got %T", arg)
	}
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		b.WriteString(tmpl[:i])
		rest := tmpl[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return nil, fmt.Errorf("Fn::Sub: unterminated ${ in %q", arg)
		}
		name := strings.TrimSpace(rest[:j])
		tmpl = rest[j+1:]
		if strings.HasPrefix(name, "!") { // ${!Literal} -> ${Literal}
			b.WriteString("${" + name[1:] + "}")
			continue
		}
		var val any
		var err error
		if v, ok := vars[name]; ok {
			val, err = r.resolve(v)
		} else if id, attr, found := strings.Cut(name, "."); found && !strings.HasPrefix(name, "AWS::") {
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

// refs lists the logical ids v refers to (Ref, Fn::GetAtt, ${...} in Fn::Sub),
// pseudo parameters and Fn::Sub variables excluded.
func refs(v any) []string {
	set := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 1 {
				if name, ok := x["Ref"].(string); ok {
					set[name] = true
					return
				}
				if id, _, ok := getAtt(x); ok {
					set[id] = true
					return
				}
				if arg, ok := x["Fn::Sub"]; ok {
					tmpl, _ := arg.(string)
					vars := map[string]any{}
					if a, ok := arg.([]any); ok && len(a) == 2 {
						tmpl, _ = a[0].(string)
						vars, _ = a[1].(map[string]any)
						walk(a[1])
					}
					for _, name := range subNames(tmpl) {
						if _, isVar := vars[name]; isVar {
							continue
						}
						id, _, _ := strings.Cut(name, ".")
						set[id] = true
					}
					return
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	out := make([]string, 0, len(set))
	for k := range set {
		if !strings.HasPrefix(k, "AWS::") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// subNames lists the ${...} names of an Fn::Sub template, literals excluded.
func subNames(tmpl string) []string {
	var names []string
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			return names
		}
		rest := tmpl[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return names
		}
		if name := strings.TrimSpace(rest[:j]); !strings.HasPrefix(name, "!") {
			names = append(names, name)
		}
		tmpl = rest[j+1:]
	}
}

// jsonAttr renders a policy-like property (RedrivePolicy, RedriveAllowPolicy)
// as the JSON string SQS expects; a string is passed through.
func (r *resolver) jsonAttr(v any) (string, error) {
	rv, err := r.resolve(v)
	if err != nil {
		return "", err
	}
	if s, ok := rv.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(rv)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
