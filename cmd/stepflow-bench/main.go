// Command stepflow-bench measures stepflow on the local stack: throughput
// and latency against a bare floor loop on the same emulator, every AWS
// request it makes and what else AWS bills (API Gateway requests, Lambda
// requests and duration, logs, storage for the retention, the work at
// expiry), and what that would cost on AWS next to the physical floor and
// to Step Functions for the same work. It writes docs/benchmarks.md and a
// chart.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/sdk/client"
	"github.com/stepflow/stepflow/sdk/worker"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/logging"
	"github.com/stepflow/stepflow/shared/store"
)

const (
	benchKey    = "bench-key"
	benchTenant = "bench"
	// benchTimerThreshold makes the timer workload's 5 s sleeps long
	// timers, as hour-long ones are on AWS at the default 900 s: the
	// heartbeat's sweep sends each within reach.
	benchTimerThreshold = 2 * time.Second
	// benchSweepEvery is how often the bench runs the heartbeat's sweep
	// during the timer workload (the template's is every minute, a long
	// way off for 5 s sleeps).
	benchSweepEvery = 500 * time.Millisecond
	// sweepTag marks the requests of those sweeps (costmeter.Tag), which
	// are the timers' own cost.
	sweepTag = "sweep"
)

type options struct {
	jobs, concurrency, workers int
	rest                       []int
	out, chart, prices         string
	skipBuild                  bool
	// only, when set, runs just the workloads whose names contain one of
	// these, and prints their cost; docs/benchmarks.md is not written.
	only []string
	// largeOutput is what the large-output workload's workers complete
	// with; noBlobs keeps every output in the job's item (no S3), to
	// measure what large data cost before it went to S3.
	largeOutput int
	noBlobs     bool
	// jobStateEvents is the stack's STEPFLOW_JOB_STATE_EVENTS, the
	// template's default: which Job State Change events were put, and so
	// what the events column bills.
	jobStateEvents string
	// poller is how the event source mapping receives: "batching" (up to
	// ten messages a receive, as the local runner does), "aws" (one a
	// receive, as Lambda's pollers do at low load) or "both" (batching, and
	// the single-step workload again AWS-like).
	poller string
	// retentionDays is how long a COMPLETED job is kept (the template's
	// RetentionCompletedDays): what storage is priced for.
	retentionDays int
	// logLevel is the level the functions log at on AWS, the template's
	// LogLevel default.
	logLevel string
	// parameters give template parameters other values (--only runs
	// alone: the report is of the defaults), to price a setting such as
	// ReadyBatchingWindowSeconds.
	parameters map[string]string
}

func main() {
	var o options
	cmd := &cobra.Command{
		Use:          "stepflow-bench",
		Short:        "Benchmark stepflow on the local stack and price what AWS would bill for it",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.jobs, "jobs", 1000, "single-step jobs (five-step and worker workloads run a fifth as many jobs)")
	f.IntVar(&o.concurrency, "concurrency", 8, "clients submitting at once (and floor producers)")
	f.IntVar(&o.workers, "workers", 4, "external workers claiming worker steps")
	f.IntSliceVar(&o.rest, "rest", []int{0, 10000, 100000, 1000000}, "jobs at rest under which the heartbeat's sweep is measured (in moto up to 10,000; every size on the in-memory store)")
	f.StringVar(&o.out, "out", "docs/benchmarks.md", "markdown report (also printed)")
	f.StringVar(&o.chart, "chart", "docs/benchmarks.png", "chart")
	f.StringVar(&o.prices, "prices", "docs/costs.md", "price table")
	f.BoolVar(&o.skipBuild, "skip-build", false, "do not build the Lambda bootstraps to measure their size")
	f.StringSliceVar(&o.only, "only", nil, "run only the workloads whose names contain one of these (e.g. --only five-step,timer) and print what each cost; writes no report")
	f.IntVar(&o.largeOutput, "large-output", 32*1024, "bytes each step of the large-output worker workload completes with (incompressible)")
	f.BoolVar(&o.noBlobs, "no-blobs", false, "keep every payload and output in the job's item, no S3 (the cost before large data went to S3)")
	f.StringToStringVar(&o.parameters, "parameter", nil, "a template parameter's value other than its default, as a deploy's override (e.g. --parameter ReadyBatchingWindowSeconds=1); only with --only")
	f.StringVar(&o.poller, "poller", "both", "how the event source mapping receives: batching (up to ten a receive), aws (one a receive, as Lambda's pollers at low load), both (batching, and the single-step workload again AWS-like)")
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}

