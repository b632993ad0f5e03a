// Package devstack assembles the whole stack on one machine: the emulator
// (moto, or the running one EndpointURL names, behind a proxy that
// serialises DynamoDB requests), the
// resources of template.yaml, the API keys, the engine and the runner that
// plays API Gateway, the SQS event source mapping and the schedule. `make
// dev` and the end-to-end tests both start it.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/stepflow/stepflow/infra/bootstrap"
	"github.com/stepflow/stepflow/localstack/emulator"
	"github.com/stepflow/stepflow/localstack/lambdaemu"
	"github.com/stepflow/stepflow/localstack/runner"
	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/actions/lambdaclient"
	"github.com/stepflow/stepflow/shared/blobstore"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/handlers"
	"github.com/stepflow/stepflow/shared/httpapi"
	"github.com/stepflow/stepflow/shared/metrics"
	"github.com/stepflow/stepflow/shared/metrics/prometheus"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/store"
)

// Options configure a stack.
type Options struct {
	Addr          string            // HTTP API listen address; "127.0.0.1:0" for any port
	EndpointURL   string            // a running emulator (AWS_ENDPOINT_URL), put behind a serialising proxy; empty starts moto
	StackName     string            // resource name prefix; derived from the port when empty
	TemplatePath  string            // template.yaml
	APIKeys       map[string]string // key -> tenant
	ScheduleEvery time.Duration     // heartbeat period override; 0 keeps the template's
	PollWait      time.Duration     // event source mapping long-poll
	// MachineInvocations fits each function's event source mappings to
	// this many concurrent invocations, keeping their ratios
	// (runner.Runner.MachineInvocations); 0 runs every mapping's
	// MaximumConcurrency. `make dev` sets it from the machine's cores.
	MachineInvocations int
	Region             string
	Log                *slog.Logger
	MotoLog            *os.File
	// APIOptions are added to the middleware stacks of the engine's AWS
	// clients (DynamoDB, SQS, Step Functions, S3), and of no other: the clients that provision
	// the stack, register the API keys and are Stack.DynamoDB and Stack.SQS
	// stay plain. The chaos fault layer (chaos.Faults.Middleware), the cost
	// meter (costmeter.Meter.Middleware) and tests' faults
	// (awsfault.FailOperation) go here; each entry picks its service and
	// operation from the middleware context.
	APIOptions []func(*middleware.Stack) error
	// RunnerAPIOptions are added to the middleware stack of the SQS client
	// the event source mapping polls with (chaos.Faults.Duplicates: duplicate
	// deliveries).
	RunnerAPIOptions []func(*middleware.Stack) error
	// Lease overrides the ready queues' visibility timeout and the built-in
	// lease (template: 1800 s), so a crashed execution is redelivered soon.
	Lease time.Duration
	// TimerThreshold overrides STEPFLOW_TIMER_THRESHOLD (template: 900 s),
	// the longest delay sent as an SQS delay at once (a longer one the
	// heartbeat's sweep sends within reach, or the timer state machine
	// holds), so a test reaches a long timer without waiting 15 minutes.
	// Whole seconds, 1 s to 900 s.
	TimerThreshold time.Duration
	// Parameters give template parameters values other than their
	// Default, as a deploy's overrides do: LongTimers StepFunctions makes
	// the timer state machine and tells the functions of it.
	Parameters map[string]string
	// Env sets the functions' environment variables beyond the template's
	// (STEPFLOW_P0_TENANTS, STEPFLOW_MAX_WORKER_QUEUES...).
	Env map[string]string
	// Now replaces the engine's clock (tests move time forward with it).
	Now func() time.Time
	// NoRunner provisions and wires without serving or polling, for tests
	// that drive the handlers themselves.
	NoRunner bool
	// HTTPAllow is the http action's allow list (STEPFLOW_HTTP_ALLOW, e.g.
	// "127.0.0.1/32" for a test server); empty keeps the guard's default,
	// which refuses loopback, private and link-local addresses.
	HTTPAllow string
	// LambdaDirs, when set, starts the local Lambda service
	// (localstack/lambdaemu) for the Go functions in these directories
	// (each subdirectory one function; relative to template.yaml's
	// directory), served under their names and under the template's
	// STEPFLOW_LAMBDA_ALLOW prefix, and points the lambda action at it
	// (STEPFLOW_LAMBDA_ENDPOINT). `make dev` serves examples/functions.
	LambdaDirs []string
	// LambdaOutput receives those functions' stdout and stderr; nil
	// discards them.
	LambdaOutput io.Writer
	// MetricsOutput receives the EMF records the stack's functions write
	// to stdout on Lambda (shared/metrics), under the template's
	// STEPFLOW_METRICS_NAMESPACE; nil writes none.
	MetricsOutput io.Writer
	// OperatorKeys are keys that open GET /v1/metrics' operator view:
	// hashed into STEPFLOW_OPERATOR_KEY_HASHES, as a deploy's
	// OperatorKeyHashes parameter holds them.
	OperatorKeys []string
	// SampleJob makes the sample job the sample events in events/ act on
	// (SeedSampleJob); `make dev` does.
	SampleJob bool
	// StatePath keeps the stack's state in this file across restarts
	// (`make dev`'s STEPFLOW_DEV_STATE, state.go): Start restores it into
	// the empty table and bucket, and Close saves it once the runner has
	// stopped.
	StatePath string
}

