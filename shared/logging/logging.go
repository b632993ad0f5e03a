// Package logging makes stepflow's loggers (log/slog): JSON lines on
// Lambda, each record carrying the ids of the request it was logged for,
// and the compact lines `make dev` prints, one per job change.
//
// Request ids travel in the context: the HTTP API puts API Gateway's
// request id there, the execute handler each SQS message's id, and Lambda
// its own request id (read from lambdacontext); a record logged with that
// context (slog's ...Context methods, LogAttrs) gets them as attributes.
// The engine's change records (engine.ChangeMessage) carry the job, step,
// attempt, lease and worker themselves; they are at Debug, so a function
// writes them only when its LogLevel is DEBUG (LambdaLevel), while `make
// dev` always shows them (Dev).
package logging

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

type ctxKey struct{}

// With answers ctx carrying attrs besides those it carries already: every
// record logged with it gets them.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	return context.WithValue(ctx, ctxKey{}, append(slices.Clip(prev), attrs...))
}

// requestAttrs answers the attributes ctx carries: those of With, and
// Lambda's request id when ctx is an invocation's.
func requestAttrs(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	attrs, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		attrs = append(slices.Clip(attrs), slog.String("aws_request_id", lc.AwsRequestID))
	}
	return attrs
}

// contextHandler adds the request's attributes to each record.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs := requestAttrs(ctx); len(attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(attrs...)
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

// LambdaLevel answers the level a function logs at: Lambda's
// AWS_LAMBDA_LOG_LEVEL, which it sets from the function's
// LoggingConfig.ApplicationLogLevel (the template's LogLevel parameter),
// INFO when unset. Lambda would drop the records below it anyway (JSON
// format with a "level" key); not writing them saves their formatting.
// At INFO the engine's change records (Debug) are not written.
func LambdaLevel(getenv func(string) string) slog.Level {
	switch strings.ToUpper(getenv("AWS_LAMBDA_LOG_LEVEL")) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN":
		return slog.LevelWarn
	case "ERROR", "FATAL":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// JSON answers a function's logger: a JSON object a line on w (Lambda
// sends stderr to CloudWatch Logs), at level and above, with the
// request's ids.
func JSON(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(contextHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}
