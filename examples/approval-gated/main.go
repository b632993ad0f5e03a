// Command approval-gated runs the approval-gated runs' lifecycle on
// stepflow: a run created under an Idempotency-Key (a repeat answers the
// same run), an approval step it waits at, another tenant who cannot see
// or approve it (404), and an approve that, sent twice, answers the same.
//
//	STEPFLOW_API_KEYS=dev:dev-key,other:other-key make dev
//	go run ./examples/approval-gated
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/stepflow/stepflow/sdk/client"
)

// config is where the example runs, as which tenants, and where it prints.
type config struct {
	URL         string
	APIKey      string
	OtherAPIKey string // another tenant's key
	Out         io.Writer
}

func main() {
	cfg := config{
		URL:         cmp.Or(os.Getenv("STEPFLOW_URL"), "http://127.0.0.1:3000"),
		APIKey:      cmp.Or(os.Getenv("STEPFLOW_API_KEY"), "dev-key"),
		OtherAPIKey: cmp.Or(os.Getenv("STEPFLOW_OTHER_API_KEY"), "other-key"),
		Out:         os.Stdout,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "approval-gated:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	newClient := func(key string) (*client.Client, error) {
		return client.New(client.Config{BaseURL: cfg.URL, APIKey: key, HTTPClient: &http.Client{Timeout: time.Minute}})
	}
	c, err := newClient(cfg.APIKey)
	if err != nil {
		return err
	}
	other, err := newClient(cfg.OtherAPIKey)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Out, format+"\n", a...) }

	// Idempotent creation: the pair (tenant, Idempotency-Key) maps one
	// request to one run.
	key := fmt.Sprintf("release-%d", time.Now().UnixNano())
	req := client.JobRequest{Payload: map[string]string{"release": "v1.4.2"}, Steps: []client.StepSpec{
		{ID: "build", Action: client.Pass()},
		{ID: "approve", Action: client.Approval(0)},
		{ID: "deploy", Action: client.Pass()},
	}}
	created, err := c.Submit(ctx, req, client.WithIdempotencyKey(key))
	if err != nil {
		return fmt.Errorf("create the run: %w", err)
	}
	say("run %s created (Idempotency-Key %s): build -> approve -> deploy", created.ID, key)
	again, err := c.Submit(ctx, req, client.WithIdempotencyKey(key))
	if err != nil {
		return fmt.Errorf("create the run again: %w", err)
	}
	if again.ID != created.ID || !again.Replayed {
		return fmt.Errorf("the same request under the same key made run %s (replayed %t), not run %s", again.ID, again.Replayed, created.ID)
	}
	say("  the same request again: run %s again, nothing created", again.ID)
	otherBody := req
	otherBody.Payload = map[string]string{"release": "v9.9.9"}
	_, err = c.Submit(ctx, otherBody, client.WithIdempotencyKey(key))
	if client.ErrorCode(err) != client.CodeIdempotencyMismatch {
		return fmt.Errorf("another request under the same key: want 422 idempotency_mismatch, got %v", err)
	}
	say("  another request under the same key: %v", err)

	// The run waits at its approval gate; workers never execute it.
	if _, err := await(ctx, c, created.ID, "the approval gate", func(j *client.Job) bool { return stepState(j, "approve") == "NEEDS_USER" }); err != nil {
		return err
	}
	waiting, err := gatedView(ctx, c, created.ID)
	if err != nil {
		return err
	}
	printGated(say, waiting)

	// Tenant isolation: another tenant's key finds no such run.
	_, err = other.Job(ctx, created.ID)
	if client.ErrorCode(err) == client.CodeUnauthorized {
		return fmt.Errorf("the other tenant's key %q is not known to the API (%v): start make dev with STEPFLOW_API_KEYS=dev:dev-key,other:other-key, or set STEPFLOW_OTHER_API_KEY", cfg.OtherAPIKey, err)
	}
	if !client.IsNotFound(err) {
		return fmt.Errorf("another tenant's GET of run %s: want 404, got %v", created.ID, err)
	}
	_, aerr := other.Approve(ctx, created.ID, "approve", client.DecisionRequest{By: "mallory"})
	if !client.IsNotFound(aerr) {
		return fmt.Errorf("another tenant's approve of run %s: want 404, got %v", created.ID, aerr)
	}
	say("another tenant: GET run -> 404, approve -> 404")

	// Approve, twice: the second answers the same and changes nothing.
	first, err := c.Approve(ctx, created.ID, "approve", client.DecisionRequest{By: "ann", Comment: "ship it"})
	if err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	second, err := c.Approve(ctx, created.ID, "approve", client.DecisionRequest{By: "ann", Comment: "ship it"})
	if err != nil {
		return fmt.Errorf("approve again: %w", err)
	}
	d1, d2 := decision(first), decision(second)
	if d1 == nil || d2 == nil || !d1.Approved || *d1 != *d2 {
		return fmt.Errorf("approving twice should answer one decision: %+v, then %+v", d1, d2)
	}
	say("approved by %s at %s; approved again: the same decision, nothing written", d1.By, d1.At.Format(time.RFC3339Nano))

	done, err := await(ctx, c, created.ID, "the run to succeed", func(j *client.Job) bool { return j.State == client.JobCompleted })
	if err != nil {
		return err
	}
	succeeded, err := gatedView(ctx, c, created.ID)
	if err != nil {
		return err
	}
	printGated(say, succeeded)
	return check(ctx, c, done, waiting, succeeded)
}

