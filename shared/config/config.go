// Package config reads a function's settings from its environment (set by
// template.yaml on AWS, by the local stack's bootstrap here) and wires the
// engine over real AWS clients. AWS_ENDPOINT_URL, honoured by the SDK,
// points every client at a local emulator.
package config

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/stepflow/stepflow/shared/actions"
	"github.com/stepflow/stepflow/shared/blobstore"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/eventbus"
	"github.com/stepflow/stepflow/shared/logging"
	"github.com/stepflow/stepflow/shared/metrics"
	"github.com/stepflow/stepflow/shared/netguard"
	"github.com/stepflow/stepflow/shared/queue"
	"github.com/stepflow/stepflow/shared/statemachines"
	"github.com/stepflow/stepflow/shared/store"
)

// Settings are the environment variables template.yaml gives every function.
type Settings struct {
	Table             string        // STEPFLOW_TABLE
	ReadyQueues       [3]string     // STEPFLOW_QUEUE_P0..P2
	DLQARN            string        // STEPFLOW_DLQ_ARN
	DLQURL            string        // STEPFLOW_DLQ_URL (optional): the sweep reads its depth
	WorkerQueuePrefix string        // STEPFLOW_WORKER_QUEUE_PREFIX
	Lease             time.Duration // STEPFLOW_LEASE_SECONDS: the ready queues' visibility timeout, the longest built-in lease
	// HTTPAllow is STEPFLOW_HTTP_ALLOW (optional): CIDRs and host names the
	// http action may reach although the guard refuses them by default
	// (loopback, link-local, private...). Empty allows none of them.
	HTTPAllow string
	// P0Tenants is STEPFLOW_P0_TENANTS (optional): "*" or empty lets every
	// tenant submit priority 0; otherwise a comma-separated list of the
	// tenants that may.
	P0Tenants string
	// TenantBudgets is STEPFLOW_TENANT_BUDGETS (optional): tenants' daily
	// budgets in dollars, "tenant:usd,...", "*:usd" for every tenant not
	// named (engine.ParseTenantBudgets).
	TenantBudgets string
	// MaxWorkerQueues is STEPFLOW_MAX_WORKER_QUEUES (optional): how many
	// worker queues one tenant may have (queue.DefaultMaxWorkerQueues).
	MaxWorkerQueues int
	// WorkerQueueIdle is STEPFLOW_WORKER_QUEUE_IDLE_SECONDS (optional,
	// engine.DefaultWorkerQueueIdle): a worker queue no job has named for
	// this long is removed by the sweep.
	WorkerQueueIdle time.Duration
	// MaxLongPolls is STEPFLOW_MAX_LONG_POLLS (optional): how many
	// long-polls (events with wait, claims with wait_seconds) one tenant
	// may hold open at once (engine.DefaultMaxLongPolls).
	MaxLongPolls int
	// TimerStateMachine is STEPFLOW_TIMER_STATE_MACHINE (optional; the
	// template's LongTimers StepFunctions sets it): the ARN of
	// statemachine/timer.asl.json, which then holds every delay beyond the
	// threshold. Without it such a delay waits in the due index and the
	// heartbeat's sweep sends it once it is within the threshold.
	TimerStateMachine string
	// TimerThreshold is STEPFLOW_TIMER_THRESHOLD (optional, seconds, 1 to
	// 900, default 900): the longest delay sent as an SQS delay at once.
	TimerThreshold time.Duration
	// ResourceWait is STEPFLOW_RESOURCE_WAIT_SECONDS (optional, seconds, 1
	// to a year, default domain.DefaultResourceWait): how long a step that
	// names no resource_wait_seconds waits for a resource slot.
	ResourceWait time.Duration
	// Retention is STEPFLOW_RETENTION_COMPLETED_DAYS, _FAILED_DAYS and
	// _CANCELLED_DAYS (optional; 30, 14 and 7 by default).
	Retention domain.Retention
	// LambdaEndpoint is STEPFLOW_LAMBDA_ENDPOINT (optional): the endpoint of
	// the lambda action's client alone (locally, the invoke service of
	// examples/functions); empty keeps the AWS config's.
	LambdaEndpoint string
	// LambdaAllow is STEPFLOW_LAMBDA_ALLOW (optional): function-name
	// prefixes a lambda step may call; empty leaves it to IAM.
	LambdaAllow string
	// Account and Partition are STEPFLOW_AWS_ACCOUNT and
	// STEPFLOW_AWS_PARTITION (template.yaml: AWS::AccountId and
	// AWS::Partition): a lambda step's ARN must name them, and the AWS
	// config's region. Unset, a step may name its function by name only.
	Account, Partition string
	// SFNAllow is STEPFLOW_SFN_ALLOW: the name prefixes of the state
	// machines a stepfunctions step may run (statemachines.DefaultAllow
	// when empty).
	SFNAllow string
	// SFNWait is STEPFLOW_SFN_WAIT_SECONDS: how long the execute function
	// waits for an execution it started before leaving it to the sweep
	// (engine.ExecutionWait when unset).
	SFNWait    time.Duration
	SFNWaitSet bool
	// DataBucket is STEPFLOW_DATA_BUCKET (optional): the S3 bucket that
	// keeps payloads and outputs over InlineLimit. Without it everything
	// stays in the job's item.
	DataBucket string
	// InlineLimit is STEPFLOW_INLINE_LIMIT (optional, bytes,
	// domain.DefaultInlineLimit when unset): the largest payload or output
	// kept inline.
	InlineLimit int
	// EventBus is STEPFLOW_EVENT_BUS (optional): the EventBridge bus that
	// gets the "Job State Change" events JobStateEvents chooses. Without
	// it, or with JobStateEvents Disabled, none is sent.
	EventBus string
	// JobStateEvents is STEPFLOW_JOB_STATE_EVENTS (template parameter
	// JobStateEvents): Disabled (also when unset), Terminal or All;
	// Enabled, what it was before Terminal, is read as All.
	JobStateEvents engine.JobStateEvents
	// Health is STEPFLOW_HEALTH_* and STEPFLOW_HEARTBEAT_SECONDS
	// (optional; the template's Health* parameters): the health verdict's
	// thresholds (engine.DefaultHealthThresholds when unset).
	Health engine.HealthThresholds
	// MetricsNamespace is STEPFLOW_METRICS_NAMESPACE (optional): the
	// CloudWatch namespace of the EMF records a function writes to stdout;
	// empty writes none.
	MetricsNamespace string
	// OperatorKeyHashes is STEPFLOW_OPERATOR_KEY_HASHES (optional): the
	// SHA-256 (hex) of each operator key, comma-separated. A request to
	// GET /v1/metrics with one of them answers the stack's operator
	// metrics (docs/metrics.md); empty: no operator key.
	OperatorKeyHashes []string
}

