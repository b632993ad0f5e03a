// Command submitter submits a job whose middle step runs on an external
// worker (examples/worker) and follows its events until it ends, with the
// Go SDK. It exits 0 only when the job completed.
//
//	STEPFLOW_API_KEY=dev-key go run ./examples/submitter
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
)

func main() {
	queue := flag.String("queue", "words", "the worker queue of the middle step")
	text := flag.String("text", "the quick brown fox jumps over the lazy dog", "what the worker counts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := submitAndWatch(ctx, *queue, *text); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func submitAndWatch(ctx context.Context, queue, text string) error {
	c, err := client.New(client.Config{
		BaseURL: cmp.Or(os.Getenv("STEPFLOW_URL"), "http://127.0.0.1:3000"),
		APIKey:  os.Getenv("STEPFLOW_API_KEY"),
	})
	if err != nil {
		return err
	}
	j, err := c.Submit(ctx, client.JobRequest{
		Payload: map[string]string{"text": text},
		Steps: []client.StepSpec{
			{ID: "prepare", Action: client.Pass()},
			{ID: "count", Action: client.Worker(queue, 60), Retry: &client.RetryPolicy{MaxAttempts: 3}},
			{ID: "done", Action: client.Pass()},
		},
	})
	if err != nil {
		return err
	}
	fmt.Printf("submitted job %s; waiting for a worker on queue %q\n", j.ID, queue)

	// Follow the event log: long-polled where the API supports it, once a
	// second otherwise.
	seq := 0
	for !j.State.Finished() {
		start := time.Now()
		evs, err := c.Events(ctx, j.ID, client.EventsOptions{After: seq, Wait: 20 * time.Second})
		if err != nil {
			return err
		}
		for _, e := range evs.Events {
			seq = e.Seq
			fmt.Printf("%s  %-16s %s\n", e.At.Local().Format("15:04:05"), e.Type, e.Step)
		}
		if len(evs.Events) == 0 {
			time.Sleep(max(time.Second-time.Since(start), 0))
			continue
		}
		if j, err = c.Job(ctx, j.ID); err != nil {
			return err
		}
	}
	if j.State != client.JobCompleted {
		return fmt.Errorf("job %s ended %s", j.ID, j.State)
	}
	s, _ := j.Step("count")
	fmt.Printf("job %s COMPLETED; the worker answered %s\n", j.ID, s.Output)
	return nil
}
