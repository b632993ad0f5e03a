package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// Limits of a job submission.
const (
	// MaxBodyBytes bounds a request body (a schedule, a signal, a
	// decision ...): a larger one answers 413.
	MaxBodyBytes = 256 * 1024
	// MaxJobSpecBytes bounds a job's spec (POST /v1/jobs, and a batch
	// of them): a larger one answers 413. It is larger than MaxBodyBytes
	// so a job of MaxSteps steps fits (10,000 plain steps are about
	// 600 KB); 4 MB stays within API Gateway's 10 MB and, base64-encoded
	// as a binary body is passed on (5.3 MB), within Lambda's 6 MB
	// request payload.
	MaxJobSpecBytes    = 4 << 20
	MaxSteps           = 10000
	MaxBuiltinSeconds  = 270 // built-in actions run inside the 300 s execute function
	MaxLeaseSeconds    = 12 * 3600
	DefaultLeaseSecs   = 60
	DefaultTimeoutSecs = 60
	MaxPriority        = 2
	DefaultPriority    = 1
	DefaultQueue       = "default"
	// MaxWaitSeconds bounds a durable sleep, a job's run_at, and the
	// deadline of an approval gate or a wait: a year.
	MaxWaitSeconds = 365 * 24 * 3600
)

// FailureClass is how an attempt failed; it picks the next step state.
type FailureClass string

const (
	ClassRetryable FailureClass = "retryable"
	// ClassNetwork: the callee could not be reached (connection refused,
	// DNS, reset); retried on its own, slower schedule.
	ClassNetwork FailureClass = "network"
	ClassTimeout FailureClass = "timeout"
	// ClassBlocked: something outside the job is not ready yet (the quality
	// platform's blocked task); retried every few minutes until it clears.
	ClassBlocked   FailureClass = "blocked"
	ClassResource  FailureClass = "resource"
	ClassFatal     FailureClass = "fatal"
	ClassNeedsUser FailureClass = "needs_user"
	// ClassReplan ends the step and puts the steps its outcome carries in
	// its place (the agent platform's critic decision replan).
	ClassReplan FailureClass = "replan"
)

// FailureClasses lists every class.
func FailureClasses() []FailureClass {
	return []FailureClass{ClassRetryable, ClassNetwork, ClassTimeout, ClassBlocked, ClassResource, ClassFatal, ClassNeedsUser, ClassReplan}
}

const classList = "retryable, network, timeout, blocked, resource, fatal, needs_user, replan"

// ParseFailureClass validates a class named by a client.
func ParseFailureClass(field, s string) (FailureClass, error) {
	switch c := FailureClass(s); c {
	case ClassRetryable, ClassNetwork, ClassTimeout, ClassBlocked, ClassResource, ClassFatal, ClassNeedsUser, ClassReplan:
		return c, nil
	case "":
		return "", Invalid(field, "is required: one of %s", classList)
	default:
		return "", Invalid(field, "%q is not one of %s", s, classList)
	}
}

