package domain

import (
	"math"
	"math/rand/v2"
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
	switch {
	case p.MaxAttempts == 0:
		p.MaxAttempts = DefaultMaxAttempts
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
		return Invalid(field+".max_attempts", "must be between 1 and %d", MaxAttemptsLimit)
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
