// Command event-sourced runs the event-sourced job's lifecycle on
// stepflow: for jobs ending completed, failed and cancelled, it follows
// each job's event log page by page (GET /v1/jobs/{id}/events?after=),
// recomputes the job's status from the events alone, and checks it equals
// the status stepflow stored.
//
//	go run ./examples/event-sourced      # against make dev
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
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
		fmt.Fprintln(os.Stderr, "event-sourced:", err)
		os.Exit(1)
	}
}

// statusAfter is the event-sourced lifecycle's rule: each job event drives
// the status to one state, and the last such event decides. Leased is
// merged into Running; stepflow's job_retrying is the explicit Retrying,
// and its job_parked (a wait beyond the timer threshold) is still Waiting
// here, a lifecycle without Parked. Other events (step_*, signal_received,
// job_replanned) drive no job status.
var statusAfter = map[string]string{
	"job_created": "Queued", "job_queued": "Queued", "job_requeued": "Queued", "wait_completed": "Queued",
	"job_leased": "Running", "job_running": "Running",
	"job_waiting": "Waiting", "job_parked": "Waiting",
	"job_retrying":  "Retrying",
	"job_completed": "Completed", "job_failed": "Failed", "job_cancelled": "Cancelled",
}

// storedAs is the stored (canonical) job state in this lifecycle's words.
var storedAs = map[client.JobState]string{
	client.JobQueued: "Queued", client.JobRunning: "Running", client.JobWaiting: "Waiting", client.JobParked: "Waiting",
	client.JobRetrying: "Retrying", client.JobCompleted: "Completed", client.JobFailed: "Failed", client.JobCancelled: "Cancelled",
}

func terminal(status string) bool {
	return status == "Completed" || status == "Failed" || status == "Cancelled"
}