// JobSpec is the body of POST /v1/jobs.
type JobSpec struct {
	Steps    []StepSpec      `json:"steps"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Queue    string          `json:"queue,omitempty"`
	Priority *Priority       `json:"priority,omitempty"`
	// RunAt is when the job may start at the earliest; its first steps are
	// dispatched through the timer service.
	RunAt *time.Time `json:"run_at,omitempty"`
	// ParkAfter is set by the engine, not the client: its timer threshold
	// (DefaultTimerThreshold when zero).
	ParkAfter time.Duration `json:"-"`
	// ResourceWait is set by the engine: the bound of a resource wait for
	// a step that names none (STEPFLOW_RESOURCE_WAIT_SECONDS;
	// DefaultResourceWait when zero).
	ResourceWait time.Duration `json:"-"`
	// Retention is set by the engine: how long the finished job is kept
	// (STEPFLOW_RETENTION_*_DAYS).
	Retention Retention `json:"-"`
	// ScheduleID is set by the engine for a schedule's run, so a client
	// cannot make a job look like one.
	ScheduleID string `json:"-"`
	// PayloadRef is set by the engine, not the client: the payload kept in
	// the blob store (Payload is then nil).
	PayloadRef *DataRef `json:"-"`
	// PayloadStored is the payload PayloadRef names, as the engine stored
	// it, for the conditions NewJob decides at submit.
	PayloadStored []byte `json:"-"`
	// Budget bounds what the job may cost (budget.go).
	Budget *BudgetSpec `json:"budget,omitempty"`
}

// StepSpec is one step of a submission: what every step has, and its
// action with the action's own parameters.
type StepSpec struct {
	ID             string       `json:"id"`
	Action         ActionSpec   `json:"action"`
	DependsOn      []string     `json:"depends_on,omitempty"`
	Retry          *RetryPolicy `json:"retry,omitempty"`
	TimeoutSeconds int          `json:"timeout_seconds,omitempty"` // one attempt's bound (executed actions)
	// Requires names what a resource must have for the step to run on it:
	// each attempt then holds a slot of a matching resource.
	Requires *Requirements `json:"requires,omitempty"`
	// ResourceWaitSeconds bounds how long the step waits for a slot of a
	// resource it requires (the job's default when zero): past it the
	// step fails with class resource.
	ResourceWaitSeconds int `json:"resource_wait_seconds,omitempty"`
	// When is the step's condition, a CEL expression over the payload and
	// its dependencies' outputs (condition.go): false skips the step.
	When string `json:"when,omitempty"`
	// Input and Output shape what the step runs on and what it keeps
	// (shape.go): CEL expressions, for executed actions.
	Input  string `json:"input,omitempty"`
	Output string `json:"output,omitempty"`
}

// ActionSpec is a step's action: its type and that type's parameters,
// flat in one JSON object. Each type accepts exactly its own; any other
// answers 400 naming it. Each embedded struct is an action type
// (action_<type>.go), in the order Actions() lists them, or parameters
// some types share: embedding a type's struct here registers it.
type ActionSpec struct {
	Type string `json:"type"`
	PassAction
	SleepAction
	FailAction
	HTTPAction
	WorkerAction
	ApprovalAction
	WaitAction
	LambdaAction
	MapAction
	JobAction
	StepFunctionsAction
	ActionDeadline
}

var (
	stepIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
)

// validID reports whether s may name a step, a resource or a schedule,
// each of which a route names as a path segment: the pattern, and not "."
// or "..", which every URL resolver (browsers, curl, API Gateway) takes
// for the directory or its parent, so no request could reach them.
func validID(s string) bool { return stepIDPattern.MatchString(s) && s != "." && s != ".." }

// idRule says what validID takes, in an error message.
var idRule = IDRule

// IDRule says what an id of a step, a resource or a schedule must be.
var IDRule = "must match " + stepIDPattern.String() + " and not be . or .."

// ValidName reports whether s may name a queue or a tenant.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// ParseJobSpec decodes and validates a submission. Every error is an *Error
// naming the field; nothing about the job is written before this passes.
func ParseJobSpec(body []byte) (*JobSpec, error) {
	if len(body) > MaxJobSpecBytes {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("body is %d bytes; the limit is %d", len(body), MaxJobSpecBytes)}
	}
	var spec JobSpec
	if err := DecodeStrict(body, &spec); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &spec, nil
}

// DecodeStrict decodes one JSON object into v and answers an *Error that
// names the field at fault (steps[2].retry.backoff). It first checks the
// whole body with the rules of CheckJSON (one value, UTF-8, nesting at
// most MaxJSONDepth, no repeated member), then decodes with exact,
// case-sensitive member names (json tags as written: "STEPS" is not
// "steps"), refusing unknown members. Only decoding is strict: nothing
// here changes how values are encoded.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return Invalid("body", "is empty; expected a JSON object")
	}
	if p := scanJSON(body); p != nil {
		return p.toError("", reflect.TypeOf(v))
	}
	if err := jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return decodeError(err, reflect.TypeOf(v))
	}
	return nil
}

// Validate checks a decoded spec and fills its defaults.
func (s *JobSpec) Validate() error {
	if len(s.Steps) == 0 {
		return Invalid("steps", "must hold at least one step")
	}
	if len(s.Steps) > MaxSteps {
		return Invalid("steps", "holds %d steps; the limit is %d", len(s.Steps), MaxSteps)
	}
	if s.Queue == "" {
		s.Queue = DefaultQueue
	} else if !namePattern.MatchString(s.Queue) {
		return Invalid("queue", "must match %s", namePattern)
	}
	if s.Priority == nil {
		p := Priority(DefaultPriority)
		s.Priority = &p
	}
	if s.RunAt != nil {
		if s.RunAt.IsZero() {
			return Invalid("run_at", "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		at := s.RunAt.UTC()
		s.RunAt = &at
	}
	if len(s.Payload) == 0 || string(s.Payload) == "null" {
		s.Payload = json.RawMessage(`{}`)
	}
	if s.Budget != nil {
		if err := CheckBudget("budget.usd", s.Budget.USD); err != nil {
			return err
		}
	}
	seen := make(map[string]int, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		field := fmt.Sprintf("steps[%d]", i)
		if !validID(st.ID) {
			return Invalid(field+".id", "%s", idRule)
		}
		if j, dup := seen[st.ID]; dup {
			return Invalid(field+".id", "%q is also the id of steps[%d]; step ids must be unique", st.ID, j)
		}
		seen[st.ID] = i
		if err := st.validate(field, s.Queue); err != nil {
			return err
		}
	}
	if err := s.validateDeps(seen); err != nil {
		return err
	}
	if err := s.checkConditions(); err != nil {
		return err
	}
	// A replan a fail step carries is checked now, against the job as it
	// will stand when it happens (and so on down a replan's own replans),
	// rather than when it runs.
	return checkReplans(s.Steps, s.DAG(), seen)
}

// validateDeps checks depends_on: every step named exists, none is the step
// itself or named twice, and the steps form no cycle.
func (s *JobSpec) validateDeps(index map[string]int) error {
	for i, st := range s.Steps {
		if err := checkDependsOn(fmt.Sprintf("steps[%d]", i), st, index, ""); err != nil {
			return err
		}
	}
	var stuck []string
	for _, i := range unordered(s.Steps, index) {
		stuck = append(stuck, s.Steps[i].ID)
	}
	if len(stuck) > 0 {
		return Invalid("steps", "depends_on forms a cycle: steps %s can never start", strings.Join(stuck, ", "))
	}
	return nil
}

// checkConditions checks each step's condition and input against the
// steps it depends on (the step before it, in a job of steps in order).
func (s *JobSpec) checkConditions() error {
	dag := s.DAG()
	for i, st := range s.Steps {
		deps := st.DependsOn
		if !dag {
			deps = []string{}
			if i > 0 {
				deps = []string{s.Steps[i-1].ID}
			}
		}
		if deps == nil {
			deps = []string{}
		}
		if st.When != "" {
			if err := checkCondition(fmt.Sprintf("steps[%d].when", i), st.When, deps); err != nil {
				return err
			}
		}
		if st.Input != "" {
			if err := checkShape(fmt.Sprintf("steps[%d].input", i), st.Input, deps, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// DAG reports whether the steps declare their dependencies; if none does,
// they run in order, each on the one before it.
func (s *JobSpec) DAG() bool {
	for _, st := range s.Steps {
		if len(st.DependsOn) > 0 {
			return true
		}
	}
	return false
}

func (st *StepSpec) validate(field, jobQueue string) error {
	if st.When != "" {
		// What it may name is checked with the job's dependencies
		// (checkConditions; a replan's steps where they join the job).
		if err := checkCondition(field+".when", st.When, nil); err != nil {
			return err
		}
	}
	if st.Input != "" {
		if err := checkShape(field+".input", st.Input, nil, false); err != nil {
			return err
		}
	}
	if st.Output != "" {
		if err := checkShape(field+".output", st.Output, nil, true); err != nil {
			return err
		}
	}
	a := &st.Action
	af := field + ".action"
	if err := actionTypes.checkApplies(a, af); err != nil {
		return err
	}
	kind, known := LookupAction(a.Type)
	if known && kind.Executor() == ExecutorNone {
		if err := st.refuseAttemptFields(field, kind); err != nil {
			return err
		}
	}
	if !known {
		return unknownAction(af, a.Type)
	}
	if err := kind.Validate(a, ActionCheck{Field: af, JobQueue: jobQueue}); err != nil {
		return err
	}
	if kind.Executor() == ExecutorNone {
		p := RetryPolicy{MaxAttempts: 1}
		_ = p.validate("")
		st.Retry = &p
		return nil
	}
	return st.validateAttempts(field, kind)
}

// refuseAttemptFields refuses what applies only to attempts in a step of
// type kind, which nothing runs.
func (st *StepSpec) refuseAttemptFields(field string, kind ActionKind) error {
	t := kind.Name()
	if st.TimeoutSeconds != 0 {
		hint := ""
		if actionTypes.takes[t]["timeout_seconds"] {
			hint = " (its deadline is action.timeout_seconds)"
		}
		return Invalid(field+".timeout_seconds", "does not apply to action type %q: no executor runs it%s", t, hint)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"retry", st.Retry != nil},
		{"requires", st.Requires != nil},
		{"input", st.Input != ""},
		{"output", st.Output != ""},
		{"resource_wait_seconds", st.ResourceWaitSeconds != 0},
	} {
		if f.set {
			return Invalid(field+"."+f.name, "does not apply to action type %q: no executor runs it", t)
		}
	}
	return nil
}

// validateAttempts checks, and fills the defaults of, what bounds the
// attempts of a step an executor runs.
func (st *StepSpec) validateAttempts(field string, kind ActionKind) error {
	if st.Requires != nil {
		if err := st.Requires.validate(field + ".requires"); err != nil {
			return err
		}
	}
	switch w := st.ResourceWaitSeconds; {
	case w == 0:
	case st.Requires == nil:
		return Invalid(field+".resource_wait_seconds", "applies only to a step that requires a resource (requires)")
	case w < 1 || w > MaxWaitSeconds:
		return Invalid(field+".resource_wait_seconds", "must be between 1 and %d (a year)", MaxWaitSeconds)
	}
	def, maxTimeout := DefaultTimeoutSecs, MaxBuiltinSeconds
	if b, ok := kind.(AttemptBounds); ok {
		def, maxTimeout = b.AttemptTimeout()
	}
	switch {
	case st.TimeoutSeconds == 0:
		st.TimeoutSeconds = def
	case st.TimeoutSeconds < 1 || st.TimeoutSeconds > maxTimeout:
		return Invalid(field+".timeout_seconds", "must be between 1 and %d for action type %s", maxTimeout, kind.Name())
	}
	if st.Retry == nil {
		// No policy of its own: each class by the quality platform's rules,
		// written out so the job shows the policies in force.
		p := DefaultRetryPolicy()
		p.Classes = ClassDefaults()
		st.Retry = &p
	}
	return st.Retry.validate(field + ".retry")
}

// WalkSteps calls fn on each step and on each step a replan of it would
// add, depth first, with the field that names it (steps[1].action.steps[0]).
func WalkSteps(steps []StepSpec, field string, fn func(field string, st *StepSpec) error) error {
	for i := range steps {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := fn(f, &steps[i]); err != nil {
			return err
		}
		if err := WalkSteps(steps[i].Action.Steps, f+".action.steps", fn); err != nil {
			return err
		}
	}
	return nil
}

// ValidateSteps checks steps that are not part of a submission (a
// worker's replan) and fills their defaults, with queue as the job's.
func ValidateSteps(steps []StepSpec, field, queue string) error {
	if len(steps) > MaxSteps {
		return Invalid(field, "holds %d steps; the limit is %d", len(steps), MaxSteps)
	}
	for i := range steps {
		if err := steps[i].validate(fmt.Sprintf("%s[%d]", field, i), queue); err != nil {
			return err
		}
	}
	return nil
}

// checkDependsOn checks the names in st's depends_on (field names st):
// each a step of index, not st itself, not twice, and not replaced (the
// step a replan takes the place of; "" for none).
func checkDependsOn(field string, st StepSpec, index map[string]int, replaced string) error {
	named := map[string]bool{}
	for d, dep := range st.DependsOn {
		df := fmt.Sprintf("%s.depends_on[%d]", field, d)
		switch _, ok := index[dep]; {
		case replaced != "" && dep == replaced:
			return Invalid(df, "names %q, the step being replanned", dep)
		case dep == st.ID:
			return Invalid(df, "step %q cannot depend on itself", st.ID)
		case !ok:
			return Invalid(df, "names no step of this job: %q", dep)
		case named[dep]:
			return Invalid(df, "names %q twice", dep)
		}
		named[dep] = true
	}
	return nil
}
