package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

func budgetCmd(a *app) *cobra.Command {
	var usd float64
	cmd := &cobra.Command{
		Use:   "budget [JOB --usd N]",
		Short: "Set or raise a job's budget, or show the tenant's daily budget",
		Long: `With a job and --usd, set or raise the job's budget (POST /v1/jobs/{id}/budget): a job
waiting at its budget gate (its cost went past its budget) goes on once the budget is
more than it cost. The API refuses a budget not more than the job's cost so far.

With no job, show the tenant's daily budget (GET /v1/budget): what its jobs spent
today and when that resets. A submit past the daily budget is refused (402).`,
		Example: `  stepflow budget 01JD7X2Q9V3M8K4T6W5R1N0ABC --usd 2.50
  stepflow budget`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			set := cmd.Flags().Changed("usd")
			if len(args) == 0 {
				if set {
					return errors.New("--usd sets a job's budget: give the job's id (stepflow budget JOB --usd N)")
				}
				b, err := c.Budget(cmd.Context())
				if err != nil {
					return err
				}
				return a.show(b, func() error {
					daily := "none (no daily budget for this tenant)"
					if b.DailyUSD != nil {
						daily = dollars(*b.DailyUSD)
					}
					spent := dollars(b.SpentTodayUSD)
					if b.Exceeded {
						spent += " (exceeded: submits are refused until it resets)"
					}
					_, err := fmt.Fprintf(a.stdout, "tenant       %s\ndaily        %s\nspent today  %s\nresets at    %s\n",
						b.Tenant, daily, spent, when(&b.ResetsAt))
					return err
				})
			}
			if !set {
				return errors.New("give the job's new budget: --usd N")
			}
			j, err := c.SetBudget(cmd.Context(), args[0], usd)
			if err != nil {
				return err
			}
			return a.show(j, func() error {
				line := fmt.Sprintf("%s %s", j.ID, j.State)
				if j.Budget != nil {
					line += " budget " + budgetLine(j)
				}
				_, err := fmt.Fprintln(a.stdout, line)
				return err
			})
		},
	}
	cmd.Flags().Float64Var(&usd, "usd", 0, "the job's new budget, in US dollars (more than its cost so far)")
	return cmd
}
