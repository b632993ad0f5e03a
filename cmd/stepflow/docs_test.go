package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md")

// docs/cli.md is the command reference, generated from the commands.
func TestCLIDocIsCurrent(t *testing.T) {
	got := cliDoc(t)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "docs/cli.md is stale: go test ./cmd/stepflow -run TestCLIDocIsCurrent -update")
}

func cliDoc(t *testing.T) []byte {
	t.Helper()
	root := newRoot(&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard})
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true
	var b bytes.Buffer
	b.WriteString("# stepflow CLI reference\n\n" +
		"Generated from the commands (`go test ./cmd/stepflow -run TestCLIDocIsCurrent -update`);\n" +
		"`stepflow <command> --help` says the same. Install with `go install ./cmd/stepflow`.\n\n")
	// One file: links to a command's own page become links to its heading.
	link := func(name string) string { return "#" + strings.ReplaceAll(strings.TrimSuffix(name, ".md"), "_", "-") }
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root || c.IsAdditionalHelpTopicCommand() {
			return
		}
		require.NoError(t, doc.GenMarkdownCustom(c, &b, link))
		b.WriteString("\n")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return bytes.TrimRight(b.Bytes(), "\n")
}
