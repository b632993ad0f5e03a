package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	lru "github.com/hashicorp/golang-lru/v2"
)

// A step's condition (StepSpec.When) is a CEL expression
// (https://cel.dev) over what the step would run on, decided once, when its
// dependencies are done (at submit for a step with none): true runs it,
// false skips it (SKIPPED; what depends on it goes on), an error fails it
// without running. It reads
//
//   - payload: the job's payload;
//   - steps: the step's dependencies (the step before it, in a job of
//     steps in order) by id, each {"state": "SUCCEEDED" or "SKIPPED",
//     "output": its output, null if skipped}.
//
// JSON numbers are CEL doubles, compared across types with ints
// (payload.n > 3 holds for 4.0). CEL is side-effect free and
// terminating; a cost bound keeps a hostile expression from holding an
// executor (docs/model.md#conditions).

// MaxConditionBytes bounds a condition's text.
const MaxConditionBytes = 2048

// conditionCostLimit bounds one evaluation (CEL's cost units: about one
// per operation, a list's comprehension per element).
const conditionCostLimit = 100_000

var conditionEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("payload", cel.DynType),
		cel.Variable("steps", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxConditionBytes),
	)
})

// conditionPrograms keeps compiled conditions: a job's steps are decided
// in many invocations, and compiling costs far more than evaluating.
var conditionPrograms = func() *lru.Cache[string, cel.Program] {
	c, _ := lru.New[string, cel.Program](512)
	return c
}()

// compileCondition checks a condition and answers its program and the
// step ids it names with a constant (steps.x, steps["x"]).
func compileCondition(src string) (cel.Program, []string, error) {
	env, err := conditionEnv()
	if err != nil {
		return nil, nil, err
	}
	return compileIn(env, src, true)
}

// compileIn compiles src in env, bounded in cost, and answers the step ids
// it names; boolean: it must be true or false (a condition).
func compileIn(env *cel.Env, src string, boolean bool) (cel.Program, []string, error) {
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, nil, errors.New(strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if t := ast.OutputType(); boolean && !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, nil, fmt.Errorf("is of type %s; a condition must be true or false", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(conditionCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, nil, err
	}
	return prg, namedSteps(ast.NativeRep()), nil
}

// namedSteps answers the step ids a condition names with a constant.
func namedSteps(a *celast.AST) []string {
	seen := map[string]bool{}
	isSteps := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == "steps" }
	root := celast.NavigateAST(a)
	for _, e := range celast.MatchDescendants(root, celast.KindMatcher(celast.SelectKind)) {
		if sel := e.AsSelect(); isSteps(sel.Operand()) {
			seen[sel.FieldName()] = true
		}
	}
	for _, e := range celast.MatchDescendants(root, celast.FunctionMatcher(operators.Index)) {
		args := e.AsCall().Args()
		if len(args) == 2 && isSteps(args[0]) && args[1].Kind() == celast.LiteralKind {
			if s, ok := args[1].AsLiteral().Value().(string); ok {
				seen[s] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// checkCondition checks the condition of the step at field: it compiles,
// is true or false, and names only steps in deps (nil: any, for a
// replan's steps, whose dependencies are checked against the job later).
func checkCondition(field, src string, deps []string) error {
	if strings.TrimSpace(src) == "" {
		return Invalid(field, "is empty; leave it out to run the step always, or write a CEL expression such as payload.mode == \"full\"")
	}
	return checkExpression(field, src, deps, "a condition", "a condition", func(src string) ([]string, error) {
		_, named, err := compileCondition(src)
		return named, err
	})
}

// checkExpression checks an expression of a step at field: its size, that
// compile takes it (else it is not kind), and that it names only steps in
// deps (nil: any), as what.
func checkExpression(field, src string, deps []string, kind, what string, compile func(string) ([]string, error)) error {
	if len(src) > MaxConditionBytes {
		return Invalid(field, "is %d bytes; the limit is %d", len(src), MaxConditionBytes)
	}
	named, err := compile(src)
	if err != nil {
		return Invalid(field, "is not %s: %v", kind, err)
	}
	if deps == nil {
		return nil
	}
	for _, id := range named {
		if !slices.Contains(deps, id) {
			if len(deps) == 0 {
				return Invalid(field, "names steps.%s, but the step depends on no step: %s reads only payload and the steps it depends on", id, what)
			}
			return Invalid(field, "names steps.%s, which the step does not depend on (it depends on %s): %s reads only payload and the steps it depends on", id, strings.Join(deps, ", "), what)
		}
	}
	return nil
}

// NeedDataError is a decision that needs data the job keeps in the blob
// store (a condition reading a large output): the engine fetches it into
// Job.Fetched, outside the decision, and decides again on the job read
// again.
type NeedDataError struct{ Refs []DataRef }

func (e *NeedDataError) Error() string {
	return fmt.Sprintf("a condition needs %d stored values fetched first", len(e.Refs))
}

// storedValue answers d whole, taking what it references from the data
// the engine fetched for this decision; a *NeedDataError names what it
// has not fetched yet.
func (j *Job) storedValue(d Data) (json.RawMessage, error) {
	var need []DataRef
	for _, r := range d.Refs() {
		if why, bad := j.Unfetchable[r.Key]; bad {
			return nil, errors.New(why)
		}
		if _, ok := j.Fetched[r.Key]; !ok {
			need = append(need, r)
		}
	}
	if len(need) > 0 {
		return nil, &NeedDataError{Refs: need}
	}
	return d.Compose(j.Fetched)
}

// condition decides step i's condition on the job as it stands: whether
// the step runs. A step without one runs.
func (j *Job) condition(i int) (bool, error) {
	src := j.Steps[i].Spec.When
	if src == "" {
		return true, nil
	}
	prg, ok := conditionPrograms.Get(src)
	if !ok {
		var err error
		if prg, _, err = compileCondition(src); err != nil {
			return false, err
		}
		conditionPrograms.Add(src, prg)
	}
	vars, err := j.conditionVars(i)
	if err != nil {
		return false, err
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("answered %v (%s), not true or false", out.Value(), out.Type().TypeName())
	}
	return b, nil
}

// conditionVars answers what step i's condition reads. What it needs of
// the blob store is asked for at once (one *NeedDataError), so the change
// fetches it in one round.
func (j *Job) conditionVars(i int) (map[string]any, error) {
	var need NeedDataError
	value := func(d Data, what string) (any, error) {
		raw, err := j.storedValue(d)
		if more := (*NeedDataError)(nil); errors.As(err, &more) {
			need.Refs = append(need.Refs, more.Refs...)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		v, err := jsonValue(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return v, nil
	}
	payload, err := value(j.payloadData(), "payload")
	if err != nil {
		return nil, err
	}
	steps := map[string]any{}
	for _, k := range j.deps(i) {
		d := j.Steps[k]
		view := map[string]any{"state": string(d.State), "output": nil}
		if out, ok := j.OutputData(k); ok && d.State == StepSucceeded {
			if view["output"], err = value(out, "the output of step "+d.ID()); err != nil {
				return nil, err
			}
		}
		steps[d.ID()] = view
	}
	if len(need.Refs) > 0 {
		return nil, &need
	}
	return map[string]any{"payload": payload, "steps": steps}, nil
}

func jsonValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	return v, err
}