// result is one workload's measurement.
type result struct {
	Name        string
	Jobs        int
	StepsPerJob int
	Wall        time.Duration
	Requests    map[string]int64 // by service.Operation, at the emulator proxy
	Units       costmeter.Units
	Lambda      map[string]costmeter.LambdaUse // by function
	APIRequests int64                          // API Gateway, as billed
	Logs        costmeter.LogUse
	// ItemBytes and ObjectBytes are what the workload left stored in the
	// table (as billed: costmeter.StoredBytes) and in S3, for
	// RetentionDays; DataJobs its jobs with data in S3, and Expiry the
	// sweep's work to delete it (expiryPoint).
	ItemBytes, ObjectBytes float64
	RetentionDays          int
	DataJobs               int
	Expiry                 costmeter.Units
	ToStart                []time.Duration
	ToDone                 []time.Duration
	Attempts               int // step attempts in all
	// Entered counts the steps entered in all (each attempt, or once for a
	// step no executor runs): the Task and Wait states the same work needs
	// on Step Functions.
	Entered int
	// Own is what the jobs counted of their own usage, summed
	// (domain.Job.Usage: cost.units), to hold against the meter.
	Own domain.Usage
	// Sweeps are the requests of the sweeps the bench ran during the
	// workload (the timer workload's) beyond what as many sweeps with
	// nothing due cost: sending the long timers within reach. They are in
	// Requests and Units too.
	Sweeps costmeter.Tagged
}

func (r result) jobsPerSec() float64 { return float64(r.Jobs) / r.Wall.Seconds() }

