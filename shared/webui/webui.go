// Package webui holds stepflow's web UI: one page of static HTML, CSS and
// JavaScript modules, embedded in the API function so that serving it needs
// no build step, no bucket and no CDN. The page talks to the same HTTP API
// with the key its user signs in with; serving the files needs none.
package webui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// File is one file of the UI, ready to serve.
type File struct {
	Name        string
	Body        []byte
	ContentType string
	ETag        string // a strong validator: the content's hash
}

// index is the page itself, served at /ui only: its assets are named
// relative to /ui, so under another path they would not resolve.
const index = "index.html"

// contentTypes is fixed here rather than read from the system's MIME
// tables, which differ between machines (a module script must be served as
// JavaScript).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

var files = mustLoad()

func mustLoad() map[string]File {
	out := map[string]File{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		name := path.Base(p)
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			return fmt.Errorf("webui: no content type for %s", name)
		}
		sum := sha256.Sum256(body)
		out[name] = File{Name: name, Body: body, ContentType: ct, ETag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // the files are compiled in: a failure here is a build fault
	}
	return out
}

// Page answers the UI's page.
func Page() File { return files[index] }

// Asset answers one of the page's assets by name (app.js, style.css, ...);
// the page itself is not one of them.
func Asset(name string) (File, bool) {
	if name == index || strings.ContainsAny(name, "/\\") {
		return File{}, false
	}
	f, ok := files[name]
	return f, ok
}

// Assets names every asset, for tests.
func Assets() []string {
	var out []string
	for name := range files {
		if name != index {
			out = append(out, name)
		}
	}
	return out
}
