// Command gendoc writes docs/api.md from api/openapi.yaml: the routes, each
// operation's parameters, body and answers, and every schema, so the page
// never says other than the document the API is served and tested by.
//
//	go generate ./api
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stepflow/stepflow/api"
)

func main() {
	out := flag.String("o", "docs/api.md", "the page to write")
	flag.Parse()
	page, err := Render(api.YAML)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		log.Fatal(err)
	}
}

// doc is a parsed OpenAPI document, read in the order it is written.
type doc struct{ root *yaml.Node }

// get answers the value of key in mapping n, or nil.
func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, key := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// pairs answers mapping n's keys and values in order.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([][2]*yaml.Node, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

func text(n *yaml.Node, keys ...string) string {
	if v := get(n, keys...); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// resolve follows a local $ref ("#/components/parameters/Limit").
func (d doc) resolve(n *yaml.Node) *yaml.Node {
	for n != nil {
		ref := text(n, "$ref")
		if ref == "" {
			return n
		}
		n = get(d.root, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...)
	}
	return n
}

// cell makes text fit one table cell on one line.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

// anchor is the id GitHub gives a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var schemaRef = regexp.MustCompile(`^#/components/schemas/(.+)$`)

// typeOf describes a schema in a few words, linking named schemas.
func typeOf(s *yaml.Node) string {
	if s == nil {
		return "any"
	}
	if m := schemaRef.FindStringSubmatch(text(s, "$ref")); m != nil {
		return fmt.Sprintf("[`%s`](#%s)", m[1], anchor(m[1]))
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts := get(s, key); alts != nil {
			var parts []string
			for _, a := range alts.Content {
				parts = append(parts, typeOf(a))
			}
			return strings.Join(parts, " or ")
		}
	}
	if c := get(s, "const"); c != nil {
		return fmt.Sprintf("`%q`", c.Value)
	}
	if e := get(s, "enum"); e != nil {
		var vals []string
		for _, v := range e.Content {
			vals = append(vals, "`"+v.Value+"`")
		}
		return strings.Join(vals, ", ")
	}
	var types []string
	if t := get(s, "type"); t != nil {
		if t.Kind == yaml.SequenceNode {
			for _, x := range t.Content {
				types = append(types, x.Value)
			}
		} else {
			types = []string{t.Value}
		}
	}
	if len(types) == 0 {
		return "any"
	}
	for i, t := range types {
		switch t {
		case "array":
			types[i] = "array of " + typeOf(get(s, "items"))
		case "object":
			if ap := get(s, "additionalProperties"); ap != nil && ap.Kind == yaml.MappingNode {
				types[i] = "object of " + typeOf(ap)
			}
		}
		if f := text(s, "format"); f != "" && t != "array" {
			types[i] += " (" + f + ")"
		}
	}
	return strings.Join(types, " or ") + limits(s)
}

// limits describes a schema's bounds.
func limits(s *yaml.Node) string {
	var out []string
	bound := func(lo, hi, unit string) {
		l, h := text(s, lo), text(s, hi)
		switch {
		case l != "" && h != "":
			out = append(out, l+"-"+h+unit)
		case l != "":
			out = append(out, "at least "+l+unit)
		case h != "":
			out = append(out, "at most "+h+unit)
		}
	}
	bound("minimum", "maximum", "")
	bound("minLength", "maxLength", " characters")
	bound("minItems", "maxItems", " items")
	bound("minProperties", "maxProperties", " members")
	if p := text(s, "pattern"); p != "" {
		out = append(out, "matching `"+p+"`")
	}
	if len(out) == 0 {
		return ""
	}
	return ", " + strings.Join(out, ", ")
}

// bodyType answers the schema of a request body or an answer as JSON.
// Another media type is named as it is.
func (d doc) bodyType(n *yaml.Node) string {
	content := get(d.resolve(n), "content")
	if s := get(content, "application/json", "schema"); s != nil {
		return typeOf(s)
	}
	var types []string
	for _, kv := range pairs(content) {
		types = append(types, "`"+kv[0].Value+"`")
	}
	return strings.Join(types, ", ")
}

var methods = []string{"get", "put", "post", "delete", "patch"}

// Render answers the page for the OpenAPI document spec.
func Render(spec []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(spec, &root); err != nil {
		return nil, fmt.Errorf("parse the document: %w", err)
	}
	d := doc{root: root.Content[0]}
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# %s (%s)\n\n", text(d.root, "info", "title"), text(d.root, "info", "version"))
	p("<!-- Generated from api/openapi.yaml by `go generate ./api`; do not edit. -->\n\n")
	p("%s\n", strings.TrimSpace(text(d.root, "info", "description")))
	p("\nThe document is [api/openapi.yaml](../api/openapi.yaml) (OpenAPI %s), served as JSON at `GET /v1/openapi.json` without a key.\n", text(d.root, "openapi"))

	type op struct {
		method, path string
		n            *yaml.Node
	}
	byTag := map[string][]op{}
	var all []op
	for _, kv := range pairs(get(d.root, "paths")) {
		for _, mv := range pairs(kv[1]) {
			if m, n := mv[0].Value, mv[1]; slices.Contains(methods, m) {
				o := op{strings.ToUpper(m), kv[0].Value, n}
				all = append(all, o)
				tag := ""
				if tags := get(n, "tags"); tags != nil && len(tags.Content) > 0 {
					tag = tags.Content[0].Value
				}
				byTag[tag] = append(byTag[tag], o)
			}
		}
	}

	p("\n## Routes\n\n| method | path | |\n|---|---|---|\n")
	for _, o := range all {
		p("| %s | [`%s`](#%s) | %s |\n", o.method, o.path, anchor(o.method+" "+o.path), cell(text(o.n, "summary")))
	}

	var tags []string
	if t := get(d.root, "tags"); t != nil {
		for _, tag := range t.Content {
			tags = append(tags, text(tag, "name"))
		}
	}
	for tag := range byTag {
		if !slices.Contains(tags, tag) {
			tags = append(tags, tag)
		}
	}
	for _, tag := range tags {
		ops := byTag[tag]
		if len(ops) == 0 {
			continue
		}
		name := tag
		if name == "" {
			name = "other"
		}
		p("\n## %s%s\n", strings.ToUpper(name[:1]), name[1:])
		for _, t := range get(d.root, "tags").Content {
			if text(t, "name") == tag && text(t, "description") != "" {
				p("\n%s\n", strings.TrimSpace(text(t, "description")))
			}
		}
		for _, o := range ops {
			d.operation(p, o.method, o.path, o.n)
		}
	}

	p("\n## Schemas\n")
	for _, kv := range pairs(get(d.root, "components", "schemas")) {
		d.schema(p, kv[0].Value, kv[1])
	}
	return b.Bytes(), nil
}

func (d doc) operation(p func(string, ...any), method, path string, n *yaml.Node) {
	p("\n### %s %s\n\n%s.\n", method, path, strings.TrimSuffix(text(n, "summary"), "."))
	if desc := strings.TrimSpace(text(n, "description")); desc != "" {
		p("\n%s\n", desc)
	}
	if sec := get(n, "security"); sec != nil && len(sec.Content) == 0 {
		p("\nNo API key is needed.\n")
	}
	if params := get(n, "parameters"); params != nil && len(params.Content) > 0 {
		p("\n| parameter | in | type | |\n|---|---|---|---|\n")
		for _, raw := range params.Content {
			prm := d.resolve(raw)
			name := "`" + text(prm, "name") + "`"
			if text(prm, "required") == "true" {
				name += " (required)"
			}
			p("| %s | %s | %s | %s |\n", name, text(prm, "in"), typeOf(get(prm, "schema")), cell(text(prm, "description")))
		}
	}
	if body := get(n, "requestBody"); body != nil {
		req := "optional"
		if text(body, "required") == "true" {
			req = "required"
		}
		p("\nBody (%s): %s\n", req, d.bodyType(body))
	}
	p("\n| status | answer | |\n|---|---|---|\n")
	for _, kv := range pairs(get(n, "responses")) {
		res := d.resolve(kv[1])
		desc := text(res, "description")
		var headers []string
		for _, h := range pairs(get(res, "headers")) {
			headers = append(headers, "`"+h[0].Value+"`")
		}
		if len(headers) > 0 {
			desc += " Headers: " + strings.Join(headers, ", ") + "."
		}
		p("| %s | %s | %s |\n", kv[0].Value, d.bodyType(res), cell(desc))
	}
}

// members writes a row for each of object schema s's members, and for the
// members of an object written inline, under their dotted names.
func members(p func(string, ...any), prefix string, s *yaml.Node) {
	var required []string
	if r := get(s, "required"); r != nil {
		for _, x := range r.Content {
			required = append(required, x.Value)
		}
	}
	for _, kv := range pairs(get(s, "properties")) {
		name := prefix + kv[0].Value
		member := "`" + name + "`"
		if slices.Contains(required, kv[0].Value) {
			member += " (required)"
		}
		p("| %s | %s | %s |\n", member, typeOf(kv[1]), cell(text(kv[1], "description")))
		if get(kv[1], "properties") != nil {
			members(p, name+".", kv[1])
		}
	}
}

func (d doc) schema(p func(string, ...any), name string, s *yaml.Node) {
	p("\n### %s\n", name)
	if desc := strings.TrimSpace(text(s, "description")); desc != "" {
		p("\n%s\n", desc)
	}
	props := get(s, "properties")
	if props == nil {
		p("\nType: %s.\n", typeOf(s))
		return
	}
	p("\n| member | type | |\n|---|---|---|\n")
	members(p, "", s)
	if alts := get(s, "oneOf"); alts != nil {
		var req []string
		for _, a := range alts.Content {
			var names []string
			for _, r := range get(a, "required").Content {
				names = append(names, "`"+r.Value+"`")
			}
			req = append(req, strings.Join(names, ", "))
		}
		p("\nOne of %s is required.\n", strings.Join(req, " or "))
	}
	if text(s, "additionalProperties") == "false" {
		p("\nNo other member is accepted.\n")
	}
}
