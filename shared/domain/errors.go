package domain

import (
	"errors"
	"fmt"
)

// Code classifies an error for clients; the HTTP layer maps each code to one
// status in a single table.
type Code string

const (
	CodeInvalid             Code = "invalid"              // 400
	CodeUnauthorized        Code = "unauthorized"         // 401
	CodeNotFound            Code = "not_found"            // 404
	CodeMethodNotAllowed    Code = "method_not_allowed"   // 405
	CodeConflict            Code = "conflict"             // 409: illegal transition
	CodeLeaseLost           Code = "lease_lost"           // 409: the lease was taken over or ended
	CodeTooLarge            Code = "too_large"            // 413
	CodeIdempotencyMismatch Code = "idempotency_mismatch" // 422
	CodeThrottled           Code = "throttled"            // 429
	CodeInternal            Code = "internal"             // 500
)

// Error is an error a client can act on.
type Error struct {
	Code    Code
	Field   string // the offending input field, for CodeInvalid
	Message string
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
	ErrNotFound            = &Error{Code: CodeNotFound, Message: "not found"}
	ErrLeaseLost           = &Error{Code: CodeLeaseLost, Message: "lease lost: it expired or was taken over"}
	ErrIdempotencyMismatch = &Error{Code: CodeIdempotencyMismatch, Message: "Idempotency-Key was already used with a different request body"}
	ErrUnauthorized        = &Error{Code: CodeUnauthorized, Message: "missing or unknown API key"}
	// ErrUnreadable is a stored job that cannot be decoded: the sweep and
	// the handlers set it aside (quarantine) instead of failing on it again
	// and again.
	ErrUnreadable = &Error{Code: CodeInternal, Message: "the job's stored data cannot be read; it is quarantined"}
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