func (r result) count(prefix string) int64 {
	var n int64
	for k, v := range r.Requests {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

func (r result) invocations() float64 {
	var n float64
	for _, v := range r.Lambda {
		n += v.Requests
	}
	return n
}

func (r result) gbSeconds() float64 {
	var n float64
	for _, v := range r.Lambda {
		n += v.GBSeconds
	}
	return n
}

// usage is all the workload used, as costmeter prices it: the requests
// at the proxy, the units metered, the S3 GETs of presigned URLs by
// workers (the proxy's s3.GetObject beyond the engine's own), the long
// timers (the sweeps' requests that sent them, taken out of the rest; or
// the timer state machine's executions, states.StartExecution, on a stack
// with LongTimers StepFunctions), and the rest metered around the
// functions.
func (r result) usage() costmeter.Usage {
	units := r.Units.Minus(r.Sweeps.Units)
	units.S3Reads += max(float64(r.count("s3.GetObject"))-r.Units.S3Reads, 0)
	var armSQS float64
	for k, v := range r.Sweeps.Requests {
		if strings.HasPrefix(k, "SQS.") {
			armSQS += float64(v)
		}
	}
	return costmeter.Usage{
		Jobs: float64(r.Jobs), Units: units,
		Arms: r.Sweeps.Units, ArmSQSRequests: armSQS,
		SQSRequests:    float64(r.count("sqs.")) - armSQS,
		LambdaRequests: r.invocations(), LambdaGBSeconds: r.gbSeconds(),
		APIRequests:     float64(r.APIRequests),
		TimerExecutions: float64(r.count("states.StartExecution")),
		LogBytes:        float64(r.Logs.Bytes), LogEvents: float64(r.Logs.Events),
		StoredItemBytes: r.ItemBytes, StoredObjectBytes: r.ObjectBytes, RetentionDays: float64(r.RetentionDays),
		Expiry: r.Expiry,
	}
}

// bill answers the workload's charges in USD per million jobs.
func (r result) bill(p costmeter.Prices) costmeter.Bill { return p.Bill(r.usage()) }

// stepFunctions prices the same work as Step Functions Standard and Express
// workflows (docs/costs.md says how).
func (r result) stepFunctions(p costmeter.Prices) (standard, express float64) {
	perJob := 1e6 / float64(r.Jobs)
	transitions := float64(r.Entered + r.Jobs)
	standard = transitions * p["sfn_standard_transition"] * perJob
	var secs float64
	for _, d := range r.ToDone {
		secs += max(0.1, float64((d+99*time.Millisecond)/(100*time.Millisecond))/10)
	}
	express = (float64(r.Jobs)*p["sfn_express_request"] + secs*0.064*p["sfn_express_gb_second"]) * perJob
	return
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

type bench struct {
	o      options
	stack  *devstack.Stack
	meter  *costmeter.Meter
	direct *store.Store     // reads the emulator directly, past the proxy, so observing costs nothing
	raw    *dynamodb.Client // the same, for single attributes
	http   *http.Client
	log    *slog.Logger

	// The meters around the functions: invocations and their duration,
	// API Gateway's requests, what the functions log.
	lambda *costmeter.Lambda
	api    *costmeter.APIGateway
	logs   *costmeter.Logs
	poller *pollerMode
	url    string // the HTTP API, behind API Gateway's meter
	// clock is how far the engine's clock is ahead of the wall clock
	// (nanoseconds): the expiry measurement moves it past the retention.
	clock atomic.Int64
}

func (b *bench) now() time.Time { return time.Now().Add(time.Duration(b.clock.Load())) }

func run(ctx context.Context, o options) error {
	prices, err := costmeter.LoadPrices(o.prices)
	if err != nil {
		return err
	}
	if o.poller != "batching" && o.poller != "aws" && o.poller != "both" {
		return fmt.Errorf("--poller %q: want batching, aws or both", o.poller)
	}
	if len(o.parameters) > 0 && len(o.only) == 0 {
		return errors.New("--parameter needs --only: docs/benchmarks.md reports the template's defaults")
	}
	tmplPath, err := devstack.FindTemplate()
	if err != nil {
		return err
	}
	tmpl, err := readTemplate(tmplPath)
	if err != nil {
		return err
	}
	o.logLevel = tmpl.LogLevel
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b := &bench{o: o, meter: costmeter.New(), http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, log: log,
		lambda: costmeter.NewLambda(tmpl.MemoryMB), api: &costmeter.APIGateway{}, logs: &costmeter.Logs{}, poller: &pollerMode{}}
	// The functions log as on Lambda: JSON lines at the template's
	// LogLevel, metered (CloudWatch Logs), and their warnings shown here.
	level := logging.LambdaLevel(func(string) string { return tmpl.LogLevel })
	fnLog := slog.New(slog.NewMultiHandler(logging.JSON(b.logs, level).Handler(), log.Handler()))
	var env map[string]string
	if o.noBlobs {
		env = map[string]string{"STEPFLOW_DATA_BUCKET": ""}
	}
	st, err := devstack.Start(ctx, devstack.Options{
		Env:        env,
		Parameters: o.parameters,
		APIKeys:    map[string]string{benchKey: benchTenant}, Log: fnLog,
		// The bench serves the functions itself, with its meters around
		// them (serve).
		NoRunner: true,
		// The heartbeat's period the health verdict reads: the bench runs
		// the sweep itself (sweep at rest, expiry), no schedule.
		ScheduleEvery: 24 * time.Hour,
		// The EMF metric records go to CloudWatch Logs too.
		MetricsOutput: b.logs,
		// The meter is middleware in the engine's clients' stacks: it bills
		// each attempt that reached DynamoDB.
		APIOptions: []func(*middleware.Stack) error{b.meter.Middleware},
		// The timer workload's 5 s sleeps are long timers, as hour-long
		// ones are on AWS at the default 900 s.
		TimerThreshold: benchTimerThreshold,
		Now:            b.now,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	b.stack = st
	stop, err := b.serve(ctx, log)
	if err != nil {
		return err
	}
	defer stop()
	o.jobStateEvents = st.Resources.Env["STEPFLOW_JOB_STATE_EVENTS"]
	o.retentionDays = int(b.envDuration("STEPFLOW_RETENTION_COMPLETED_DAYS", 24*time.Hour, 30) / (24 * time.Hour))
	b.o = o
	cfg, err := devstack.AWSConfig(ctx, st.Emulator.MotoURL, "us-east-1")
	if err != nil {
		return err
	}
	b.raw = dynamoFrom(cfg)
	b.direct = store.New(b.raw, st.Resources.Tables["JobsTable"])

	fmt.Fprintf(os.Stderr, "bench: %d single-step jobs, %d five-step, worker and diamond jobs, %d timer jobs, concurrency %d\n", o.jobs, o.jobs/5, o.jobs/10, o.concurrency)
	var results []result
	for i, w := range []struct {
		name  string
		n     int
		steps int
		spec  map[string]any
	}{
		{"single-step pass", o.jobs, 1, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}, "payload": map[string]any{"n": 1}}},
		{"single-step pass, ten a request (POST /v1/jobs/batch)", o.jobs, 1, map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}, "payload": map[string]any{"n": 1}}},
		{"five-step pass", o.jobs / 5, 5, map[string]any{"steps": fiveSteps(), "payload": map[string]any{"n": 1}}},
		{"worker step via /v1/claim", o.jobs / 5, 1, map[string]any{"steps": []any{map[string]any{"id": "w", "action": map[string]any{"type": "worker", "queue": "bench", "lease_seconds": 60}}}, "payload": map[string]any{"n": 1}}},
		{fmt.Sprintf("worker: three steps of %d KB outputs", o.largeOutput/1024), o.jobs / 10, 3, map[string]any{"steps": []any{
			map[string]any{"id": "large1", "action": map[string]any{"type": "worker", "queue": "bench", "lease_seconds": 60}},
			map[string]any{"id": "large2", "action": map[string]any{"type": "worker", "queue": "bench", "lease_seconds": 60}},
			map[string]any{"id": "large3", "action": map[string]any{"type": "worker", "queue": "bench", "lease_seconds": 60}},
		}, "payload": map[string]any{"n": 1}}},
		{"diamond DAG (a; b, c; d)", o.jobs / 5, 4, map[string]any{"steps": diamond(), "payload": map[string]any{"n": 1}}},
		{"fan-out: 98 pass branches and their fan-in", max(o.jobs/100, 2), 100, map[string]any{"steps": fanOut(98), "payload": map[string]any{"n": 1}}},
		{"10-step pass", max(o.jobs/10, 2), 10, map[string]any{"steps": passChain(10), "payload": map[string]any{"n": 1}}},
		{"100-step pass", max(o.jobs/50, 2), 100, map[string]any{"steps": passChain(100), "payload": map[string]any{"n": 1}}},
		{"1,000-step pass", 2, 1000, map[string]any{"steps": passChain(1000), "payload": map[string]any{"n": 1}}},
		{"5,000-step pass", 1, 5000, map[string]any{"steps": passChain(5000), "payload": map[string]any{"n": 1}}},
		{"child job: a step runs a one-step child, then a pass step", o.jobs / 5, 2, map[string]any{"steps": []any{
			map[string]any{"id": "sub", "action": map[string]any{"type": "job", "spec": map[string]any{"steps": []any{map[string]any{"id": "a", "action": map[string]any{"type": "pass"}}}}}},
			map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
		}, "payload": map[string]any{"n": 1}}},
		{"map: 1,000 pass items", 1, 1001, map[string]any{"steps": []any{
			map[string]any{"id": "each", "action": map[string]any{"type": "map", "items": "payload.items", "step": map[string]any{"action": map[string]any{"type": "pass"}, "output": "output.item * 2.0"}}},
		}, "payload": map[string]any{"items": mapItems(1000)}}},
		{"timer: 5 s sleep past the threshold, then pass", o.jobs / 10, 2, map[string]any{"steps": []any{
			map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 5}},
			map[string]any{"id": "after", "action": map[string]any{"type": "pass"}},
		}, "payload": map[string]any{"n": 1}}},
	} {
		if !o.runs(w.name) {
			continue
		}
		modes := []bool{o.poller == "aws"}
		if o.poller == "both" && i == 0 {
			modes = append(modes, true)
		}
		for _, awsLike := range modes {
			name := w.name
			if awsLike {
				name += ", AWS-like poller"
			}
			fmt.Fprintf(os.Stderr, "bench: %s ...\n", name)
			b.poller.awsLike.Store(awsLike)
			r, err := b.workload(ctx, name, w.n, w.steps, w.spec, strings.HasPrefix(w.name, "worker"), strings.HasPrefix(w.name, "timer"))
			b.poller.awsLike.Store(false)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			results = append(results, r)
		}
	}
	if len(o.only) > 0 {
		fmt.Print(renderOnly(results, prices))
		return ownCheck(results, prices)
	}
	fmt.Fprintln(os.Stderr, "bench: floor ...")
	floor, err := runFloor(ctx, st, o.jobs, o.concurrency)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: chained step latency ...")
	lat, err := b.measureChainLatency(ctx, 100)
	if err != nil {
		return fmt.Errorf("chained step latency: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: sweep at rest ...")
	sweeps, err := b.sweepAtRest(ctx, o.rest)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: expiry ...")
	exp, err := b.expiry(ctx)
	if err != nil {
		return fmt.Errorf("expiry: %w", err)
	}
	for i := range results {
		results[i].Expiry = exp.perJob().Times(float64(results[i].DataJobs))
	}
	sizes := map[string]int64{}
	if !o.skipBuild {
		if sizes, err = bootstrapSizes(ctx); err != nil {
			return err
		}
	}
	report := render(results, floor, sweeps, exp, lat, sizes, prices, o)
	fmt.Print(report)
	if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
		return err
	}
	if err := chart(o.chart, results, prices); err != nil {
		return err
	}
	single := results[0]
	std, _ := single.stepFunctions(prices)
	reqs := float64(single.count("dynamodb.")+single.count("sqs.")) / float64(single.Jobs)
	fmt.Printf("bench: %.0f jobs/s = %.2f of floor, %.1f requests/job, $%.2f per million jobs all-in but Lambda duration and logs (floor $%.2f; Step Functions Standard $%.2f)\n",
		single.jobsPerSec(), single.jobsPerSec()/floor.jobsPerSec(), reqs, single.bill(prices).Total(), prices.Bill(costmeter.Floor(1, 1)).Total(), std)
	return ownCheck(results, prices)
}

