package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"gopkg.in/yaml.v3"

	"github.com/stepflow/stepflow/localstack/costmeter"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/runner"
	"github.com/stepflow/stepflow/shared/blobstore"
)

// templateSettings are what the bench reads of template.yaml beyond what
// the stack provisions from it: each function's MemorySize (Lambda bills
// duration by it) and the LogLevel parameter's default (the level the
// functions log at on AWS).
type templateSettings struct {
	MemoryMB map[string]int
	LogLevel string
}

func readTemplate(path string) (templateSettings, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return templateSettings{}, err
	}
	var t struct {
		Parameters map[string]struct {
			Default any `yaml:"Default"`
		} `yaml:"Parameters"`
		Globals struct {
			Function struct {
				MemorySize int `yaml:"MemorySize"`
			} `yaml:"Function"`
		} `yaml:"Globals"`
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				MemorySize int `yaml:"MemorySize"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &t); err != nil {
		return templateSettings{}, fmt.Errorf("read %s: %w", path, err)
	}
	s := templateSettings{MemoryMB: map[string]int{}, LogLevel: fmt.Sprint(t.Parameters["LogLevel"].Default)}
	for id, r := range t.Resources {
		if r.Type != "AWS::Serverless::Function" {
			continue
		}
		s.MemoryMB[id] = cmpOr(r.Properties.MemorySize, t.Globals.Function.MemorySize, costmeter.DefaultMemoryMB)
	}
	return s, nil
}

func cmpOr(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// pollerMode makes the local event source mapping receive as Lambda's
// pollers do at low load while awsLike is set: one message per
// ReceiveMessage. Otherwise it receives up to ten at once, as the local
// runner does.
type pollerMode struct{ awsLike atomic.Bool }

func (p *pollerMode) middleware(s *middleware.Stack) error {
	return s.Initialize.Add(middleware.InitializeMiddlewareFunc("bench.OneMessagePerReceive",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if r, ok := in.Parameters.(*sqs.ReceiveMessageInput); ok && p.awsLike.Load() {
				one := *r
				one.MaxNumberOfMessages = 1
				in.Parameters = &one
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// serve runs the stack's functions as devstack's runner would, but with
// the meters around them: API Gateway in front of the routes, each
// invocation timed (costmeter.Lambda), the event source mapping's
// receives through the poller mode. It answers a stop that waits for the
// runner.
func (b *bench) serve(ctx context.Context, log *slog.Logger) (func(), error) {
	st := b.stack
	cfg, err := devstack.AWSConfig(ctx, st.Endpoint, "us-east-1")
	if err != nil {
		return nil, err
	}
	timed := runner.Handlers{
		HTTP: map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){},
		SQS:  map[string]func(context.Context, events.SQSEvent) (events.SQSEventResponse, error){},
		// The schedule is the bench's own (sweep at rest, expiry), per
		// hour rather than per job: not served.
	}
	for fn, h := range st.Handlers.HTTP {
		timed.HTTP[fn] = costmeter.Timed(b.lambda, fn, h)
	}
	for fn, h := range st.Handlers.SQS {
		timed.SQS[fn] = costmeter.Timed(b.lambda, fn, h)
	}
	r := &runner.Runner{
		Stack: st.Resources, Handlers: timed, Log: log, Region: "us-east-1",
		SQS: sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, b.poller.middleware) }),
		// The event source mapping long-polls as Lambda's does (20 s), so
		// idle polls do not count against the work.
		PollWait: 20 * time.Second,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.url = "http://" + ln.Addr().String()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	metered := b.api.Handler(r)
	go func() { done <- runWith(runCtx, r, metered, ln) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("runner stopped with an error", "err", err)
		}
	}, nil
}

// runWith runs r's event source mappings and schedules until ctx ends,
// and serves its routes on ln through handler (r behind API Gateway's
// meter).
func runWith(ctx context.Context, r *runner.Runner, handler http.Handler, ln net.Listener) error {
	// r.Run serves r itself: give it a listener no one calls, and serve
	// the metered handler on the real one.
	idle, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	err = r.Run(ctx, idle)
	_ = srv.Close() // r stopped (ctx ended, or its own server failed): so do its routes
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// stored answers what the table and the data bucket hold, as billed
// (costmeter.StoredBytes for items), read past the proxy so it costs the
// workloads nothing.
func (b *bench) stored(ctx context.Context) (items, objects float64, err error) {
	cfg, err := devstack.AWSConfig(ctx, b.stack.Emulator.MotoURL, "us-east-1")
	if err != nil {
		return 0, 0, err
	}
	pages := dynamodb.NewScanPaginator(dynamoFrom(cfg), &dynamodb.ScanInput{TableName: aws.String(b.stack.Resources.Tables["JobsTable"])})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("scan the table: %w", err)
		}
		for _, it := range page.Items {
			items += float64(costmeter.StoredBytes(it))
		}
	}
	objs := s3.NewListObjectsV2Paginator(s3.NewFromConfig(cfg, blobstore.Options(true)), &s3.ListObjectsV2Input{Bucket: aws.String(b.stack.Resources.Buckets["DataBucket"])})
	for objs.HasMorePages() {
		page, err := objs.NextPage(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("list the data bucket: %w", err)
		}
		for _, o := range page.Contents {
			objects += float64(aws.ToInt64(o.Size))
		}
	}
	return items, objects, nil
}

// expiryPoint is the sweep's work as jobs' stored data expired, in all,
// less what the same sweeps cost with nothing due.
type expiryPoint struct {
	Jobs     int // jobs whose data was deleted
	Sweeps   int
	Requests map[string]int64
	Units    costmeter.Units
}

// perJob answers the units one job's expiry costs.
func (e expiryPoint) perJob() costmeter.Units {
	if e.Jobs == 0 {
		return costmeter.Units{}
	}
	return e.Units.Times(1 / float64(e.Jobs))
}

// envDuration reads a whole number of units (seconds, days) from the
// functions' environment, def when unset.
func (b *bench) envDuration(key string, unit time.Duration, def int) time.Duration {
	n, err := strconv.Atoi(b.stack.Resources.Env[key])
	if err != nil || n <= 0 {
		n = def
	}
	return time.Duration(n) * unit
}

// expiry moves the engine's clock past the retention of the jobs run and
// measures the sweeps that delete their stored data (the sweep's
// DeletePrefix: a list and a delete, and each job read and written).
// The clock first passes the worker queues' idle time, so their removal
// is swept before and not counted as the jobs'; a sweep with nothing due,
// measured then, is taken off each measured sweep (its index reads are
// the heartbeat's, per minute, not per job).
func (b *bench) expiry(ctx context.Context) (expiryPoint, error) {
	var e expiryPoint
	eng := b.stack.Engine
	idle := b.envDuration("STEPFLOW_WORKER_QUEUE_IDLE_SECONDS", time.Second, 604800)
	retention := b.envDuration("STEPFLOW_RETENTION_COMPLETED_DAYS", 24*time.Hour, 30)
	b.clock.Store(int64(idle + time.Hour))
	for range 10 {
		rep, err := eng.Sweep(ctx)
		if err != nil {
			return e, err
		}
		if rep.QueuesRemoved == 0 && rep.Due == 0 {
			break
		}
	}
	before, units := b.stack.Emulator.Counts(), b.meter.Units()
	if _, err := eng.Sweep(ctx); err != nil {
		return e, err
	}
	idleReqs, idleUnits := diff(b.stack.Emulator.Counts(), before), b.meter.Units().Minus(units)

	b.clock.Store(int64(max(retention, idle) + 24*time.Hour))
	before, units = b.stack.Emulator.Counts(), b.meter.Units()
	// A sweep takes up to engine.SweepLimit jobs a shard: sweep until one
	// deletes nothing.
	for range 1000 {
		rep, err := eng.Sweep(ctx)
		if err != nil {
			return e, err
		}
		e.Sweeps++
		e.Jobs += rep.DataDeleted
		if rep.DataDeleted == 0 {
			break
		}
	}
	e.Requests = diff(b.stack.Emulator.Counts(), before)
	for k, v := range idleReqs {
		e.Requests[k] -= v * int64(e.Sweeps)
		if e.Requests[k] <= 0 {
			delete(e.Requests, k)
		}
	}
	e.Units = b.meter.Units().Minus(units).Minus(idleUnits.Times(float64(e.Sweeps)))
	return e, nil
}
