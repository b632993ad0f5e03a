package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/stepflow/stepflow/sdk/client"
)

// DefaultURL is the API `make dev` serves.
const DefaultURL = "http://127.0.0.1:3000"

// app is what every command shares: its streams, flags and client.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	url, key       string
	output         string // table or json
	c              *client.Client
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "stepflow",
		Short: "Submit, watch and run stepflow jobs",
		Long: `stepflow talks to a stepflow API: STEPFLOW_URL (default ` + DefaultURL + `, what make dev
serves) with the key STEPFLOW_API_KEY. The admin commands (keys, dlq) act on the
stack's AWS resources directly: against make dev they find them by themselves.

Exit codes: 0 success; 1 an error; watch (and submit --watch) 2 when the job
ended FAILED, 3 when it ended CANCELLED.`,
		Version:       readBuildVersion().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// From the environment here, not as the flags' defaults: help
			// must never print a key.
			a.url = cmp.Or(a.url, os.Getenv("STEPFLOW_URL"), DefaultURL)
			a.key = cmp.Or(a.key, os.Getenv("STEPFLOW_API_KEY"))
			if a.output != "table" && a.output != "json" {
				return fmt.Errorf("--output must be table or json, not %q", a.output)
			}
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}")
	root.PersistentFlags().StringVar(&a.url, "url", "", "the API's base URL (default STEPFLOW_URL, else "+DefaultURL+")")
	root.PersistentFlags().StringVar(&a.key, "api-key", "", "the API key (default STEPFLOW_API_KEY)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "table or json")
	root.AddGroup(&cobra.Group{ID: "jobs", Title: "Jobs:"}, &cobra.Group{ID: "ops", Title: "Resources, schedules and health:"},
		&cobra.Group{ID: "work", Title: "Workers:"}, &cobra.Group{ID: "admin", Title: "Admin (AWS directly):"})
	for _, c := range jobCommands(a) {
		c.GroupID = "jobs"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{resourcesCmd(a), schedulesCmd(a), healthCmd(a)} {
		c.GroupID = "ops"
		root.AddCommand(c)
	}
	for _, w := range []*cobra.Command{workerCmd(a), queuesCmd(a)} {
		w.GroupID = "work"
		root.AddCommand(w)
	}
	for _, c := range []*cobra.Command{keysCmd(a), dlqCmd(a)} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	root.AddCommand(versionCmd(a)) // beside help and completion
	return root
}

// client answers the API client, made on first use.
func (a *app) client() (*client.Client, error) {
	if a.c != nil {
		return a.c, nil
	}
	if a.key == "" {
		return nil, fmt.Errorf("no API key: set STEPFLOW_API_KEY or pass --api-key (make dev prints one)")
	}
	c, err := client.New(client.Config{BaseURL: a.url, APIKey: a.key, UserAgent: "stepflow-cli"})
	if err != nil {
		return nil, err
	}
	a.c = c
	return c, nil
}

// printJSON writes v indented.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// show prints v as JSON, or as table() prints it.
func (a *app) show(v any, table func() error) error {
	if a.output == "json" {
		return a.printJSON(v)
	}
	return table()
}

// readDoc reads a JSON or YAML document (a file, or - for stdin) and
// answers it as JSON.
func (a *app) readDoc(path string) (json.RawMessage, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(a.stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	return toJSON(b, path)
}

// toJSON answers a JSON or YAML document as JSON (JSON is kept as it is).
func toJSON(b []byte, name string) (json.RawMessage, error) {
	if json.Valid(b) {
		return b, nil
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s is neither JSON nor YAML: %w", name, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// jsonArg reads a flag's JSON value: JSON as it is, @file for a file's
// (JSON or YAML), anything else as a JSON string.
func (a *app) jsonArg(v string) (json.RawMessage, error) {
	if strings.HasPrefix(v, "@") {
		return a.readDoc(v[1:])
	}
	if json.Valid([]byte(v)) {
		return json.RawMessage(v), nil
	}
	return json.Marshal(v)
}

// keyValues parses k=v pairs.
func keyValues(pairs []string, what string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q is not key=value", what, p)
		}
		m[k] = v
	}
	return m, nil
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func orDash(s string) string { return cmp.Or(s, "-") }

func labels(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return orDash(strings.Join(parts, ","))
}

// short cuts s to n runes for a table cell.
func short(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
