package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/sdk/client"
)

func jobCommands(a *app) []*cobra.Command {
	return []*cobra.Command{
		submitCmd(a), getCmd(a), listCmd(a), eventsCmd(a), watchCmd(a), outputCmd(a),
		jobAction(a, "cancel JOB", "Cancel a job and fence off its running attempts", func(ctx context.Context, c *client.Client, id string) (*client.Job, error) { return c.Cancel(ctx, id) }),
		jobAction(a, "redrive JOB", "Run a FAILED job again from its failed and cancelled steps", func(ctx context.Context, c *client.Client, id string) (*client.Job, error) { return c.Redrive(ctx, id) }),
		decideCmd(a, true), decideCmd(a, false), resumeCmd(a), signalCmd(a), budgetCmd(a),
	}
}

func submitCmd(a *app) *cobra.Command {
	var file, action, stepID, payload, queue, priority, runAt, idemKey string
	var params []string
	var timeout, maxAttempts int
	var watch bool
	cmd := &cobra.Command{
		Use:   "submit (-f FILE | FILE... | --action TYPE [--param k=v]...)",
		Short: "Submit a job from a JSON or YAML file, several jobs from several files, or a one-step job from flags",
		Long: `Submit a job: the body POST /v1/jobs takes, from a JSON or YAML file (-f, or -f - for
stdin), or a one-step job from flags: --action names its type and each --param one
of that type's parameters (a value that parses as JSON is JSON, else a string).

Several files submit their jobs together (POST /v1/jobs/batch, 25 a request), each
on its own: a line per file with its job or its error, and exit code 1 if any was
refused. A file may carry its job's own "idempotency_key"; one without is given one,
so a retried request never submits a job twice.`,
		Example: `  stepflow submit -f job.yaml
  stepflow submit a.json b.json c.yaml
  stepflow submit --action pass --payload '{"hi":1}'
  stepflow submit --action worker --param queue=gpu --param lease_seconds=60 --watch
  stepflow submit --action sleep --param seconds=30`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, files []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if len(files) > 0 && (file != "" || action != "") {
				return errors.New("give files, -f or --action: one of them")
			}
			if len(files) == 1 {
				file = files[0]
			}
			if len(files) > 1 {
				if idemKey != "" || watch {
					return errors.New("--idempotency-key and --watch take one job; give each file its own \"idempotency_key\"")
				}
				return a.submitFiles(cmd.Context(), c, files)
			}
			var body json.RawMessage
			switch {
			case file != "" && action != "":
				return errors.New("give -f or --action, not both")
			case file != "":
				if body, err = a.readDoc(file); err != nil {
					return err
				}
			case action != "":
				if body, err = a.oneStep(action, stepID, params, payload, queue, priority, runAt, timeout, maxAttempts); err != nil {
					return err
				}
			default:
				return errors.New("give -f FILE or --action TYPE")
			}
			var opts []client.SubmitOption
			if idemKey != "" {
				opts = append(opts, client.WithIdempotencyKey(idemKey))
			}
			j, err := c.SubmitJSON(cmd.Context(), body, opts...)
			if client.IsBudgetExceeded(err) {
				return fmt.Errorf("%w (stepflow budget shows the tenant's daily budget)", err)
			}
			if err != nil {
				return err
			}
			if watch {
				if a.output == "table" {
					fmt.Fprintf(a.stdout, "job %s submitted\n", j.ID)
				}
				return a.watch(cmd.Context(), c, j.ID)
			}
			return a.show(j, func() error {
				replay := ""
				if j.Replayed {
					replay = " (submitted before under this idempotency key)"
				}
				_, err := fmt.Fprintf(a.stdout, "%s %s%s\n", j.ID, j.State, replay)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the job as JSON or YAML; - reads stdin")
	f.StringVar(&action, "action", "", "a one-step job of this action type: pass, sleep, fail, http, worker, lambda, approval, wait")
	f.StringArrayVar(&params, "param", nil, "a parameter of the action, key=value (repeatable)")
	f.StringVar(&stepID, "step", "", "the step's id (default: the action type)")
	f.StringVar(&payload, "payload", "", "the payload: JSON, or @file (JSON or YAML)")
	f.StringVar(&queue, "queue", "", "the job's queue")
	f.StringVar(&priority, "priority", "", "0-2 or P0-P2 (default 1)")
	f.StringVar(&runAt, "run-at", "", "start no earlier than this RFC 3339 time")
	f.IntVar(&timeout, "timeout-seconds", 0, "one attempt's bound")
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts in all (the step's retry.max_attempts)")
	f.StringVar(&idemKey, "idempotency-key", "", "submit once under this key: the same key and body answer the same job")
	f.BoolVar(&watch, "watch", false, "watch the job until it ends (exit code as watch's)")
	return cmd
}

// submitFiles submits the jobs of several files, client.MaxBatchJobs a
// request, and prints a line for each: its job, or why it was refused.
// Any refused job is exit code 1.
func (a *app) submitFiles(ctx context.Context, c *client.Client, files []string) error {
	bodies := make([]json.RawMessage, len(files))
	for i, f := range files {
		b, err := a.readDoc(f)
		if err != nil {
			return err
		}
		bodies[i] = b
	}
	type refusal struct {
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field,omitempty"`
		err     *client.Error
	}
	type answer struct {
		File           string      `json:"file"`
		Job            *client.Job `json:"job,omitempty"`
		Error          *refusal    `json:"error,omitempty"`
		IdempotencyKey string      `json:"idempotency_key"`
	}
	var answers []answer
	refused := 0
	for from := 0; from < len(bodies); from += client.MaxBatchJobs {
		to := min(from+client.MaxBatchJobs, len(bodies))
		res, err := c.SubmitBatchJSON(ctx, bodies[from:to])
		if err != nil {
			if from > 0 {
				err = fmt.Errorf("%w (the jobs of the %d files before %s were submitted)", err, from, files[from])
			}
			return err
		}
		for i, r := range res {
			an := answer{File: files[from+i], Job: r.Job, IdempotencyKey: r.IdempotencyKey}
			if e := r.Err; e != nil {
				an.Error = &refusal{Status: e.Status, Code: e.Code, Message: e.Message, Field: e.Field, err: e}
				refused++
			}
			answers = append(answers, an)
		}
	}
	err := a.show(answers, func() error {
		for _, an := range answers {
			if an.Error != nil {
				fmt.Fprintf(a.stdout, "%s\terror: %s\n", an.File, an.Error.err.Error())
				continue
			}
			replay := ""
			if an.Job.Replayed {
				replay = " (submitted before under this idempotency key)"
			}
			fmt.Fprintf(a.stdout, "%s\t%s %s%s\n", an.File, an.Job.ID, an.Job.State, replay)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if refused > 0 {
		return &exitCode{code: exitError, err: fmt.Errorf("%d of %d jobs refused", refused, len(files))}
	}
	return nil
}

// oneStep builds a one-step job body from submit's flags.
func (a *app) oneStep(action, stepID string, params []string, payload, queue, priority, runAt string, timeout, maxAttempts int) (json.RawMessage, error) {
	act := map[string]any{"type": action}
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" || k == "type" {
			return nil, fmt.Errorf("--param %q is not key=value", p)
		}
		var val any = v
		if json.Valid([]byte(v)) {
			val = json.RawMessage(v)
		}
		act[k] = val
	}
	step := map[string]any{"id": stepID, "action": act}
	if stepID == "" {
		step["id"] = action
	}
	if timeout > 0 {
		step["timeout_seconds"] = timeout
	}
	if maxAttempts > 0 {
		step["retry"] = map[string]int{"max_attempts": maxAttempts}
	}
	job := map[string]any{"steps": []any{step}}
	if payload != "" {
		p, err := a.jsonArg(payload)
		if err != nil {
			return nil, err
		}
		job["payload"] = p
	}
	if queue != "" {
		job["queue"] = queue
	}
	if priority != "" {
		if n, err := strconv.Atoi(priority); err == nil {
			job["priority"] = n
		} else {
			job["priority"] = priority
		}
	}
	if runAt != "" {
		job["run_at"] = runAt
	}
	return json.Marshal(job)
}

func getCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB",
		Short: "Show a job: its state, steps and attempts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			j, err := c.Job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.show(j, func() error { return a.printJob(j) })
		},
	}
}

// printJob writes a job as a header and a table of its steps.
func (a *app) printJob(j *client.Job) error {
	fmt.Fprintf(a.stdout, "job      %s\nstate    %s\nqueue    %s (priority %d)\ncreated  %s\n", j.ID, j.State, j.Queue, j.Priority, when(&j.CreatedAt))
	if j.EndedAt != nil {
		fmt.Fprintf(a.stdout, "ended    %s\n", when(j.EndedAt))
	}
	if j.ScheduleID != "" {
		fmt.Fprintf(a.stdout, "schedule %s\n", j.ScheduleID)
	}
	if p := j.Parent; p != nil {
		fmt.Fprintf(a.stdout, "parent   %s (step %s, attempt %d)\n", p.Job, p.Step, p.Attempt)
	}
	if len(j.Children) > 0 {
		fmt.Fprintf(a.stdout, "children %s\n", children(j))
	}
	if j.Error != nil {
		fmt.Fprintf(a.stdout, "error    %s: %s\n", j.Error.Class, j.Error.Message)
	}
	fmt.Fprintf(a.stdout, "cost     %s\n", costLine(j.Cost))
	if j.Budget != nil {
		fmt.Fprintf(a.stdout, "budget   %s\n", budgetLine(j))
	}
	fmt.Fprintln(a.stdout)
	// A cost column only when a step reported one: most never do.
	spent := slices.ContainsFunc(j.Steps, func(s client.Step) bool { return s.CostUSD > 0 })
	row := func(id, action, state, attempt string, cost float64, note string) []string {
		if !spent {
			return []string{id, action, state, attempt, note}
		}
		c := "-"
		if cost > 0 {
			c = dollars(cost)
		}
		return []string{id, action, state, attempt, c, note}
	}
	var rows [][]string
	items := map[string]map[string]int{} // a map's items by state
	for _, s := range j.Steps {
		if s.MapOf != "" {
			if items[s.MapOf] == nil {
				items[s.MapOf] = map[string]int{}
			}
			items[s.MapOf][s.State]++
		}
	}
	for _, s := range j.Steps {
		if s.MapOf != "" {
			continue // counted on its map's row
		}
		if byState := items[s.ID]; byState != nil {
			var parts []string
			for _, st := range slices.Sorted(maps.Keys(byState)) {
				parts = append(parts, fmt.Sprintf("%d %s", byState[st], st))
			}
			rows = append(rows, row(s.ID, s.Action, s.State, "-", s.CostUSD, short(fmt.Sprintf("%d items: %s", s.Children, strings.Join(parts, ", ")), 70)))
			continue
		}
		attempt := fmt.Sprintf("%d/%d", s.Attempt, s.MaxAttempts)
		if neverRuns(j, &s) {
			attempt = "-" // 0/3 would read as a step still to run
		}
		note := stepNote(&s)
		if child := stepChild(&s); child != "" {
			note = childNote(&s, child, note)
		}
		rows = append(rows, row(s.ID, s.Action, s.State, attempt, s.CostUSD, note))
	}
	header := []string{"STEP", "ACTION", "STATE", "ATTEMPT", "NOTE"}
	if spent {
		header = []string{"STEP", "ACTION", "STATE", "ATTEMPT", "COST", "NOTE"}
	}
	return a.table(header, rows)
}

// costLine says what a job cost so far and of what.
func costLine(c client.Cost) string {
	line := fmt.Sprintf("$%.6f (engine $%.6f, reported $%.6f", c.USD, c.EngineUSD, c.ReportedUSD)
	if c.ChildrenUSD != 0 {
		line += fmt.Sprintf(", children $%.6f", c.ChildrenUSD)
	}
	return line + ")"
}

// budgetLine says what a job may cost and, when it waits at its budget
// gate, why and how to let it go on.
func budgetLine(j *client.Job) string {
	b := j.Budget
	line := dollars(b.USD)
	if b.Exceeded == nil {
		return line
	}
	why := b.Message
	if why == "" {
		why = fmt.Sprintf("budget exceeded: %s of %s", dollars(b.Exceeded.CostUSD), dollars(b.USD))
	}
	return fmt.Sprintf("%s — exceeded: %s; raise it: stepflow budget %s --usd N", line, why, j.ID)
}

// dollars shows an amount of US dollars to the cent, or as finely as it
// needs below one ($0.50, $2.00, $0.0042).
func dollars(usd float64) string {
	s := strings.TrimRight(strconv.FormatFloat(usd, 'f', 6, 64), "0")
	if decimals := len(s) - strings.IndexByte(s, '.') - 1; decimals < 2 {
		s += strings.Repeat("0", 2-decimals)
	}
	return "$" + s
}

// neverRuns reports a step that did not run and will not: skipped,
// cancelled before it started, or left unrun by a job that finished.
func neverRuns(j *client.Job, s *client.Step) bool {
	return s.Attempt == 0 && (s.State == "SKIPPED" || s.State == "CANCELLED" || j.State.Finished())
}

// shownChildren is how many of a job's children get names its header
// names; past it, their count and `list --parent` lists them all.
const shownChildren = 5

// children names a job's child jobs, in step order: each, or when there
// are many the first few and how to list them all.
func children(j *client.Job) string {
	if len(j.Children) <= shownChildren {
		return strings.Join(j.Children, ", ")
	}
	return fmt.Sprintf("%d: %s, … (stepflow list --parent %s)", len(j.Children), strings.Join(j.Children[:shownChildren], ", "), j.ID)
}

// stepChild answers the child job of a job step: the one its running
// attempt waits on, else the one its latest attempt made.
func stepChild(s *client.Step) string {
	if s.Child != "" {
		return s.Child
	}
	for i := len(s.Attempts) - 1; i >= 0; i-- {
		if c := s.Attempts[i].Child; c != "" {
			return c
		}
	}
	return ""
}

// childNote is a job step's note: its child job first, then what else
// is worth knowing of it (its error or output; not the lease the engine
// holds while the child runs).
func childNote(s *client.Step, child, note string) string {
	out := "child " + child
	if s.Lease != nil && s.Error == nil {
		return out
	}
	if note != "" {
		out += "; " + note
	}
	return out
}

// stepNote says the one thing most worth knowing of a step now.
func stepNote(s *client.Step) string {
	switch {
	case s.State == "SKIPPED":
		return short("skipped: when "+s.When+" was false", 70)
	case s.Error != nil:
		return short(s.Error.Class+": "+s.Error.Message, 70)
	case s.Prompt != "":
		return short("asks: "+s.Prompt, 70)
	case s.Lease != nil:
		return "leased to " + orDash(s.Lease.Worker) + " until " + when(&s.Lease.ExpiresAt)
	case s.NextRunAt != nil:
		return "next attempt " + when(s.NextRunAt)
	case s.ResourceWait != nil && s.ResourceWait.Until != nil:
		return "waits for a resource slot until " + when(s.ResourceWait.Until)
	case s.WakeAt != nil:
		return "wakes " + when(s.WakeAt)
	case s.Signal != "" && s.State == "WAITING":
		return "waits for signal " + s.Signal
	case s.OutputRef != nil:
		return fmt.Sprintf("output in S3 (%d bytes)", s.OutputRef.Size)
	case len(s.Output) > 0:
		return short("output "+string(s.Output), 70)
	}
	return ""
}

func listCmd(a *app) *cobra.Command {
	var o client.ListJobsOptions
	var state string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first",
		Long:  "List the tenant's jobs, newest first, a page at a time (--cursor goes on from where a page ended), or every page with --all.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			o.State = client.JobState(strings.ToUpper(state))
			var jobs []client.JobSummary
			next := ""
			if all {
				for j, err := range c.Jobs(cmd.Context(), o) {
					if err != nil {
						return err
					}
					jobs = append(jobs, j)
				}
			} else {
				p, err := c.ListJobs(cmd.Context(), o)
				if err != nil {
					return err
				}
				jobs, next = p.Jobs, p.NextCursor
			}
			if a.output == "json" {
				return a.printJSON(client.JobPage{Jobs: jobs, NextCursor: next})
			}
			rows := make([][]string, 0, len(jobs))
			for _, j := range jobs {
				rows = append(rows, []string{j.ID, string(j.State), j.Queue, orDash(j.ScheduleID)})
			}
			if err := a.table([]string{"ID", "STATE", "QUEUE", "SCHEDULE"}, rows); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(a.stderr, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only jobs in this state (QUEUED, RUNNING, WAITING, PARKED, RETRYING, COMPLETED, FAILED, CANCELLED)")
	f.StringVar(&o.Queue, "queue", "", "only jobs of this queue")
	f.StringVar(&o.Schedule, "schedule", "", "only the runs of this schedule")
	f.StringVar(&o.Parent, "parent", "", "only the child jobs of this job (its job steps')")
	f.IntVar(&o.Limit, "limit", 0, "jobs a page, 1-100 (default 50)")
	f.StringVar(&o.Cursor, "cursor", "", "go on from a page's next cursor")
	f.BoolVar(&all, "all", false, "every page")
	return cmd
}

func eventsCmd(a *app) *cobra.Command {
	var after int
	cmd := &cobra.Command{
		Use:   "events JOB",
		Short: "Show a job's event log, in order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.Events(cmd.Context(), args[0], client.EventsOptions{After: after})
			if err != nil {
				return err
			}
			for l.More { // a long job's log comes a page at a time
				next, err := c.Events(cmd.Context(), args[0], client.EventsOptions{After: l.LastSeq})
				if err != nil {
					return err
				}
				l.Events = append(l.Events, next.Events...)
				l.State, l.LastSeq, l.More = next.State, next.LastSeq, next.More && next.LastSeq > l.LastSeq
			}
			return a.show(l, func() error {
				rows := make([][]string, 0, len(l.Events))
				for _, e := range l.Events {
					att := "-"
					if e.Attempt > 0 {
						att = strconv.Itoa(e.Attempt)
					}
					rows = append(rows, []string{strconv.Itoa(e.Seq), when(&e.At), e.Type, orDash(e.Step), att, short(e.Detail, 80)})
				}
				return a.table([]string{"SEQ", "AT", "TYPE", "STEP", "ATTEMPT", "DETAIL"}, rows)
			})
		},
	}
	cmd.Flags().IntVar(&after, "after", 0, "only events after this sequence number")
	return cmd
}

func watchCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "watch JOB",
		Short: "Follow a job's progress until it ends; exit 0 only if it COMPLETED",
		Long: `Print each event of the job as it happens until the job ends, then its steps.
The exit code is 0 when the job COMPLETED, 2 when it FAILED, 3 when it was CANCELLED.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.watch(cmd.Context(), c, args[0])
		},
	}
}

// watchWait is how long one events request may long-poll.
const watchWait = 20 * time.Second

// watch follows a job's events until it ends. It long-polls the events
// route (after, wait); where the API answers at once, it asks once a
// second.
func (a *app) watch(ctx context.Context, c *client.Client, id string) error {
	seq := 0
	maps := mapProgress{}
	for {
		start := time.Now()
		l, err := c.Events(ctx, id, client.EventsOptions{After: seq, Wait: watchWait})
		if err != nil {
			return err
		}
		ended := false
		for _, e := range l.Events {
			seq = max(seq, e.Seq)
			if maps.item(e) && a.output != "json" {
				continue // a map's items show as its progress, below
			}
			a.printEvent(e)
			maps.start(e)
			switch e.Type {
			case "job_completed", "job_failed", "job_cancelled":
				ended = true
			}
		}
		maps.print(a)
		if ended {
			j, err := c.Job(ctx, id)
			if err != nil {
				return err
			}
			if !j.State.Finished() {
				continue // redriven meanwhile: follow on
			}
			if err := a.show(j, func() error { fmt.Fprintln(a.stdout); return a.printJob(j) }); err != nil {
				return err
			}
			switch j.State {
			case client.JobFailed:
				return &exitCode{code: exitFailed, err: fmt.Errorf("job %s FAILED", id)}
			case client.JobCancelled:
				return &exitCode{code: exitCancelled, err: fmt.Errorf("job %s was CANCELLED", id)}
			}
			return nil
		}
		if len(l.Events) == 0 {
			if rest := time.Second - time.Since(start); rest > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(rest):
				}
			}
		}
	}
}

// mapProgress follows a watched job's maps: an item's events are not
// printed one by one (a map may have 10,000), but as a line a map per
// poll, with how many items have ended.
type mapProgress map[string]*mapCount

type mapCount struct {
	items, ended, failed int
	changed              bool
}

// start notes a map's item count from its step_waiting_deps ("N items").
func (m mapProgress) start(e client.Event) {
	var n int
	if e.Type == "step_waiting_deps" && e.Step != "" {
		if _, err := fmt.Sscanf(e.Detail, "%d items", &n); err == nil && n > 0 {
			m[e.Step] = &mapCount{items: n}
		}
	}
}

// item reports whether e is an item's event of a map being followed, and
// counts it when it ends the item.
func (m mapProgress) item(e client.Event) bool {
	i := strings.LastIndexByte(e.Step, '[')
	if i <= 0 || !strings.HasSuffix(e.Step, "]") {
		return false
	}
	c, ok := m[e.Step[:i]]
	if !ok {
		return false
	}
	switch e.Type {
	case "step_succeeded", "step_cancelled", "step_skipped":
		c.ended++
		c.changed = true
	case "step_failed":
		c.ended++
		c.failed++
		c.changed = true
	}
	return true
}

func (m mapProgress) print(a *app) {
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if c := m[id]; c.changed {
			c.changed = false
			line := fmt.Sprintf("%s  %-22s  %s  %d of %d items ended", time.Now().Format("15:04:05"), "map_progress", id, c.ended, c.items)
			if c.failed > 0 {
				line += fmt.Sprintf(", %d failed", c.failed)
			}
			fmt.Fprintln(a.stdout, line)
		}
	}
}

// printEvent writes one event as a progress line (JSON: one object a line).
func (a *app) printEvent(e client.Event) {
	if a.output == "json" {
		b, _ := json.Marshal(e)
		fmt.Fprintln(a.stdout, string(b))
		return
	}
	line := e.At.Local().Format("15:04:05") + "  " + fmt.Sprintf("%-22s", e.Type)
	if e.Step != "" {
		line += "  " + e.Step
		if e.Attempt > 0 {
			line += fmt.Sprintf(" #%d", e.Attempt)
		}
	}
	if e.Detail != "" {
		line += "  " + short(e.Detail, 100)
	}
	fmt.Fprintln(a.stdout, line)
}

func outputCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "output JOB STEP",
		Short: "Print a step's whole output (also one kept in S3)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.StepOutput(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return a.printJSON(out)
		},
	}
}

// jobAction is a command acting on one job and answering it.
func jobAction(a *app, use, short string, do func(context.Context, *client.Client, string) (*client.Job, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			j, err := do(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			return a.show(j, func() error { _, err := fmt.Fprintf(a.stdout, "%s %s\n", j.ID, j.State); return err })
		},
	}
}

func decideCmd(a *app, approve bool) *cobra.Command {
	var d client.DecisionRequest
	use, short := "approve JOB STEP", "Approve an approval gate"
	if !approve {
		use, short = "reject JOB STEP", "Reject an approval gate (its job fails)"
	}
	cmd := jobAction2(a, use, short, func(ctx context.Context, c *client.Client, job, step string) (*client.Job, error) {
		if approve {
			return c.Approve(ctx, job, step, d)
		}
		return c.Reject(ctx, job, step, d)
	})
	cmd.Flags().StringVar(&d.By, "by", "", "who decides (recorded with the key's id)")
	cmd.Flags().StringVar(&d.Comment, "comment", "", "why")
	return cmd
}

func resumeCmd(a *app) *cobra.Command {
	var input string
	cmd := jobAction2(a, "resume JOB STEP", "Run a step waiting on a person (NEEDS_USER) again with their input", func(ctx context.Context, c *client.Client, job, step string) (*client.Job, error) {
		var in json.RawMessage
		if input != "" {
			var err error
			if in, err = a.jsonArg(input); err != nil {
				return nil, err
			}
		}
		return c.Resume(ctx, job, step, in)
	})
	cmd.Flags().StringVar(&input, "input", "", "the person's answer: JSON, @file, or text")
	return cmd
}

func signalCmd(a *app) *cobra.Command {
	var payload, id string
	cmd := jobAction2(a, "signal JOB NAME", "Send a signal to a job's waits", func(ctx context.Context, c *client.Client, job, name string) (*client.Job, error) {
		s := client.SignalRequest{Name: name, ID: id}
		if payload != "" {
			p, err := a.jsonArg(payload)
			if err != nil {
				return nil, err
			}
			s.Payload = p
		}
		return c.Signal(ctx, job, s)
	})
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's payload: JSON, @file, or text")
	cmd.Flags().StringVar(&id, "id", "", "the signal's id: a repeat of it is delivered once (default: a new one)")
	return cmd
}

// jobAction2 is a command acting on a job and a second argument.
func jobAction2(a *app, use, short string, do func(context.Context, *client.Client, string, string) (*client.Job, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			j, err := do(cmd.Context(), c, args[0], args[1])
			if err != nil {
				return err
			}
			return a.show(j, func() error { _, err := fmt.Fprintf(a.stdout, "%s %s\n", j.ID, j.State); return err })
		},
	}
}
