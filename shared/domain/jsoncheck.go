package domain

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxJSONDepth is how deeply objects and arrays may nest in JSON a client
// sends: the nesting of objects and arrays together, counted from the top
// of the value being checked (a number or string is depth 0, `{}` and `[]`
// are 1, `{"a":[1]}` is 2). A request body is checked whole, so a job's
// payload, a member of the body, may itself nest 63 levels. Go's decoders
// give up at 10,000 levels, and stored documents wrap a client's value a
// few levels deeper, so the limit sits far below that: whatever is
// accepted can always be read back.
const MaxJSONDepth = 64

// CheckJSON answers an *Error (CodeInvalid) naming field when raw is not
// one well-formed JSON value, holds invalid UTF-8 (inside strings or out),
// nests deeper than MaxJSONDepth, or repeats a member name in an object
// (the error then names the member's path, e.g. "payload.a.b"). Empty or
// blank input is refused too. It reads raw once, as a stream of tokens
// (github.com/go-json-experiment/json/jsontext, the tokenizer of Go's
// encoding/json/v2), without recursion: memory grows with the nesting and,
// to find repeats, the member names of the objects still open.
func CheckJSON(field string, raw []byte) error {
	if p := scanJSON(raw); p != nil {
		return p.toError(field, nil)
	}
	return nil
}

type jsonProblemKind int

const (
	problemEmpty jsonProblemKind = iota
	problemSyntax
	problemTruncated
	problemTrailing
	problemUTF8
	problemDuplicate
	problemDepth
)

// jsonProblem is the first thing wrong with a JSON text.
type jsonProblem struct {
	kind    jsonProblemKind
	offset  int64
	detail  string    // problemSyntax: the tokenizer's words
	path    []pathSeg // problemUTF8: the value or object; problemDuplicate: the member; problemDepth: the first value past the limit
	depth   int       // problemDepth: the deepest nesting seen
	atLeast bool      // problemDepth: reading stopped before the value ended
}

// pathSeg is one step of a path into a JSON value: a member name or an
// array index.
type pathSeg struct {
	name    string
	index   int64
	isIndex bool
}

// scanJSON reads raw token by token (no recursion: the tokenizer keeps a
// stack of the open objects and arrays) and answers the first problem, or
// nil. Past MaxJSONDepth it reads on, to say how deep the input goes.
func scanJSON(raw []byte) *jsonProblem {
	dec := jsontext.NewDecoder(bytes.NewReader(raw)) // rejects invalid UTF-8 and duplicate names by default
	var deep *jsonProblem
	started := false
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			if deep != nil {
				deep.atLeast = !errors.Is(err, io.EOF) || dec.StackDepth() > 0
				return deep
			}
			if errors.Is(err, io.EOF) {
				if !started {
					return &jsonProblem{kind: problemEmpty}
				}
				return nil
			}
			return classify(raw, dec, err)
		}
		started = true
		switch tok.Kind() {
		case '{', '[':
			if d := dec.StackDepth(); d > MaxJSONDepth {
				if deep == nil {
					deep = &jsonProblem{kind: problemDepth, path: pathOf(dec, dec.StackPointer())}
				}
				deep.depth = max(deep.depth, d)
			}
		}
		if dec.StackDepth() == 0 {
			// One whole value read; nothing but white space may follow.
			if deep != nil {
				return deep
			}
			if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
				return &jsonProblem{kind: problemTrailing, offset: dec.InputOffset()}
			}
			return nil
		}
	}
}

// classify turns a tokenizer error into a problem.
func classify(raw []byte, dec *jsontext.Decoder, err error) *jsonProblem {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &jsonProblem{kind: problemSyntax, detail: err.Error()}
	}
	off := se.ByteOffset
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		return &jsonProblem{kind: problemDuplicate, offset: off, path: pathOf(dec, se.JSONPointer)}
	case badUTF8At(raw, off) || se.Err != nil && se.Err.Error() == "invalid UTF-8":
		return &jsonProblem{kind: problemUTF8, offset: off, path: pathOf(dec, se.JSONPointer)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &jsonProblem{kind: problemTruncated, offset: off}
	}
	detail := "syntax error"
	if se.Err != nil {
		detail = se.Err.Error()
	}
	return &jsonProblem{kind: problemSyntax, offset: off, detail: detail}
}

