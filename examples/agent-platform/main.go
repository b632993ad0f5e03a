// Command agent-platform runs the agent platform's lifecycle on stepflow: a
// planned DAG of steps, a critic that judges every result (accept, retry,
// switch_resource, replan, needs_user), a pool of browsers the steps lease,
// and a person who confirms a purchase.
//
//	go run ./examples/agent-platform      # against make dev
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
	"slices"
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
		fmt.Fprintln(os.Stderr, "agent-platform:", err)
		os.Exit(1)
	}
}

// The queue the agent's worker claims from, and the label that picks this
// example's browsers out of the tenant's resources.
const (
	queue = "agent"
	pool  = "agent-example"
)

func run(ctx context.Context, cfg config) error {
	c, err := client.New(client.Config{BaseURL: cfg.URL, APIKey: cfg.APIKey, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Out, format+"\n", a...) }

	// The resource pool: two browsers, one slot each.
	for _, id := range []string{"browser-1", "browser-2"} {
		if _, _, err := c.PutResource(ctx, id, client.ResourceRequest{Capabilities: []string{"browser"}, Labels: map[string]string{"pool": pool}, Capacity: 1}); err != nil {
			return fmt.Errorf("put resource %s: %w", id, err)
		}
	}
	say("resource pool: browser-1, browser-2 (capability browser, pool %s)", pool)

	// The critic's worker: it runs each step, judges the result and
	// answers the engine with the decision.
	wctx, stopWorker := context.WithCancel(ctx)
	w, err := worker.New(c, worker.Options{Queue: queue, Concurrency: 4, Name: "agent-1", ClaimWait: 5 * time.Second, DrainTimeout: 10 * time.Second,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, critic(say))
	if err != nil {
		stopWorker()
		return err
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		<-workerDone
	}()

	// The plan: research and draft side by side, then buy what they found
	// (a person confirms), then report.
	delay := int64(200)
	agentStep := func(id string, deps ...string) client.StepSpec {
		return client.StepSpec{ID: id, Action: client.Worker(queue, 30), DependsOn: deps,
			Retry: &client.RetryPolicy{MaxAttempts: 3, InitialDelayMS: &delay}}
	}
	search := agentStep("search", "plan")
	search.Requires = &client.Requirements{Capabilities: []string{"browser"}, Labels: map[string]string{"pool": pool}}
	// The planner's subtasks: a map runs the agent on each, two at a time.
	research := client.StepSpec{ID: "research", DependsOn: []string{"plan"}, Action: client.Action{
		"type": "map", "items": "payload.subtasks", "max_concurrency": 2,
		"step": map[string]any{"action": client.Worker(queue, 30), "retry": map[string]any{"max_attempts": 3, "initial_delay_ms": delay}},
	}}
	j, err := c.Submit(ctx, client.JobRequest{
		Payload: map[string]any{"goal": "a market report on solar panels", "subtasks": []string{"prices", "reviews", "suppliers"}},
		Steps: []client.StepSpec{
			{ID: "plan", Action: client.Pass()},
			search,
			agentStep("draft", "plan"),
			research,
			agentStep("buy", "search", "draft", "research"),
			// The critic's verdict on what was bought picks what follows:
			// a report, or rework (a condition each; the other is SKIPPED).
			agentStep("review", "buy"),
			{ID: "report", Action: client.Pass(), DependsOn: []string{"review"}, When: "steps.review.output.verdict == 'publish'"},
			{ID: "rework", Action: client.Worker(queue, 30), DependsOn: []string{"review"}, When: "steps.review.output.verdict == 'rework'"},
		},
	})
	if err != nil {
		return fmt.Errorf("submit the plan: %w", err)
	}
	say("planned job %s: plan -> {search, draft, research over 3 subtasks} -> buy -> review -> report or rework", j.ID)

	// A person confirms the purchase the critic asked about.
	j, err = await(ctx, c, j.ID, "buy to need a person", func(j *client.Job) bool { return stepState(j, "buy") == "NEEDS_USER" })
	if err != nil {
		return err
	}
	buy, _ := j.Step("buy")
	say("person: asked %q; answering yes", buy.Prompt)
	if _, err := c.Resume(ctx, j.ID, "buy", map[string]any{"confirmed": true, "by": "ada"}); err != nil {
		return fmt.Errorf("resume buy: %w", err)
	}

	j, err = await(ctx, c, j.ID, "the job to finish", func(j *client.Job) bool { return j.State.Finished() })
	if err != nil {
		return err
	}
	evs, err := c.Events(ctx, j.ID, client.EventsOptions{})
	if err != nil {
		return err
	}
	say("\neach step's states, from the event log:")
	hist := stepHistory(evs.Events)
	for _, s := range j.Steps {
		say("  %-8s %s", s.ID, strings.Join(hist[s.ID], " -> "))
	}
	if err := printView(ctx, c, j.ID, say); err != nil {
		return err
	}
	return check(j, hist)
}

// critic runs a step as the agent and judges its result. Its decisions are
// scripted so the example shows each one: the agent platform's critic
// answers them from what the agent produced.
func critic(say func(string, ...any)) worker.Handler {
	return func(ctx context.Context, t *worker.Task) (any, error) {
		on := ""
		if t.Resource != nil {
			on = " on " + t.Resource.ID
		}
		decide := func(decision, why string) { say("critic: %s#%d%s -> %s (%s)", t.StepID, t.Attempt, on, decision, why) }
		switch {
		case t.StepID == "search" && t.Attempt == 1:
			decide("switch_resource", "the browser crashed")
			return nil, worker.Fail(client.ClassResource, "the browser crashed")
		case t.StepID == "draft" && t.Attempt == 1:
			decide("retry", "the draft cites no source")
			return nil, worker.Fail(client.ClassRetryable, "the draft cites no source")
		case t.StepID == "draft":
			decide("replan", "the draft needs an outline first")
			return nil, &worker.FailError{Class: client.ClassReplan, Message: "the draft needs an outline first", Steps: []client.StepSpec{
				{ID: "outline", Action: client.Worker(queue, 30)},
				{ID: "write", Action: client.Worker(queue, 30), DependsOn: []string{"outline"}},
			}}
		case t.StepID == "buy":
			var in struct {
				UserInput *struct {
					Confirmed bool   `json:"confirmed"`
					By        string `json:"by"`
				} `json:"user_input"`
			}
			if err := t.Decode(&in); err != nil {
				return nil, worker.Fail(client.ClassFatal, err.Error())
			}
			if in.UserInput == nil || !in.UserInput.Confirmed {
				decide("needs_user", "buying costs money")
				return nil, &worker.FailError{Class: client.ClassNeedsUser, Message: "buying costs money", Prompt: "Buy the $12 market report?"}
			}
			decide("accept", "confirmed by "+in.UserInput.By)
			return map[string]any{"bought": "market report", "confirmed_by": in.UserInput.By}, nil
		case t.StepID == "review":
			decide("accept", "verdict publish")
			return map[string]any{"verdict": "publish"}, nil
		}
		decide("accept", "looks right")
		return map[string]any{"step": t.StepID, "resource": strings.TrimPrefix(on, " on ")}, nil
	}
}

// stepHistory answers each step's states in order, read from its step_*
// events (the step machine's own words, upper case).
func stepHistory(evs []client.Event) map[string][]string {
	h := map[string][]string{}
	for _, e := range evs {
		if s, ok := strings.CutPrefix(e.Type, "step_"); ok && e.Step != "" {
			h[e.Step] = append(h[e.Step], strings.ToUpper(s))
		}
	}
	return h
}

// check requires what the lifecycle promises; any deviation is an error.
func check(j *client.Job, hist map[string][]string) error {
	var errs []error
	want := func(ok bool, format string, a ...any) bool {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
		return ok
	}
	want(j.State == client.JobCompleted, "job %s ended %s, not COMPLETED", j.ID, j.State)
	has := func(step string, states ...string) bool {
		for _, s := range states {
			if !slices.Contains(hist[step], s) {
				return false
			}
		}
		return true
	}
	if s, ok := j.Step("search"); want(ok, "no step search") {
		want(has("search", "FAILED_RESOURCE", "SWITCHING_RESOURCE", "SUCCEEDED"), "search did not switch resource: %v", hist["search"])
		want(len(s.Attempts) == 2 && s.Attempts[0].Resource != "" && s.Attempts[0].Resource != s.Attempts[1].Resource,
			"search's two attempts should run on two browsers: %+v", s.Attempts)
		want(len(s.Attempts) > 0 && slices.Contains(s.Avoid, s.Attempts[0].Resource), "search should avoid %s: %v", s.Attempts[0].Resource, s.Avoid)
	}
	if s, ok := j.Step("draft"); want(ok, "no step draft") {
		want(has("draft", "FAILED_RETRYABLE", "RETRYING", "FAILED_FATAL", "FAILED"), "draft was not retried then replanned: %v", hist["draft"])
		want(slices.Equal(s.ReplacedBy, []string{"outline", "write"}), "draft should be replaced by outline and write: %v", s.ReplacedBy)
	}
	want(has("buy", "NEEDS_USER", "SUCCEEDED"), "buy did not wait for a person: %v", hist["buy"])
	if s, ok := j.Step("research"); want(ok, "no step research") {
		want(s.Children == 3 && s.OutputIsChildren, "research should run an item per subtask: %+v", s)
	}
	for _, id := range []string{"plan", "search", "outline", "write", "research", "research[0]", "research[1]", "research[2]", "buy", "review", "report"} {
		want(stepState(j, id) == "SUCCEEDED", "step %s is %s, not SUCCEEDED", id, stepState(j, id))
	}
	want(slices.Equal(hist["rework"], []string{"WAITING_DEPS", "SKIPPED"}), "rework should be skipped by the verdict without running: %v", hist["rework"])
	return errors.Join(errs...)
}

func stepState(j *client.Job, id string) string {
	if s, ok := j.Step(id); ok {
		return s.State
	}
	return ""
}

// canonicalView is GET /v1/jobs/{id}?view=canonical: the step machine's
// states are the canonical ones.
type canonicalView struct {
	ID    string `json:"id"`
	View  string `json:"view"`
	State string `json:"state"`
	Steps []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
}

// printView prints the job in the canonical view.
func printView(ctx context.Context, c *client.Client, id string, say func(string, ...any)) error {
	raw, err := c.GetView(ctx, id, "canonical")
	if err != nil {
		return fmt.Errorf("canonical view: %w", err)
	}
	var v canonicalView
	if err := json.Unmarshal(raw, &struct{ View *string }{&v.View}); err != nil || v.View != "canonical" {
		return fmt.Errorf("canonical view: the API answered view %q", v.View)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("canonical view: %w", err)
	}
	say("canonical view: job %s", v.State)
	for _, s := range v.Steps {
		say("  %-8s %s", s.ID, s.State)
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
