package webui_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/webui"
)

// Every file the page names and every module a script imports is one the
// API serves: a renamed file fails here, not in a browser.
func TestEveryReferencedFileIsServed(t *testing.T) {
	t.Parallel()
	page := string(webui.Page().Body)
	var wanted []string
	for _, m := range regexp.MustCompile(`(?:src|href)="ui/([^"]+)"`).FindAllStringSubmatch(page, -1) {
		wanted = append(wanted, m[1])
	}
	require.Contains(t, wanted, "app.js")
	for _, name := range webui.Assets() {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		f, ok := webui.Asset(name)
		require.True(t, ok)
		for _, m := range regexp.MustCompile(`(?m)^import .* from '\./([^']+)';$`).FindAllStringSubmatch(string(f.Body), -1) {
			wanted = append(wanted, m[1])
		}
	}
	for _, name := range wanted {
		_, ok := webui.Asset(name)
		require.True(t, ok, "%s is referenced but not served", name)
	}
	for _, name := range webui.Assets() {
		if name != "app.js" && strings.HasSuffix(name, ".js") {
			require.True(t, slices.Contains(wanted, name), "%s is served but nothing imports it", name)
		}
	}
}

func TestFilesAreTextWithTheirTypes(t *testing.T) {
	t.Parallel()
	types := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	for _, name := range webui.Assets() {
		f, _ := webui.Asset(name)
		require.True(t, utf8.Valid(f.Body), "%s: the API answers text bodies", name)
		ext := name[strings.LastIndex(name, "."):]
		require.True(t, strings.HasPrefix(f.ContentType, types[ext]), "%s is %s", name, f.ContentType)
		require.Regexp(t, `^"[0-9a-f]{16}"$`, f.ETag)
	}
	require.Equal(t, "text/html; charset=utf-8", webui.Page().ContentType)
}

// The page is served at /ui only (its files are named relative to it), and
// an asset name is one path segment.
func TestAssetNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"index.html", "", "../webui.go", "static/app.js", `x\app.js`, "nope.js"} {
		_, ok := webui.Asset(name)
		require.False(t, ok, name)
	}
	_, ok := webui.Asset("style.css")
	require.True(t, ok)
}

// What the API answers goes into the page as text: no script builds HTML
// from strings.
func TestScriptsNeverWriteHTML(t *testing.T) {
	t.Parallel()
	for _, name := range webui.Assets() {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		f, _ := webui.Asset(name)
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			require.NotContains(t, string(f.Body), sink, name)
		}
	}
}

// Every job, step and attempt state has its colour: a state added to the
// domain and not here would show uncoloured.
func TestEveryStateHasAColour(t *testing.T) {
	t.Parallel()
	css, ok := webui.Asset("style.css")
	require.True(t, ok)
	var states []string
	for _, s := range domain.AllJobStates() {
		states = append(states, string(s))
	}
	for _, s := range domain.AllStepStates() {
		states = append(states, string(s))
	}
	for _, s := range domain.AllAttemptStates() {
		states = append(states, string(s))
	}
	for _, s := range states {
		require.Regexp(t, `\.st-`+strings.ToLower(s)+`\b[^{]*\{[^}]*--c:`, string(css.Body), "%s has no colour", s)
	}
}
