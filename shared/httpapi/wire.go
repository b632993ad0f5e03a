package httpapi

import (
	"errors"
	"strings"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/wire"
)

// The worker protocol's bodies are decoded into wire types and answered
// from them; the engine takes and gives plain Go types. These convert.

// decodeWire is decodeUpTo for a body of a wire type. A body that is not
// a JSON object was always refused naming the engine type it decoded
// into ("body: must be engine.ClaimRequest, not JSON array"), and still is.
func (r *request) decodeWire(v any, limit int) error {
	err := r.decodeUpTo(v, limit)
	var de *domain.Error
	if errors.As(err, &de) && de.Field == "body" && strings.HasPrefix(de.Message, "must be wire.") {
		de.Message = "must be engine." + strings.TrimPrefix(de.Message, "must be wire.")
	}
	return err
}

func claimRequest(c wire.ClaimRequest) engine.ClaimRequest {
	return engine.ClaimRequest{Queue: c.Queue, Max: c.Max, WaitSeconds: c.WaitSeconds, Worker: c.Worker}
}

// claimed answers a claim's leases, an empty list when there are none.
func claimed(ls []engine.ClaimedLease) wire.Claimed {
	out := wire.Claimed{Leases: make([]wire.ClaimedLease, 0, len(ls))}
	for _, l := range ls {
		out.Leases = append(out.Leases, claimedLease(l))
	}
	return out
}

func claimedLease(l engine.ClaimedLease) wire.ClaimedLease {
	w := wire.ClaimedLease{
		LeaseID: l.LeaseID, JobID: l.JobID, StepID: l.StepID, Attempt: l.Attempt, MaxAttempts: l.MaxAttempts,
		Input: l.Input, ExpiresAt: l.ExpiresAt, LeaseSeconds: l.LeaseSeconds, IdempotencyKey: l.IdempotencyKey,
		Deadline: l.Deadline, InputRef: l.InputRef, InputURL: l.InputURL,
	}
	if r := l.Resource; r != nil {
		w.Resource = &wire.ClaimedResource{ID: r.ID, Capabilities: r.Capabilities, Labels: r.Labels}
	}
	return w
}

func heartbeatResult(h engine.HeartbeatResult) wire.HeartbeatResult {
	return wire.HeartbeatResult{LeaseID: h.LeaseID, ExpiresAt: h.ExpiresAt, CancelRequested: h.CancelRequested}
}

// failure is a /fail body as the engine's Fail takes it (its output, which
// belongs on /complete, is refused before).
func failure(o wire.Outcome) engine.Outcome {
	return engine.Outcome{Class: o.Class, Message: o.Message, RetryAfterSeconds: o.RetryAfterSeconds, Prompt: o.Prompt, Steps: o.Steps, CostUSD: o.Cost.Dollars()}
}

func outcomeResult(r engine.OutcomeResult) wire.OutcomeResult {
	return wire.OutcomeResult{JobID: r.JobID, StepID: r.StepID, StepState: r.StepState, JobState: r.JobState}
}

// decision is a decision's body as the engine takes it, with the id of
// the key that sent it.
func decision(d wire.Decision, key string) engine.Decision {
	return engine.Decision{By: d.By, Comment: d.Comment, Key: key}
}