// Stack is a running local stack.
type Stack struct {
	URL       string // the HTTP API's base URL
	Endpoint  string // the AWS endpoint the clients use
	Name      string
	Resources *bootstrap.Stack
	Engine    *engine.Engine
	Store     *store.Store       // the stack's table, for tests that set a job up by hand
	Blobs     engine.Blobs       // the stack's data bucket
	API       *httpapi.API       // every route in one handler, for tests that call it directly; the runner serves each function's own
	Emulator  *emulator.Emulator // the serialising proxy, and the moto it started when EndpointURL was empty
	DynamoDB  *dynamodb.Client
	SQS       *sqs.Client
	S3        *s3.Client
	Handlers  runner.Handlers
	Runner    *runner.Runner     // nil with NoRunner
	Lambda    *lambdaemu.Service // the local Lambda service; nil without LambdaDirs
	// Restored is what Start restored from Options.StatePath;
	// RestoreSkipped is ErrStateNotRestored when the table already held
	// items and the file was left alone.
	Restored       StateCounts
	RestoreSkipped error

	// EventBridge is a plain client, as DynamoDB and SQS are: a test sets
	// up rules on the stack's bus (Resources.EventBuses) with it.
	EventBridge *eventbridge.Client

	log       *slog.Logger
	statePath string // saved by Close; set once the restore succeeded, so a failed start never overwrites the file
	cancel    context.CancelFunc
	done      chan error
}

// ParseAPIKeys reads STEPFLOW_API_KEYS: "tenant:key,tenant:key".
func ParseAPIKeys(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tenant, key, ok := strings.Cut(pair, ":")
		if !ok || key == "" || !domain.ValidName(tenant) {
			return nil, fmt.Errorf("STEPFLOW_API_KEYS: %q is not tenant:key (tenant of letters, digits, '-', '_')", pair)
		}
		out[key] = tenant
	}
	return out, nil
}

// AWSConfig answers an SDK config for a local endpoint.
func AWSConfig(ctx context.Context, endpoint, region string) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx,
		awsconfig.WithRegion(region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		awsconfig.WithBaseEndpoint(endpoint),
	)
	if err != nil {
		return cfg, fmt.Errorf("AWS config for %s: %w", endpoint, err)
	}
	return cfg, nil
}

// Start brings a stack up. Close it when done.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	s := &Stack{log: o.Log}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	s.URL = "http://" + ln.Addr().String()
	if o.StackName == "" {
		o.StackName = fmt.Sprintf("stepflow-%d", ln.Addr().(*net.TCPAddr).Port)
	}
	s.Name = o.StackName
	cfg, err := s.start(ctx, o)
	if err != nil {
		ln.Close()
		s.Close()
		return nil, err
	}
	if o.NoRunner {
		ln.Close()
		return s, nil
	}
	s.run(ctx, o, cfg, ln)
	return s, nil
}

