// Command formal-machine runs the formal job machine's lifecycle on
// stepflow: a job suspended at a wait node until its signal, a job parked
// by a long sleep, and a failed job requeued by a redrive, each shown in
// the formal view with its stored state beside the one derived from its
// events.
//
//	go run ./examples/formal-machine      # against make dev
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
)

// config is where the example runs and where it prints.
type config struct {
	URL    string
	APIKey string
	Out    io.Writer
}

func main() {
	cfg := config{
		URL:    cmp.Or(os.Getenv("STEPFLOW_URL"), "http://127.0.0.1:3000"),
		APIKey: cmp.Or(os.Getenv("STEPFLOW_API_KEY"), "dev-key"),
		Out:    os.Stdout,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "formal-machine:", err)
		os.Exit(1)
	}
}

// formalState is the formal machine's state each job event leads to: the
// machine's event table, one target per event.
var formalState = map[string]string{
	"job_created": "Queued", "job_queued": "Queued", "job_requeued": "Queued", "wait_completed": "Queued",
	"job_leased": "Running", "job_running": "Running",
	"job_waiting": "Waiting", "job_parked": "Parked", "job_retrying": "Retrying",
	"job_completed": "Completed", "job_failed": "Failed", "job_cancelled": "Cancelled",
}

func run(ctx context.Context, cfg config) error {
	c, err := client.New(client.Config{BaseURL: cfg.URL, APIKey: cfg.APIKey, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Out, format+"\n", a...) }
	// Each walk, and the job events it must show in this order.
	walks := []struct {
		run  func(context.Context, *client.Client, func(string, ...any)) (*client.Job, error)
		want []string
	}{
		{waitNode, []string{"job_created", "job_waiting", "wait_completed", "job_completed"}},
		{parked, []string{"job_created", "job_running", "job_waiting", "job_parked", "job_cancelled"}},
		{requeued, []string{"job_created", "job_leased", "job_failed", "job_requeued", "job_leased", "job_completed"}},
	}
	var errs []error
	for _, w := range walks {
		j, err := w.run(ctx, c, say)
		if err != nil {
			return err
		}
		if err := printEvents(ctx, c, j.ID, w.want, say); err != nil {
			errs = append(errs, err)
		}
		say("")
	}
	return errors.Join(errs...)
}

// waitNode: a job suspended at a wait node (Running -> Waiting) until its
// signal comes (wait_completed), then Completed.
func waitNode(ctx context.Context, c *client.Client, say func(string, ...any)) (*client.Job, error) {
	j, err := c.Submit(ctx, client.JobRequest{Payload: map[string]any{"order": 7}, Steps: []client.StepSpec{
		{ID: "reserve", Action: client.Pass()},
		{ID: "paid", Action: client.Wait("payment", 600)},
		{ID: "ship", Action: client.Pass()},
	}})
	if err != nil {
		return nil, err
	}
	say("job %s: reserve -> wait node paid (signal payment) -> ship", j.ID)
	if _, err := await(ctx, c, j.ID, "the wait node", func(j *client.Job) bool { return j.State == client.JobWaiting }); err != nil {
		return nil, err
	}
	if err := showFormal(ctx, c, j.ID, "Waiting", say); err != nil {
		return nil, err
	}
	if _, err := c.Signal(ctx, j.ID, client.SignalRequest{Name: "payment", Payload: map[string]int{"amount": 5}}); err != nil {
		return nil, fmt.Errorf("signal payment: %w", err)
	}
	say("  signal payment sent")
	j, err = await(ctx, c, j.ID, "the job to complete", func(j *client.Job) bool { return j.State == client.JobCompleted })
	if err != nil {
		return nil, err
	}
	return j, showFormal(ctx, c, j.ID, "Completed", say)
}

// parked: a sleep of a day is further off than the timer threshold, so the
// job parks (Waiting -> Parked): nothing polls it until its timer. It is
// cancelled here rather than waited for.
func parked(ctx context.Context, c *client.Client, say func(string, ...any)) (*client.Job, error) {
	j, err := c.Submit(ctx, client.JobRequest{Steps: []client.StepSpec{{ID: "nightly", Action: client.Sleep(24 * 3600)}}})
	if err != nil {
		return nil, err
	}
	say("job %s: sleep a day", j.ID)
	if _, err := await(ctx, c, j.ID, "the job to park", func(j *client.Job) bool { return j.State == client.JobParked }); err != nil {
		return nil, err
	}
	if err := showFormal(ctx, c, j.ID, "Parked", say); err != nil {
		return nil, err
	}
	if j, err = c.Cancel(ctx, j.ID); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	say("  cancelled")
	return j, showFormal(ctx, c, j.ID, "Cancelled", say)
}

