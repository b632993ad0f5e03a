package main

import (
	"strconv"

	"github.com/spf13/cobra"
)

func queuesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use: "queues", Short: "List your worker queues with their depth and last use", Args: cobra.NoArgs,
		Long: "List the tenant's worker queues: messages visible (a claim can take them now), in flight (taken, not done) " +
			"and delayed (a retry's backoff), and when a job last named each. A queue no job names for the stack's idle time " +
			"(WorkerQueueIdleSeconds, 7 days by default) is removed once empty; a job naming it later makes it again.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			qs, err := c.ListQueues(cmd.Context())
			if err != nil {
				return err
			}
			return a.show(qs, func() error {
				rows := make([][]string, 0, len(qs))
				for _, q := range qs {
					lanes := ""
					for _, l := range q.Lanes {
						if lanes != "" {
							lanes += ","
						}
						lanes += "P" + strconv.Itoa(l.Priority)
					}
					rows = append(rows, []string{q.Name, strconv.FormatInt(q.Visible, 10), strconv.FormatInt(q.InFlight, 10),
						strconv.FormatInt(q.Delayed, 10), orDash(lanes), when(&q.LastUsed)})
				}
				return a.table([]string{"QUEUE", "VISIBLE", "IN_FLIGHT", "DELAYED", "LANES", "LAST_USED"}, rows)
			})
		},
	}
}
