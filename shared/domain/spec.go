package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
)

// Limits of a job submission.
const (
	MaxBodyBytes       = 256 * 1024 // a larger POST /v1/jobs answers 413
	MaxSteps           = 100
	MaxBuiltinSeconds  = 270 // built-in actions run inside the 300 s execute function
	MaxLeaseSeconds    = 12 * 3600
	DefaultLeaseSecs   = 60
	DefaultTimeoutSecs = 60
	MaxPriority        = 2
	DefaultPriority    = 1
	DefaultQueue       = "default"
)

// Actions the engine knows.
const (
	ActionPass   = "pass"
	ActionSleep  = "sleep"
	ActionFail   = "fail"
	ActionHTTP   = "http"
	ActionWorker = "worker"
	// ActionApproval is a gate a person opens: no executor ever runs it.
	ActionApproval = "approval"
)

// MaxGateSeconds bounds an approval gate's timeout_seconds (a year).
const MaxGateSeconds = 365 * 24 * 3600

// Actions lists the known actions.
func Actions() []string {
	return []string{ActionPass, ActionSleep, ActionFail, ActionHTTP, ActionWorker, ActionApproval}
}

// FailureClass is how an attempt failed; it picks the next step state.
type FailureClass string

const (
	ClassRetryable FailureClass = "retryable"
	ClassResource  FailureClass = "resource"
	ClassFatal     FailureClass = "fatal"
	ClassNeedsUser FailureClass = "needs_user"
	ClassTimeout   FailureClass = "timeout"
)

// ParseFailureClass validates a class named by a client.
func ParseFailureClass(field, s string) (FailureClass, error) {
	switch c := FailureClass(s); c {
	case ClassRetryable, ClassResource, ClassFatal, ClassNeedsUser, ClassTimeout:
		return c, nil
	case "":
		return "", Invalid(field, "is required: one of retryable, resource, fatal, needs_user, timeout")
	default:
		return "", Invalid(field, "%q is not one of retryable, resource, fatal, needs_user, timeout", s)
	}
}