// fill sets the options left empty to their defaults, and checks them.
func (o *Options) fill() error {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.TimerThreshold%time.Second != 0 {
		return fmt.Errorf("timer threshold %s: want whole seconds", o.TimerThreshold)
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.TemplatePath == "" {
		p, err := FindTemplate()
		if err != nil {
			return err
		}
		o.TemplatePath = p
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	return nil
}

// start does all of Start but serving: the emulator and the clients, the
// template's resources and the saved state, the engine and the handlers.
// It answers the clients' config, for the runner's.
func (s *Stack) start(ctx context.Context, o Options) (aws.Config, error) {
	cfg, err := s.connect(ctx, o)
	if err != nil {
		return cfg, err
	}
	if err := s.provision(ctx, o, cfg); err != nil {
		return cfg, err
	}
	if err := s.setEnv(ctx, o); err != nil {
		return cfg, err
	}
	heartbeat, err := s.wire(ctx, o, cfg)
	if err != nil {
		return cfg, err
	}
	if o.SampleJob {
		if _, err := s.SeedSampleJob(ctx); err != nil {
			return cfg, err
		}
	}
	if s.Restored.Items > 0 {
		// The restored jobs' messages were not kept: re-send what is due now
		// rather than at the first tick.
		if _, err := heartbeat(ctx, events.EventBridgeEvent{}); err != nil {
			o.Log.Warn("sweep after restoring the state failed; the heartbeat will run it", "err", err)
		}
	}
	return cfg, nil
}

// connect starts the emulator, or fronts the running one, and makes the
// stack's plain clients.
func (s *Stack) connect(ctx context.Context, o Options) (aws.Config, error) {
	// Every AWS request goes through a proxy that serialises DynamoDB
	// requests: moto applies conditional writes without a lock, and an
	// emulator named by EndpointURL is not known to be atomic either.
	var em *emulator.Emulator
	var err error
	if o.EndpointURL == "" {
		em, err = emulator.Start(ctx, "127.0.0.1:0", o.MotoLog)
	} else {
		em, err = emulator.Front(ctx, "127.0.0.1:0", o.EndpointURL)
	}
	if err != nil {
		return aws.Config{}, err
	}
	s.Emulator, s.Endpoint = em, em.URL
	cfg, err := AWSConfig(ctx, s.Endpoint, o.Region)
	if err != nil {
		return cfg, err
	}
	s.DynamoDB, s.SQS = dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	s.S3 = s3.NewFromConfig(cfg, blobstore.Options(true))
	s.EventBridge = eventbridge.NewFromConfig(cfg)
	return cfg, nil
}

// provision makes the template's resources and restores the saved state
// into them.
func (s *Stack) provision(ctx context.Context, o Options, cfg aws.Config) error {
	tmpl, err := bootstrap.Parse(o.TemplatePath)
	if err != nil {
		return err
	}
	for name, value := range o.Parameters {
		if err := tmpl.SetParameter(name, value); err != nil {
			return err
		}
	}
	res, err := bootstrap.Provision(ctx, s.DynamoDB, s.SQS, sfn.NewFromConfig(cfg), s.S3, s.EventBridge, tmpl, o.StackName)
	if err != nil {
		return err
	}
	s.Resources = res
	if o.StatePath == "" {
		return nil
	}
	n, err := s.RestoreState(ctx, o.StatePath)
	if errors.Is(err, ErrStateNotRestored) {
		s.RestoreSkipped = err
	} else if err != nil {
		return err
	}
	s.Restored, s.statePath = n, o.StatePath
	return nil
}

// setEnv puts the options into the functions' environment (and the ready
// queues' visibility), and starts the local Lambda service.
func (s *Stack) setEnv(ctx context.Context, o Options) error {
	res := s.Resources
	if o.Lease > 0 {
		secs := fmt.Sprint(int(o.Lease.Seconds()))
		for _, id := range []string{"ReadyQueueP0", "ReadyQueueP1", "ReadyQueueP2"} {
			if _, err := s.SQS.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(res.QueueURLs[id]), Attributes: map[string]string{"VisibilityTimeout": secs}}); err != nil {
				return fmt.Errorf("shorten the lease of %s: %w", id, err)
			}
		}
		res.Env["STEPFLOW_LEASE_SECONDS"] = secs
	}
	if o.TimerThreshold != 0 {
		res.Env["STEPFLOW_TIMER_THRESHOLD"] = fmt.Sprint(int(o.TimerThreshold / time.Second)) // range validated by FromEnv
	}
	if o.HTTPAllow != "" {
		res.Env["STEPFLOW_HTTP_ALLOW"] = o.HTTPAllow // validated by FromEnv
	}
	if o.ScheduleEvery > 0 {
		// The heartbeat's period, as the health verdict judges a stale one.
		res.Env["STEPFLOW_HEARTBEAT_SECONDS"] = fmt.Sprint(int(max((o.ScheduleEvery+time.Second-1)/time.Second, 1)))
	}
	if len(o.LambdaDirs) > 0 {
		// The functions reach the emulator as the stack's own functions do.
		svc, err := ServeLambda(ctx, o, res.Env, map[string]string{"AWS_ENDPOINT_URL": s.Endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"})
		if err != nil {
			return err
		}
		s.Lambda = svc
		res.Env["STEPFLOW_LAMBDA_ENDPOINT"] = svc.URL // validated by FromEnv
	}
	if len(o.OperatorKeys) > 0 {
		hashes := make([]string, len(o.OperatorKeys))
		for i, k := range o.OperatorKeys {
			hashes[i] = engine.HashKey(k)
		}
		res.Env["STEPFLOW_OPERATOR_KEY_HASHES"] = strings.Join(hashes, ",")
	}
	for k, v := range o.Env {
		res.Env[k] = v // validated by FromEnv
	}
	return nil
}

// wire makes the engine from the functions' environment, registers the
// API keys and makes each function's handler. It answers the heartbeat's.
func (s *Stack) wire(ctx context.Context, o Options, cfg aws.Config) (func(context.Context, events.EventBridgeEvent) (engine.SweepReport, error), error) {
	settings, err := config.FromEnv(func(k string) string { return s.Resources.Env[k] })
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", o.StackName, err)
	}
	// The engine's clients are its own, with the options' middleware.
	ec := config.EngineConfig(settings, config.ClientsFrom(cfg, o.APIOptions...).WithLambda(lambdaclient.FromConfig, settings.LambdaEndpoint), o.Log)
	ec.Now = o.Now // nil: the wall clock
	if o.MetricsOutput != nil {
		ec.Metrics = metrics.NewEMF(o.MetricsOutput, settings.MetricsNamespace)
	}
	s.Engine, s.Blobs = engine.New(ec), ec.Blobs
	st := store.New(s.DynamoDB, settings.Table)
	s.Store = st
	for key, tenant := range o.APIKeys {
		if err := st.PutAPIKey(ctx, tenant, key); err != nil {
			return nil, err
		}
	}
	s.Handlers, s.API = NewHandlers(s.Engine, o.Log, queue.ReadyTokens(settings.ReadyQueues), settings.OperatorKeyHashes)
	return handlers.Heartbeat(s.Engine), nil
}

// NewHandlers makes each function's handler over eng as its main wires it
// (functions/), by logical id, and an API with every route (Stack.API).
// tokens makes the ready queues' token of a record the execute function
// gets (queue.ReadyTokens); operatorKeyHashes open GET /v1/metrics'
// operator view (config.Settings.OperatorKeyHashes).
func NewHandlers(eng *engine.Engine, log *slog.Logger, tokens func(queueARN, receipt string) string, operatorKeyHashes []string) (runner.Handlers, *httpapi.API) {
	newAPI := func(fns ...httpapi.Function) *httpapi.API {
		a := httpapi.New(eng, log, fns...)
		a.MetricsText = prometheus.Exposition // as functions/enqueue wires it
		a.OperatorText, a.OperatorKeyHashes = prometheus.OperatorExposition, operatorKeyHashes
		return a
	}
	heartbeat := handlers.Heartbeat(eng)
	return runner.Handlers{
		HTTP: map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){
			"EnqueueFunction": newAPI(httpapi.EnqueueFunction).Handle,
			"ClaimFunction":   newAPI(httpapi.ClaimFunction).Handle,
		},
		SQS: map[string]func(context.Context, events.SQSEvent) (events.SQSEventResponse, error){
			"ExecuteFunction": handlers.Execute(eng, tokens, log),
		},
		Schedule: map[string]func(context.Context, events.EventBridgeEvent) error{
			"HeartbeatFunction": func(ctx context.Context, ev events.EventBridgeEvent) error {
				_, err := heartbeat(ctx, ev)
				return err
			},
		},
	}, newAPI()
}

