// Package actions runs the built-in step actions: those the domain runs
// itself (pass, fail) and those that do I/O, one file each (http, lambda).
// (worker steps run elsewhere, on external workers through claim.)
package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/netguard"
)

// MaxOutputBytes bounds what an http or lambda action may answer: what a
// worker may complete with. The engine keeps an output over the inline
// limit in the blob store, so the job's item holds only its reference; a
// pass step answers its input, which the engine bounds as it composes it
// (engine.MaxComposedInputBytes).
const MaxOutputBytes = engine.MaxOutputBytes

// MaxRetryAfter bounds the Retry-After an http step's callee may ask for:
// a longer wait is cut to this.
const MaxRetryAfter = time.Hour

// DefaultHTTPTimeout bounds one http call made with the guarded default
// client (the step's timeout_seconds bounds it too).
const DefaultHTTPTimeout = time.Duration(domain.MaxBuiltinSeconds) * time.Second

// maxQuote bounds how much of a URL or a response body a failure message
// quotes.
const maxQuote = 200

// builtin is how the execute function runs an action type that does I/O
// (one that needs none is a domain.PureAction, run by the domain's type),
// and what it checks of a step at submit.
type builtin struct {
	run func(r *Runner, ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure)
	// check answers why a's target may never be called, naming the
	// parameter at fault; nil checks nothing.
	check func(r *Runner, a domain.ActionSpec) (param string, err error)
}

// builtins are the built-in action types that do I/O, by type name: each
// is one file of this package and one line here (its domain type, in
// shared/domain/action_<type>.go, says ExecutorBuiltIn).
var builtins = map[string]builtin{
	domain.ActionHTTP:   {run: (*Runner).post, check: (*Runner).checkHTTP},
	domain.ActionLambda: {run: (*Runner).invokeLambda, check: (*Runner).checkLambda},
}

// Runner runs built-in actions.
type Runner struct {
	// Guard decides which destinations the http action may reach; the zero
	// Policy refuses loopback, link-local (cloud metadata), private and
	// other non-public addresses. It is also what Submit checks step URLs
	// against (see Policy).
	Guard netguard.Policy
	// HTTP, when set, replaces the client built from Guard. Guard's static
	// URL check still applies, but the dial-time check (DNS answers,
	// redirects) only does if the client comes from Guard.Client.
	HTTP *http.Client
	// Lambda invokes the lambda action's functions; without it a lambda
	// step fails fatal, saying so.
	Lambda LambdaInvoker
	// LambdaAllow lists the function-name prefixes a lambda step may call
	// (STEPFLOW_LAMBDA_ALLOW); empty allows any the IAM role allows.
	LambdaAllow []string
	// LambdaHome is the stack's partition, region and account: a lambda
	// step's ARN must name them.
	LambdaHome LambdaHome

	once   sync.Once
	client *http.Client
}

// Run runs the call until it ends or ctx is done, and answers its output or
// the failure that decides what happens next. A ctx that expires is a
// timeout.
func (r *Runner) Run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	out, f := r.run(ctx, c)
	kind, _ := domain.LookupAction(c.Spec.Action.Type)
	_, pure := kind.(domain.PureAction) // answers its input or nothing, bounded already
	if f == nil && len(out) > MaxOutputBytes && !pure {
		return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("output is %d bytes; the limit is %d", len(out), MaxOutputBytes)}
	}
	if f != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, &domain.Failure{Class: domain.ClassTimeout, Message: fmt.Sprintf("ran past timeout_seconds (%d)", c.Spec.TimeoutSeconds)}
	}
	return out, f
}

func (r *Runner) run(ctx context.Context, c engine.ActionCall) (json.RawMessage, *domain.Failure) {
	a := c.Spec.Action
	kind, _ := domain.LookupAction(a.Type)
	if p, ok := kind.(domain.PureAction); ok {
		return p.Run(a, c.Input)
	}
	if b, ok := builtins[a.Type]; ok {
		return b.run(r, ctx, c)
	}
	// Sleeps, waits and gates are timers and decisions, never run.
	return nil, &domain.Failure{Class: domain.ClassFatal, Message: fmt.Sprintf("action type %q cannot run in the built-in executor", a.Type)}
}

// CheckAction answers why a step's action may never reach its target (an
// http url the guard refuses, a lambda function outside those the stack
// may invoke), naming the parameter at fault, so the job is refused at
// submit. A nil Runner checks with the default guard and allows every
// function.
func (r *Runner) CheckAction(a domain.ActionSpec) (param string, err error) {
	if b, ok := builtins[a.Type]; ok && b.check != nil {
		return b.check(r, a)
	}
	return "", nil
}

// clip bounds a quoted string to maxQuote bytes (at a rune boundary).
func clip(s string) string {
	if len(s) <= maxQuote {
		return s
	}
	cut := maxQuote
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
