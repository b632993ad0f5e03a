package domain

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/states.md")

func TestStatesDoc(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "states.md")
	want := Diagram()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "docs/states.md is stale: go test ./shared/domain -run TestStatesDoc -update")
}
