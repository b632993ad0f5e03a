package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stepflow/stepflow/shared/domain"
)

// A job's doc attribute is a document the store owns, not the domain's
// JSON: the types below say exactly what is stored, and the mapping to
// and from domain.Job is written out, so a change to the domain changes
// nothing stored until the mapping says how, and the reading of older
// documents (their spellings, their fields) stays here. A step's action
// is the one exception (stepSpecDoc.Action says why).
//
// Versions, in the item's dv attribute:
//
//	1 (no dv) the domain's JSON of a job, written before the store owned
//	          its document. A step state CANCELED and an event
//	          step_canceled, as written before one spelling of cancelled
//	          was kept (85eae6a), read as CANCELLED and step_cancelled.
//	2         this document; its fields are version 1's, so a build
//	          without this file reads it as before.
//	3         adds a step's unsent: the instant of a message too far off
//	          for an SQS delay, which the sweep sends within reach. A
//	          build of version 2 reads the rest and logs it.
//
// A change to what is stored adds a version, its golden items
// (testdata/jobs/v<N>) and the reading of the versions before it.
const (
	documentVersion = 3
	docVersionAttr  = "dv" // a number attribute: three bytes on every item
)

type jobDoc struct {
	Tenant              string          `json:"tenant"`
	ID                  string          `json:"id"`
	State               string          `json:"state"`
	Version             int64           `json:"version"`
	Queue               string          `json:"queue"`
	Priority            int             `json:"priority"`
	Payload             json.RawMessage `json:"payload,omitempty"`
	IdempotencyKey      string          `json:"idempotency_key,omitempty"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
	EndedAt             *time.Time      `json:"ended_at,omitempty"`
	Steps               []*stepDoc      `json:"steps"`
	Events              []eventDoc      `json:"events"`
	DueAt               *time.Time      `json:"due_at,omitempty"`
	ExpiresAt           *time.Time      `json:"expires_at,omitempty"`
	DataDeletedAt       *time.Time      `json:"data_deleted_at,omitempty"`
	Graph               bool            `json:"graph,omitempty"`
	RunAt               *time.Time      `json:"run_at,omitempty"`
	ParkAfterSeconds    int             `json:"park_after_seconds,omitempty"`
	Retention           *retentionDoc   `json:"retention,omitempty"`
	Signals             []signalDoc     `json:"signals,omitempty"`
	ScheduleID          string          `json:"schedule_id,omitempty"`
	PayloadRef          *dataRefDoc     `json:"payload_ref,omitempty"`
	ResourceWaitSeconds int             `json:"resource_wait_seconds,omitempty"`
	Error               *errorDoc       `json:"error,omitempty"`
	Parent              *parentDoc      `json:"parent,omitempty"`
	Orphans             []string        `json:"orphans,omitempty"`
	Budget              *budgetDoc      `json:"budget,omitempty"`
}

type budgetDoc struct {
	USD      float64    `json:"usd"`
	Exceeded *time.Time `json:"exceeded_at,omitempty"`
	CostUSD  float64    `json:"cost_usd,omitempty"` // at the gate
}

type parentDoc struct {
	Job     string `json:"job"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Lease   string `json:"lease"`
}

type childRunDoc struct {
	ID      string    `json:"id"`
	CheckAt time.Time `json:"check_at"`
	Checks  int       `json:"checks,omitempty"`
}

type retentionDoc struct {
	CompletedDays int `json:"completed_days,omitempty"`
	FailedDays    int `json:"failed_days,omitempty"`
	CancelledDays int `json:"cancelled_days,omitempty"`
}

type signalDoc struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Request string          `json:"request,omitempty"`
	At      time.Time       `json:"at"`
	Step    string          `json:"step,omitempty"`
}