// JobSpec is the body of POST /v1/jobs.
type JobSpec struct {
	Steps    []StepSpec      `json:"steps"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Queue    string          `json:"queue,omitempty"`
	Priority *int            `json:"priority,omitempty"`
}

// StepSpec is one step of a submission. Action parameters sit beside the
// step's id, as the API names them.
type StepSpec struct {
	ID             string       `json:"id"`
	Action         string       `json:"action"`
	DependsOn      []string     `json:"depends_on,omitempty"`
	Retry          *RetryPolicy `json:"retry,omitempty"`
	TimeoutSeconds int          `json:"timeout_seconds,omitempty"`
	Seconds        *float64     `json:"seconds,omitempty"`       // sleep
	Class          string       `json:"class,omitempty"`         // fail
	Message        string       `json:"message,omitempty"`       // fail
	URL            string       `json:"url,omitempty"`           // http
	Queue          string       `json:"queue,omitempty"`         // worker
	LeaseSeconds   int          `json:"lease_seconds,omitempty"` // worker
}

var (
	stepIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	namePattern   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
)

// ValidName reports whether s may name a queue or a tenant.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// ParseJobSpec decodes and validates a submission. Every error is an *Error
// naming the field; nothing about the job is written before this passes.
func ParseJobSpec(body []byte) (*JobSpec, error) {
	if len(body) > MaxBodyBytes {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("body is %d bytes; the limit is %d", len(body), MaxBodyBytes)}
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
		p := DefaultPriority
		s.Priority = &p
	} else if *s.Priority < 0 || *s.Priority > MaxPriority {
		return Invalid("priority", "must be 0 (highest), 1 or 2, not %d", *s.Priority)
	}
	if len(s.Payload) == 0 || string(s.Payload) == "null" {
		s.Payload = json.RawMessage(`{}`)
	}
	seen := make(map[string]int, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		field := fmt.Sprintf("steps[%d]", i)
		if !stepIDPattern.MatchString(st.ID) {
			return Invalid(field+".id", "must match %s", stepIDPattern)
		}
		if j, dup := seen[st.ID]; dup {
			return Invalid(field+".id", "%q is also the id of steps[%d]; step ids must be unique", st.ID, j)
		}
		seen[st.ID] = i
		if err := st.validate(field, s.Queue); err != nil {
			return err
		}
	}
	return s.validateDeps(seen)
}

// validateDeps checks depends_on: every step named exists, none is the step
// itself or named twice, and the steps form no cycle.
func (s *JobSpec) validateDeps(index map[string]int) error {
	for i, st := range s.Steps {
		named := map[string]bool{}
		for k, dep := range st.DependsOn {
			field := fmt.Sprintf("steps[%d].depends_on[%d]", i, k)
			switch _, ok := index[dep]; {
			case dep == st.ID:
				return Invalid(field, "step %q cannot depend on itself", st.ID)
			case !ok:
				return Invalid(field, "names no step of this job: %q", dep)
			case named[dep]:
				return Invalid(field, "names %q twice", dep)
			}
			named[dep] = true
		}
	}
	// Kahn's algorithm: what cannot be ordered lies on or behind a cycle.
	waiting := make([]int, len(s.Steps))
	after := make([][]int, len(s.Steps))
	var ready []int
	for i, st := range s.Steps {
		waiting[i] = len(st.DependsOn)
		for _, dep := range st.DependsOn {
			after[index[dep]] = append(after[index[dep]], i)
		}
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		for _, k := range after[i] {
			if waiting[k]--; waiting[k] == 0 {
				ready = append(ready, k)
			}
		}
	}
	var stuck []string
	for i, n := range waiting {
		if n > 0 {
			stuck = append(stuck, s.Steps[i].ID)
		}
	}
	if len(stuck) > 0 {
		return Invalid("steps", "depends_on forms a cycle: steps %s can never start", strings.Join(stuck, ", "))
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
	only := func(name string, set bool, actions ...string) error {
		for _, a := range actions {
			if st.Action == a {
				return nil
			}
		}
		if set {
			return Invalid(field+"."+name, "does not apply to action %q", st.Action)
		}
		return nil
	}
	for _, check := range []error{
		only("seconds", st.Seconds != nil, ActionSleep),
		only("class", st.Class != "", ActionFail),
		only("message", st.Message != "", ActionFail),
		only("url", st.URL != "", ActionHTTP),
		only("queue", st.Queue != "", ActionWorker),
		only("lease_seconds", st.LeaseSeconds != 0, ActionWorker),
	} {
		if check != nil {
			return check
		}
	}
	maxTimeout := MaxBuiltinSeconds
	switch st.Action {
	case ActionPass:
	case ActionSleep:
		if st.Seconds == nil {
			return Invalid(field+".seconds", "is required for action sleep")
		}
		if *st.Seconds < 0 || *st.Seconds > MaxBuiltinSeconds {
			return Invalid(field+".seconds", "must be between 0 and %d", MaxBuiltinSeconds)
		}
		if st.TimeoutSeconds == 0 {
			st.TimeoutSeconds = min(int(*st.Seconds)+DefaultTimeoutSecs, MaxBuiltinSeconds)
		}
	case ActionFail:
		c, err := ParseFailureClass(field+".class", st.Class)
		if err != nil {
			return err
		}
		st.Class = string(c)
	case ActionHTTP:
		u, err := url.Parse(st.URL)
		if st.URL == "" {
			return Invalid(field+".url", "is required for action http")
		}
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Invalid(field+".url", "must be an absolute http or https URL")
		}
	case ActionApproval:
		// timeout_seconds is the gate's deadline; none (0) waits for ever.
		if st.TimeoutSeconds < 0 || st.TimeoutSeconds > MaxGateSeconds {
			return Invalid(field+".timeout_seconds", "must be between 1 and %d (a year) for action approval, or left out for no deadline", MaxGateSeconds)
		}
		if st.Retry != nil {
			return Invalid(field+".retry", "does not apply to action %q: no executor runs it", st.Action)
		}
		p := DefaultRetryPolicy()
		st.Retry = &p
		return nil
	case ActionWorker:
		if st.Queue == "" {
			st.Queue = jobQueue
		} else if !namePattern.MatchString(st.Queue) {
			return Invalid(field+".queue", "must match %s", namePattern)
		}
		if st.LeaseSeconds == 0 {
			st.LeaseSeconds = DefaultLeaseSecs
		} else if st.LeaseSeconds < 1 || st.LeaseSeconds > MaxLeaseSeconds {
			return Invalid(field+".lease_seconds", "must be between 1 and %d", MaxLeaseSeconds)
		}
		maxTimeout = MaxLeaseSeconds
	case "":
		return Invalid(field+".action", "is required: one of %s", strings.Join(Actions(), ", "))
	default:
		return Invalid(field+".action", "%q is not one of %s", st.Action, strings.Join(Actions(), ", "))
	}
	if st.TimeoutSeconds == 0 {
		st.TimeoutSeconds = DefaultTimeoutSecs
	} else if st.TimeoutSeconds < 1 || st.TimeoutSeconds > maxTimeout {
		return Invalid(field+".timeout_seconds", "must be between 1 and %d for action %s", maxTimeout, st.Action)
	}
	if st.Retry == nil {
		p := DefaultRetryPolicy()
		st.Retry = &p
	}
	return st.Retry.validate(field + ".retry")
}
