package bootstrap

import (
	"fmt"
	"slices"
	"strconv"
)

// Conditions, as CloudFormation evaluates them from the parameters' values
// (their Default, or what SetParameter gave): a resource whose Condition is
// false is not created, and Fn::If takes the branch its condition names.
// Only what template.yaml uses is handled: a condition is Fn::Equals of
// two values, each a literal or a Ref to a parameter.

// SetParameter gives a parameter a value other than its Default, as a
// deploy's parameter override does: a template's choice (LongTimers) that
// decides which resources exist. The value must be one of the
// parameter's AllowedValues, when it declares them.
func (t *Template) SetParameter(name, value string) error {
	params, _ := t.doc["Parameters"].(map[string]any)
	p, ok := params[name].(map[string]any)
	if !ok {
		return fmt.Errorf("parameter %s: the template declares no such parameter", name)
	}
	if allowed, ok := p["AllowedValues"].([]any); ok && !slices.Contains(allowed, any(value)) {
		return fmt.Errorf("parameter %s: %q is not one of its AllowedValues %v", name, value, allowed)
	}
	if p["Type"] == "Number" {
		// As the template's own Default of a Number parameter reads.
		n, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("parameter %s: %q is not a Number", name, value)
		}
		t.params[name] = n
	} else {
		t.params[name] = value
	}
	return t.parseFunctions()
}

// condition evaluates the template's condition name.
func (t *Template) condition(name string) (bool, error) {
	conds, _ := t.doc["Conditions"].(map[string]any)
	expr, ok := conds[name].(map[string]any)
	if !ok {
		return false, fmt.Errorf("condition %s is not declared in Conditions", name)
	}
	fn, arg, ok := intrinsicCall(expr)
	args, _ := arg.([]any)
	if !ok || fn != "Fn::Equals" || len(args) != 2 {
		return false, fmt.Errorf("condition %s: only Fn::Equals of two values is handled, got %v", name, expr)
	}
	r := newResolver(t, "condition") // a parameter's value needs no resource
	var vals [2]string
	for i, a := range args {
		v, err := r.str(a)
		if err != nil {
			return false, fmt.Errorf("condition %s: %w", name, err)
		}
		vals[i] = v
	}
	return vals[0] == vals[1], nil
}

// included reports whether resource id exists on this stack: it names no
// Condition, or one that holds. A condition that cannot be evaluated
// leaves the resource out (the support check names it).
func (t *Template) included(id string) bool {
	c := t.Resources[id].Condition
	if c == "" {
		return true
	}
	ok, err := t.condition(c)
	return err == nil && ok
}

// ifBranch resolves Fn::If [condition, then, else]: the branch the
// condition chooses, and only that one, as CloudFormation does.
func (r *resolver) ifBranch(arg any) (any, error) {
	a, _ := arg.([]any)
	var name string
	if len(a) == 3 {
		name, _ = a[0].(string)
	}
	if name == "" {
		return nil, fmt.Errorf("Fn::If: want [Condition, then, else], got %v", arg)
	}
	holds, err := r.t.condition(name)
	if err != nil {
		return nil, fmt.Errorf("Fn::If: %w", err)
	}
	if holds {
		return r.resolve(a[1])
	}
	return r.resolve(a[2])
}
