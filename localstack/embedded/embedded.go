// Package embedded runs the local stack with no AWS emulator: the engine,
// handlers and routes of localstack/devstack over the in-memory adapters
// (shared/memory, held to the same contract suite as the DynamoDB and SQS
// ones), in this process. The runner plays API Gateway and the heartbeat's
// schedule as it does over the emulator; a loop plays the ready queues'
// event source mapping over the memory queue, into the execute function's
// handler; data handed out by URL is served on a port of its own, as S3's
// presigned URLs are. The state is kept in a file, written soon after each
// change and on Close, and read back by Start, so a restart loses nothing.
//
// `make dev` runs it when it finds no moto_server and pip cannot install
// one, or when STEPFLOW_DEV_MODE=embedded says so; the in-memory API tests
// (localstack/devstack/inmemory) run on it too.
package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/lambdaemu"
	"github.com/stepflow/stepflow/localstack/runner"
	"github.com/stepflow/stepflow/shared/actions/lambdaclient"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/memory"
	"github.com/stepflow/stepflow/shared/metrics"
)

// Options configure an embedded stack.
type Options struct {
	Addr         string            // HTTP API listen address; "127.0.0.1:0" (the default) for any port
	TemplatePath string            // template.yaml; found from the working directory when empty
	APIKeys      map[string]string // key -> tenant, added to the keys restored
	// StatePath keeps the state in this file: Start restores it, and it is
	// written within SaveEvery of a change and at Close. Empty: in memory
	// only.
	StatePath string
	SaveEvery time.Duration // 1 s when zero
	// ScheduleEvery overrides the heartbeat's period (the template's when
	// zero).
	ScheduleEvery time.Duration
	// Env sets the functions' settings beyond the template's, as
	// devstack.Options.Env does (STEPFLOW_P0_TENANTS, ...).
	Env       map[string]string
	HTTPAllow string // STEPFLOW_HTTP_ALLOW
	// MachineInvocations bounds the execute function's invocations at
	// once (four per core when zero).
	MachineInvocations int
	// LambdaDirs, LambdaOutput: as devstack.Options's, the functions served
	// to lambda steps (they reach no AWS service here).
	LambdaDirs   []string
	LambdaOutput io.Writer
	// MetricsOutput receives the EMF records the functions would write on
	// Lambda; nil writes none.
	MetricsOutput io.Writer
	// SampleJob makes the sample job the sample events act on
	// (devstack.SeedSampleJob).
	SampleJob bool
	Region    string           // us-east-1 when empty
	Now       func() time.Time // the engine's clock; the wall clock when nil
	Log       *slog.Logger
}

// Stack is a running embedded stack.
type Stack struct {
	URL      string // the HTTP API's base URL
	DataURL  string // where data handed out by URL is served
	Name     string // stepflow-<port>, as devstack names a stack
	Env      map[string]string
	Engine   *engine.Engine
	API      *httpapi.API // every route in one handler
	Handlers runner.Handlers
	Runner   *runner.Runner
	Lambda   *lambdaemu.Service // nil without LambdaDirs

	Store     *memory.Store
	Queue     *memory.Queue
	Schedules *memory.Schedules
	Blobs     *memory.Blobs

	// Restored is what Start read from Options.StatePath.
	Restored StateCounts

	log       *slog.Logger
	statePath string
	saveEvery time.Duration

	cancel  context.CancelFunc
	runDone chan struct{} // closed when the runner ends, with runErr
	runErr  error
	loops   sync.WaitGroup // the mapping and the save loop
	data    *http.Server

	saveMu   sync.Mutex
	saved    uint64 // Changes() at the last write
	lastFail string // the last write's error, logged once
	closed   bool
}

// Start brings an embedded stack up. Close it when done.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	tmpl, err := bootstrap.Parse(o.TemplatePath)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	s := &Stack{URL: "http://" + ln.Addr().String(), Name: fmt.Sprintf("stepflow-%d", ln.Addr().(*net.TCPAddr).Port),
		log: o.Log, statePath: o.StatePath, saveEvery: o.SaveEvery}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if err := s.start(ctx, o, tmpl); err != nil {
		ln.Close()
		s.stop()
		return nil, err
	}
	s.run(runCtx, o, tmpl, ln)
	return s, nil
}

func (o *Options) fill() error {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Now == nil {
		o.Now = func() time.Time { return time.Now().UTC() }
	}
	if o.SaveEvery <= 0 {
		o.SaveEvery = time.Second
	}
	if o.MachineInvocations <= 0 {
		o.MachineInvocations = 4 * runtime.NumCPU()
	}
	if o.TemplatePath == "" {
		p, err := devstack.FindTemplate()
		if err != nil {
			return err
		}
		o.TemplatePath = p
	}
	return nil
}

