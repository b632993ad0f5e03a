package domain

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Action types are a registry: each is one value in one file
// (action_<type>.go) that says its name, who runs it, its parameters (the
// fields of its own struct) and how they are checked. Embedding that
// struct in ActionSpec registers it: its parameters then sit flat beside
// "type" in the action's JSON object, and the order of the embedded
// structs is the order of Actions(). docs/architecture.md#action-types says
// what else a new type may need (a built-in run that does I/O lives in
// shared/actions; api/openapi.yaml describes it, which a test checks).

// Executor says what runs the steps of an action type.
type Executor int

const (
	// ExecutorNone: nothing runs it; time, a signal or a person ends it.
	ExecutorNone Executor = iota
	// ExecutorBuiltIn: the execute function runs it (a PureAction's Run,
	// or shared/actions for one that does I/O).
	ExecutorBuiltIn
	// ExecutorWorker: an external worker claims it from its queue.
	ExecutorWorker
	// ExecutorEngine: the engine runs it itself when its step is leased
	// from the ready queue (a child job, which it makes and then waits on).
	ExecutorEngine
)

// ActionKind is one action type. Its value is the zero value of its
// parameters' struct, so it must not implement a JSON (un)marshaler: the
// method would be ActionSpec's too.
type ActionKind interface {
	// Name is the action's "type".
	Name() string
	Executor() Executor
	// Validate checks a's parameters (those of this type only: others are
	// refused before) and fills their defaults.
	Validate(a *ActionSpec, c ActionCheck) error
}

// ActionCheck is what an action's validation knows of its step.
type ActionCheck struct {
	Field    string // names the action: steps[0].action
	JobQueue string
}

// PureAction is a built-in action whose run needs nothing but its
// parameters and input, so the domain runs it.
type PureAction interface {
	Run(a ActionSpec, input json.RawMessage) (json.RawMessage, *Failure)
}

// waitingAction is an action type nothing runs (ExecutorNone): when its
// step is ready it starts waiting, and a deadline may end the wait.
type waitingAction interface {
	// start makes the ready step s wait, and answers its timer if any.
	start(j *Job, s *Step, now time.Time) ([]Dispatch, error)
	// timedOut is the failure message of a deadline that passed.
	timedOut(a ActionSpec) string
}

// SharedParams is an action type that also takes parameters of a struct
// ActionSpec embeds that is no action type (ActionDeadline), by JSON name.
type SharedParams interface {
	SharedParams() []string
}

// AttemptBounds is an executed action type whose attempts are bounded
// otherwise than the built-in ones: def is the step's timeout_seconds
// when it sets none (0: none), max its limit.
type AttemptBounds interface {
	AttemptTimeout() (def, max int)
}

// actionParam is one parameter of ActionSpec: its JSON name and where it
// sits in the struct.
type actionParam struct {
	name  string
	index []int
}

type actionRegistry struct {
	kinds  []ActionKind
	byName map[string]ActionKind
	// params are every type's parameters in ActionSpec's order, which is
	// the order they are refused in when they do not apply.
	params []actionParam
	takes  map[string]map[string]bool // type → the parameters it takes
}

var actionTypes = newActionRegistry()

func newActionRegistry() *actionRegistry {
	r := &actionRegistry{byName: map[string]ActionKind{}, takes: map[string]map[string]bool{}}
	kindType := reflect.TypeFor[ActionKind]()
	owner := map[string]string{}
	spec := reflect.TypeFor[ActionSpec]()
	for i := range spec.NumField() {
		f := spec.Field(i)
		if !f.Anonymous {
			continue
		}
		for _, p := range ownParams(f.Type) {
			if o, dup := owner[p.name]; dup {
				panic(fmt.Sprintf("domain: action parameter %q is both %s's and %s's", p.name, o, f.Type.Name()))
			}
			owner[p.name] = f.Type.Name()
			r.params = append(r.params, actionParam{name: p.name, index: append([]int{i}, p.index...)})
		}
		if !f.Type.Implements(kindType) {
			continue // parameters some types share (ActionDeadline)
		}
		k := reflect.Zero(f.Type).Interface().(ActionKind)
		if _, dup := r.byName[k.Name()]; dup {
			panic(fmt.Sprintf("domain: two action types are named %q", k.Name()))
		}
		r.kinds = append(r.kinds, k)
		r.byName[k.Name()] = k
		r.takes[k.Name()] = map[string]bool{}
		for _, p := range ActionParams(k) {
			r.takes[k.Name()][p] = true
		}
	}
	// A shared parameter may sit in a struct embedded after its type's.
	for name, ps := range r.takes {
		for p := range ps {
			if _, ok := owner[p]; !ok {
				panic(fmt.Sprintf("domain: action type %q takes %q, which no struct of ActionSpec holds", name, p))
			}
		}
	}
	return r
}

// ownParams are the JSON parameters of a struct ActionSpec embeds.
func ownParams(t reflect.Type) []actionParam {
	var out []actionParam
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, actionParam{name: name, index: []int{i}})
	}
	return out
}

// ActionParams names the parameters of action type k, beside "type": the
// fields of its own struct, then those it shares.
func ActionParams(k ActionKind) []string {
	var out []string
	for _, p := range ownParams(reflect.TypeOf(k)) {
		out = append(out, p.name)
	}
	if s, ok := k.(SharedParams); ok {
		out = append(out, s.SharedParams()...)
	}
	return out
}

// ActionKinds lists the action types, in the order of Actions().
func ActionKinds() []ActionKind { return append([]ActionKind(nil), actionTypes.kinds...) }

// LookupAction answers the action type named t.
func LookupAction(t string) (ActionKind, bool) {
	k, ok := actionTypes.byName[t]
	return k, ok
}

// Actions lists the known action types.
func Actions() []string {
	out := make([]string, len(actionTypes.kinds))
	for i, k := range actionTypes.kinds {
		out[i] = k.Name()
	}
	return out
}

// Executed reports whether an executor runs steps of action type t: the
// built-in one or a worker. Sleeps, waits and approval gates are decided
// by time, signals and people alone. A type no one knows counts as
// executed: validation refuses it, naming the types.
func Executed(t string) bool {
	k, ok := LookupAction(t)
	return !ok || k.Executor() != ExecutorNone
}

// checkApplies refuses the first parameter a sets that its type does not
// take (every one, for a type no one knows), in ActionSpec's order.
func (r *actionRegistry) checkApplies(a *ActionSpec, field string) error {
	v := reflect.ValueOf(a).Elem()
	takes := r.takes[a.Type]
	for _, p := range r.params {
		if !takes[p.name] && !v.FieldByIndex(p.index).IsZero() {
			return Invalid(field+"."+p.name, "does not apply to action type %q", a.Type)
		}
	}
	return nil
}

// unknownAction refuses an action type no one knows.
func unknownAction(field, t string) error {
	if t == "" {
		return Invalid(field+".type", "is required: one of %s", strings.Join(Actions(), ", "))
	}
	return Invalid(field+".type", "%q is not one of %s", t, strings.Join(Actions(), ", "))
}
