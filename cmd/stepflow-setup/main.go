// Command stepflow-setup installs what the local stack needs beyond Go:
// moto_server, the AWS emulator, and cfn-lint (localstack/toolchain), into
// the project's virtualenv .stepflow/venv with pip, unless they are on PATH
// already. `make setup` runs it. `make test` runs it with -for-test before
// anything else: that installs what is missing too, and when it cannot, it
// fails with one line naming the command to run, so no test that needs
// the emulator is left to fail one by one.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/stepflow/stepflow/localstack/toolchain"
)

// logFile keeps pip's output of -for-test's install.
var logFile = filepath.Join(".stepflow", "setup.log")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], toolchain.New(), os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, tc toolchain.Toolchain, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stepflow-setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	forTest := fs.Bool("for-test", false, "quiet when the tools are there; else install them, or fail with one line saying what to run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tools := []string{toolchain.MotoServer, toolchain.CfnLint}
	missing := tc.Missing(tools...)
	if *forTest {
		return forTests(ctx, tc, missing, stdout, stderr)
	}
	if len(missing) > 0 {
		fmt.Fprintf(stdout, "installing %s into %s with pip\n", strings.Join(toolchain.Requirements, " "), toolchain.VenvDir)
		if err := tc.Install(ctx, stdout); err != nil {
			fmt.Fprintf(stderr, "make setup: %v\n", err)
			return 1
		}
	}
	for _, tool := range tools {
		p, _ := tc.Find(tool)
		fmt.Fprintf(stdout, "%-12s %s\n", tool, p)
	}
	return 0
}

// forTests is `make test`'s check: silent when the tools are there (CI),
// an install when they are not, and one line on stderr when that fails.
func forTests(ctx context.Context, tc toolchain.Toolchain, missing []string, stdout, stderr io.Writer) int {
	if len(missing) == 0 {
		return 0
	}
	fail := func(why string) int {
		fmt.Fprintf(stderr, "make test: %s missing (not on PATH or in %s), and installing them failed %s: run %s\n",
			strings.Join(missing, " and "), toolchain.VenvDir, why, toolchain.SetupCommand)
		return 1
	}
	if at, why, failed := tc.LastFailure(); failed && time.Since(at) < toolchain.RetryAfter {
		return fail(fmt.Sprintf("at %s (%s)", at.Format("15:04"), why))
	}
	path := filepath.Join(tc.Root, logFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fail("(" + err.Error() + ")")
	}
	log, err := os.Create(path)
	if err != nil {
		return fail("(" + err.Error() + ")")
	}
	defer log.Close()
	fmt.Fprintf(stdout, "make test: installing %s into %s with pip (output in %s)\n", strings.Join(toolchain.Requirements, " "), toolchain.VenvDir, logFile)
	if err := tc.Install(ctx, log); err != nil {
		return fail("(" + err.Error() + ")")
	}
	return 0
}
