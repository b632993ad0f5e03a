package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stepflow/stepflow/sdk/client"
)

func healthCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Show the tenant's health: success rate, backlog, jobs blocked on a person",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := c.Health(cmd.Context())
			if err != nil {
				return err
			}
			return a.show(h, func() error {
				rate := "-"
				if h.SuccessRate != nil {
					rate = fmt.Sprintf("%.1f%%", *h.SuccessRate*100)
				}
				avg := "-"
				if h.AvgDuration != nil {
					avg = fmt.Sprintf("%.1f s", *h.AvgDuration)
				}
				fmt.Fprintf(a.stdout, "status        %s\nsuccess rate  %s (24 h: %d completed, %d failed, %d cancelled)\nbacklog       %d\nblocked       %d\navg duration  %s\nheartbeat     %s\n",
					h.Status, rate, h.Completed, h.Failed, h.Cancelled, h.Backlog, h.Blocked, avg, when(h.LastHeartbeat))
				for _, r := range h.Reasons {
					fmt.Fprintf(a.stdout, "  - %s\n", r)
				}
				for _, n := range h.Notes {
					fmt.Fprintf(a.stdout, "note: %s\n", n)
				}
				return nil
			})
		},
	}
}

func resourcesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "resources", Aliases: []string{"resource"}, Short: "List, show, put and delete resources (GPUs, licences, devices)"}
	printOne := func(r *client.Resource) error {
		return a.show(r, func() error {
			fmt.Fprintf(a.stdout, "resource      %s\ncapabilities  %s\nlabels        %s\nslots         %d in use of %d (%d free)\n",
				r.ID, orDash(strings.Join(r.Capabilities, ",")), labels(r.Labels), r.InUse, r.Capacity, r.Free)
			for _, h := range r.Holders {
				fmt.Fprintf(a.stdout, "  held by %s/%s (attempt %s) until %s\n", h.Job, h.Step, h.Attempt, when(&h.ExpiresAt))
			}
			for _, w := range r.Waiting {
				fmt.Fprintf(a.stdout, "  waiting: %s/%s since %s\n", w.Job, w.Step, when(&w.Since))
			}
			return nil
		})
	}
	list := &cobra.Command{
		Use: "list", Short: "List resources", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			rs, err := c.Resources(cmd.Context())
			if err != nil {
				return err
			}
			return a.show(rs, func() error {
				rows := make([][]string, 0, len(rs))
				for _, r := range rs {
					rows = append(rows, []string{r.ID, strconv.Itoa(r.Capacity), strconv.Itoa(r.InUse), strconv.Itoa(len(r.Waiting)), orDash(strings.Join(r.Capabilities, ",")), labels(r.Labels)})
				}
				return a.table([]string{"ID", "CAPACITY", "IN_USE", "WAITING", "CAPABILITIES", "LABELS"}, rows)
			})
		},
	}
	get := &cobra.Command{
		Use: "get ID", Short: "Show a resource with its holders and waiting steps", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Resource(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(r)
		},
	}
	var file string
	var caps, lbls []string
	var capacity int
	put := &cobra.Command{
		Use: "put ID", Short: "Create or change a resource", Args: cobra.ExactArgs(1),
		Example: "  stepflow resources put gpu-1 --capability gpu --label zone=a --capacity 2",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var req client.ResourceRequest
			if file != "" {
				raw, err := a.readDoc(file)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(raw, &req); err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
			}
			if len(caps) > 0 {
				req.Capabilities = caps
			}
			if len(lbls) > 0 {
				if req.Labels, err = keyValues(lbls, "--label"); err != nil {
					return err
				}
			}
			if capacity > 0 {
				req.Capacity = capacity
			}
			r, created, err := c.PutResource(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if created && a.output == "table" {
				fmt.Fprintln(a.stdout, "created")
			}
			return printOne(r)
		},
	}
	put.Flags().StringVarP(&file, "file", "f", "", "the resource as JSON or YAML (capabilities, labels, capacity)")
	put.Flags().StringArrayVar(&caps, "capability", nil, "a capability (repeatable)")
	put.Flags().StringArrayVar(&lbls, "label", nil, "a label key=value (repeatable)")
	put.Flags().IntVar(&capacity, "capacity", 0, "slots, 1-1000 (default 1)")
	del := &cobra.Command{
		Use: "delete ID", Short: "Delete a resource (refused while a slot is held)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.DeleteResource(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.show(map[string]any{"id": args[0], "deleted": true}, func() error {
				_, err := fmt.Fprintf(a.stdout, "deleted %s\n", args[0])
				return err
			})
		},
	}
	cmd.AddCommand(list, get, put, del)
	return cmd
}

func schedulesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Aliases: []string{"schedule"}, Short: "List, show, create, replace, delete, pause and resume schedules"}
	printOne := func(s *client.Schedule) error {
		return a.show(s, func() error {
			ticks := s.Every
			if s.Cron != "" {
				ticks = s.Cron + " (" + orDash(s.TimeZone) + ")"
			}
			fmt.Fprintf(a.stdout, "schedule  %s\nticks     %s, overlap %s\npaused    %t\nnext      %s\nlast run  %s (job %s)\nruns      %d (%d skipped)\n",
				s.ID, ticks, s.Overlap, s.Paused, when(s.NextAt), when(s.LastRunAt), orDash(s.LastJobID), s.Runs, s.Skipped)
			if s.LastError != "" {
				fmt.Fprintf(a.stdout, "error     %s\n", s.LastError)
			}
			return nil
		})
	}
	var limit int
	var cursor string
	var all bool
	list := &cobra.Command{
		Use: "list", Short: "List schedules by id", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var ss []client.Schedule
			next := ""
			if all {
				for s, err := range c.Schedules(cmd.Context(), limit) {
					if err != nil {
						return err
					}
					ss = append(ss, s)
				}
			} else {
				p, err := c.ListSchedules(cmd.Context(), limit, cursor)
				if err != nil {
					return err
				}
				ss, next = p.Schedules, p.NextCursor
			}
			if a.output == "json" {
				return a.printJSON(client.SchedulePage{Schedules: ss, NextCursor: next})
			}
			rows := make([][]string, 0, len(ss))
			for _, s := range ss {
				ticks := s.Every
				if s.Cron != "" {
					ticks = s.Cron + " " + s.TimeZone
				}
				rows = append(rows, []string{s.ID, ticks, strconv.FormatBool(s.Paused), when(s.NextAt), strconv.FormatInt(s.Runs, 10), orDash(s.LastJobID)})
			}
			if err := a.table([]string{"ID", "TICKS", "PAUSED", "NEXT", "RUNS", "LAST JOB"}, rows); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(a.stderr, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "schedules a page, 1-100 (default 50)")
	list.Flags().StringVar(&cursor, "cursor", "", "go on from a page's next cursor")
	list.Flags().BoolVar(&all, "all", false, "every page")

	var file, id, cron, tz, every, overlap, jobFile string
	create := &cobra.Command{
		Use:   "create (-f FILE | --id ID (--cron EXPR [--time-zone TZ] | --every DURATION) --job FILE)",
		Short: "Create a schedule that submits a job at each tick",
		Example: `  stepflow schedules create -f schedule.yaml
  stepflow schedules create --id ping --every 5m --overlap allow --job job.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var body json.RawMessage
			if file != "" {
				if body, err = a.readDoc(file); err != nil {
					return err
				}
			} else {
				if jobFile == "" {
					return errors.New("give -f FILE, or --id with --cron or --every and --job FILE")
				}
				job, err := a.readDoc(jobFile)
				if err != nil {
					return err
				}
				if body, err = json.Marshal(map[string]any{"id": id, "cron": cron, "time_zone": tz, "every": every, "overlap": overlap, "job": job}); err != nil {
					return err
				}
				body = dropEmpty(body)
			}
			s, err := c.CreateScheduleJSON(cmd.Context(), body)
			if err != nil {
				return err
			}
			if !s.Created && a.output == "table" {
				fmt.Fprintln(a.stdout, "(made before from the same body)")
			}
			return printOne(s)
		},
	}
	f := create.Flags()
	f.StringVarP(&file, "file", "f", "", "the schedule as JSON or YAML (what POST /v1/schedules takes)")
	f.StringVar(&id, "id", "", "the schedule's id")
	f.StringVar(&cron, "cron", "", "five cron fields: minute hour day-of-month month day-of-week")
	f.StringVar(&tz, "time-zone", "", "the cron's IANA time zone (default UTC)")
	f.StringVar(&every, "every", "", "a duration between ticks, e.g. 5m")
	f.StringVar(&overlap, "overlap", "", "skip (default): no tick while the last run is unfinished; allow")
	f.StringVar(&jobFile, "job", "", "the job each tick submits, as JSON or YAML")

	one := func(use, short string, do func(*cobra.Command, *client.Client, string) (*client.Schedule, error)) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := a.client()
				if err != nil {
					return err
				}
				s, err := do(cmd, c, args[0])
				if err != nil {
					return err
				}
				return printOne(s)
			},
		}
	}
	var replaceFile string
	replace := &cobra.Command{
		Use:     "replace ID -f FILE",
		Short:   "Replace a schedule's definition, keeping its runs and whether it is paused",
		Example: `  stepflow schedules replace nightly -f schedule.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if replaceFile == "" {
				return errors.New("give -f FILE: the schedule as POST /v1/schedules takes it, with the same id")
			}
			body, err := a.readDoc(replaceFile)
			if err != nil {
				return err
			}
			s, err := c.ReplaceScheduleJSON(cmd.Context(), args[0], body)
			if err != nil {
				return err
			}
			return printOne(s)
		},
	}
	replace.Flags().StringVarP(&replaceFile, "file", "f", "", "the schedule as JSON or YAML, with the same id")
	cmd.AddCommand(list, create, replace,
		one("get ID", "Show a schedule", func(cmd *cobra.Command, c *client.Client, id string) (*client.Schedule, error) {
			return c.Schedule(cmd.Context(), id)
		}),
		one("delete ID", "Delete a schedule: no tick makes a job after it", func(cmd *cobra.Command, c *client.Client, id string) (*client.Schedule, error) {
			return c.DeleteSchedule(cmd.Context(), id)
		}),
		one("pause ID", "Pause a schedule", func(cmd *cobra.Command, c *client.Client, id string) (*client.Schedule, error) {
			return c.PauseSchedule(cmd.Context(), id)
		}),
		one("resume ID", "Resume a schedule from its first tick after now", func(cmd *cobra.Command, c *client.Client, id string) (*client.Schedule, error) {
			return c.ResumeSchedule(cmd.Context(), id)
		}),
	)
	return cmd
}

// dropEmpty removes a JSON object's members whose value is "": the API
// decodes strictly, and a flag not given is no member.
func dropEmpty(body json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	for k, v := range m {
		if string(v) == `""` {
			delete(m, k)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
