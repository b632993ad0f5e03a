package domain

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Backoff strategies of the step machine's RetryPolicy
// (docs/model.md#step-machine-agent-platform).
const (
	BackoffExponential = "exponential"
	BackoffLinear      = "linear"
	BackoffFixed       = "fixed"
)

// RetryPolicy says how often and how soon a failed step runs again.
// MaxAttempts counts every attempt, the first included; 0, like leaving it
// out, means DefaultMaxAttempts (as a zero MaxAttempts does in River), so a
// step cannot be given no attempt at all.
type RetryPolicy struct {
	MaxAttempts    int    `json:"max_attempts,omitempty"`
	Backoff        string `json:"backoff,omitempty"`
	InitialDelayMS *int64 `json:"initial_delay_ms,omitempty"`
	MaxDelayMS     *int64 `json:"max_delay_ms,omitempty"`
	Jitter         bool   `json:"jitter,omitempty"`
	// Classes are policies for single failure classes (network, timeout,
	// blocked, retryable, resource). A class named here counts only its own
	// failures against its max_attempts; any other class is under the
	// policy above, which counts every attempt.
	Classes map[FailureClass]*RetryPolicy `json:"classes,omitempty"`
}

// retriedClasses are the classes a retry policy governs.
var retriedClasses = []FailureClass{ClassRetryable, ClassNetwork, ClassTimeout, ClassBlocked, ClassResource}

// ClassDefaults are the quality platform's rules for a step that names no
// retry policy (docs/model.md#retries-and-backoff): network errors 3
// retries after 30 s, 60 s and 120 s; a timeout 1 retry after 5 minutes; a
// blocked step every 5 minutes, for a day, until it clears. Other classes
// follow the default policy. A step's own retry replaces them all.
func ClassDefaults() map[FailureClass]*RetryPolicy {
	ms := func(v int64) *int64 { return &v }
	return map[FailureClass]*RetryPolicy{
		ClassNetwork: {MaxAttempts: 4, Backoff: BackoffExponential, InitialDelayMS: ms(30_000), MaxDelayMS: ms(120_000)},
		ClassTimeout: {MaxAttempts: 2, Backoff: BackoffFixed, InitialDelayMS: ms(300_000), MaxDelayMS: ms(300_000)},
		ClassBlocked: {MaxAttempts: BlockedDefaultAttempts, Backoff: BackoffFixed, InitialDelayMS: ms(300_000), MaxDelayMS: ms(300_000)},
	}
}

// BlockedDefaultAttempts is a day of 5-minute retries; MaxClassAttempts
// bounds what a class policy may ask for.
const (
	BlockedDefaultAttempts = 288
	MaxClassAttempts       = 10_000
)

// For answers the policy that governs a failure of class c, and whether
// it counts only c's own failures (a class policy) or every attempt.
func (p *RetryPolicy) For(c FailureClass) (*RetryPolicy, bool) {
	if cp, ok := p.Classes[c]; ok && cp != nil {
		return cp, true
	}
	return p, false
}

// The step machine's defaults (docs/model.md#retries-and-backoff): three
// attempts, exponential from 1 s, at most 30 s.
const (
	DefaultMaxAttempts    = 3
	DefaultInitialDelayMS = 1000
	DefaultMaxDelayMS     = 30000
	MaxAttemptsLimit      = 100
	MaxDelayLimitMS       = 7 * 24 * 3600 * 1000
)

// DefaultRetryPolicy answers the policy a step without one gets.
func DefaultRetryPolicy() RetryPolicy {
	p := RetryPolicy{}
	_ = p.validate("retry")
	return p
}

func (p *RetryPolicy) validate(field string) error {
	if err := p.validateOne(field, MaxAttemptsLimit); err != nil {
		return err
	}
	for _, c := range slices.Sorted(maps.Keys(p.Classes)) {
		cp := p.Classes[c]
		f := field + ".classes." + string(c)
		if !slices.Contains(retriedClasses, c) {
			return Invalid(f, "is not a class that retries: one of retryable, network, timeout, blocked, resource")
		}
		if cp == nil {
			return Invalid(f, "must be a retry policy such as {\"max_attempts\": 3}")
		}
		if cp.Classes != nil {
			return Invalid(f+".classes", "does not apply inside a class policy")
		}
		if err := cp.validateOne(f, MaxClassAttempts); err != nil {
			return err
		}
	}
	return nil
}

func (p *RetryPolicy) validateOne(field string, maxAttempts int) error {
	switch {
	case p.MaxAttempts == 0:
		p.MaxAttempts = DefaultMaxAttempts
	case p.MaxAttempts < 1 || p.MaxAttempts > maxAttempts:
		return Invalid(field+".max_attempts", "must be between 1 and %d", maxAttempts)
	}
	switch p.Backoff {
	case "":
		p.Backoff = BackoffExponential
	case BackoffExponential, BackoffLinear, BackoffFixed:
	default:
		return Invalid(field+".backoff", "%q is not one of exponential, linear, fixed", p.Backoff)
	}
	if p.InitialDelayMS == nil {
		v := int64(DefaultInitialDelayMS)
		p.InitialDelayMS = &v
	} else if *p.InitialDelayMS < 0 || *p.InitialDelayMS > MaxDelayLimitMS {
		return Invalid(field+".initial_delay_ms", "must be between 0 and %d", MaxDelayLimitMS)
	}
	if p.MaxDelayMS == nil {
		v := max(int64(DefaultMaxDelayMS), *p.InitialDelayMS)
		p.MaxDelayMS = &v
	} else if *p.MaxDelayMS < *p.InitialDelayMS || *p.MaxDelayMS > MaxDelayLimitMS {
		return Invalid(field+".max_delay_ms", "must be between initial_delay_ms (%d) and %d", *p.InitialDelayMS, MaxDelayLimitMS)
	}
	return nil
}

// Delay answers the wait before retry number retry (0 for the first retry),
// the step machine's get_delay (docs/model.md#retries-and-backoff):
// initial*2^n, initial*(n+1) or initial, capped at max.
// With jitter the delay is drawn from [delay/2, delay] ("equal jitter"), so
// retries of many steps spread out but never come sooner than half the policy.
func (p RetryPolicy) Delay(retry int, rng *rand.Rand) time.Duration {
	initial, maxDelay := float64(deref(p.InitialDelayMS)), float64(deref(p.MaxDelayMS))
	var ms float64
	switch p.Backoff {
	case BackoffLinear:
		ms = initial * float64(retry+1)
	case BackoffFixed:
		ms = initial
	default:
		ms = initial * math.Pow(2, float64(retry))
	}
	ms = math.Min(ms, maxDelay)
	if p.Jitter && ms > 0 && rng != nil {
		ms = ms/2 + rng.Float64()*ms/2
	}
	return time.Duration(math.Ceil(ms * float64(time.Millisecond)))
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