type stepDoc struct {
	Spec             stepSpecDoc      `json:"spec"`
	State            string           `json:"state"`
	Attempt          int              `json:"attempt"`
	Lease            *leaseDoc        `json:"lease,omitempty"`
	ReadyAt          *time.Time       `json:"ready_at,omitempty"`
	Unsent           *time.Time       `json:"unsent,omitempty"` // version 3
	Redispatches     int              `json:"redispatches,omitempty"`
	Output           json.RawMessage  `json:"output,omitempty"`
	Error            *errorDoc        `json:"error,omitempty"`
	Attempts         []attemptDoc     `json:"attempts,omitempty"`
	Avoid            []string         `json:"avoid,omitempty"`
	Prompt           string           `json:"prompt,omitempty"`
	UserInput        json.RawMessage  `json:"user_input,omitempty"`
	Deadline         *time.Time       `json:"deadline,omitempty"`
	Decision         *decisionDoc     `json:"decision,omitempty"`
	WakeAt           *time.Time       `json:"wake_at,omitempty"`
	AttemptBase      int              `json:"attempt_base,omitempty"`
	Parked           bool             `json:"parked,omitempty"`
	ReplacedBy       []string         `json:"replaced_by,omitempty"`
	ResourceWait     *resourceWaitDoc `json:"resource_wait,omitempty"`
	OutputRef        *dataRefDoc      `json:"output_ref,omitempty"`
	OutputIsInput    bool             `json:"output_is_input,omitempty"`
	MapOf            string           `json:"map_of,omitempty"`
	Item             json.RawMessage  `json:"item,omitempty"`
	Index            int              `json:"index,omitempty"`
	Expanded         bool             `json:"expanded,omitempty"`
	Children         int              `json:"children,omitempty"`
	OutputIsChildren bool             `json:"output_is_children,omitempty"`
	Child            *childRunDoc     `json:"child,omitempty"`
}

type stepSpecDoc struct {
	ID string `json:"id"`
	// Action is stored in the domain's own encoding, the one part of the
	// document that is: it is the action object clients submit, which
	// must stay readable as the API's format anyway, and each action
	// type's parameters are the fields of its own struct
	// (domain/action_<type>.go), so adding a type or a parameter needs no
	// edit here. Its nested steps (a fail action's replan) are the API's
	// too. It is decoded by the document's decoder, so an unknown field
	// in it fails a strict read as anywhere else.
	Action              domain.ActionSpec `json:"action"`
	DependsOn           []string          `json:"depends_on,omitempty"`
	Retry               *retryDoc         `json:"retry,omitempty"`
	TimeoutSeconds      int               `json:"timeout_seconds,omitempty"`
	Requires            *requirementsDoc  `json:"requires,omitempty"`
	ResourceWaitSeconds int               `json:"resource_wait_seconds,omitempty"`
	When                string            `json:"when,omitempty"`
	Input               string            `json:"input,omitempty"`
	Output              string            `json:"output,omitempty"`
}

type retryDoc struct {
	MaxAttempts    int                  `json:"max_attempts,omitempty"`
	Backoff        string               `json:"backoff,omitempty"`
	InitialDelayMS *int64               `json:"initial_delay_ms,omitempty"`
	MaxDelayMS     *int64               `json:"max_delay_ms,omitempty"`
	Jitter         bool                 `json:"jitter,omitempty"`
	Classes        map[string]*retryDoc `json:"classes,omitempty"`
}

