// Command worker is a stepflow worker written with the Go SDK: it claims
// steps from the "words" worker queue, counts the words of the input's
// "text", and stops cleanly on Ctrl-C (the steps it runs finish first).
//
//	STEPFLOW_API_KEY=dev-key go run ./examples/worker
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
)

func main() {
	queue := flag.String("queue", "words", "the worker queue to claim from")
	concurrency := flag.Int("concurrency", 4, "steps run at once")
	flag.Parse()
	c, err := client.New(client.Config{
		BaseURL: cmp.Or(os.Getenv("STEPFLOW_URL"), "http://127.0.0.1:3000"),
		APIKey:  os.Getenv("STEPFLOW_API_KEY"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, err := worker.New(c, worker.Options{Queue: *queue, Concurrency: *concurrency}, countWords)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Ctrl-C or SIGTERM: claim no more, let running steps finish.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.Info("claiming", "queue", *queue, "api", c.BaseURL())
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// countWords is the handler: its answer is the step's output, an error
// fails the attempt (retryable, unless worker.Fail names a class).
func countWords(ctx context.Context, t *worker.Task) (any, error) {
	var in struct {
		Text *string `json:"text"`
	}
	if err := t.Decode(&in); err != nil || in.Text == nil {
		// Retrying will not fix the input: fail the step at once.
		return nil, worker.Fail(client.ClassFatal, `the input needs a "text" string`)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // cancelled, or the lease was lost: nothing is reported
	}
	words := strings.Fields(*in.Text)
	return map[string]any{"words": len(words), "attempt": t.Attempt, "idempotency_key": t.IdempotencyKey}, nil
}
