package domain

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/stretchr/testify/require"
)

// Every registered action type is whole: named once, run by someone or
// waiting on its own, and validated (shared/actions checks that the
// built-in ones run; shared/httpapi that api/openapi.yaml describes each).
func TestEveryActionTypeIsRegisteredWhole(t *testing.T) {
	t.Parallel()
	// The order of ActionSpec's embedded types is the order error messages
	// list them in: a new type goes after these, so they keep theirs.
	today := []string{"pass", "sleep", "fail", "http", "worker", "approval", "wait", "lambda"}
	require.GreaterOrEqual(t, len(Actions()), len(today))
	require.Equal(t, today, Actions()[:len(today)])
	for _, k := range ActionKinds() {
		_, waits := k.(waitingAction)
		switch k.Executor() {
		case ExecutorNone:
			require.True(t, waits, "%s: nothing runs it, so it must start waiting on its own (waitingAction)", k.Name())
			require.False(t, Executed(k.Name()), k.Name())
		case ExecutorBuiltIn, ExecutorWorker, ExecutorEngine:
			require.False(t, waits, "%s is run, so it does not wait", k.Name())
			require.True(t, Executed(k.Name()), k.Name())
		default:
			t.Fatalf("%s: executor %d is none of the known", k.Name(), k.Executor())
		}
		if _, pure := k.(PureAction); pure {
			require.Equal(t, ExecutorBuiltIn, k.Executor(), "%s runs in the domain, so it is built in", k.Name())
		}
	}
	// A kind's methods must not become ActionSpec's: a (un)marshaler would
	// change the JSON of every action.
	for _, typ := range []reflect.Type{reflect.TypeFor[ActionSpec](), reflect.TypeFor[*ActionSpec]()} {
		for _, it := range []reflect.Type{
			reflect.TypeFor[json.Marshaler](), reflect.TypeFor[json.Unmarshaler](),
			reflect.TypeFor[jsonv2.MarshalerTo](), reflect.TypeFor[jsonv2.UnmarshalerFrom](),
			reflect.TypeFor[encoding.TextMarshaler](), reflect.TypeFor[encoding.TextUnmarshaler](),
		} {
			require.False(t, typ.Implements(it), "%s implements %s", typ, it)
		}
	}
}

// setParam gives the parameter at index of a a value that is not zero.
func setParam(a *ActionSpec, index []int) {
	v := reflect.ValueOf(a).Elem().FieldByIndex(index)
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int:
		v.SetInt(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	default:
		panic(fmt.Sprintf("a parameter of kind %s", v.Kind()))
	}
}

// Each type takes its own parameters and refuses every other, naming it;
// and its validation runs (a type left out of validation would be refused
// as unknown).
func TestEveryActionTypeTakesOnlyItsParameters(t *testing.T) {
	t.Parallel()
	for _, k := range ActionKinds() {
		takes := map[string]bool{}
		for _, p := range ActionParams(k) {
			takes[p] = true
		}
		for _, p := range actionTypes.params {
			st := StepSpec{ID: "s", Action: ActionSpec{Type: k.Name()}}
			setParam(&st.Action, p.index)
			err := st.validate("steps[0]", DefaultQueue)
			notApply := fmt.Sprintf("steps[0].action.%s: does not apply to action type %q", p.name, k.Name())
			if takes[p.name] {
				if err != nil {
					require.NotContains(t, err.Error(), notApply)
				}
				continue
			}
			require.EqualError(t, err, notApply)
		}
		st := StepSpec{ID: "s", Action: ActionSpec{Type: k.Name()}}
		if err := st.validate("steps[0]", DefaultQueue); err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "steps[0].action."), "%s: %v", k.Name(), err)
			require.NotContains(t, err.Error(), "is not one of")
		}
	}
	st := StepSpec{ID: "s", Action: ActionSpec{Type: "teleport"}}
	require.EqualError(t, st.validate("steps[0]", DefaultQueue),
		`steps[0].action.type: "teleport" is not one of `+strings.Join(Actions(), ", "))
}