// run serves the API on ln and polls the queues, as the runner plays API
// Gateway, the event source mappings and the schedule, until Close.
func (s *Stack) run(ctx context.Context, o Options, cfg aws.Config, ln net.Listener) {
	var pollSQS runner.SQSAPI = s.SQS
	if len(o.RunnerAPIOptions) > 0 {
		pollSQS = sqs.NewFromConfig(cfg, func(so *sqs.Options) { so.APIOptions = append(so.APIOptions, o.RunnerAPIOptions...) })
	}
	r := &runner.Runner{
		Stack: s.Resources, Handlers: s.Handlers, SQS: pollSQS, Log: o.Log, Region: o.Region,
		ScheduleEvery: o.ScheduleEvery, PollWait: o.PollWait, MachineInvocations: o.MachineInvocations,
	}
	s.Runner = r
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- r.Run(runCtx, ln) }()
}

// Wait blocks until the runner stops.
func (s *Stack) Wait() error {
	if s.done == nil {
		return nil
	}
	return <-s.done
}

// Close stops the runner and the emulator it started.
func (s *Stack) Close() {
	if s.cancel != nil {
		s.cancel()
		if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
			slog.Warn("runner stopped with an error", "err", err)
		}
		s.cancel = nil
	}
	if s.statePath != "" {
		path := s.statePath
		s.statePath = ""
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := s.SaveState(ctx, path)
		cancel()
		if err != nil {
			s.log.Error("state not saved", "file", path, "err", err)
		} else {
			s.log.Info("state saved", "file", path, "items", n.Items, "objects", n.Objects)
		}
	}
	if s.Lambda != nil {
		s.Lambda.Close()
		s.Lambda = nil
	}
	if s.Emulator != nil {
		s.Emulator.Close()
		s.Emulator = nil
	}
}