// ownCheck fails the bench when a workload's jobs' own cost is off its
// meter by more than ownTolerance: what a job says it cost must be what it
// cost.
func ownCheck(results []result, p costmeter.Prices) error {
	if off := offMeter(results, p); len(off) > 0 {
		return fmt.Errorf("the jobs' own cost is more than %.0f%% off the meter:\n  %s", 100*ownTolerance, strings.Join(off, "\n  "))
	}
	return nil
}

// runs reports whether the workload named name is run (--only).
func (o options) runs(name string) bool {
	if len(o.only) == 0 {
		return true
	}
	for _, s := range o.only {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// submitBatch is how many jobs of a workload one request submits: ten
// through POST /v1/jobs/batch for a workload named so, else one.
func submitBatch(name string) int {
	if strings.Contains(name, "ten a request") {
		return 10
	}
	return 1
}

// submit submits job i (one), or jobs i to i+batch through the batch
// route, and notes their ids.
func (b *bench) submit(ctx context.Context, body, batchBody []byte, batch, i int, ids []string) error {
	if batch <= 1 {
		var j struct{ ID string }
		if err := b.call(ctx, http.MethodPost, "/v1/jobs", body, &j); err != nil {
			return err
		}
		ids[i] = j.ID
		return nil
	}
	if left := len(ids) - i; left < batch { // the last request, short
		specs := make([]json.RawMessage, left)
		for k := range specs {
			specs[k] = body
		}
		batchBody, _ = json.Marshal(map[string]any{"jobs": specs})
	}
	var out struct {
		Jobs []struct {
			Status int
			Job    struct{ ID string }
		}
	}
	if err := b.call(ctx, http.MethodPost, "/v1/jobs/batch", batchBody, &out); err != nil {
		return err
	}
	for k, a := range out.Jobs {
		if a.Status != http.StatusCreated || i+k >= len(ids) {
			return fmt.Errorf("batch submit: job %d answered %d", k, a.Status)
		}
		ids[i+k] = a.Job.ID
	}
	return nil
}

func diamond() []any {
	step := func(id string, deps ...string) map[string]any {
		s := map[string]any{"id": id, "action": map[string]any{"type": "pass"}}
		if len(deps) > 0 {
			s["depends_on"] = deps
		}
		return s
	}
	return []any{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")}
}

func fiveSteps() []any { return passChain(5) }

// passChain is n pass steps, each after the one before.
func passChain(n int) []any {
	var s []any
	for i := range n {
		s = append(s, map[string]any{"id": fmt.Sprintf("s%d", i+1), "action": map[string]any{"type": "pass"}})
	}
	return s
}

// fanOut is a pass step, width pass steps after it and one after them
// all: a job's widest join.
func fanOut(width int) []any {
	s := []any{map[string]any{"id": "root", "action": map[string]any{"type": "pass"}}}
	var deps []string
	for i := range width {
		id := fmt.Sprintf("b%d", i+1)
		s = append(s, map[string]any{"id": id, "action": map[string]any{"type": "pass"}, "depends_on": []string{"root"}})
		deps = append(deps, id)
	}
	return append(s, map[string]any{"id": "join", "action": map[string]any{"type": "pass"}, "depends_on": deps})
}

// workload submits n jobs over HTTP from concurrent clients, lets them run
// (or has external workers claim them), waits for all to finish, and
// measures what it took. With sweeps the bench runs the heartbeat's sweep
// every benchSweepEvery meanwhile, and measures its requests apart.
func (b *bench) workload(ctx context.Context, name string, n, steps int, spec map[string]any, viaWorkers, sweeps bool) (result, error) {
	r := result{Name: name, Jobs: n, StepsPerJob: steps}
	itemsBefore, objectsBefore, err := b.stored(ctx)
	if err != nil {
		return r, err
	}
	var idle costmeter.Tagged
	if sweeps {
		// What a sweep costs with nothing due: every sweep pays it, timers
		// or not (the heartbeat's standing cost).
		if idle, err = b.sweepOnce(ctx, "idle"); err != nil {
			return r, err
		}
	}
	sweepsBefore := b.meter.Tagged(sweepTag)
	stopSweeps := func() int { return 0 }
	if sweeps {
		stopSweeps = b.sweepEvery(ctx, benchSweepEvery)
	}
	defer stopSweeps()
	before, unitsBefore, lambdaBefore := b.stack.Emulator.Counts(), b.meter.Units(), b.lambda.Use()
	apiBefore, logsBefore := b.api.Requests(), b.logs.Use()
	body, _ := json.Marshal(spec)
	ids := make([]string, n)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	next := make(chan int)
	go func() {
		for i := 0; i < n; i += max(submitBatch(name), 1) {
			next <- i
		}
		close(next)
	}()
	batch := submitBatch(name)
	var batchBody []byte
	if batch > 1 {
		specs := make([]json.RawMessage, batch)
		for k := range specs {
			specs[k] = body
		}
		batchBody, _ = json.Marshal(map[string]any{"jobs": specs})
	}
	for range b.o.concurrency {
		wg.Go(func() {
			for i := range next {
				err := b.submit(ctx, body, batchBody, batch, i, ids)
				if err != nil {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
				}
			}
		})
	}
	stopWorkers := make(chan struct{})
	var workersDone sync.WaitGroup
	if viaWorkers {
		for w := range b.o.workers {
			workersDone.Go(func() { b.worker(ctx, fmt.Sprintf("bench-%d", w), stopWorkers) })
		}
	}
	wg.Wait()
	if firstErr != nil {
		close(stopWorkers)
		return r, firstErr
	}
	if err := b.awaitDone(ctx, ids, 5*time.Minute); err != nil {
		close(stopWorkers)
		return r, err
	}
	close(stopWorkers)
	workersDone.Wait()
	if err := b.awaitQuiet(ctx); err != nil {
		return r, err
	}
	if ran := stopSweeps(); ran > 0 {
		r.Sweeps = beyond(b.meter.Tagged(sweepTag), sweepsBefore, idle, ran)
	}
	r.Wall = time.Since(start)
	r.Requests = diff(b.stack.Emulator.Counts(), before)
	r.Units = b.meter.Units().Minus(unitsBefore)
	r.Lambda = map[string]costmeter.LambdaUse{}
	for fn, u := range b.lambda.Use() {
		if d := (costmeter.LambdaUse{Requests: u.Requests - lambdaBefore[fn].Requests, GBSeconds: u.GBSeconds - lambdaBefore[fn].GBSeconds}); d.Requests != 0 {
			r.Lambda[fn] = d
		}
	}
	r.APIRequests = b.api.Requests() - apiBefore
	l := b.logs.Use()
	r.Logs = costmeter.LogUse{Bytes: l.Bytes - logsBefore.Bytes, Events: l.Events - logsBefore.Events}
	items, objects, err := b.stored(ctx)
	if err != nil {
		return r, err
	}
	r.ItemBytes, r.ObjectBytes, r.RetentionDays = items-itemsBefore, objects-objectsBefore, b.o.retentionDays
	var first, last time.Time
	for _, id := range ids {
		j, err := b.direct.Get(ctx, benchTenant, id)
		if err != nil {
			return r, err
		}
		if j.State != domain.JobCompleted {
			return r, fmt.Errorf("job %s ended %s", id, j.State)
		}
		if first.IsZero() || j.CreatedAt.Before(first) {
			first = j.CreatedAt
		}
		if j.EndedAt.After(last) {
			last = *j.EndedAt
		}
		r.Own.Add(j.Usage)
		r.ToStart = append(r.ToStart, started(j).Sub(j.CreatedAt))
		r.ToDone = append(r.ToDone, j.EndedAt.Sub(j.CreatedAt))
		if j.StoresData() {
			r.DataJobs++
		}
		for _, s := range j.Steps {
			r.Attempts += len(s.Attempts)
			r.Entered += max(len(s.Attempts), 1)
		}
	}
	// Throughput is jobs over the time from the first enqueue to the last
	// completion, as the jobs themselves recorded it; a job done in its
	// submit's write (a map of instant items) keeps the workload's own.
	if w := last.Sub(first); w > 0 {
		r.Wall = w
	}
	return r, nil
}

// started answers when the job's first step started: leased by an
// executor, or began to sleep or wait.
func started(j *domain.Job) time.Time {
	for _, e := range j.Events {
		if e.Type == domain.StepLeased.EventType() || e.Type == domain.StepWaiting.EventType() || e.Type == domain.StepNeedsUser.EventType() {
			return e.At
		}
	}
	return *j.EndedAt
}

// worker runs one of the bench's external workers until stop: the SDK's
// worker, as a user would run it (claims of up to ten, outcomes reported
// in batches), answering each step at once.
func (b *bench) worker(ctx context.Context, name string, stop <-chan struct{}) {
	c, err := client.New(client.Config{BaseURL: b.url, APIKey: benchKey, HTTPClient: b.http})
	if err != nil {
		b.log.Warn("worker not started", "err", err)
		return
	}
	w, err := worker.New(c, worker.Options{Queue: "bench", Concurrency: 10, Name: name, ClaimWait: time.Second, Log: b.log}, func(_ context.Context, t *worker.Task) (any, error) {
		if strings.HasPrefix(t.StepID, "large") {
			return largeOutput(b.o.largeOutput), nil
		}
		return map[string]bool{"ok": true}, nil
	})
	if err != nil {
		b.log.Warn("worker not started", "err", err)
		return
	}
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		<-stop
		cancel()
	}()
	if err := w.Run(runCtx); err != nil {
		b.log.Warn("worker stopped", "err", err)
	}
}

// largeOutput is an output of n bytes of JSON string, base64: as
// incompressible as JSON gets.
func largeOutput(n int) json.RawMessage {
	raw := make([]byte, max(n-2, 0)*3/4)
	_, _ = rand.Read(raw)
	return json.RawMessage(`"` + base64.StdEncoding.EncodeToString(raw) + `"`)
}

func (b *bench) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	res, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// awaitDone polls the store directly (uncounted) until every job finished.
func (b *bench) awaitDone(ctx context.Context, ids []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	moved := time.Now()
	versions := map[string]string{}
	pending := slices.Clone(ids)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs unfinished after %s", len(pending), len(ids), limit)
		}
		var still []string
		for _, id := range pending {
			done, version, err := b.finished(ctx, id)
			if err != nil || !done {
				still = append(still, id)
			}
			if versions[id] != version {
				versions[id], moved = version, time.Now()
			}
		}
		pending = still
		if len(pending) > 0 && time.Since(moved) > stillFor {
			// As the heartbeat would on AWS: a step whose message was lost
			// (a send that timed out under the emulator's load) is sent
			// again by the sweep, not left for ever. What it costs is
			// counted with the workload.
			moved = time.Now()
			fmt.Fprintf(os.Stderr, "bench: %d jobs unmoved for %s: a sweep, as the heartbeat's\n", len(pending), stillFor)
			if _, err := b.sweepOnce(ctx, "recovery"); err != nil {
				return err
			}
		}
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond) // polling the store from outside the system under test
		}
	}
	return nil
}

