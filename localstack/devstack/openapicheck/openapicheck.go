// Package openapicheck checks a test stack's HTTP traffic against the API's
// OpenAPI document. It is a package of its own, not part of stacktest:
// the OpenAPI library's generic types are compiled into every package that
// imports one holding them, about ten seconds each, so only the tests that
// check conformance pay for them.
package openapicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
)

// Conformance checks a harness's HTTP traffic against api/openapi.yaml:
// every answer must be one the document describes for its operation and
// status, and name no member the document does not (the document leaves
// its objects open, as clients should read them; the stack must not use
// that), and every request the stack accepted (2xx, 3xx) must be one the
// document allows. It records which operation answered which statuses, so
// a test can require that it drove every route.
type Conformance struct {
	t      testing.TB
	v      validator.Validator
	doc    map[string]any // the document as JSON, for undocumented members
	errors *base.Schema   // components.schemas.Error, for answers of no operation
	ops    []operation
	host   string // the stack's API; other hosts (a presigned S3 URL) pass unchecked
	next   http.RoundTripper

	mu   sync.Mutex
	seen map[string]map[int]int // "GET /v1/jobs/{id}" -> status -> answers
	last Checked
}

// Checked is what Conformance found of one exchange.
type Checked struct {
	Operation string // "GET /v1/jobs/{id}"; "" when the document has none for it
	Status    int
	// RequestErrors is why the document refuses the request (none: it
	// allows it).
	RequestErrors []string
}

type operation struct {
	method string
	path   []string // segments; "{x}" matches one non-empty segment
	key    string
}

// Check makes h check its traffic against the API's document from
// now on, failing t on an answer the document does not describe.
func Check(t testing.TB, h *stacktest.Harness) *Conformance {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.YAML)
	require.NoError(t, err)
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	// Not the validator's strict mode, which counts a map's keys and the
	// members of free-form data (payload, output) as undeclared, and does
	// not follow a $ref with a description beside it (undocumented, below).
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	require.Empty(t, errs)
	base, err := url.Parse(h.URL)
	require.NoError(t, err)
	c := &Conformance{t: t, v: v, seen: map[string]map[int]int{}, host: base.Host, next: h.HTTP.Transport}
	raw, err := api.JSON()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &c.doc))
	if c.next == nil {
		c.next = http.DefaultTransport
	}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().KeysFromOldest() {
			c.ops = append(c.ops, operation{method: strings.ToUpper(method), path: strings.Split(path, "/"), key: strings.ToUpper(method) + " " + path})
		}
	}
	c.errors = model.Model.Components.Schemas.GetOrZero("Error").Schema()
	require.NotNil(t, c.errors, "components.schemas.Error")
	h.HTTP.Transport = c
	return c
}

// Operations answers every operation the document describes.
func (c *Conformance) Operations() []string {
	out := make([]string, 0, len(c.ops))
	for _, op := range c.ops {
		out = append(out, op.key)
	}
	slices.Sort(out)
	return out
}

// Seen answers, for each operation driven, the statuses it answered.
func (c *Conformance) Seen() map[string][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]int{}
	for op, statuses := range c.seen {
		for s := range statuses {
			out[op] = append(out[op], s)
		}
		slices.Sort(out[op])
	}
	return out
}

// Last answers what was found of the last exchange.
func (c *Conformance) Last() Checked {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *Conformance) operation(method, path string) string {
	segs := strings.Split(path, "/")
	for _, op := range c.ops {
		if op.method != method || len(op.path) != len(segs) {
			continue
		}
		same := true
		for i, p := range op.path {
			same = same && (p == segs[i] || strings.HasPrefix(p, "{") && segs[i] != "")
		}
		if same {
			return op.key
		}
	}
	return ""
}