// start does all of Start but serving: the settings, the engine over the
// memory adapters, the state, the keys and the handlers.
func (s *Stack) start(ctx context.Context, o Options, tmpl *bootstrap.Template) error {
	env, err := tmpl.StandInEnv(s.Name)
	if err != nil {
		return err
	}
	if o.HTTPAllow != "" {
		env["STEPFLOW_HTTP_ALLOW"] = o.HTTPAllow // validated by FromEnv
	}
	if o.ScheduleEvery > 0 {
		env["STEPFLOW_HEARTBEAT_SECONDS"] = fmt.Sprint(int(max((o.ScheduleEvery+time.Second-1)/time.Second, 1)))
	}
	if len(o.LambdaDirs) > 0 {
		svc, err := devstack.ServeLambda(ctx, devstack.Options{TemplatePath: o.TemplatePath, LambdaDirs: o.LambdaDirs, Region: o.Region, LambdaOutput: o.LambdaOutput, Log: o.Log}, env, nil)
		if err != nil {
			return err
		}
		s.Lambda = svc
		env["STEPFLOW_LAMBDA_ENDPOINT"] = svc.URL
	}
	for k, v := range o.Env {
		env[k] = v // validated by FromEnv
	}
	settings, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		return fmt.Errorf("embedded stack: %w", err)
	}
	s.Env = env

	var qopts []memory.QueueOption
	if settings.MaxWorkerQueues > 0 {
		qopts = append(qopts, memory.WithMaxWorkerQueues(settings.MaxWorkerQueues))
	}
	if settings.Lease > 0 {
		qopts = append(qopts, memory.WithReadyVisibility(settings.Lease))
	}
	s.Store, s.Queue, s.Blobs = memory.NewStore(), memory.NewQueue(o.Now, qopts...), memory.NewBlobs(o.Now)
	s.Schedules = memory.NewSchedules(s.Store)
	data, err := serveData(s.Blobs, o.Now)
	if err != nil {
		return err
	}
	s.data, s.DataURL = data.server, data.base

	// EngineConfig turns the settings into the engine's configuration as on
	// Lambda; the ports are then the memory adapters. Its AWS clients call
	// nothing (noAWS), so a port this misses fails loudly.
	cfg := aws.Config{Region: o.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient: noAWS{}, BaseEndpoint: aws.String("http://no-aws.invalid")}
	clients := config.ClientsFrom(cfg)
	if settings.LambdaEndpoint != "" {
		local := cfg.Copy()
		local.HTTPClient = nil
		clients.Lambda = lambdaclient.FromConfig(local, settings.LambdaEndpoint)
	} else {
		clients = clients.WithLambda(lambdaclient.FromConfig, "")
	}
	ec := config.EngineConfig(settings, clients, o.Log)
	ec.Store, ec.Queue, ec.Schedules, ec.Blobs = s.Store, longPoll{s.Queue}, s.Schedules, data
	ec.TimerService, ec.Publisher = false, nil // the timer state machine and the event bus are AWS's
	ec.StateMachines = nil                     // as is Step Functions: a stepfunctions step is refused at submit, saying so
	ec.Now = o.Now
	if o.MetricsOutput != nil {
		ec.Metrics = metrics.NewEMF(o.MetricsOutput, settings.MetricsNamespace)
	}
	s.Engine = engine.New(ec)

	if s.statePath != "" {
		if s.Restored, err = s.restore(o.Now()); err != nil {
			return err
		}
	}
	for key, tenant := range o.APIKeys {
		s.Store.AddKey(tenant, key)
	}
	s.Handlers, s.API = devstack.NewHandlers(s.Engine, o.Log, func(_, receipt string) string { return receipt }, settings.OperatorKeyHashes)
	if o.SampleJob {
		if _, err := devstack.SeedSampleJob(ctx, s.Engine); err != nil {
			return err
		}
	}
	// The first sweep: it re-sends what came due while the stack was down,
	// and records a sweep for the health verdict before the first tick.
	if _, err := handlers.Heartbeat(s.Engine)(ctx, events.EventBridgeEvent{}); err != nil {
		o.Log.Warn("first sweep failed; the heartbeat will run it", "err", err)
	}
	return nil
}

// run serves the API and runs the schedule (the runner), the ready
// queues' mapping and the state's writes, until Close.
func (s *Stack) run(ctx context.Context, o Options, tmpl *bootstrap.Template, ln net.Listener) {
	execute := s.Handlers.SQS["ExecuteFunction"]
	batch := 10
	for _, f := range tmpl.Functions() {
		if f.LogicalID == "ExecuteFunction" && len(f.SQS) > 0 {
			batch = min(max(f.SQS[0].BatchSize, 1), memory.MaxReceive)
		}
	}
	served := s.Handlers
	served.SQS = nil // the mapping below plays the event source mappings
	s.Runner = &runner.Runner{Stack: &bootstrap.Stack{Name: s.Name, Functions: tmpl.Functions()}, Handlers: served,
		Log: o.Log, Region: o.Region, ScheduleEvery: o.ScheduleEvery}
	s.runDone = make(chan struct{})
	go func() {
		defer close(s.runDone)
		s.runErr = s.Runner.Run(ctx, ln)
	}()
	s.loops.Go(func() { executeReady(ctx, s.Queue, execute, batch, o.MachineInvocations, o.Log) })
	if s.statePath != "" {
		s.loops.Go(func() { s.saveLoop(ctx) }) // its first write: what Start restored and added
	}
}