func run(ctx context.Context, cfg config) error {
	c, err := client.New(client.Config{BaseURL: cfg.URL, APIKey: cfg.APIKey, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Out, format+"\n", a...) }
	retry := func(n int) *client.RetryPolicy {
		d := int64(200)
		return &client.RetryPolicy{MaxAttempts: n, InitialDelayMS: &d}
	}
	jobs := []struct {
		name  string
		steps []client.StepSpec
		want  string
		// act moves the job on once its projection reaches a status.
		at  string
		act func(ctx context.Context, id string) error
	}{
		{name: "pass -> sleep 1 s -> pass", want: "Completed", steps: []client.StepSpec{
			{ID: "receive", Action: client.Pass()}, {ID: "settle", Action: client.Sleep(1)}, {ID: "post", Action: client.Pass()}}},
		{name: "pass -> fail (fatal)", want: "Failed", steps: []client.StepSpec{
			{ID: "receive", Action: client.Pass()}, {ID: "post", Action: client.Fail(client.ClassFatal, "the ledger refused the entry")}}},
		{name: "fail (retryable), 2 attempts", want: "Failed", steps: []client.StepSpec{
			{ID: "post", Action: client.Fail(client.ClassRetryable, "the ledger is busy"), Retry: retry(2)}}},
		{name: "wait for a signal, cancelled", want: "Cancelled", steps: []client.StepSpec{
			{ID: "confirm", Action: client.Wait("confirmation", 600)}},
			at: "Waiting", act: func(ctx context.Context, id string) error { _, err := c.Cancel(ctx, id); return err }},
	}
	var errs []error
	for _, spec := range jobs {
		j, err := c.Submit(ctx, client.JobRequest{Payload: map[string]int{"amount": 5}, Steps: spec.steps})
		if err != nil {
			return fmt.Errorf("submit %s: %w", spec.name, err)
		}
		say("job %s: %s", j.ID, spec.name)
		p := &projection{steps: map[string]string{}}
		if spec.act != nil {
			if err := p.follow(ctx, c, j.ID, func(s string) bool { return s == spec.at }); err != nil {
				return err
			}
			say("  projected %s: acting on it", p.status)
			if err := spec.act(ctx, j.ID); err != nil {
				return err
			}
		}
		if err := p.follow(ctx, c, j.ID, terminal); err != nil {
			return err
		}
		if err := p.compare(ctx, c, j.ID, spec.want, say); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// projection is a job's status (and each step's state) computed from its
// events alone, read page by page.
type projection struct {
	after  int               // the last seq read
	status string            // the job's status after the events read
	steps  map[string]string // each step's state after them
	events int
	pages  []string // each page's after
}

// apply folds one event in.
func (p *projection) apply(e client.Event) {
	if s, ok := statusAfter[e.Type]; ok {
		p.status = s
	}
	if s, ok := strings.CutPrefix(e.Type, "step_"); ok && e.Step != "" {
		p.steps[e.Step] = strings.ToUpper(s)
	}
	p.after = e.Seq
	p.events++
}

// follow reads the events after the last one read, long-polling for new
// ones, until until(status) holds and no event is left to read.
func (p *projection) follow(ctx context.Context, c *client.Client, id string, until func(string) bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		wait := 10 * time.Second
		if until(p.status) {
			wait = 0 // there: read what is left, without waiting for more
		}
		page, err := c.Events(ctx, id, client.EventsOptions{After: p.after, Wait: wait})
		if err != nil {
			return fmt.Errorf("events of %s after %d: %w", id, p.after, err)
		}
		if len(page.Events) == 0 {
			if until(p.status) {
				return nil
			}
			continue
		}
		p.pages = append(p.pages, strconv.Itoa(p.after))
		for _, e := range page.Events {
			p.apply(e)
		}
	}
}

// compare requires the projection to equal the stored job: its status and
// every step's state.
func (p *projection) compare(ctx context.Context, c *client.Client, id, want string, say func(string, ...any)) error {
	j, err := c.Job(ctx, id)
	if err != nil {
		return err
	}
	say("  read %d events in %d pages (after=%s)", p.events, len(p.pages), strings.Join(p.pages, ", "))
	stored := storedAs[j.State]
	say("  status from the events: %s; stored: %s (%s)", p.status, j.State, stored)
	var errs []error
	if p.status != stored || p.status != want {
		errs = append(errs, fmt.Errorf("job %s: the events say %s, the stored state %s, want %s", id, p.status, j.State, want))
	}
	steps := make([]string, len(j.Steps))
	for i, s := range j.Steps {
		derived := cmp.Or(p.steps[s.ID], "PENDING") // a step with no event yet is where every step starts
		steps[i] = s.ID + " " + derived
		if derived != s.State {
			errs = append(errs, fmt.Errorf("job %s step %s: the events say %s, the stored state %s", id, s.ID, derived, s.State))
		}
	}
	say("  steps from the events: %s", strings.Join(steps, ", "))
	if v, err := formalView(ctx, c, id); err != nil {
		errs = append(errs, err)
	} else {
		say("  formal view: derived_state %s", v.DerivedState)
		if v.DerivedState != p.status {
			errs = append(errs, fmt.Errorf("job %s: the formal view derives %s, the events here %s", id, v.DerivedState, p.status))
		}
	}
	if len(errs) == 0 {
		say("  the events and the stored state agree")
	}
	return errors.Join(errs...)
}

// formalDoc is GET /v1/jobs/{id}?view=formal, whose derived_state is the
// status stepflow derives from the events.
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

// formalView answers the job in the formal view.
func formalView(ctx context.Context, c *client.Client, id string) (*formalDoc, error) {
	raw, err := c.GetView(ctx, id, "formal")
	if err != nil {
		return nil, fmt.Errorf("formal view: %w", err)
	}
	var v formalDoc
	if err := json.Unmarshal(raw, &struct{ View *string }{&v.View}); err != nil || v.View != "formal" {
		return nil, fmt.Errorf("formal view: the API answered view %q", v.View)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("formal view: %w", err)
	}
	return &v, nil
}