// badUTF8At reports whether raw holds an invalid UTF-8 sequence at off.
func badUTF8At(raw []byte, off int64) bool {
	if off < 0 || off >= int64(len(raw)) || raw[off] < utf8.RuneSelf {
		return false
	}
	r, size := utf8.DecodeRune(raw[off:])
	return r == utf8.RuneError && size <= 1
}

// pathOf turns a pointer the decoder reported into a path, telling array
// indices from member names by the kind of each open level.
func pathOf(dec *jsontext.Decoder, ptr jsontext.Pointer) []pathSeg {
	var segs []pathSeg
	level := 0
	for tok := range ptr.Tokens() {
		level++
		if level <= dec.StackDepth() {
			if kind, _ := dec.StackIndex(level); kind == '[' {
				if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
					segs = append(segs, pathSeg{index: n, isIndex: true})
					continue
				}
			}
		}
		segs = append(segs, pathSeg{name: tok})
	}
	return segs
}

// toError answers the problem as an *Error. root is the field the checked
// value is ("" for a request body, which is then called "body"). With t,
// the Go type the value decodes into, a problem of depth names the
// deepest field of t it lies in ("payload", "steps[2].retry"), not the
// path into free-form data.
func (p *jsonProblem) toError(root string, t reflect.Type) *Error {
	at := func(segs []pathSeg) string {
		if f := formatPath(root, segs); f != "" {
			return f
		}
		return "body"
	}
	whole := at(nil)
	switch p.kind {
	case problemEmpty:
		return Invalid(whole, "is empty; expected a JSON value")
	case problemTruncated:
		return Invalid(whole, "is truncated JSON")
	case problemTrailing:
		if t != nil {
			return Invalid(whole, "has data after the JSON object")
		}
		return Invalid(whole, "has data after the JSON value at byte %d", p.offset)
	case problemUTF8:
		return Invalid(at(p.path), "holds invalid UTF-8 at byte %d; send text as UTF-8 (binary data base64-encoded, as a string)", p.offset)
	case problemDuplicate:
		return Invalid(at(p.path), "appears twice in the same object; give each member once")
	case problemDepth:
		field := whole
		if t != nil {
			field = at(typedPrefix(t, p.path))
		}
		more := ""
		if p.atLeast {
			more = "at least "
		}
		return Invalid(field, "nests %s%d levels deep; the limit is %d: flatten it, or carry deep data as a JSON string", more, p.depth, MaxJSONDepth)
	default:
		return Invalid(whole, "is not valid JSON at byte %d: %s", p.offset, strings.ToValidUTF8(p.detail, "\uFFFD"))
	}
}

// formatPath writes a path in the style of the API's field names:
// steps[2].retry, payload.a.b; a name that is not a plain word is quoted,
// payload["a.b"], and a long one cut short.
func formatPath(root string, segs []pathSeg) string {
	var b strings.Builder
	b.WriteString(root)
	for _, s := range segs {
		switch {
		case s.isIndex:
			b.WriteString("[" + strconv.FormatInt(s.index, 10) + "]")
		case plainName(s.name):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.name)
		default:
			name := s.name
			if len(name) > 64 {
				cut := 64
				for cut > 0 && !utf8.RuneStart(name[cut]) {
					cut--
				}
				name = name[:cut] + "…"
			}
			b.WriteString("[" + strconv.Quote(strings.ToValidUTF8(name, "\uFFFD")) + "]")
		}
	}
	return b.String()
}