// check requires one approval in the log and, where the API has views, the
// run WAITING_APPROVAL at its gate and SUCCEEDED at the end.
func check(ctx context.Context, c *client.Client, j *client.Job, waiting, succeeded *gatedDoc) error {
	evs, err := c.Events(ctx, j.ID, client.EventsOptions{})
	if err != nil {
		return err
	}
	approvals := 0
	for _, e := range evs.Events {
		if e.Step == "approve" && e.Type == "step_succeeded" {
			approvals++
		}
	}
	if approvals != 1 {
		return fmt.Errorf("run %s: %d approvals in its log, want 1", j.ID, approvals)
	}
	if waiting.State != "WAITING_APPROVAL" || gatedStep(waiting, "approve") != "WAITING_APPROVAL" || gatedStep(waiting, "build") != "SUCCEEDED" {
		return fmt.Errorf("gated view at the gate: %+v", waiting)
	}
	if succeeded.State != "SUCCEEDED" || gatedStep(succeeded, "approve") != "SUCCEEDED" || gatedStep(succeeded, "deploy") != "SUCCEEDED" {
		return fmt.Errorf("gated view at the end: %+v", succeeded)
	}
	return nil
}

func decision(j *client.Job) *client.Decision {
	if s, ok := j.Step("approve"); ok {
		return s.Decision
	}
	return nil
}

func stepState(j *client.Job, id string) string {
	if s, ok := j.Step(id); ok {
		return s.State
	}
	return ""
}

// gatedDoc is GET /v1/jobs/{id}?view=gated: the run and its steps as
// PENDING, RUNNING, WAITING_APPROVAL, SUCCEEDED, FAILED, CANCELED.
type gatedDoc struct {
	ID    string `json:"id"`
	View  string `json:"view"`
	State string `json:"state"`
	Steps []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
}

func gatedStep(v *gatedDoc, id string) string {
	for _, s := range v.Steps {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

// gatedView answers the run in the gated view.
func gatedView(ctx context.Context, c *client.Client, id string) (*gatedDoc, error) {
	raw, err := c.GetView(ctx, id, "gated")
	if err != nil {
		return nil, fmt.Errorf("gated view: %w", err)
	}
	var v gatedDoc
	if err := json.Unmarshal(raw, &struct{ View *string }{&v.View}); err != nil || v.View != "gated" {
		return nil, fmt.Errorf("gated view: the API answered view %q", v.View)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("gated view: %w", err)
	}
	return &v, nil
}

func printGated(say func(string, ...any), v *gatedDoc) {
	steps := make([]string, len(v.Steps))
	for i, s := range v.Steps {
		steps[i] = s.ID + " " + s.State
	}
	say("gated view: run %s; steps %s", v.State, strings.Join(steps, ", "))
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