type requirementsDoc struct {
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

type resourceWaitDoc struct {
	Since time.Time  `json:"since"`
	On    []string   `json:"on"`
	Until *time.Time `json:"until,omitempty"`
}

type decisionDoc struct {
	Approved bool      `json:"approved"`
	By       string    `json:"by,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	Key      string    `json:"key,omitempty"`
	At       time.Time `json:"at"`
}

type leaseDoc struct {
	ID        string     `json:"id"`
	Attempt   int        `json:"attempt"`
	ExpiresAt time.Time  `json:"expires_at"`
	Worker    string     `json:"worker,omitempty"`
	Token     string     `json:"token,omitempty"`
	Resource  string     `json:"resource,omitempty"`
	Deadline  *time.Time `json:"deadline,omitempty"`
}

type errorDoc struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

type attemptDoc struct {
	N          int             `json:"n"`
	State      string          `json:"state"`
	Lease      string          `json:"lease,omitempty"`
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
	Worker     string          `json:"worker,omitempty"`
	Resource   string          `json:"resource,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	EndedAt    *time.Time      `json:"ended_at,omitempty"`
	Error      *errorDoc       `json:"error,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	OutputRef  *dataRefDoc     `json:"output_ref,omitempty"`
	Child      string          `json:"child,omitempty"`
	CostUSD    float64         `json:"cost_usd,omitempty"`
}

type eventDoc struct {
	Seq     int       `json:"seq"`
	Type    string    `json:"type"`
	At      time.Time `json:"at"`
	Step    string    `json:"step,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

type dataRefDoc struct {
	Key    string `json:"key"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// encodeDocument renders j as its stored document.
func encodeDocument(j *domain.Job) ([]byte, error) { return json.Marshal(jobDocOf(j)) }

// errUnknownField marks a document holding a field this build does not
// store: one written by a newer build, or a bug.
var errUnknownField = errors.New("unknown field")

// decodeDocument reads a stored document of version v. Strict, a field
// the document types do not have is an error wrapping errUnknownField;
// otherwise it is dropped, as the domain's JSON always dropped it.
func decodeDocument(raw []byte, v int, strict bool) (*domain.Job, error) {
	if v < 1 || v > documentVersion && strict {
		return nil, fmt.Errorf("document version %d: this build reads 1 to %d", v, documentVersion)
	}
	var d jobDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&d); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fmt.Errorf("%w %s", errUnknownField, field)
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the document")
	}
	if v == 1 {
		d.canonicalSpellings()
	}
	return d.job(), nil
}

// canonicalSpellings rewrites what version 1 documents spelled otherwise
// before 85eae6a: a step CANCELED, its event step_canceled.
func (d *jobDoc) canonicalSpellings() {
	for _, s := range d.Steps {
		if s != nil && s.State == "CANCELED" {
			s.State = string(domain.StepCancelled)
		}
	}
	for i := range d.Events {
		if d.Events[i].Type == "step_canceled" {
			d.Events[i].Type = domain.StepCancelled.EventType()
		}
	}
}

// documentVersionOf answers the version of an item's document: 1 without
// the attribute.
func documentVersionOf(it map[string]ddb.AttributeValue) (int, error) {
	return intAttr(it, docVersionAttr, 1)
}

// intAttr answers an item's number attribute name, or absent without it.
func intAttr(it map[string]ddb.AttributeValue, name string, absent int) (int, error) {
	a, ok := it[name]
	if !ok {
		return absent, nil
	}
	n, isN := a.(*ddb.AttributeValueMemberN)
	if !isN {
		return 0, fmt.Errorf("attribute %s is a %T, not a number", name, a)
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, fmt.Errorf("attribute %s: %w", name, err)
	}
	return v, nil
}

// mapSlice maps in by f, keeping nil nil (a nil and an empty list are
// stored differently where the field has no omitempty).
func mapSlice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

// mapPtr maps a pointer by f, keeping nil nil.
func mapPtr[T, U any](in *T, f func(T) U) *U {
	if in == nil {
		return nil
	}
	out := f(*in)
	return &out
}

func jobDocOf(j *domain.Job) jobDoc {
	return jobDoc{
		Tenant: j.Tenant, ID: j.ID, State: string(j.State), Version: j.Version, Queue: j.Queue, Priority: j.Priority,
		Payload: j.Payload, IdempotencyKey: j.IdempotencyKey, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EndedAt: j.EndedAt,
		Steps: mapSlice(j.Steps, func(s *domain.Step) *stepDoc {
			if s == nil {
				return nil
			}
			d := stepDocOf(*s)
			return &d
		}),
		Events: mapSlice(j.Events, eventDocOf),
		DueAt:  j.DueAt, ExpiresAt: j.ExpiresAt, DataDeletedAt: j.DataDeletedAt, Graph: j.Graph, RunAt: j.RunAt,
		ParkAfterSeconds: j.ParkAfterSeconds,
		Retention: mapPtr(j.Retention, func(r domain.Retention) retentionDoc {
			return retentionDoc{CompletedDays: r.CompletedDays, FailedDays: r.FailedDays, CancelledDays: r.CancelledDays}
		}),
		Signals: mapSlice(j.Signals, func(s domain.Signal) signalDoc {
			return signalDoc{Name: s.Name, Payload: s.Payload, ID: s.ID, Request: s.Request, At: s.At, Step: s.Step}
		}),
		ScheduleID: j.ScheduleID, PayloadRef: mapPtr(j.PayloadRef, dataRefDocOf),
		ResourceWaitSeconds: j.ResourceWaitSeconds, Error: mapPtr(j.Error, errorDocOf),
		Parent: mapPtr(j.Parent, func(p domain.ParentRef) parentDoc {
			return parentDoc{Job: p.Job, Step: p.Step, Attempt: p.Attempt, Lease: p.Lease}
		}),
		Orphans: j.Orphans,
		Budget: mapPtr(j.Budget, func(b domain.Budget) budgetDoc {
			d := budgetDoc{USD: b.USD}
			if b.Exceeded != nil {
				d.Exceeded, d.CostUSD = &b.Exceeded.At, b.Exceeded.CostUSD
			}
			return d
		}),
	}
}

func (d *jobDoc) job() *domain.Job {
	return &domain.Job{
		Tenant: d.Tenant, ID: d.ID, State: domain.JobState(d.State), Version: d.Version, Queue: d.Queue, Priority: d.Priority,
		Payload: d.Payload, IdempotencyKey: d.IdempotencyKey, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, EndedAt: d.EndedAt,
		Steps: mapSlice(d.Steps, func(s *stepDoc) *domain.Step {
			if s == nil {
				return nil
			}
			st := s.step()
			return &st
		}),
		Events: mapSlice(d.Events, eventDoc.event),
		DueAt:  d.DueAt, ExpiresAt: d.ExpiresAt, DataDeletedAt: d.DataDeletedAt, Graph: d.Graph, RunAt: d.RunAt,
		ParkAfterSeconds: d.ParkAfterSeconds,
		Retention: mapPtr(d.Retention, func(r retentionDoc) domain.Retention {
			return domain.Retention{CompletedDays: r.CompletedDays, FailedDays: r.FailedDays, CancelledDays: r.CancelledDays}
		}),
		Signals: mapSlice(d.Signals, func(s signalDoc) domain.Signal {
			return domain.Signal{Name: s.Name, Payload: s.Payload, ID: s.ID, Request: s.Request, At: s.At, Step: s.Step}
		}),
		ScheduleID: d.ScheduleID, PayloadRef: mapPtr(d.PayloadRef, dataRefDoc.ref),
		ResourceWaitSeconds: d.ResourceWaitSeconds, Error: mapPtr(d.Error, errorDoc.stepError),
		Parent: mapPtr(d.Parent, func(p parentDoc) domain.ParentRef {
			return domain.ParentRef{Job: p.Job, Step: p.Step, Attempt: p.Attempt, Lease: p.Lease}
		}),
		Orphans: d.Orphans,
		Budget: mapPtr(d.Budget, func(b budgetDoc) domain.Budget {
			out := domain.Budget{USD: b.USD}
			if b.Exceeded != nil {
				out.Exceeded = &domain.BudgetExceeded{At: *b.Exceeded, CostUSD: b.CostUSD}
			}
			return out
		}),
	}
}

func stepDocOf(s domain.Step) stepDoc {
	d := stepDoc{
		Spec: stepSpecDocOf(s.Spec), State: string(s.State), Attempt: s.Attempt,
		Lease: mapPtr(s.Lease, func(l domain.Lease) leaseDoc {
			return leaseDoc{ID: l.ID, Attempt: l.Attempt, ExpiresAt: l.ExpiresAt, Worker: l.Worker, Token: l.Token, Resource: l.Resource, Deadline: l.Deadline}
		}),
		ReadyAt: s.ReadyAt, Unsent: s.Unsent, Redispatches: s.Redispatches, Output: s.Output, Error: mapPtr(s.Error, errorDocOf),
		Attempts: mapSlice(s.Attempts, func(a domain.Attempt) attemptDoc {
			return attemptDoc{N: a.N, State: string(a.State), Lease: a.Lease, LeaseUntil: a.LeaseUntil, Worker: a.Worker, Resource: a.Resource,
				StartedAt: a.StartedAt, EndedAt: a.EndedAt, Error: mapPtr(a.Error, errorDocOf), Output: a.Output, OutputRef: mapPtr(a.OutputRef, dataRefDocOf), Child: a.Child, CostUSD: a.CostUSD}
		}),
		Avoid: s.Avoid, Prompt: s.Prompt, UserInput: s.UserInput,
		Decision: mapPtr(s.Decision, func(d domain.Decision) decisionDoc {
			return decisionDoc{Approved: d.Approved, By: d.By, Comment: d.Comment, Key: d.Key, At: d.At}
		}),
		AttemptBase: s.AttemptBase, ReplacedBy: s.ReplacedBy,
		ResourceWait: mapPtr(s.ResourceWait, func(w domain.ResourceWait) resourceWaitDoc {
			return resourceWaitDoc{Since: w.Since, On: w.On, Until: w.Until}
		}),
		OutputRef: mapPtr(s.OutputRef, dataRefDocOf), OutputIsInput: s.OutputIsInput,
		MapOf: s.MapOf, Item: s.Item, Index: s.Index, Expanded: s.Expanded, Children: s.Children, OutputIsChildren: s.OutputIsChildren,
		Child: mapPtr(s.Child, func(c domain.ChildRun) childRunDoc {
			return childRunDoc{ID: c.ID, CheckAt: c.CheckAt, Checks: c.Checks}
		}),
	}
	// The step's timer is stored flat, as when its fields were the step's own.
	if t := s.Timer; t != nil {
		d.WakeAt, d.Deadline, d.Parked = t.WakeAt, t.Deadline, t.Parked
	}
	return d
}

func (d *stepDoc) step() domain.Step {
	s := domain.Step{
		Spec: d.Spec.spec(), State: domain.StepState(d.State), Attempt: d.Attempt,
		Lease: mapPtr(d.Lease, func(l leaseDoc) domain.Lease {
			return domain.Lease{ID: l.ID, Attempt: l.Attempt, ExpiresAt: l.ExpiresAt, Worker: l.Worker, Token: l.Token, Resource: l.Resource, Deadline: l.Deadline}
		}),
		ReadyAt: d.ReadyAt, Unsent: d.Unsent, Redispatches: d.Redispatches, Output: d.Output, Error: mapPtr(d.Error, errorDoc.stepError),
		Attempts: mapSlice(d.Attempts, func(a attemptDoc) domain.Attempt {
			return domain.Attempt{N: a.N, State: domain.AttemptState(a.State), Lease: a.Lease, LeaseUntil: a.LeaseUntil, Worker: a.Worker, Resource: a.Resource,
				StartedAt: a.StartedAt, EndedAt: a.EndedAt, Error: mapPtr(a.Error, errorDoc.stepError), Output: a.Output, OutputRef: mapPtr(a.OutputRef, dataRefDoc.ref), Child: a.Child, CostUSD: a.CostUSD}
		}),
		Avoid: d.Avoid, Prompt: d.Prompt, UserInput: d.UserInput,
		Decision: mapPtr(d.Decision, func(x decisionDoc) domain.Decision {
			return domain.Decision{Approved: x.Approved, By: x.By, Comment: x.Comment, Key: x.Key, At: x.At}
		}),
		AttemptBase: d.AttemptBase, ReplacedBy: d.ReplacedBy,
		ResourceWait: mapPtr(d.ResourceWait, func(w resourceWaitDoc) domain.ResourceWait {
			return domain.ResourceWait{Since: w.Since, On: w.On, Until: w.Until}
		}),
		OutputRef: mapPtr(d.OutputRef, dataRefDoc.ref), OutputIsInput: d.OutputIsInput,
		MapOf: d.MapOf, Item: d.Item, Index: d.Index, Expanded: d.Expanded, Children: d.Children, OutputIsChildren: d.OutputIsChildren,
		Child: mapPtr(d.Child, func(c childRunDoc) domain.ChildRun {
			return domain.ChildRun{ID: c.ID, CheckAt: c.CheckAt, Checks: c.Checks}
		}),
	}
	if d.WakeAt != nil || d.Deadline != nil || d.Parked {
		s.Timer = &domain.Timer{WakeAt: d.WakeAt, Deadline: d.Deadline, Parked: d.Parked}
	}
	return s
}

func stepSpecDocOf(s domain.StepSpec) stepSpecDoc {
	return stepSpecDoc{
		ID: s.ID, Action: s.Action,
		DependsOn: s.DependsOn, Retry: mapPtr(s.Retry, retryDocOf), TimeoutSeconds: s.TimeoutSeconds,
		Requires: mapPtr(s.Requires, func(r domain.Requirements) requirementsDoc {
			return requirementsDoc{Capabilities: r.Capabilities, Labels: r.Labels}
		}),
		ResourceWaitSeconds: s.ResourceWaitSeconds, When: s.When, Input: s.Input, Output: s.Output,
	}
}

func (d stepSpecDoc) spec() domain.StepSpec {
	return domain.StepSpec{
		ID: d.ID, Action: d.Action,
		DependsOn: d.DependsOn, Retry: mapPtr(d.Retry, retryDoc.policy), TimeoutSeconds: d.TimeoutSeconds,
		Requires: mapPtr(d.Requires, func(r requirementsDoc) domain.Requirements {
			return domain.Requirements{Capabilities: r.Capabilities, Labels: r.Labels}
		}),
		ResourceWaitSeconds: d.ResourceWaitSeconds, When: d.When, Input: d.Input, Output: d.Output,
	}
}

func retryDocOf(p domain.RetryPolicy) retryDoc {
	d := retryDoc{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff, InitialDelayMS: p.InitialDelayMS, MaxDelayMS: p.MaxDelayMS, Jitter: p.Jitter}
	if p.Classes != nil {
		d.Classes = make(map[string]*retryDoc, len(p.Classes))
		for c, cp := range p.Classes {
			d.Classes[string(c)] = mapPtr(cp, retryDocOf)
		}
	}
	return d
}

func (d retryDoc) policy() domain.RetryPolicy {
	p := domain.RetryPolicy{MaxAttempts: d.MaxAttempts, Backoff: d.Backoff, InitialDelayMS: d.InitialDelayMS, MaxDelayMS: d.MaxDelayMS, Jitter: d.Jitter}
	if d.Classes != nil {
		p.Classes = make(map[domain.FailureClass]*domain.RetryPolicy, len(d.Classes))
		for c, cp := range d.Classes {
			p.Classes[domain.FailureClass(c)] = mapPtr(cp, retryDoc.policy)
		}
	}
	return p
}

func eventDocOf(e domain.Event) eventDoc {
	return eventDoc{Seq: e.Seq, Type: e.Type, At: e.At, Step: e.Step, Attempt: e.Attempt, Detail: e.Detail}
}

func (d eventDoc) event() domain.Event {
	return domain.Event{Seq: d.Seq, Type: d.Type, At: d.At, Step: d.Step, Attempt: d.Attempt, Detail: d.Detail}
}

func errorDocOf(e domain.StepError) errorDoc {
	return errorDoc{Class: string(e.Class), Message: e.Message}
}

func (d errorDoc) stepError() domain.StepError {
	return domain.StepError{Class: domain.FailureClass(d.Class), Message: d.Message}
}

func dataRefDocOf(r domain.DataRef) dataRefDoc {
	return dataRefDoc{Key: r.Key, Size: r.Size, SHA256: r.SHA256}
}

func (d dataRefDoc) ref() domain.DataRef {
	return domain.DataRef{Key: d.Key, Size: d.Size, SHA256: d.SHA256}
}
