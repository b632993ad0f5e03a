package domain

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"
)

// Resource pools (the agent platform's resources, docs/model.md#resources):
// a resource has capabilities, labels and a capacity of slots. A step that
// requires some takes a free slot of a matching resource with its lease;
// the slot is held until the lease ends, and comes back by itself when the
// lease expires (a dead executor). Every change of a resource is decided
// here and saved with one conditional write on its version, like a job's.

// Limits of the resource model.
const (
	MaxResourceCapacity = 1000
	MaxResourceLabels   = 20
	MaxCapabilities     = 20
	// MaxResourceWaiters bounds the steps one resource keeps in line; one
	// beyond it is left to the sweep.
	MaxResourceWaiters = 200
	// MaxResourcesPerTenant bounds what a lease looks through to pick one.
	MaxResourcesPerTenant = 200
)

var (
	labelKeyPattern   = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)
	labelValuePattern = regexp.MustCompile(`^[A-Za-z0-9_.:/ -]{0,128}$`)
)

// Requirements are what a step needs of a resource: every capability
// named, and every label with the value given.
type Requirements struct {
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

func (r *Requirements) validate(field string) error {
	if len(r.Capabilities) == 0 && len(r.Labels) == 0 {
		return Invalid(field, "must name capabilities or labels a resource must have")
	}
	return validateTraits(field, r.Capabilities, r.Labels)
}

func validateTraits(field string, caps []string, labels map[string]string) error {
	if len(caps) > MaxCapabilities {
		return Invalid(field+".capabilities", "holds %d; the limit is %d", len(caps), MaxCapabilities)
	}
	for i, c := range caps {
		if !labelKeyPattern.MatchString(c) {
			return Invalid(fmt.Sprintf("%s.capabilities[%d]", field, i), "must match %s", labelKeyPattern)
		}
	}
	if len(labels) > MaxResourceLabels {
		return Invalid(field+".labels", "holds %d; the limit is %d", len(labels), MaxResourceLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKeyPattern.MatchString(k) {
			return Invalid(field+".labels", "key %q must match %s", k, labelKeyPattern)
		}
		if !labelValuePattern.MatchString(labels[k]) {
			return Invalid(field+".labels."+k, "must match %s", labelValuePattern)
		}
	}
	return nil
}

// Resource is one resource of a tenant with its slots.
type Resource struct {
	Tenant       string            `json:"tenant" dynamodbav:"tenant"`
	ID           string            `json:"id" dynamodbav:"id"`
	Capabilities []string          `json:"capabilities" dynamodbav:"capabilities"`
	Labels       map[string]string `json:"labels" dynamodbav:"labels"`
	Capacity     int               `json:"capacity" dynamodbav:"capacity"`
	// Holders are the slots in use, by the id of the lease holding each.
	// The lease id is known before the lease is written (its nonce is
	// chosen first), so a slot is one claimer's own: two claimers racing
	// for one attempt never share one.
	Holders map[string]Holder `json:"holders" dynamodbav:"holders"`
	// Waiters are steps waiting for a slot, first come first woken.
	Waiters   []Waiter  `json:"waiters,omitempty" dynamodbav:"waiters,omitempty"`
	Version   int64     `json:"version" dynamodbav:"version"`
	CreatedAt time.Time `json:"created_at" dynamodbav:"created_at"`
	UpdatedAt time.Time `json:"updated_at" dynamodbav:"updated_at"`
}

// Holder is a slot held by one attempt's lease until ExpiresAt.
type Holder struct {
	Lease     string    `json:"lease" dynamodbav:"lease"`
	Job       string    `json:"job" dynamodbav:"job"`
	Step      string    `json:"step" dynamodbav:"step"`
	Since     time.Time `json:"since" dynamodbav:"since"`
	ExpiresAt time.Time `json:"expires_at" dynamodbav:"expires_at"`
}

// Waiter is a step waiting for a slot.
type Waiter struct {
	Job   string    `json:"job" dynamodbav:"job"`
	Step  string    `json:"step" dynamodbav:"step"`
	Since time.Time `json:"since" dynamodbav:"since"`
	// Where the step's message goes when it is woken (its worker queue, or
	// the ready queue of its job's priority), so waking it reads no job.
	Queue    string `json:"queue,omitempty" dynamodbav:"queue,omitempty"`
	Priority int    `json:"priority" dynamodbav:"priority"`
}

// ResourceSpec is the body of PUT /v1/resources/{id}.
type ResourceSpec struct {
	Capabilities []string          `json:"capabilities,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Capacity     *int              `json:"capacity,omitempty"`
}

// ParseResourceSpec decodes and validates a resource.
func ParseResourceSpec(body []byte) (*ResourceSpec, error) {
	var s ResourceSpec
	if err := DecodeStrict(body, &s); err != nil {
		return nil, err
	}
	if s.Capacity == nil {
		one := 1
		s.Capacity = &one
	} else if *s.Capacity < 1 || *s.Capacity > MaxResourceCapacity {
		return nil, Invalid("capacity", "must be between 1 and %d slots", MaxResourceCapacity)
	}
	if err := validateTraits("body", s.Capabilities, s.Labels); err != nil {
		return nil, err
	}
	return &s, nil
}

// ValidResourceID reports whether id may name a resource.
func ValidResourceID(id string) bool { return validID(id) }

// CheckResourceID answers why id may not name a resource: an *Error
// naming the field id.
func CheckResourceID(id string) error {
	if validID(id) {
		return nil
	}
	return Invalid("id", "%s", idRule)
}

// Apply sets what a PUT changes; the slots held stay held (a capacity
// lowered below them frees nothing: no new slot is given until they end).
func (r *Resource) Apply(s *ResourceSpec, now time.Time) {
	r.Capabilities, r.Labels, r.Capacity, r.UpdatedAt = s.Capabilities, s.Labels, *s.Capacity, now
	if r.Capabilities == nil {
		r.Capabilities = []string{}
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
}

// Matches reports whether the resource has everything req asks.
func (r *Resource) Matches(req *Requirements) bool {
	for _, c := range req.Capabilities {
		if !slices.Contains(r.Capabilities, c) {
			return false
		}
	}
	for k, v := range req.Labels {
		if have, ok := r.Labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// Live answers the slots in use at now: holders whose lease has not
// expired.
func (r *Resource) Live(now time.Time) int {
	n := 0
	for _, h := range r.Holders {
		if now.Before(h.ExpiresAt) {
			n++
		}
	}
	return n
}

// Free answers how many slots are free at now.
func (r *Resource) Free(now time.Time) int { return max(r.Capacity-r.Live(now), 0) }

// prune drops holders whose lease expired: their slot comes back.
func (r *Resource) prune(now time.Time) {
	maps.DeleteFunc(r.Holders, func(_ string, h Holder) bool { return !now.Before(h.ExpiresAt) })
}

// ErrNoSlot says every slot of a resource is held.
var ErrNoSlot = errors.New("no free slot")

// Acquire takes a slot for the attempt key names, until h.ExpiresAt. The
// same key again takes nothing more. With no free slot it answers ErrNoSlot
// and changes nothing.
func (r *Resource) Acquire(key string, h Holder, now time.Time) error {
	if _, held := r.Holders[key]; held {
		r.Holders[key] = h
		return nil
	}
	r.prune(now)
	if len(r.Holders) >= r.Capacity {
		return ErrNoSlot
	}
	if r.Holders == nil {
		r.Holders = map[string]Holder{}
	}
	r.Holders[key] = h
	r.Waiters = slices.DeleteFunc(r.Waiters, func(w Waiter) bool { return w.Job == h.Job && w.Step == h.Step })
	r.UpdatedAt = now
	return nil
}

// Wait puts a step in line for a slot; false when it already is, or the
// line is full (the sweep then looks at the step later).
func (r *Resource) Wait(w Waiter) bool {
	if len(r.Waiters) >= MaxResourceWaiters || slices.ContainsFunc(r.Waiters, func(x Waiter) bool { return x.Job == w.Job && x.Step == w.Step }) {
		return false
	}
	r.Waiters = append(r.Waiters, w)
	return true
}

// Release gives back the slot key holds, and answers the waiters to wake:
// as many as there are free slots now, first come first.
func (r *Resource) Release(key string, now time.Time) []Waiter {
	delete(r.Holders, key)
	return r.Wake(now)
}

// Wake takes out of line as many waiters as there are free slots.
func (r *Resource) Wake(now time.Time) []Waiter {
	r.prune(now)
	n := min(r.Free(now), len(r.Waiters))
	woken := slices.Clone(r.Waiters[:n])
	r.Waiters = slices.Delete(r.Waiters, 0, n)
	r.UpdatedAt = now
	return woken
}
