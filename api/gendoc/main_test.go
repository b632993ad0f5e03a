package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
)

// docs/api.md is what go generate ./api writes from api/openapi.yaml now.
func TestAPIDocIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := Render(api.YAML)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "docs/api.md is stale: go generate ./api")
}

// The page has a section for every operation and every schema, and links
// only to sections it has.
func TestAPIDocCoversTheDocument(t *testing.T) {
	t.Parallel()
	page, err := Render(api.YAML)
	require.NoError(t, err)
	raw, err := api.JSON()
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct{ Schemas map[string]json.RawMessage }
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	headings := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			headings[anchor(h)] = true
		}
	}
	for path, item := range doc.Paths {
		for method := range item {
			require.True(t, headings[anchor(strings.ToUpper(method)+" "+path)], "%s %s", method, path)
		}
	}
	for name := range doc.Components.Schemas {
		require.True(t, headings[anchor(name)], name)
	}
	for _, link := range strings.Split(string(page), "](#")[1:] {
		target, _, _ := strings.Cut(link, ")")
		require.True(t, headings[target], "a link to #%s, which is no heading", target)
	}
}