func plainName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	unmarshalerFromType = reflect.TypeFor[jsonv2.UnmarshalerFrom]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// typedPrefix answers the part of path that names fields of Go type t:
// struct members by their exact JSON name, slice and array elements,
// map values. It stops at a value that decodes itself (json.RawMessage,
// any, a type with its own UnmarshalJSON) and after a member t does not
// have.
func typedPrefix(t reflect.Type, path []pathSeg) []pathSeg {
	for i, s := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if opaque(t) {
			return path[:i]
		}
		switch t.Kind() {
		case reflect.Struct:
			if s.isIndex {
				return path[:i]
			}
			f, ok := fieldByJSONName(t, s.name)
			if !ok {
				return path[:i+1]
			}
			t = f
		case reflect.Slice, reflect.Array:
			if !s.isIndex {
				return path[:i]
			}
			t = t.Elem()
		case reflect.Map:
			if s.isIndex {
				return path[:i]
			}
			t = t.Elem()
		default:
			return path[:i]
		}
	}
	return path
}

func opaque(t reflect.Type) bool {
	if t.Kind() == reflect.Interface || t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		return true
	}
	pt := reflect.PointerTo(t)
	for _, it := range []reflect.Type{unmarshalerType, unmarshalerFromType, textUnmarshalerType} {
		if t.Implements(it) || pt.Implements(it) {
			return true
		}
	}
	return false
}

// fieldByJSONName answers the type of t's field that JSON name decodes
// into, looking through embedded structs without a name of their own.
func fieldByJSONName(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" && f.Tag.Get("json") == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			if inner, ok := fieldByJSONName(ft, name); ok {
				return inner, true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

// decodeError turns an error of the v2 decoder into an *Error naming the
// field at fault, in the API's style (steps[0].retry.max_attempts).
func decodeError(err error, t reflect.Type) error {
	var se *jsonv2.SemanticError
	if !errors.As(err, &se) {
		var syn *jsontext.SyntacticError
		if errors.As(err, &syn) {
			return Invalid("body", "is not valid JSON at byte %d: %v", syn.ByteOffset, syn.Err)
		}
		return Invalid("body", "%v", err)
	}
	var path []pathSeg
	for tok := range se.JSONPointer.Tokens() {
		path = append(path, pathSeg{name: tok})
	}
	path = typedIndices(t, path)
	field := formatPath("", path)
	if field == "" {
		field = "body"
	}
	if errors.Is(err, jsonv2.ErrUnknownName) {
		if name := se.JSONPointer.LastToken(); name == "" && len(path) > 0 {
			parent := formatPath("", path[:len(path)-1])
			if parent == "" {
				parent = "body"
			}
			return Invalid(parent, `has an unknown field ""`)
		}
		return Invalid(field, "is not a known field")
	}
	if se.GoType == nil {
		return Invalid(field, "%v", strings.TrimPrefix(err.Error(), "json: "))
	}
	want := se.GoType.String()
	if d, ok := typeNames[se.GoType]; ok {
		want = d
	}
	return Invalid(field, "must be %s, not JSON %s", want, kindName(se.JSONKind, se.JSONValue))
}

// typeNames say in a client's words what a field of a domain type must be.
var typeNames = map[reflect.Type]string{
	reflect.TypeFor[Priority]():   `0 (highest), 1 or 2, or "P0", "P1" or "P2"`,
	reflect.TypeFor[ActionSpec](): `an object such as {"type": "pass"} (an action's type and its own parameters)`,
}

// typedIndices marks the segments of path that index a slice or array of
// t, by walking t; past the typed part every segment stays a name.
func typedIndices(t reflect.Type, path []pathSeg) []pathSeg {
	for i := range path {
		if t == nil {
			return path
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array:
			if n, err := strconv.ParseInt(path[i].name, 10, 64); err == nil {
				path[i] = pathSeg{index: n, isIndex: true}
			}
			t = t.Elem()
		case reflect.Struct:
			f, ok := fieldByJSONName(t, path[i].name)
			if !ok {
				return path
			}
			t = f
		case reflect.Map:
			t = t.Elem()
		default:
			return path
		}
	}
	return path
}

// kindName names a JSON kind as encoding/json's errors did: "string",
// "number 1.5", "object".
func kindName(k jsontext.Kind, v jsontext.Value) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '"':
		return "string"
	case '0':
		if len(v) > 0 && len(v) <= 40 {
			return "number " + string(v)
		}
		return "number"
	default:
		return k.String()
	}
}
