// Command stepflow is stepflow's command line: jobs, resources, schedules
// and health over the HTTP API (STEPFLOW_URL, STEPFLOW_API_KEY), a worker
// that runs any program per claimed step, and admin commands (keys, dlq)
// that act on the stack's AWS resources directly.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK        = 0
	exitError     = 1 // a bad command line, or a call that failed
	exitFailed    = 2 // watch: the job ended FAILED
	exitCancelled = 3 // watch: the job ended CANCELLED
)

// exitCode is an error that sets the exit code.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string { return e.err.Error() }
func (e *exitCode) Unwrap() error { return e.err }

// run runs the command line args and answers its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(&app{stdin: stdin, stdout: stdout, stderr: stderr})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ec *exitCode
	if errors.As(err, &ec) {
		if ec.err != nil && ec.code != exitFailed && ec.code != exitCancelled {
			report(stderr, ec.err)
		}
		return ec.code
	}
	report(stderr, err)
	return exitError
}

func report(w io.Writer, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "stepflow") {
		msg = "stepflow: " + msg
	}
	fmt.Fprintln(w, msg)
}
