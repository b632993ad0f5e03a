package domain

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated state diagrams in docs/ (go generate ./shared/domain)")

// The markers around the generated part of docs/architecture.md.
const (
	generatedBegin = "<!-- BEGIN GENERATED: state diagrams, by go generate ./shared/domain; do not edit -->\n"
	generatedEnd   = "<!-- END GENERATED -->\n"
)

func architectureDiagrams() string {
	return "### Job\n\n" + JobDiagram() + "\n### Step\n\n" + StepDiagram()
}

// TestStatesDoc fails when a generated diagram in docs/ is not what the
// transition tables give (CI runs it with every test); `go generate
// ./shared/domain` runs it with -update to rewrite them.
func TestStatesDoc(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	fix := "stale: go generate ./shared/domain"

	path := filepath.Join(docs, "states.md")
	want := Diagram()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "docs/states.md is "+fix)

	path = filepath.Join(docs, "architecture.md")
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	before, rest, ok := strings.Cut(string(got), generatedBegin)
	require.True(t, ok, "docs/architecture.md has no line %q", generatedBegin)
	section, after, ok := strings.Cut(rest, generatedEnd)
	require.True(t, ok, "docs/architecture.md has no line %q after the first", generatedEnd)
	if *update {
		section = architectureDiagrams()
		require.NoError(t, os.WriteFile(path, []byte(before+generatedBegin+section+generatedEnd+after), 0o644))
	}
	require.Equal(t, architectureDiagrams(), section, "docs/architecture.md's state diagrams are "+fix)

	path = filepath.Join(docs, "model.md")
	for _, part := range []struct{ name, want string }{
		{"job table", JobTableDoc()},
		{"widenings of the formal job table", WideningsDoc()},
	} {
		got, err = os.ReadFile(path)
		require.NoError(t, err)
		begin := "<!-- BEGIN GENERATED: " + part.name + ", by go generate ./shared/domain; do not edit -->\n"
		before, rest, ok := strings.Cut(string(got), begin)
		require.True(t, ok, "docs/model.md has no line %q", begin)
		section, after, ok := strings.Cut(rest, generatedEnd)
		require.True(t, ok, "docs/model.md has no line %q after %q", generatedEnd, begin)
		if *update {
			section = part.want
			require.NoError(t, os.WriteFile(path, []byte(before+begin+section+generatedEnd+after), 0o644))
		}
		require.Equal(t, part.want, section, "docs/model.md's "+part.name+" is "+fix)
	}
}
