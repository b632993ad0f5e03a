package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/localstack/embedded"
	"github.com/stepflow/stepflow/localstack/toolchain"
)

// devMode is how `make dev` runs: over the AWS emulator (moto, or the one
// AWS_ENDPOINT_URL names), or embedded, with no emulator
// (localstack/embedded).
type devMode struct {
	embedded bool
	why      string // the emulator it runs (moto_server's path), or why it runs embedded
}

// setupLog keeps pip's output of an install `make dev` tries.
var setupLog = filepath.Join(".stepflow", "setup.log")

// chooseMode decides from STEPFLOW_DEV_MODE (setting): "embedded" runs
// embedded; "emulator" runs over moto, installing it first if it is
// missing, or fails; unset does the same but runs embedded when moto
// cannot be had, saying why. An install that failed within
// toolchain.RetryAfter is not tried again unset, so `make dev` on a
// machine pip cannot serve starts at once. out hears of an install.
func chooseMode(ctx context.Context, setting, endpoint string, tc toolchain.Toolchain, out io.Writer) (devMode, error) {
	switch setting {
	case "embedded":
		return devMode{embedded: true, why: "STEPFLOW_DEV_MODE=embedded"}, nil
	case "", "emulator":
	default:
		return devMode{}, fmt.Errorf("STEPFLOW_DEV_MODE=%s: want emulator or embedded (unset: the emulator when moto_server is installed or pip installs it, else embedded)", setting)
	}
	if endpoint != "" {
		return devMode{why: endpoint + " (AWS_ENDPOINT_URL)"}, nil
	}
	if p, ok := tc.Find(toolchain.MotoServer); ok {
		return devMode{why: p}, nil
	}
	if at, why, failed := tc.LastFailure(); failed && setting == "" && time.Since(at) < toolchain.RetryAfter {
		return devMode{embedded: true, why: fmt.Sprintf("moto_server is not installed, and installing it failed at %s: %s", at.Format("15:04"), why)}, nil
	}
	fmt.Fprintf(out, "moto_server is not on PATH or in %s: installing %s there with pip (make setup; output in %s)\n", toolchain.VenvDir, strings.Join(toolchain.Requirements, " "), setupLog)
	logPath := filepath.Join(tc.Root, setupLog)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return devMode{}, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return devMode{}, err
	}
	defer log.Close()
	if err := tc.Install(ctx, log); err != nil {
		if setting == "emulator" {
			return devMode{}, fmt.Errorf("STEPFLOW_DEV_MODE=emulator: %w (pip's output in %s)", err, setupLog)
		}
		return devMode{embedded: true, why: "moto_server is not installed, and installing it failed: " + err.Error()}, nil
	}
	p, _ := tc.Find(toolchain.MotoServer)
	return devMode{why: p + ", installed now"}, nil
}

// modeLines are the banner's first lines: which mode runs, and, embedded,
// why and how to get the emulator.
func modeLines(m devMode) string {
	if !m.embedded {
		return "  mode       emulator: the AWS emulator " + m.why + "\n"
	}
	return "  mode       embedded: no AWS emulator; the same engine and handlers over in-memory adapters, in this process\n" +
		"             why: " + m.why + "\n" +
		"             for the emulator: " + toolchain.SetupCommand + " (or " + toolchain.PipCommand + "), then make dev again\n"
}

// embeddedState is where the embedded mode keeps its state unless
// STEPFLOW_DEV_STATE names a file: one per port, so two stacks never share.
func embeddedState(addr string) string {
	return filepath.Join(".stepflow", "embedded-"+devstate.PortOf(addr)+".json")
}

// runEmbedded runs `make dev` with no emulator until ctx ends.
func runEmbedded(ctx context.Context, mode devMode, o embedded.Options, log *slog.Logger) error {
	if os.Getenv("STEPFLOW_DEV_STATE") == "" {
		o.StatePath = embeddedState(o.Addr)
	}
	st, err := embedded.Start(ctx, o)
	if err != nil {
		return err
	}
	defer st.Close()
	sf, err := stateFile(o.Addr)
	if err != nil {
		return err
	}
	if err := devstate.Write(sf, devstate.State{Mode: devstate.ModeEmbedded, URL: st.URL, Region: o.Region, Stack: st.Name, Env: st.Env}); err != nil {
		return err
	}
	defer os.Remove(sf)
	var tenants []string
	for k, t := range o.APIKeys {
		tenants = append(tenants, t+" (key "+k+")")
	}
	lambda := "none"
	if st.Lambda != nil {
		lambda = fmt.Sprintf("%s (examples/functions: %s)", st.Lambda.URL, strings.Join(st.Lambda.Names(), ", "))
	}
	r := st.Restored
	var notes string
	if os.Getenv("STEPFLOW_LONG_TIMERS") == "StepFunctions" {
		notes = "  note       STEPFLOW_LONG_TIMERS=StepFunctions needs the emulator: the sweep sends long delays here\n"
	}
	fmt.Fprintf(os.Stderr, `
stepflow is running
%s  HTTP API   %s
  web UI     %s/ui#key=%s
  lambda     %s
  tenants    %s
  jobs       %s: restored %d jobs, %d queued messages, %d schedules; written as they change and on stop
  data       %s (large inputs and outputs, by signed URL)
  CLI state  %s (stepflow keys and dlq need the emulator)
%s
  curl -s -X POST %s/v1/jobs -H 'Authorization: Bearer %s' \
       -d '{"steps":[{"id":"hello","action":{"type":"pass"}}],"payload":{"hi":1}}'

Ctrl-C stops it.
`, modeLines(mode), st.URL, st.URL, firstKey(o.APIKeys), lambda, strings.Join(tenants, ", "), o.StatePath, r.Jobs, r.Messages, r.Schedules,
		st.DataURL, sf, notes, st.URL, firstKey(o.APIKeys))
	select {
	case <-ctx.Done():
	case <-st.Done():
		return fmt.Errorf("the HTTP API stopped: %w", st.Err())
	}
	fmt.Fprintln(os.Stderr, "stopping")
	return nil
}