// FromEnv reads Settings, naming any variable that is missing.
func FromEnv(getenv func(string) string) (Settings, error) {
	s := Settings{
		Table:             getenv("STEPFLOW_TABLE"),
		DLQARN:            getenv("STEPFLOW_DLQ_ARN"),
		WorkerQueuePrefix: getenv("STEPFLOW_WORKER_QUEUE_PREFIX"),
		HTTPAllow:         getenv(netguard.EnvAllow),
	}
	for p := range s.ReadyQueues {
		s.ReadyQueues[p] = getenv(fmt.Sprintf("STEPFLOW_QUEUE_P%d", p))
	}
	for name, v := range map[string]string{
		"STEPFLOW_TABLE": s.Table, "STEPFLOW_QUEUE_P0": s.ReadyQueues[0], "STEPFLOW_QUEUE_P1": s.ReadyQueues[1],
		"STEPFLOW_QUEUE_P2": s.ReadyQueues[2], "STEPFLOW_WORKER_QUEUE_PREFIX": s.WorkerQueuePrefix,
	} {
		if v == "" {
			return s, fmt.Errorf("environment variable %s is not set", name)
		}
	}
	s.P0Tenants = getenv("STEPFLOW_P0_TENANTS")
	s.TenantBudgets = getenv("STEPFLOW_TENANT_BUDGETS")
	s.TimerStateMachine = getenv("STEPFLOW_TIMER_STATE_MACHINE")
	s.TimerThreshold = queue.MaxDelay
	s.ResourceWait = domain.DefaultResourceWait
	s.InlineLimit = domain.DefaultInlineLimit
	if err := readNumbers(getenv, &s, numberVars); err != nil {
		return s, err
	}
	s.DataBucket = getenv("STEPFLOW_DATA_BUCKET")
	s.EventBus = getenv("STEPFLOW_EVENT_BUS")
	switch v := getenv("STEPFLOW_JOB_STATE_EVENTS"); v {
	case "", string(engine.JobStateEventsDisabled):
		s.JobStateEvents, s.EventBus = engine.JobStateEventsDisabled, ""
	case string(engine.JobStateEventsTerminal), string(engine.JobStateEventsAll):
		s.JobStateEvents = engine.JobStateEvents(v)
	case "Enabled": // deprecated: a stack deployed with it keeps every event
		s.JobStateEvents = engine.JobStateEventsAll
	default:
		return s, fmt.Errorf("environment variable STEPFLOW_JOB_STATE_EVENTS must be Disabled, Terminal or All (Enabled, deprecated, means All), not %q", v)
	}
	if err := readNumbers(getenv, &s, numberVarsAfterEvents); err != nil {
		return s, err
	}
	if _, err := engine.ParseTenantBudgets(s.TenantBudgets); err != nil {
		return s, err
	}
	if _, err := netguard.ParseAllow(s.HTTPAllow); err != nil {
		return s, fmt.Errorf("environment variable %s: %w", netguard.EnvAllow, err)
	}
	var err error
	if s.Health, err = healthFromEnv(getenv); err != nil {
		return s, err
	}
	s.MetricsNamespace = getenv("STEPFLOW_METRICS_NAMESPACE")
	s.DLQURL = getenv("STEPFLOW_DLQ_URL")
	if s.OperatorKeyHashes, err = operatorKeyHashes(getenv("STEPFLOW_OPERATOR_KEY_HASHES")); err != nil {
		return s, err
	}
	s.LambdaAllow = getenv(actions.EnvLambdaAllow)
	s.Account, s.Partition = getenv(actions.EnvAccount), getenv(actions.EnvPartition)
	s.SFNAllow = getenv(statemachines.EnvAllow)
	if s.Account != "" && !accountPattern.MatchString(s.Account) {
		return s, fmt.Errorf("environment variable %s must be a 12-digit AWS account id, not %q", actions.EnvAccount, s.Account)
	}
	if s.LambdaEndpoint = getenv("STEPFLOW_LAMBDA_ENDPOINT"); s.LambdaEndpoint != "" {
		if u, err := url.Parse(s.LambdaEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("environment variable STEPFLOW_LAMBDA_ENDPOINT must be an http or https URL such as http://127.0.0.1:3001")
		}
	}
	return s, nil
}