// requeued: a job whose step fails for good (Failed) is requeued by a
// redrive (job_requeued: Failed -> Queued) and completes on its next
// attempt. A worker plays the step: its first attempt fails, fatal.
func requeued(ctx context.Context, c *client.Client, say func(string, ...any)) (*client.Job, error) {
	const queue = "formal-import"
	w, err := worker.New(c, worker.Options{Queue: queue, Name: "importer", ClaimWait: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		func(ctx context.Context, t *worker.Task) (any, error) {
			if t.Attempt == 1 {
				return nil, worker.Fail(client.ClassFatal, "the source file is truncated")
			}
			return map[string]int{"rows": 1200}, nil
		})
	if err != nil {
		return nil, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		<-done
	}()

	j, err := c.Submit(ctx, client.JobRequest{Steps: []client.StepSpec{
		{ID: "load", Action: client.Worker(queue, 30), Retry: &client.RetryPolicy{MaxAttempts: 1}},
	}})
	if err != nil {
		return nil, err
	}
	say("job %s: load (an import that fails once, fatal)", j.ID)
	if _, err := await(ctx, c, j.ID, "the job to fail", func(j *client.Job) bool { return j.State == client.JobFailed }); err != nil {
		return nil, err
	}
	if err := showFormal(ctx, c, j.ID, "Failed", say); err != nil {
		return nil, err
	}
	if _, err := c.Redrive(ctx, j.ID); err != nil {
		return nil, fmt.Errorf("redrive: %w", err)
	}
	say("  redriven")
	j, err = await(ctx, c, j.ID, "the job to complete", func(j *client.Job) bool { return j.State == client.JobCompleted })
	if err != nil {
		return nil, err
	}
	return j, showFormal(ctx, c, j.ID, "Completed", say)
}

// printEvents prints the job's state events in the formal machine's words;
// it requires them to hold want in order and to end at the stored state.
func printEvents(ctx context.Context, c *client.Client, id string, want []string, say func(string, ...any)) error {
	evs, err := c.Events(ctx, id, client.EventsOptions{})
	if err != nil {
		return err
	}
	var path []string
	last, next := "", 0
	for _, e := range evs.Events {
		if to, ok := formalState[e.Type]; ok {
			path = append(path, fmt.Sprintf("%s -> %s", e.Type, to))
			last = to
			if next < len(want) && e.Type == want[next] {
				next++
			}
		}
	}
	say("  events: %s", strings.Join(path, ", "))
	if next < len(want) {
		return fmt.Errorf("job %s: its events miss %s (after %s)", id, want[next], strings.Join(want[:next], ", "))
	}
	if stored := titleCase(string(evs.State)); last != stored {
		return fmt.Errorf("job %s: its events lead to %s, its stored state is %s", id, last, stored)
	}
	return nil
}

// titleCase spells a canonical job state (QUEUED) as the formal machine
// does (Queued).
func titleCase(s string) string {
	if s == "" {
		return s
	}
	return s[:1] + strings.ToLower(s[1:])
}

// formalDoc is GET /v1/jobs/{id}?view=formal: the formal machine's state,
// stored and derived from the events.
type formalDoc struct {
	ID           string `json:"id"`
	View         string `json:"view"`
	State        string `json:"state"`
	DerivedState string `json:"derived_state"`
	Steps        []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
}

// showFormal prints the formal view and requires its state and derived
// state to be want.
func showFormal(ctx context.Context, c *client.Client, id, want string, say func(string, ...any)) error {
	raw, err := c.GetView(ctx, id, "formal")
	if err != nil {
		return fmt.Errorf("formal view: %w", err)
	}
	var v formalDoc
	if err := json.Unmarshal(raw, &struct{ View *string }{&v.View}); err != nil || v.View != "formal" {
		return fmt.Errorf("formal view: the API answered view %q", v.View)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("formal view: %w", err)
	}
	say("  formal view: state %s, derived_state %s", v.State, v.DerivedState)
	if v.State != want || v.DerivedState != want {
		return fmt.Errorf("job %s: formal view state %s, derived_state %s; want %s", id, v.State, v.DerivedState, want)
	}
	return nil
}

// await answers the job once cond holds, within a minute (Client.Await).
func await(ctx context.Context, c *client.Client, id, what string, cond func(*client.Job) bool) (*client.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := c.Await(ctx, id, cond)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", what, err)
	}
	return j, nil
}
