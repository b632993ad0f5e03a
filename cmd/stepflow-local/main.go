// Command stepflow-local runs stepflow on one machine: `dev` starts the
// emulator, the resources of template.yaml and the runner that plays API
// Gateway, SQS event source mappings and the schedule, or, with no
// emulator to be had, the same engine and handlers embedded over
// in-memory adapters (localstack/embedded); `invoke` runs one function's
// handler on one event against a running dev stack, as `sam local invoke`
// would.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/localstack/embedded"
	"github.com/stepflow/stepflow/localstack/toolchain"
	"github.com/stepflow/stepflow/shared/config"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/logging"
	"github.com/stepflow/stepflow/shared/store"
)

func main() {
	root := &cobra.Command{Use: "stepflow-local", Short: "Run stepflow on this machine against a local AWS emulator, or embedded without one", SilenceUsage: true}
	root.AddCommand(devCmd(), invokeCmd(), apiKeyCmd())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}

// passedSettings are the functions' optional settings `make dev` takes
// from its own environment.
func passedSettings() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"STEPFLOW_P0_TENANTS", "STEPFLOW_MAX_WORKER_QUEUES", "STEPFLOW_WORKER_QUEUE_IDLE_SECONDS", "STEPFLOW_MAX_LONG_POLLS", "STEPFLOW_TIMER_THRESHOLD", "STEPFLOW_RESOURCE_WAIT_SECONDS", "STEPFLOW_LAMBDA_ALLOW", "STEPFLOW_INLINE_LIMIT", "STEPFLOW_JOB_STATE_EVENTS", "STEPFLOW_TENANT_BUDGETS"} {
		if v, ok := os.LookupEnv(k); ok {
			m[k] = v
		}
	}
	return m
}

// devParameters answers the template parameters `make dev` deploys
// with: DeployExamples, since it serves examples/functions for lambda
// steps, and LongTimers from STEPFLOW_LONG_TIMERS (none: the template's
// Sweep).
func devParameters() map[string]string {
	p := map[string]string{"DeployExamples": "true"}
	if v := os.Getenv("STEPFLOW_LONG_TIMERS"); v != "" {
		p["LongTimers"] = v
	}
	return p
}

// devParametersOf answers the parameters of the dev stack whose
// functions' environment is env: LongTimers StepFunctions when they were
// told of a timer state machine.
func devParametersOf(env map[string]string) map[string]string {
	p := map[string]string{"DeployExamples": "true"}
	if env["STEPFLOW_TIMER_STATE_MACHINE"] != "" {
		p["LongTimers"] = "StepFunctions"
	}
	return p
}

// stateFile is where a running dev stack leaves what `invoke` and the
// stepflow CLI's admin commands need (localstack/devstate).
func stateFile(addr string) (string, error) { return devstate.Path(devstate.PortOf(addr)) }

// envVarsFile is the functions' environment for `sam local invoke
// --env-vars`, written by `make dev` for the stack it runs.
var envVarsFile = filepath.Join(".stepflow", "env.json")

// samEnvVars answers what `sam local invoke --env-vars` takes: each
// function's variables by logical id. SAM passes on only variables
// template.yaml declares, so the template declares AWS_ENDPOINT_URL
// (empty on AWS) for this file to point the functions at the emulator.
func samEnvVars(st *devstack.Stack) map[string]map[string]string {
	vars := map[string]string{"AWS_ENDPOINT_URL": st.Endpoint}
	for k, v := range st.Resources.Env {
		if k != "AWS_ENDPOINT_URL" {
			vars[k] = v
		}
	}
	out := map[string]map[string]string{}
	for id := range st.Handlers.HTTP {
		out[id] = vars
	}
	for id := range st.Handlers.SQS {
		out[id] = vars
	}
	for id := range st.Handlers.Schedule {
		out[id] = vars
	}
	return out
}

