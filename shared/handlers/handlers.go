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
		ctx = context.WithValue(ctx, recordsKey{}, len(ev.Records))
		var mu sync.Mutex
		var resp events.SQSEventResponse
		failed := func(rec events.SQSMessage, err error) {
			if err == nil {
				return
			}
			if !errors.Is(err, errHeld) {
				log.Warn("message will be redelivered", "message_id", rec.MessageId, "err", err)
			}
			mu.Lock()
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
			mu.Unlock()
		}
		// First deliveries of one job (a fan-out's branches, sent
		// together) are leased together, in one write; the rest alone.
		byJob := map[string][]int{}
		ds := make([]engine.Delivery, len(ev.Records))
		var alone []int
		for i, rec := range ev.Records {
			d, ok := delivery(ctx, e, tokens, rec)
			switch {
			case !ok:
				continue // dropped
			case d.Receives <= 1 && d.Message.Wake == "":
				k := d.Message.Tenant + "/" + d.Message.Job
				byJob[k] = append(byJob[k], i)
			default:
				alone = append(alone, i)
			}
			ds[i] = d
		}
		var wg sync.WaitGroup
		for _, group := range byJob {
			if len(group) == 1 {
				alone = append(alone, group[0])
				continue
			}
			wg.Go(func() {
				errs, ok := executeTogether(ctx, e, ev.Records, ds, group)
				if !ok {
					for _, i := range group {
						wg.Go(func() { failed(ev.Records[i], executeRecord(ctx, e, ev.Records[i], ds[i])) })
					}
					return
				}
				for k, i := range group {
					failed(ev.Records[i], errs[k])
				}
			})
		}
		for _, i := range alone {
			wg.Go(func() { failed(ev.Records[i], executeRecord(ctx, e, ev.Records[i], ds[i])) })
		}
		wg.Wait()
		return resp, nil
	}
}

var errHeld = errors.New("step is held by a live lease")

// recordsKey keeps how many records the invocation took: each job's usage
// counts its part of the invocation, its receive and its delete.
type recordsKey struct{}

func records(ctx context.Context) int {
	n, _ := ctx.Value(recordsKey{}).(int)
	return max(n, 1)
}

// delivery reads a record as the engine's delivery; ok false for a body
// that names no stepflow step, which redelivering cannot help: dropped.
func delivery(ctx context.Context, e *engine.Engine, tokens func(queueARN, receipt string) string, rec events.SQSMessage) (engine.Delivery, bool) {
	var m engine.Message
	if err := json.Unmarshal([]byte(rec.Body), &m); err != nil || m.Job == "" || m.Tenant == "" || m.Step == "" {
		e.Log().WarnContext(logging.With(ctx, slog.String("message_id", rec.MessageId)), "dropped a message that names no step")
		return engine.Delivery{}, false
	}
	d := engine.Delivery{Message: m, Token: tokens(rec.EventSourceARN, rec.ReceiptHandle)}
	if ms, err := strconv.ParseInt(rec.Attributes["SentTimestamp"], 10, 64); err == nil {
		d.SentAt = time.UnixMilli(ms)
	}
	d.Receives, _ = strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	return d, true
}

func executeRecord(ctx context.Context, e *engine.Engine, rec events.SQSMessage, d engine.Delivery) (err error) {
	// A panic on one record's goroutine would kill the whole runtime; this
	// record comes back instead, and the others are unaffected.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("message %s: panic: %v", rec.MessageId, p)
		}
	}()
	ctx = logging.With(ctx, slog.String("message_id", rec.MessageId))
	res, err := e.Execute(engine.WithTab(ctx, engine.Record(records(ctx))), d)
	return recordResult(rec, res, err)
}

// recordResult is a record's error for what executing it answered.
func recordResult(rec events.SQSMessage, res engine.ExecuteResult, err error) error {
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

// executeTogether runs a group of records of one job together
// (engine.ExecuteTogether), answering each record's error; ok false when
// the engine did nothing with them. A panic comes back as every record's
// error, as one record's does alone.
func executeTogether(ctx context.Context, e *engine.Engine, recs []events.SQSMessage, ds []engine.Delivery, group []int) (errs []error, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			errs, ok = make([]error, len(group)), true
			for k, i := range group {
				errs[k] = fmt.Errorf("message %s: panic: %v", recs[i].MessageId, p)
			}
		}
	}()
	gds := make([]engine.Delivery, len(group))
	for k, i := range group {
		gds[k] = ds[i]
	}
	res, rerrs, ok := e.ExecuteTogether(engine.WithTab(ctx, engine.Record(records(ctx)).Scaled(float64(len(group)))), gds)
	if !ok {
		return nil, false
	}
	errs = make([]error, len(group))
	for k, i := range group {
		errs[k] = recordResult(recs[i], res[k], rerrs[k])
	}
	return errs, true
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