// stillFor is how long no job of a workload may move before the bench
// sweeps, as the heartbeat does every 10 s on AWS.
const stillFor = 15 * time.Second

// finished reads a job's state and version alone, past the proxy: polling
// the whole job (its parts, for a long one) would load the emulator the
// system under test shares.
func (b *bench) finished(ctx context.Context, id string) (bool, string, error) {
	pk, sk := store.ItemKey(benchTenant, id)
	out, err := b.raw.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(b.stack.Resources.Tables["JobsTable"]), ProjectionExpression: aws.String("#s, #v"),
		ExpressionAttributeNames: map[string]string{"#s": "state", "#v": "version"},
		Key:                      map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: pk}, "sk": &ddbtypes.AttributeValueMemberS{Value: sk}},
	})
	if err != nil {
		return false, "", err
	}
	st, _ := out.Item["state"].(*ddbtypes.AttributeValueMemberS)
	v, _ := out.Item["version"].(*ddbtypes.AttributeValueMemberN)
	if st == nil || v == nil {
		return false, "", nil
	}
	return domain.JobState(st.Value).Terminal(), v.Value, nil
}

// awaitQuiet waits until the ready queues hold nothing in flight, so the
// event source mapping's last deletes are counted.
func (b *bench) awaitQuiet(ctx context.Context) error {
	cfg, err := devstack.AWSConfig(ctx, b.stack.Emulator.MotoURL, "us-east-1")
	if err != nil {
		return err
	}
	sq := sqsFrom(cfg)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		busy, err := inFlight(ctx, sq, b.stack)
		if err != nil {
			return err
		}
		if busy == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // polling the emulator from outside
	}
	return fmt.Errorf("ready queues still busy after a minute")
}

func diff(now, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// bootstrapSizes builds each function as sam build does and answers the
// bootstrap sizes.
func bootstrapSizes(ctx context.Context) (map[string]int64, error) {
	dir, err := os.MkdirTemp("", "stepflow-bootstraps")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := map[string]int64{}
	for _, fn := range []string{"enqueue", "claim", "execute", "heartbeat"} {
		bin := filepath.Join(dir, fn)
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, "./functions/"+fn)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %v: %s", fn, err, msg)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			return nil, err
		}
		out[fn] = fi.Size()
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// mapItems answers n items for the map workload to run a step each on.
func mapItems(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