// RoundTrip sends req on and checks the exchange.
func (c *Conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != c.host {
		return c.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	res, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	got, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(got))

	// The validator reads the bodies it checks: each check gets copies.
	// The API reads every body as JSON whatever its type (curl -d sends
	// a form's), so a body without one is checked as JSON.
	clone := func() *http.Request {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) > 0 && r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/json")
		}
		return r
	}
	checked := Checked{Operation: c.operation(req.Method, req.URL.Path), Status: res.StatusCode}
	if checked.Operation != "" {
		if ok, errs := c.v.ValidateHttpRequestSync(clone()); !ok {
			checked.RequestErrors = describe(errs)
		}
		answer := *res
		answer.Body = io.NopCloser(bytes.NewReader(got))
		if ok, errs := c.v.ValidateHttpResponse(clone(), &answer); !ok {
			c.t.Errorf("%s %s answered %d %s, which %s does not describe:\n%s", req.Method, req.URL.RequestURI(), res.StatusCode, clip(got), checked.Operation, strings.Join(describe(errs), "\n"))
		} else if extra := c.undocumented(checked.Operation, res, got); len(extra) > 0 {
			c.t.Errorf("%s %s answered %d with members %s does not name: %s\n%s", req.Method, req.URL.RequestURI(), res.StatusCode, checked.Operation, strings.Join(extra, ", "), clip(got))
		}
		if res.StatusCode < 400 && len(checked.RequestErrors) > 0 {
			c.t.Errorf("%s %s was accepted (%d) though the document refuses it:\n%s", req.Method, req.URL.RequestURI(), res.StatusCode, strings.Join(checked.RequestErrors, "\n"))
		}
	} else if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(c.errors, got); !ok || res.StatusCode < 400 {
		// No operation: the path or its method is none of the API's, and
		// the answer must be an error of the API's shape.
		c.t.Errorf("%s %s, no operation of the document, answered %d %s:\n%s", req.Method, req.URL.RequestURI(), res.StatusCode, clip(got), strings.Join(describe(errs), "\n"))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = checked
	if checked.Operation != "" {
		if c.seen[checked.Operation] == nil {
			c.seen[checked.Operation] = map[int]int{}
		}
		c.seen[checked.Operation][res.StatusCode]++
	}
	return res, nil
}

// undocumented answers the members of a JSON answer that the schema of
// its operation and status does not name, by path ($.steps[0].cost).
func (c *Conformance) undocumented(op string, res *http.Response, body []byte) []string {
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || len(body) == 0 {
		return nil
	}
	method, path, _ := strings.Cut(op, " ")
	answer := c.deref(lookup(c.doc, "paths", path, strings.ToLower(method), "responses", strconv.Itoa(res.StatusCode)))
	schema := lookup(answer, "content", "application/json", "schema")
	var v any
	if schema == nil || json.Unmarshal(body, &v) != nil {
		return nil
	}
	return c.walk("$", schema, v)
}

// walk answers the members of v that schema s does not name. An object
// schema with neither properties nor additionalProperties is free-form
// (payload, output) and names whatever it holds; one with
// additionalProperties is a map, each value under that schema.
func (c *Conformance) walk(path string, s, v any) []string {
	schema := c.deref(s)
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts, ok := schema[key].([]any); ok {
			var best []string
			for i, alt := range alts {
				out := c.walk(path, alt, v)
				if i == 0 || len(out) < len(best) {
					best = out
				}
			}
			return best
		}
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		extra, _ := schema["additionalProperties"].(map[string]any)
		if props == nil && extra == nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			switch p, ok := props[k]; {
			case ok:
				out = append(out, c.walk(path+"."+k, p, v[k])...)
			case extra != nil:
				out = append(out, c.walk(path+"."+k, extra, v[k])...)
			default:
				out = append(out, path+"."+k)
			}
		}
	case []any:
		for i, x := range v {
			out = append(out, c.walk(fmt.Sprintf("%s[%d]", path, i), schema["items"], x)...)
		}
	}
	return out
}

// deref follows a schema's or an answer's $ref within the document.
func (c *Conformance) deref(s any) map[string]any {
	m, _ := s.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		m, _ = lookup(c.doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
	}
	return m
}

// lookup answers the value under keys in nested JSON objects, or nil.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func describe(errs []*liberrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" {
			s += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			s += fmt.Sprintf("\n  %s: %s", f.FieldPath, f.Reason)
		}
		out = append(out, s)
	}
	return out
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "..."
	}
	return string(b)
}
