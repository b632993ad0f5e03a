package domain

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an error for clients; the HTTP layer maps each code to one
// status in a single table.
type Code string

const (
	CodeInvalid             Code = "invalid"              // 400
	CodeUnauthorized        Code = "unauthorized"         // 401
	CodeBudgetExceeded      Code = "budget_exceeded"      // 402: the tenant's daily budget is spent
	CodeNotFound            Code = "not_found"            // 404
	CodeMethodNotAllowed    Code = "method_not_allowed"   // 405
	CodeConflict            Code = "conflict"             // 409: illegal transition
	CodeLeaseLost           Code = "lease_lost"           // 409: the lease was taken over or ended
	CodeTooLarge            Code = "too_large"            // 413
	CodeIdempotencyMismatch Code = "idempotency_mismatch" // 422
	CodeThrottled           Code = "throttled"            // 429
	CodeInternal            Code = "internal"             // 500
	// CodeContended is a write that lost its race to other writers every
	// time it was decided again: nothing was written, so the very request
	// may be sent again. 503 with Retry-After, as AWS answers its own
	// throttling: the request is still applicable (409 would say it is
	// not) and it was not the client's fault (nor a server fault: 500).
	CodeContended Code = "contended" // 503
)

// Error is an error a client can act on.
type Error struct {
	Code    Code
	Field   string // the offending input field, for CodeInvalid
	Message string
	// RetryAfter is how long a client should wait before sending the
	// request again (CodeThrottled, CodeContended): the Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Message)
	}
	return e.Message
}

// Invalid is a 400 naming the field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for control flow; wrap them with context.
var (
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	// ErrLeaseLost is an outcome or heartbeat under a lease that no longer
	// holds its step; wrap it with why (Job.leaseLost).
	ErrLeaseLost           = &Error{Code: CodeLeaseLost, Message: "lease lost"}
	ErrIdempotencyMismatch = &Error{Code: CodeIdempotencyMismatch, Message: "Idempotency-Key was already used with a different request body"}
	ErrUnauthorized        = &Error{Code: CodeUnauthorized, Message: "missing or unknown API key"}
	// ErrExists is a job created under an id a stored job has: a child
	// job made again (its id is derived from its parent's attempt).
	ErrExists = &Error{Code: CodeConflict, Message: "a job of this id exists"}
	// ErrUnreadable is a stored job that cannot be decoded: the sweep and
	// the handlers set it aside (quarantine) instead of failing on it again
	// and again.
	ErrUnreadable = &Error{Code: CodeInternal, Message: "the job's stored data cannot be read; it is quarantined"}
	// ErrContended ends a change that lost every race it was allowed:
	// wrap it together with ErrVersionConflict.
	ErrContended = &Error{Code: CodeContended, Message: "other writers changed this object at the same moment every time this request tried; nothing was changed: send the request again after Retry-After", RetryAfter: time.Second}
	// ErrVersionConflict means a conditional write lost a race; the caller
	// reloads and decides again.
	ErrVersionConflict = errors.New("version conflict")
)

// CodeOf answers the client-facing code of err.
func CodeOf(err error) Code {
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	var ie *IllegalTransitionError
	if errors.As(err, &ie) {
		return CodeConflict
	}
	return CodeInternal
}

// Transient reports an error that says nothing of the request itself: a
// failed AWS call (internal) or a lost contention (contended). A sweep or a
// schedule tries such a thing again soon rather than setting it aside.
func Transient(err error) bool {
	c := CodeOf(err)
	return c == CodeInternal || c == CodeContended
}