// numberVar is a whole-number variable: its bounds, what the error says it
// must be, and where its value goes. An optional one left unset keeps the
// default FromEnv set.
type numberVar struct {
	name     string
	required bool
	lo, hi   int
	must     string
	set      func(s *Settings, n int)
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

// numberVars are read in this order, so the first bad one is the one named.
var numberVars = []numberVar{
	{"STEPFLOW_LEASE_SECONDS", true, 1, math.MaxInt, "a positive number of seconds",
		func(s *Settings, n int) { s.Lease = seconds(n) }},
	{"STEPFLOW_MAX_WORKER_QUEUES", false, 1, math.MaxInt, "a positive number",
		func(s *Settings, n int) { s.MaxWorkerQueues = n }},
	{"STEPFLOW_WORKER_QUEUE_IDLE_SECONDS", false, 1, math.MaxInt, "a positive number of seconds",
		func(s *Settings, n int) { s.WorkerQueueIdle = seconds(n) }},
	{"STEPFLOW_MAX_LONG_POLLS", false, 1, 10000, "a number from 1 to 10000",
		func(s *Settings, n int) { s.MaxLongPolls = n }},
	{"STEPFLOW_TIMER_THRESHOLD", false, 1, int(queue.MaxDelay / time.Second), fmt.Sprintf("a number of seconds from 1 to %d", int(queue.MaxDelay/time.Second)),
		func(s *Settings, n int) { s.TimerThreshold = seconds(n) }},
	{"STEPFLOW_RESOURCE_WAIT_SECONDS", false, 1, domain.MaxWaitSeconds, fmt.Sprintf("a number of seconds from 1 to %d", domain.MaxWaitSeconds),
		func(s *Settings, n int) { s.ResourceWait = seconds(n) }},
	{"STEPFLOW_RETENTION_COMPLETED_DAYS", false, 1, 3650, "a number of days from 1 to 3650",
		func(s *Settings, n int) { s.Retention.CompletedDays = n }},
	{"STEPFLOW_RETENTION_FAILED_DAYS", false, 1, 3650, "a number of days from 1 to 3650",
		func(s *Settings, n int) { s.Retention.FailedDays = n }},
	{"STEPFLOW_RETENTION_CANCELLED_DAYS", false, 1, 3650, "a number of days from 1 to 3650",
		func(s *Settings, n int) { s.Retention.CancelledDays = n }},
}

// numberVarsAfterEvents are checked after STEPFLOW_JOB_STATE_EVENTS, as
// they always were.
var numberVarsAfterEvents = []numberVar{
	{"STEPFLOW_INLINE_LIMIT", false, 1, domain.MaxInlineJobBytes / 2, fmt.Sprintf("a number of bytes from 1 to %d", domain.MaxInlineJobBytes/2),
		func(s *Settings, n int) { s.InlineLimit = n }},
	{"STEPFLOW_SFN_WAIT_SECONDS", false, 0, 60, "a number of seconds from 0 (do not wait) to 60",
		func(s *Settings, n int) { s.SFNWait = seconds(n); s.SFNWaitSet = true }},
}

// readNumbers reads vars into s, answering the first that is out of bounds
// or not a number.
func readNumbers(getenv func(string) string, s *Settings, vars []numberVar) error {
	for _, v := range vars {
		raw := getenv(v.name)
		if raw == "" && !v.required {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < v.lo || n > v.hi {
			return fmt.Errorf("environment variable %s must be %s", v.name, v.must)
		}
		v.set(s, n)
	}
	return nil
}

// accountPattern is an AWS account id.
var accountPattern = regexp.MustCompile(`^\d{12}$`)

// keyHashPattern is a key's SHA-256 as engine.HashKey writes it.
var keyHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// operatorKeyHashes reads STEPFLOW_OPERATOR_KEY_HASHES. A plain key put
// there by mistake is refused rather than taken as a hash nobody has.
func operatorKeyHashes(v string) ([]string, error) {
	var out []string
	for i, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if !keyHashPattern.MatchString(h) {
			// Not the value itself: it may be a key, and this goes to the log.
			return nil, fmt.Errorf("environment variable STEPFLOW_OPERATOR_KEY_HASHES must hold the SHA-256 of each operator key, 64 lower-case hex digits, comma-separated (printf %%s \"$KEY\" | sha256sum); entry %d is not one", i+1)
		}
		out = append(out, h)
	}
	return out, nil
}

// healthFromEnv reads the health thresholds, each within its range and
// the unhealthy bound no milder than the degraded one.
func healthFromEnv(getenv func(string) string) (engine.HealthThresholds, error) {
	h := engine.DefaultHealthThresholds()
	intVar := func(name string, lo, hi int64, dst *int64) error {
		v := getenv(name)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("environment variable %s must be a whole number from %d to %d, not %q", name, lo, hi, v)
		}
		*dst = n
		return nil
	}
	okPct, badPct := int64(h.SuccessOK*100), int64(h.SuccessUnhealthy*100)
	avg, every := int64(h.AvgDuration/time.Second), int64(h.SweepEvery/time.Second)
	for _, v := range []struct {
		name   string
		lo, hi int64
		dst    *int64
	}{
		{"STEPFLOW_HEALTH_SUCCESS_OK_PERCENT", 0, 100, &okPct},
		{"STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT", 0, 100, &badPct},
		{"STEPFLOW_HEALTH_SUCCESS_MIN_JOBS", 0, 1_000_000, &h.SuccessMinJobs},
		{"STEPFLOW_HEALTH_BACKLOG_DEGRADED", 1, 1_000_000, &h.BacklogDegraded},
		{"STEPFLOW_HEALTH_BACKLOG_UNHEALTHY", 1, 1_000_000, &h.BacklogUnhealthy},
		{"STEPFLOW_HEALTH_BLOCKED_DEGRADED", 1, 1_000_000, &h.BlockedDegraded},
		{"STEPFLOW_HEALTH_BLOCKED_UNHEALTHY", 1, 1_000_000, &h.BlockedUnhealthy},
		{"STEPFLOW_HEALTH_AVG_DURATION_SECONDS", 1, 86_400, &avg},
		{"STEPFLOW_HEALTH_FAILURES_24H", 1, 1_000_000, &h.Failures24h},
		{"STEPFLOW_HEARTBEAT_SECONDS", 1, 86_400, &every},
	} {
		if err := intVar(v.name, v.lo, v.hi, v.dst); err != nil {
			return h, err
		}
	}
	switch {
	case badPct > okPct:
		return h, fmt.Errorf("environment variable STEPFLOW_HEALTH_SUCCESS_UNHEALTHY_PERCENT (%d) must not be above STEPFLOW_HEALTH_SUCCESS_OK_PERCENT (%d)", badPct, okPct)
	case h.BacklogUnhealthy < h.BacklogDegraded:
		return h, fmt.Errorf("environment variable STEPFLOW_HEALTH_BACKLOG_UNHEALTHY (%d) must not be below STEPFLOW_HEALTH_BACKLOG_DEGRADED (%d)", h.BacklogUnhealthy, h.BacklogDegraded)
	case h.BlockedUnhealthy < h.BlockedDegraded:
		return h, fmt.Errorf("environment variable STEPFLOW_HEALTH_BLOCKED_UNHEALTHY (%d) must not be below STEPFLOW_HEALTH_BLOCKED_DEGRADED (%d)", h.BlockedUnhealthy, h.BlockedDegraded)
	}
	h.SuccessOK, h.SuccessUnhealthy = float64(okPct)/100, float64(badPct)/100
	h.AvgDuration, h.SweepEvery = time.Duration(avg)*time.Second, time.Duration(every)*time.Second
	return h, nil
}