// Close stops the stack and writes its state a last time.
func (s *Stack) Close() {
	s.saveMu.Lock()
	closed := s.closed
	s.closed = true
	s.saveMu.Unlock()
	if closed {
		return
	}
	s.stop()
	if s.statePath == "" {
		return
	}
	n, err := s.Save()
	if err != nil {
		s.log.Error("state not saved", "file", s.statePath, "err", err)
		return
	}
	s.log.Info("state saved", "file", s.statePath, "jobs", n.Jobs, "messages", n.Messages)
}

// stopWait bounds how long Close waits for steps under way.
const stopWait = 10 * time.Second

// stop ends the runner, the loops, the data server and the functions.
func (s *Stack) stop() {
	s.cancel()
	if s.runDone != nil {
		<-s.runDone
		if s.runErr != nil && !errors.Is(s.runErr, context.Canceled) {
			s.log.Warn("runner stopped with an error", "err", s.runErr)
		}
	}
	loops := make(chan struct{})
	go func() {
		s.loops.Wait()
		close(loops)
	}()
	select {
	case <-loops:
	case <-time.After(stopWait):
		// Their messages are in flight in the state written next: the next
		// start runs them again, as SQS redelivers an invocation's that died.
		s.log.Warn("steps still running after " + stopWait.String() + "; they run again at the next start")
	}
	if s.data != nil {
		_ = s.data.Close()
	}
	if s.Lambda != nil {
		s.Lambda.Close()
	}
}

// Done is closed when the stack stops serving: Close, or serving failed
// (Err says why).
func (s *Stack) Done() <-chan struct{} { return s.runDone }

// Err answers why the stack stopped serving, once Done is closed; nil
// after Close.
func (s *Stack) Err() error { return s.runErr }

// noAWS is the transport of the engine's AWS clients: the embedded stack
// calls no AWS service.
type noAWS struct{}

func (noAWS) Do(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("the embedded dev stack calls no AWS service, yet a request went to %s: a port of the engine is wired to AWS rather than to shared/memory (localstack/embedded)", r.URL.Host)
}

// longPoll makes a memory queue's Take wait as SQS's long poll does: a
// take that finds nothing looks again until its wait has passed.
type longPoll struct{ *memory.Queue }

func (q longPoll) Take(ctx context.Context, tenant, name string, lanes []int, max int, wait time.Duration) ([]engine.Delivery, error) {
	deadline := time.Now().Add(wait)
	for {
		ds, err := q.Queue.Take(ctx, tenant, name, lanes, max, wait)
		if err != nil || len(ds) > 0 || !time.Now().Before(deadline) {
			return ds, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(10 * time.Millisecond): // no notification to wait on: a message may also become visible by time alone
		}
	}
}

// executeReady plays the ready queues' event source mapping over the
// memory queue until ctx ends: batches of up to batch messages, P0 first,
// to the execute function's handler, up to invocations at once. What the
// handler does not report as failed is deleted; the rest comes back after
// its visibility timeout, as on Lambda.
func executeReady(ctx context.Context, q *memory.Queue, h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), batch, invocations int, log *slog.Logger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, invocations)
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		ds := q.TakeReady(batch)
		if len(ds) == 0 {
			<-slots
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond): // a delayed message becomes visible by time alone
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			// An invocation under way finishes, as Lambda's does when the
			// mapping is disabled.
			deliver(context.WithoutCancel(ctx), q, h, ds, log)
		})
	}
}

func deliver(ctx context.Context, q *memory.Queue, h func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), ds []engine.Delivery, log *slog.Logger) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(ds))}
	for i, d := range ds {
		body, _ := json.Marshal(d.Message)
		ev.Records[i] = events.SQSMessage{
			MessageId: d.Token, ReceiptHandle: d.Token, Body: string(body), EventSource: "aws:sqs",
			Attributes: map[string]string{"SentTimestamp": strconv.FormatInt(d.SentAt.UnixMilli(), 10), "ApproximateReceiveCount": strconv.Itoa(d.Receives)},
		}
	}
	resp, err := invokeSafely(func() (events.SQSEventResponse, error) { return h(ctx, ev) })
	if err != nil {
		log.Warn("execute batch failed; its messages will be redelivered", "err", err)
		return
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, d := range ds {
		if !failed[d.Token] {
			_ = q.Ack(ctx, d.Token) // a token of this queue's own: no error but for a message deleted since
		}
	}
}

// invokeSafely runs a handler as Lambda does: a panic fails the
// invocation, never the process.
func invokeSafely[T any](call func() (T, error)) (out T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("function crashed: %v", p)
		}
	}()
	return call()
}
