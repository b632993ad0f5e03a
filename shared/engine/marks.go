package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/stepflow/stepflow/shared/domain"
)

// Outcome marks keep the branches of a fan-out from racing on their job.
// Every write of a job is conditional on its version, so outcomes that end
// together (a hundred workers completing the branches of one job) each
// read, decide and lose to another, again and again: k outcomes cost some
// k²/2 refused writes, and a wide fan-out answered 503 and took minutes.
// An outcome that loses its first race is instead recorded beside the job
// (Store.MarkOutcome: one small update, no read, no version), and the next
// writer of the job, whoever it is, applies every mark it read with its
// own change, in one write. The maker goes on as before: it reads the job
// again, and either applies the marks itself or finds its outcome
// recorded (domain.Step.AlreadyRecorded) and answers it; a mark refused
// when applied (its lease ran out meanwhile) is dropped, and its maker,
// deciding again, hears why (409). So an outcome is accepted exactly when
// a write records it, as without marks.

// outcomeMark is an attempt's outcome as finish prepared it (an output
// too large for the item already in the blob store), recorded beside its
// job.
type outcomeMark struct {
	Lease   string          `json:"lease"`
	At      time.Time       `json:"at"`
	Output  json.RawMessage `json:"output,omitempty"`
	Ref     *domain.DataRef `json:"ref,omitempty"`
	Failure *domain.Failure `json:"failure,omitempty"`
}

// maxMarkBytes bounds a mark: marks share the job's item (400 KB) with
// it, so a larger outcome races as before.
const maxMarkBytes = 8 << 10

// markOf answers the mark of a prepared outcome; ok false when there is
// none to make (not prepared, a replan, too large).
func markOf(leaseID string, output json.RawMessage, ref *domain.DataRef, failure *domain.Failure, now time.Time) ([]byte, bool) {
	if failure != nil && len(failure.Steps) > 0 {
		return nil, false // a replan is checked against the job it joins when prepared
	}
	rec, err := json.Marshal(outcomeMark{Lease: leaseID, At: now, Output: output, Ref: ref, Failure: failure})
	if err != nil || len(rec) > maxMarkBytes {
		return nil, false
	}
	return rec, true
}

// markOutcome records a change's mark beside its job. A failure is only
// logged: the change goes on racing as it would without one.
func (e *Engine) markOutcome(ctx context.Context, tenant, id string, mark func() (string, []byte, bool)) {
	key, rec, ok := mark()
	if !ok {
		return
	}
	if err := e.cfg.Store.MarkOutcome(ctx, tenant, id, key, rec); err != nil && ctx.Err() == nil {
		e.cfg.Log.WarnContext(ctx, "an outcome could not be marked beside its job; it races on", "job", id, "lease", key, "err", err)
	}
}

// applyMarks applies the marks j was read with, oldest first, each as
// finish would have applied its outcome: one whose lease no longer holds,
// or already recorded, is dropped. It answers errNoChange when none
// applied. A decision: pure.
func (e *Engine) applyMarks(j *domain.Job, now time.Time, fx *effects) error {
	ms := make([]outcomeMark, 0, len(j.Marks))
	for _, rec := range j.Marks {
		var m outcomeMark
		if json.Unmarshal(rec, &m) == nil {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b outcomeMark) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Lease, b.Lease)) })
	rng := e.jitterRNG()
	applied := false
	for _, m := range ms {
		ref, err := domain.ParseLeaseID(m.Lease)
		if err != nil || ref.JobID != j.ID {
			continue
		}
		s, err := leaseTarget(j, ref)
		if err != nil || s.AlreadyRecorded(m.Lease, m.Failure == nil, now) {
			continue
		}
		held := s.Lease
		if held == nil || held.ID != m.Lease || m.Failure == nil && j.CheckLease(s.ID(), m.Lease, now) != nil {
			continue
		}
		ds, err := applyOutcome(j, s.ID(), m.Lease, m.Output, m.Ref, m.Failure, now, rng)
		if need := (*domain.NeedDataError)(nil); errors.As(err, &need) {
			return err // half applied: the change fetches it and decides again
		}
		if err != nil {
			continue
		}
		fx.endLease(held)
		fx.dispatch = append(fx.dispatch, ds...)
		applied = true
	}
	if !applied {
		return errNoChange
	}
	return nil
}

// then answers fx followed by next's effects.
func (fx effects) then(next effects) effects {
	return effects{
		ack:      append(fx.ack, next.ack...),
		hide:     append(fx.hide, next.hide...),
		release:  append(fx.release, next.release...),
		dispatch: append(fx.dispatch, next.dispatch...),
		start:    append(fx.start, next.start...),
		cancel:   append(fx.cancel, next.cancel...),
	}
}