// Clients are the AWS clients the engine talks through.
type Clients struct {
	DynamoDB      store.API
	SQS           queue.API
	StepFunctions queue.TimerAPI
	// StateMachines runs the stepfunctions action's executions; nil runs
	// none (such a step is refused at submit).
	StateMachines statemachines.Client
	// Lambda is the lambda action's client; nil but in the functions that
	// run steps (WithLambda).
	Lambda      actions.LambdaInvoker
	S3          *s3.Client
	EventBridge *eventbridge.Client

	cfg aws.Config // the clients': WithLambda's, and the stack's region
}

// LambdaClient makes the lambda action's client from an AWS config, at
// endpoint when it is set (lambdaclient.FromConfig). It is passed in by
// the mains that run steps, so the other functions link no Lambda client.
type LambdaClient func(cfg aws.Config, endpoint string) actions.LambdaInvoker

// WithLambda answers c with the lambda action's client made by make from
// the clients' AWS config, at endpoint when set (STEPFLOW_LAMBDA_ENDPOINT).
func (c Clients) WithLambda(make LambdaClient, endpoint string) Clients {
	c.Lambda = make(c.cfg, endpoint)
	return c
}

// Option changes the clients FromLambdaEnv wires the engine over.
type Option func(Settings, *Clients)

// LambdaActions has the engine run the lambda action through the client
// make makes: the execute function's option.
func LambdaActions(make LambdaClient) Option {
	return func(s Settings, c *Clients) { *c = c.WithLambda(make, s.LambdaEndpoint) }
}