func writeEnvVars(path string, st *devstack.Stack) ([]byte, error) {
	raw, err := json.MarshalIndent(samEnvVars(st), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return raw, nil
}

// removeIfUnchanged removes a file this process wrote unless another dev
// stack has written its own since.
func removeIfUnchanged(path string, wrote []byte) {
	if now, err := os.ReadFile(path); err == nil && string(now) == string(wrote) {
		os.Remove(path)
	}
}

// stateLine says where the stack's state lives, loudly when it is only in
// memory: moto has no persistence of its own.
func stateLine(st *devstack.Stack, file string) string {
	switch {
	case file == "" && !st.Emulator.Launched():
		return "kept by the emulator at AWS_ENDPOINT_URL"
	case file == "":
		return "IN MEMORY ONLY: stopping make dev drops every job (STEPFLOW_DEV_STATE=.stepflow/state.json make dev keeps them)"
	case st.RestoreSkipped != nil:
		return file + " not restored (" + st.RestoreSkipped.Error() + "); saved there on stop"
	default:
		return fmt.Sprintf("%s: restored %d items, %d objects; saved there on stop (Ctrl-C)", file, st.Restored.Items, st.Restored.Objects)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func devCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Serve the HTTP API and run the stack in the foreground (Ctrl-C stops it)",
		Long: `It runs over moto_server, found on PATH or in .stepflow/venv, and installed there with
pip when it is in neither (make setup does just that). When pip cannot install it, it runs
embedded: the same engine, handlers and routes over in-memory adapters in this process, the
state kept in .stepflow/embedded-<port>.json. The banner says which mode runs.

Environment:
  STEPFLOW_DEV_MODE     emulator or embedded: run so, or fail (emulator when moto cannot be had);
                        unset: the emulator when moto is installed or pip installs it, else embedded
  STEPFLOW_ADDR         HTTP API address (default 127.0.0.1:3000)
  AWS_ENDPOINT_URL      use this running emulator (e.g. LocalStack) instead of starting moto;
                        its DynamoDB requests are serialised by the same proxy; a moto
                        must run with MOTO_PORT=<its port> and TZ=UTC for timers to fire
  STEPFLOW_API_KEYS     tenant:key,... (default dev:dev-key)
  STEPFLOW_OPERATOR_KEYS
                        key,... (default dev-operator-key): GET /v1/metrics with one of them
                        answers the stack's operator metrics (queues, sweep, requests per route)
  STEPFLOW_STACK        resource name prefix (default stepflow-<port>)
  STEPFLOW_SWEEP_EVERY  heartbeat period (default: template.yaml's schedule, 1m); schedules
                        fire from it, so an every shorter than it ticks once a sweep
  STEPFLOW_TENANT_BUDGETS
                        tenants' daily budgets in US dollars, tenant:usd,... ("*:usd" for
                        every tenant not named): past one a submit answers 402
  STEPFLOW_HTTP_ALLOW   CIDRs and host names the http action may reach despite the
                        guard (default none: loopback, private, link-local refused),
                        e.g. 127.0.0.1/32,localhost
  STEPFLOW_TIMER_THRESHOLD
                        seconds, 1-900 (default 900): shorter delays are SQS message delays
                        sent at once; a longer one the heartbeat's sweep sends once it is
                        within the threshold (late by up to STEPFLOW_SWEEP_EVERY when the
                        threshold is shorter than that), or the timer state machine holds
  STEPFLOW_LONG_TIMERS  the template's LongTimers: Sweep (default) or StepFunctions (the
                        timer state machine, which moto runs, holds each longer delay)
  STEPFLOW_RESOURCE_WAIT_SECONDS
                        seconds (default 86400): how long a step that requires a resource
                        waits for a slot before it fails with class resource, unless it
                        sets resource_wait_seconds
  STEPFLOW_LOCAL_INVOCATIONS
                        invocations this machine runs at once per function (default four per
                        core): the template's MaximumConcurrency of each mapping is scaled
                        down to fit, keeping their ratios, so a P2 backlog cannot take the
                        one emulator from P0 work; 0 runs every mapping's full cap
  STEPFLOW_LAMBDA_ALLOW function-name prefixes the lambda action may call (default: the
                        template's LambdaActionPrefix, stepflow-fn-)
  STEPFLOW_JOB_STATE_EVENTS
                        Disabled (default, as the template's JobStateEvents), Terminal
                        or All: which Job State Change events go on the stack's bus
  STEPFLOW_DEV_STATE    a file that keeps the jobs across restarts (e.g. .stepflow/state.json):
                        restored at start into the emulator's empty table, saved on stop
                        (Ctrl-C, SIGTERM, SIGHUP; not after kill -9). Without it the state
                        lives in the emulator's memory and stopping drops every job.
                        Embedded, the state is always kept, in this file or by default in
                        .stepflow/embedded-<port>.json, written as it changes and on stop;
                        each mode refuses the other's file.

It writes .stepflow/env.json, the functions' environment in the format of
sam local invoke --env-vars, and keeps the sample job the events in events/
act on (id ` + devstack.SampleJobID + ` of tenant dev).

The Go functions in examples/functions are built and served on a local Lambda
Invoke API as stepflow-fn-<name> (and <name>); lambda steps call them there.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP) // SIGHUP: a closed terminal still saves the state
			defer stop()
			log := logging.Dev(os.Stderr, slog.LevelInfo) // a line per job change, and what goes wrong
			keysSpec := env("STEPFLOW_API_KEYS", "dev:dev-key")
			keys, err := devstack.ParseAPIKeys(keysSpec)
			if err != nil {
				return err
			}
			var operatorKeys []string
			for _, k := range strings.Split(env("STEPFLOW_OPERATOR_KEYS", "dev-operator-key"), ",") {
				if k = strings.TrimSpace(k); k != "" {
					operatorKeys = append(operatorKeys, k)
				}
			}
			var every time.Duration
			if v := os.Getenv("STEPFLOW_SWEEP_EVERY"); v != "" {
				if every, err = time.ParseDuration(v); err != nil || every <= 0 {
					return fmt.Errorf("STEPFLOW_SWEEP_EVERY: %q is not a duration like 10s", v)
				}
			}
			invocations := 4 * runtime.NumCPU()
			if v := os.Getenv("STEPFLOW_LOCAL_INVOCATIONS"); v != "" {
				if invocations, err = strconv.Atoi(v); err != nil || invocations < 0 {
					return fmt.Errorf("STEPFLOW_LOCAL_INVOCATIONS: %q is not a count like 8 (0: no fitting)", v)
				}
			}
			if err := os.MkdirAll(".stepflow", 0o755); err != nil {
				return err
			}
			addr := env("STEPFLOW_ADDR", "127.0.0.1:3000")
			// The functions' EMF records, as CloudWatch Logs would get them.
			metricsPath := filepath.Join(".stepflow", "metrics-"+strings.ReplaceAll(addr, ":", "_")+".log")
			metricsLog, err := os.Create(metricsPath)
			if err != nil {
				return err
			}
			defer metricsLog.Close()
			mode, err := chooseMode(ctx, os.Getenv("STEPFLOW_DEV_MODE"), os.Getenv("AWS_ENDPOINT_URL"), toolchain.New(), os.Stderr)
			if err != nil {
				return err
			}
			if mode.embedded {
				return runEmbedded(ctx, mode, embedded.Options{
					Addr: addr, APIKeys: keys, ScheduleEvery: every, MachineInvocations: invocations, Region: env("AWS_REGION", "us-east-1"), Log: log,
					MetricsOutput: metricsLog, HTTPAllow: os.Getenv("STEPFLOW_HTTP_ALLOW"), Env: passedSettings(),
					LambdaDirs: []string{"examples/functions"}, LambdaOutput: os.Stderr, SampleJob: true, StatePath: os.Getenv("STEPFLOW_DEV_STATE"),
				}, log)
			}
			motoLog, err := os.Create(filepath.Join(".stepflow", "moto-"+strings.ReplaceAll(addr, ":", "_")+".log"))
			if err != nil {
				return err
			}
			defer motoLog.Close()
			st, err := devstack.Start(ctx, devstack.Options{
				Addr: addr, EndpointURL: os.Getenv("AWS_ENDPOINT_URL"), StackName: os.Getenv("STEPFLOW_STACK"),
				APIKeys: keys, OperatorKeys: operatorKeys, ScheduleEvery: every, MachineInvocations: invocations, Region: env("AWS_REGION", "us-east-1"), Log: log, MotoLog: motoLog, MetricsOutput: metricsLog,
				HTTPAllow: os.Getenv("STEPFLOW_HTTP_ALLOW"), Env: passedSettings(), Parameters: devParameters(),
				LambdaDirs: []string{"examples/functions"}, LambdaOutput: os.Stderr,
				SampleJob: true, StatePath: os.Getenv("STEPFLOW_DEV_STATE"),
			})
			if err != nil {
				return err
			}
			defer st.Close()
			sf, err := stateFile(addr)
			if err != nil {
				return err
			}
			if err := devstate.Write(sf, devstate.State{URL: st.URL, Endpoint: st.Endpoint, Region: env("AWS_REGION", "us-east-1"), Stack: st.Name, Env: st.Resources.Env}); err != nil {
				return err
			}
			defer os.Remove(sf)
			envVars, err := writeEnvVars(envVarsFile, st)
			if err != nil {
				return err
			}
			defer removeIfUnchanged(envVarsFile, envVars)
			emu := st.Emulator.MotoURL + ", moto started here"
			if !st.Emulator.Launched() {
				emu = st.Emulator.MotoURL + " from AWS_ENDPOINT_URL"
			}
			var tenants []string
			for k, t := range keys {
				tenants = append(tenants, t+" (key "+k+")")
			}
			fmt.Fprintf(os.Stderr, `
stepflow is running
%s  HTTP API   %s
  web UI     %s/ui#key=%s
  emulator   %s (DynamoDB serialised by proxy at %s)
  stack      %s (resources from template.yaml)
  lambda     %s (examples/functions: %s)
  tenants    %s
  jobs       %s
  CLI state  %s (what the stepflow CLI's keys and dlq commands read)
  metrics    %s (the functions' EMF records); GET /v1/metrics for Prometheus
             (the stack's operator metrics with an operator key: %s)
  sam local  %s: sam local invoke <Function> -e events/<x>.json --env-vars %s
             (sample job %s of tenant dev, which events/ act on)

  curl -s -X POST %s/v1/jobs -H 'Authorization: Bearer %s' \
       -d '{"steps":[{"id":"hello","action":{"type":"pass"}}],"payload":{"hi":1}}'

Ctrl-C stops it.
`, modeLines(mode), st.URL, st.URL, firstKey(keys), emu, st.Endpoint, st.Name, st.Lambda.URL, strings.Join(st.Lambda.Names(), ", "), strings.Join(tenants, ", "),
				stateLine(st, os.Getenv("STEPFLOW_DEV_STATE")), sf, metricsPath, strings.Join(operatorKeys, ", "), envVarsFile, envVarsFile, devstack.SampleJobID, st.URL, firstKey(keys))
			<-ctx.Done()
			fmt.Fprintln(os.Stderr, "stopping")
			return nil
		},
	}
}

// lambdaSettings are the running dev stack's lambda action settings, so an
// invoked execute handler calls the functions `make dev` serves.
func lambdaSettings(running map[string]string) map[string]string {
	m := map[string]string{}
	for _, k := range []string{"STEPFLOW_LAMBDA_ENDPOINT", "STEPFLOW_LAMBDA_ALLOW"} {
		if v := running[k]; v != "" {
			m[k] = v
		}
	}
	return m
}

func firstKey(keys map[string]string) string {
	for k, t := range keys {
		if t == "dev" {
			return k
		}
	}
	for k := range keys {
		return k
	}
	return ""
}

func invokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "invoke FUNCTION EVENT.json",
		Short: "Run one function's handler on one event against the running dev stack (like sam local invoke)",
		Long: `FUNCTION is enqueue, claim, execute or heartbeat (or its logical id, e.g. EnqueueFunction).
The dev stack must be running: the one serving STEPFLOW_URL (what the stepflow CLI talks
to), else the one on STEPFLOW_ADDR (what make dev serves), else 127.0.0.1:3000.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sf, where, err := invokeStateFile()
			if err != nil {
				return err
			}
			state, err := devstate.Read(sf)
			if err != nil {
				return fmt.Errorf("no dev stack is running at %s (start one with `make dev`, or set STEPFLOW_URL to the one running): %w", where, err)
			}
			if state.Mode == devstate.ModeEmbedded {
				return fmt.Errorf("the dev stack at %s runs embedded, with no AWS emulator: invoke needs the emulator (%s, then make dev again)", where, toolchain.SetupCommand)
			}
			event, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			st, err := devstack.Start(ctx, devstack.Options{EndpointURL: state.Endpoint, StackName: state.Stack, NoRunner: true, Region: cmp.Or(state.Region, env("AWS_REGION", "us-east-1")),
				HTTPAllow: state.Env["STEPFLOW_HTTP_ALLOW"], Env: lambdaSettings(state.Env), Parameters: devParametersOf(state.Env)})
			if err != nil {
				return err
			}
			defer st.Close()
			out, err := invoke(ctx, st, args[0], event)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
}

// invokeStateFile answers the state file of the dev stack `invoke` acts
// on, and that stack's address for an error: the one serving STEPFLOW_URL,
// so that invoke and the CLI act on the same stack, else the one make dev
// serves on STEPFLOW_ADDR.
func invokeStateFile() (path, where string, err error) {
	if u := os.Getenv("STEPFLOW_URL"); u != "" {
		path, err := devstate.PathForURL(u)
		if err != nil {
			return "", "", fmt.Errorf("STEPFLOW_URL: %w; set it to the URL make dev printed, e.g. http://127.0.0.1:3000", err)
		}
		return path, u, nil
	}
	addr := env("STEPFLOW_ADDR", "127.0.0.1:3000")
	path, err = stateFile(addr)
	return path, addr, err
}

func apiKeyCmd() *cobra.Command {
	var table, tenant, key string
	cmd := &cobra.Command{
		Use:   "apikey --table TABLE --tenant TENANT [--key KEY]",
		Short: "Add an API key for a tenant to a stack's table (on AWS, or wherever AWS_ENDPOINT_URL points)",
		Long:  "Stores the key hashed. Without --key a random one is made and printed once. Uses the default AWS credential chain.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !domain.ValidName(tenant) {
				return fmt.Errorf("--tenant must be 1 to 40 letters, digits, '-' or '_'")
			}
			if table == "" {
				return fmt.Errorf("--table is required (the stack output TableName)")
			}
			if key == "" {
				b := make([]byte, 24)
				if _, err := rand.Read(b); err != nil {
					return err
				}
				key = "sf_" + base64.RawURLEncoding.EncodeToString(b)
			}
			clients, _, err := config.NewClients(cmd.Context())
			if err != nil {
				return err
			}
			if err := store.New(clients.DynamoDB, table).PutAPIKey(cmd.Context(), tenant, key); err != nil {
				return err
			}
			fmt.Printf("tenant %s: Authorization: Bearer %s\n", tenant, key)
			return nil
		},
	}
	cmd.Flags().StringVar(&table, "table", os.Getenv("STEPFLOW_TABLE"), "the stack's DynamoDB table")
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant the key names")
	cmd.Flags().StringVar(&key, "key", "", "the key (default: a new random one)")
	return cmd
}

func invoke(ctx context.Context, st *devstack.Stack, fn string, event []byte) (any, error) {
	id := strings.ToLower(strings.TrimSuffix(fn, "Function"))
	if id == "" {
		return nil, fmt.Errorf("name a function: enqueue, claim, execute or heartbeat")
	}
	id = strings.ToUpper(id[:1]) + id[1:] + "Function"
	h := st.Handlers
	if f := h.HTTP[id]; f != nil {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(event, &ev); err != nil {
			return nil, fmt.Errorf("event is not an API Gateway HTTP API event: %w", err)
		}
		return f(ctx, ev)
	}
	if f := h.SQS[id]; f != nil {
		var ev events.SQSEvent
		if err := json.Unmarshal(event, &ev); err != nil {
			return nil, fmt.Errorf("event is not an SQS event: %w", err)
		}
		return f(ctx, ev)
	}
	if f := h.Schedule[id]; f != nil {
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(event, &ev); err != nil {
			return nil, fmt.Errorf("event is not an EventBridge event: %w", err)
		}
		return map[string]string{"result": "ok"}, f(ctx, ev)
	}
	return nil, errors.New("unknown function " + fn + ": use enqueue, claim, execute or heartbeat")
}
