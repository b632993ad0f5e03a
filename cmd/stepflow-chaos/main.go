// Command stepflow-chaos runs the fault-injection suite (`make chaos`):
// for each seed, a local stack under a seeded fault layer, a random mix of
// jobs (steps of every action: sleeps and deadlines short and past the
// stack's two-second timer threshold, so both SQS delays and Step
// Functions timers run; approval gates, waits and failed jobs that racers
// approve, reject, signal, cancel and redrive at once; replans that would
// close a cycle; waits flooded with unknown signals), misbehaving workers
// and concurrent sweeps, then the checks: history invariants over every
// job of every tenant (its log replays to its document, one terminal event
// per run, nothing applied under a lost lease, every view agrees, no
// cycle, no step before a sleep's wake time), and each workload's table of
// what a job of each kind ends as given the faults and its callers'
// answers. It prints a table per run, the faults of all runs by kind, and
// ends with one line:
//
//	chaos: <runs> runs, <faults> faults injected, <jobs> jobs, lost 0, duplicated 0, mismatched 0
//
// and exits non-zero if any check failed. A seed replays the same job
// plan and the same sequence of fault decisions; which call, message or
// lease meets each decision follows the goroutines' wall-clock
// interleaving, which may differ between two runs of one seed.
//
// With --resources (the default) each run also registers a pool of three
// resources with four slots for its tenant and runs eight jobs beside
// its plan whose steps compete for them: holders go silent, resources
// fail, waves of claimers race; the checks hold every resource to its
// capacity, every slot to its lease and every step to matching resources.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/localstack/chaos"
	"github.com/stepflow/stepflow/localstack/emulator"
)

var errChecksFailed = errors.New("chaos: a check failed")

func main() {
	if err := command().Execute(); err != nil {
		if !errors.Is(err, errChecksFailed) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var (
		seed     uint64
		runs     int
		jobs     int
		endpoint string
		verbose  bool
		bound    time.Duration
		pool     bool
	)
	cmd := &cobra.Command{
		Use:   "stepflow-chaos",
		Short: "Seeded fault-injection runs against a local stepflow stack",
		Long: `Runs seeds seed..seed+runs-1. Each run starts a stack (on its own moto,
or on --endpoint), submits --jobs jobs under injected faults (crashes at
every AWS call boundary, DynamoDB throttling, 5xx and ambiguous writes on
each attempt, inside the SDK's retries, lost SQS sends, duplicate
deliveries, timer messages delivered twice or sent late, Step Functions
timers that never start, concurrent sweeps, zombie and clock-skewed
workers; racers sending approve, reject, cancel, signals and redrives at
once) and checks: every job finishes within --bound, none is lost, none
finishes twice in one run, every log replays to its stored state and
agrees with every view, no outcome is applied under a lost lease, no step
after a sleep starts before its wake time, every job ends as its kind's row
says given the faults and its racers' answers (200 or 409 as the log says
each landed), and no message is left in flight. Beside them, schedules of a
tenant of their own fire from every sweep and from two sweeps at once: one
job per tick, every run their schedule counts stored and none beyond,
overlap skip held.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 || jobs < 1 {
				return errors.New("--runs and --jobs must be at least 1")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			started := time.Now()
			if endpoint == "" {
				em, err := emulator.Start(ctx, "127.0.0.1:0", nil)
				if err != nil {
					return err
				}
				defer em.Close()
				endpoint = em.URL
			}
			var logger *slog.Logger
			if verbose {
				logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			var results []*chaos.Result
			for i := range runs {
				cfg := chaos.Config{Seed: seed + uint64(i), Jobs: jobs, Endpoint: endpoint, Bound: bound, Log: logger,
					Resources: chaos.ResourceConfig{Off: !pool}}
				if verbose {
					cfg.Progress = cmd.ErrOrStderr()
				}
				res, err := chaos.Run(ctx, cfg)
				if err != nil {
					return err
				}
				res.Report(out, verbose)
				results = append(results, res)
				if ctx.Err() != nil {
					break
				}
			}
			fmt.Fprintf(out, "total %s\n", time.Since(started).Round(100*time.Millisecond))
			fmt.Fprintln(out, chaos.FaultSummary(results))
			fmt.Fprintln(out, chaos.Summary(results))
			for _, r := range results {
				if !r.Passed() {
					return errChecksFailed
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&seed, "seed", 1, "first seed; runs use seed..seed+runs-1")
	f.IntVar(&runs, "runs", 5, "number of runs (seeds)")
	f.IntVar(&jobs, "jobs", 30, "jobs submitted per run")
	f.StringVar(&endpoint, "endpoint", "", "a running AWS emulator (e.g. http://127.0.0.1:4566); empty starts moto_server behind the serialising proxy")
	f.BoolVar(&verbose, "verbose", false, "log the stack's warnings and the run's progress to stderr")
	f.DurationVar(&bound, "bound", 120*time.Second, "how long a run waits for every job to finish; a job not finished by then is lost")
	f.BoolVar(&pool, "resources", true, "register a resource pool and run resource jobs beside each run's plan (--resources=false for none)")
	return cmd
}