// NewClients builds SDK clients from the default chain (environment,
// profile, role), so AWS_ENDPOINT_URL and AWS_REGION apply as usual.
func NewClients(ctx context.Context) (Clients, aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return Clients{}, cfg, fmt.Errorf("load AWS config: %w", err)
	}
	return ClientsFrom(cfg), cfg, nil
}

// ClientsFrom builds the engine's SDK clients from cfg. apiOptions are
// added to every client's middleware stack after cfg's own APIOptions; each
// sees every operation of every service and picks its own (the local
// stack's fault layer and cost meter go here).
func ClientsFrom(cfg aws.Config, apiOptions ...func(*middleware.Stack) error) Clients {
	cfg.APIOptions = append(slices.Clip(cfg.APIOptions), apiOptions...)
	states := sfn.NewFromConfig(cfg)
	return Clients{DynamoDB: dynamodb.NewFromConfig(cfg), SQS: sqs.NewFromConfig(cfg), StepFunctions: states, StateMachines: states,
		S3: s3.NewFromConfig(cfg, blobstore.Options(cfg.BaseEndpoint != nil)), EventBridge: eventbridge.NewFromConfig(cfg), cfg: cfg}
}

// Engine wires an engine over the clients.
func Engine(s Settings, c Clients, log *slog.Logger) *engine.Engine {
	return engine.New(EngineConfig(s, c, log))
}