// ServeLambda serves o.LambdaDirs' functions (relative to
// o.TemplatePath's directory) as Lambda would, under the names the
// functions' environment env lets a lambda step call
// (STEPFLOW_LAMBDA_ALLOW), in its account; each runs with awsEnv added to
// its environment. Point the lambda action at its URL
// (STEPFLOW_LAMBDA_ENDPOINT).
func ServeLambda(ctx context.Context, o Options, env, awsEnv map[string]string) (*lambdaemu.Service, error) {
	root := filepath.Dir(o.TemplatePath)
	dirs := make([]string, len(o.LambdaDirs))
	for i, d := range o.LambdaDirs {
		if !filepath.IsAbs(d) {
			d = filepath.Join(root, d)
		}
		dirs[i] = d
	}
	return lambdaemu.Start(ctx, "127.0.0.1:0", lambdaemu.Options{
		Dirs: dirs, Prefixes: actions.ParseLambdaAllow(env[actions.EnvLambdaAllow]), Region: o.Region,
		Account: env[actions.EnvAccount], // the emulator's, as the stack's functions know it
		Env:     awsEnv, Output: o.LambdaOutput, Log: o.Log,
	})
}

// FindTemplate finds template.yaml in the working directory or above it,
// so tests in any package and `make dev` read the same file.
func FindTemplate() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "template.yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("template.yaml not found in this directory or any above it")
		}
		dir = parent
	}
}
