package domain

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Shaped inputs and outputs, as Step Functions' Parameters and
// ResultSelector shape a state's: a step's `input` is a CEL expression
// over payload and the steps it depends on (steps.<id>.output, .state, as
// a condition reads them) whose value is what the step runs on; its
// `output` is one over output, the attempt's result, whose value is what
// the step keeps as its output. Each is checked at submit; one that
// cannot be evaluated when it is used fails the attempt as fatal, saying
// why (docs/model.md#shaped-inputs-and-outputs).

// ShapeError is a shaping expression that could not be evaluated: the
// attempt fails as fatal with it, whatever runs the step.
type ShapeError struct {
	Field string // "input" or "output"
	Err   error
}

func (e *ShapeError) Error() string { return e.Field + ": " + e.Err.Error() }

var outputEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("output", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxConditionBytes),
	)
})

// checkShape checks a shaping expression at field; deps, for an input,
// are the steps it may name (nil: any, a replan's steps).
func checkShape(field, src string, deps []string, output bool) error {
	what := "an input"
	if output {
		what = "an output"
	}
	return checkExpression(field, src, deps, "an expression", what, func(src string) ([]string, error) {
		env, err := shapeEnv(output)
		if err != nil {
			return nil, err
		}
		_, named, err := compileIn(env, src, false)
		return named, err
	})
}

// shapeEnv answers the environment an input (payload, steps) or an
// output (output) expression is compiled in.
func shapeEnv(output bool) (*cel.Env, error) {
	if output {
		return outputEnv()
	}
	return conditionEnv()
}

// shapeProgram answers the compiled expression src, kept once compiled.
func shapeProgram(src string, output bool) (cel.Program, error) {
	key := "i:" + src
	if output {
		key = "o:" + src
	}
	if prg, ok := conditionPrograms.Get(key); ok {
		return prg, nil
	}
	env, err := shapeEnv(output)
	if err != nil {
		return nil, err
	}
	prg, _, err := compileIn(env, src, false)
	if err != nil {
		return nil, err
	}
	conditionPrograms.Add(key, prg)
	return prg, nil
}

// evalJSON evaluates prg on vars and answers its value as JSON.
func evalJSON(prg cel.Program, vars map[string]any) (json.RawMessage, error) {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return nil, err
	}
	v, err := out.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, fmt.Errorf("its value (%s) is not JSON: %w", out.Type().TypeName(), err)
	}
	return protojson.Marshal(v.(*structpb.Value))
}

// ShapeOutput answers what step s keeps of an attempt's output: the
// output itself, or its `output` expression's value on it.
func ShapeOutput(s *Step, output json.RawMessage) (json.RawMessage, error) {
	src := s.Spec.Output
	if src == "" {
		return output, nil
	}
	prg, err := shapeProgram(src, true)
	if err != nil {
		return nil, &ShapeError{"output", err}
	}
	v, err := jsonValue(output)
	if err != nil {
		return nil, &ShapeError{"output", err}
	}
	shaped, err := evalJSON(prg, map[string]any{"output": v})
	if err != nil {
		return nil, &ShapeError{"output", err}
	}
	return shaped, nil
}

// shapedData is a step's input made by its `input` expression from its
// payload and dependencies once they are composed.
type shapedData struct {
	src     string
	payload Data
	deps    map[string]Data
	states  map[string]StepState
}

func (d *shapedData) compose(fetched map[string][]byte) (json.RawMessage, error) {
	prg, err := shapeProgram(d.src, false)
	if err != nil {
		return nil, &ShapeError{"input", err}
	}
	p, err := d.payload.Compose(fetched)
	if err != nil {
		return nil, err
	}
	payload, err := jsonValue(p)
	if err != nil {
		return nil, &ShapeError{"input", err}
	}
	steps := make(map[string]any, len(d.states))
	for id, st := range d.states {
		view := map[string]any{"state": string(st), "output": nil}
		if out, ok := d.deps[id]; ok {
			raw, err := out.Compose(fetched)
			if err != nil {
				return nil, err
			}
			if view["output"], err = jsonValue(raw); err != nil {
				return nil, &ShapeError{"input", err}
			}
		}
		steps[id] = view
	}
	shaped, err := evalJSON(prg, map[string]any{"payload": payload, "steps": steps})
	if err != nil {
		return nil, &ShapeError{"input", err}
	}
	return shaped, nil
}
