// Package handlers holds the Lambda handlers as plain typed functions, so
// the functions/ mains and the local runner call the very same code.
package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/logging"
)

// Execute is the ready queues' SQS handler. Each record is handled on its
// own goroutine; a record that must come back is reported as a batch item
// failure, the others are deleted by the event source mapping.
// tokens makes the queue's token of a record (config.App.ReadyTokens).
func Execute(e *engine.Engine, tokens func(queueARN, receipt string) string, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// The batch's deliveries of one job take turns at its changes
		// rather than race on its item.
		ctx = engine.WithJobTurns(ctx, engine.NewJobTurns())
		var mu sync.Mutex
		var resp events.SQSEventResponse
		var wg sync.WaitGroup
		for _, rec := range ev.Records {
			wg.Go(func() {
				if err := executeRecord(ctx, e, tokens, rec); err != nil {
					if !errors.Is(err, errHeld) {
						log.Warn("message will be redelivered", "message_id", rec.MessageId, "err", err)
					}
					mu.Lock()
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return resp, nil
	}
}

var errHeld = errors.New("step is held by a live lease")

func executeRecord(ctx context.Context, e *engine.Engine, tokens func(queueARN, receipt string) string, rec events.SQSMessage) (err error) {
	// A panic on one record's goroutine would kill the whole runtime; this
	// record comes back instead, and the others are unaffected.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("message %s: panic: %v", rec.MessageId, p)
		}
	}()
	ctx = logging.With(ctx, slog.String("message_id", rec.MessageId))
	var m engine.Message
	if err := json.Unmarshal([]byte(rec.Body), &m); err != nil || m.Job == "" || m.Tenant == "" || m.Step == "" {
		// Not a stepflow message: redelivering it cannot help; drop it.
		e.Log().WarnContext(ctx, "dropped a message that names no step")
		return nil
	}
	d := engine.Delivery{Message: m, Token: tokens(rec.EventSourceARN, rec.ReceiptHandle)}
	if ms, err := strconv.ParseInt(rec.Attributes["SentTimestamp"], 10, 64); err == nil {
		d.SentAt = time.UnixMilli(ms)
	}
	d.Receives, _ = strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	res, err := e.Execute(ctx, d)
	if err != nil {
		return fmt.Errorf("message %s: %w", rec.MessageId, err)
	}
	if res == engine.Held || res == engine.Early {
		// Kept, hidden until the holder's lease runs out, or until its job
		// may be written.
		return fmt.Errorf("message %s: %w", rec.MessageId, errHeld)
	}
	return nil
}

// Heartbeat is the EventBridge schedule's handler: one sweep.
func Heartbeat(e *engine.Engine) func(context.Context, events.EventBridgeEvent) (engine.SweepReport, error) {
	return func(ctx context.Context, _ events.EventBridgeEvent) (engine.SweepReport, error) {
		rep, err := e.Sweep(ctx)
		if err != nil {
			return rep, err
		}
		if rep.Due > 0 || rep.SchedulesDue > 0 {
			e.Log().Info("sweep", "due", rep.Due, "reclaimed", rep.Reclaimed, "redispatched", rep.Redispatched,
				"left", rep.Left, "postponed", rep.Postponed,
				"schedules_due", rep.SchedulesDue, "fired", rep.Fired, "skipped", rep.Skipped, "errors", rep.Errors)
		}
		return rep, nil
	}
}