// EngineConfig is the engine's configuration from the settings, over the
// clients.
func EngineConfig(s Settings, c Clients, log *slog.Logger) engine.Config {
	st := store.New(c.DynamoDB, s.Table)
	st.Log = log
	q := queue.New(c.SQS, queue.Config{
		ReadyURLs: [domain.MaxPriority + 1]string(s.ReadyQueues), DLQARN: s.DLQARN, DLQURL: s.DLQURL, WorkerQueuePrefix: s.WorkerQueuePrefix,
		MaxWorkerQueues: s.MaxWorkerQueues, TimerARN: s.TimerStateMachine, TimerThreshold: s.TimerThreshold,
	}).WithTimers(c.StepFunctions)
	// FromEnv refuses a bad allow list; Settings built by hand fail closed.
	guard, err := netguard.ParseAllow(s.HTTPAllow)
	if err != nil {
		guard = netguard.Policy{}
		if log != nil {
			log.Error("ignoring "+netguard.EnvAllow+": the http action reaches public addresses only", "err", err)
		}
	}
	// The region the clients (a lambda step's invoke among them) go to is
	// the stack's: every function checks a lambda step's ARN against it at
	// submit, though only the execute function invokes.
	runner := &actions.Runner{Guard: guard, LambdaAllow: actions.ParseLambdaAllow(s.LambdaAllow), Lambda: c.Lambda,
		LambdaHome: actions.LambdaHome{Partition: s.Partition, Region: c.cfg.Region, Account: s.Account}}
	cfg := engine.Config{
		Store: st, Queue: q, Runner: runner, Log: log, BuiltinLease: s.Lease, TimerService: q.TimerService(),
		P0Tenants: engine.ParseTenantList(s.P0Tenants), TimerThreshold: s.TimerThreshold, ResourceWait: s.ResourceWait,
		Retention: s.Retention, WorkerQueueIdle: s.WorkerQueueIdle, Schedules: store.NewSchedules(c.DynamoDB, s.Table),
		InlineLimit: s.InlineLimit, Thresholds: s.Health, MaxLongPolls: s.MaxLongPolls,
	}
	cfg.TenantBudgets, _ = engine.ParseTenantBudgets(s.TenantBudgets) // FromEnv refused a bad one
	cfg.FunctionMemoryMB, _ = strconv.Atoi(os.Getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"))
	if s.SFNWaitSet {
		cfg.ExecutionWait = s.SFNWait
		if s.SFNWait == 0 {
			cfg.ExecutionWait = -1 // none
		}
	}
	if s.DataBucket != "" && c.S3 != nil {
		cfg.Blobs = blobstore.New(c.S3, s.DataBucket)
	}
	if c.StateMachines != nil {
		cfg.StateMachines = statemachines.New(c.StateMachines, statemachines.Home{Partition: s.Partition, Region: c.cfg.Region, Account: s.Account},
			statemachines.ParseAllow(s.SFNAllow))
	}
	if s.EventBus != "" && c.EventBridge != nil {
		cfg.Publisher, cfg.JobStateEvents = eventbus.New(c.EventBridge, s.EventBus), s.JobStateEvents
	}
	return cfg
}

// App is what a function's main wires: the engine, the settings it was
// made from, and a logger.
type App struct {
	Engine   *engine.Engine
	Settings Settings
	Log      *slog.Logger
}

// ReadyTokens makes the queue's token of a message the execute function
// received from a ready queue.
func (a App) ReadyTokens() func(queueARN, receipt string) string {
	return queue.ReadyTokens(a.Settings.ReadyQueues)
}

// FromLambdaEnv is what each function's main calls: settings from the
// environment, clients from the default chain, a JSON logger at the
// function's ApplicationLogLevel (logging.LambdaLevel: INFO by default,
// which leaves out the line per job change; warnings and errors are kept).
func FromLambdaEnv(ctx context.Context, opts ...Option) (App, error) {
	log := logging.JSON(os.Stderr, logging.LambdaLevel(os.Getenv))
	s, err := FromEnv(os.Getenv)
	if err != nil {
		return App{Log: log}, err
	}
	c, _, err := NewClients(ctx)
	if err != nil {
		return App{Log: log}, err
	}
	for _, o := range opts {
		o(s, &c)
	}
	cfg := EngineConfig(s, c, log)
	if s.MetricsNamespace != "" {
		// Lambda sends stdout to the function's log group, where CloudWatch
		// extracts the EMF records' metrics.
		cfg.Metrics = metrics.NewEMF(os.Stdout, s.MetricsNamespace)
	}
	e := engine.New(cfg)
	return App{Engine: e, Settings: s, Log: log}, nil
}

// MustFromLambdaEnv is FromLambdaEnv for a function's main: a function that
// cannot be wired stops at once, its error in the log.
func MustFromLambdaEnv(opts ...Option) App {
	app, err := FromLambdaEnv(context.Background(), opts...)
	if err != nil {
		app.Log.Error("function not wired", "err", err)
		os.Exit(1)
	}
	return app
}
