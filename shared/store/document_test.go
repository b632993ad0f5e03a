package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

type golden struct {
	version int
	name    string
	item    map[string]ddb.AttributeValue
	doc     []byte // the item's doc, inflated
	want    *domain.Job
}

// goldens reads the golden items of every document version this build
// reads; each version must have some.
func goldens(t *testing.T) []golden {
	t.Helper()
	var out []golden
	for v := 1; v <= documentVersion; v++ {
		paths, err := filepath.Glob(filepath.Join(goldenDir(v), "*.item.json"))
		require.NoError(t, err)
		require.NotEmpty(t, paths, "document version %d has no golden items", v)
		for _, p := range paths {
			g := golden{version: v, name: fmt.Sprintf("v%d/%s", v, strings.TrimSuffix(filepath.Base(p), ".item.json"))}
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			g.item, err = parseItemJSON(raw)
			require.NoError(t, err, g.name)
			g.doc, err = inflate(g.item["doc"].(*ddb.AttributeValueMemberB).Value)
			require.NoError(t, err, g.name)
			want, err := os.ReadFile(strings.TrimSuffix(p, ".item.json") + ".job.json")
			require.NoError(t, err)
			// Compact, as a stored document's payloads and outputs are.
			var compact bytes.Buffer
			require.NoError(t, json.Compact(&compact, want), g.name)
			dec := json.NewDecoder(&compact)
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&g.want), g.name)
			out = append(out, g)
		}
	}
	return out
}

// Every stored version's items read, strictly, as the jobs they hold;
// the old spelling of cancelled reads as the canonical one, and every log
// replays through today's tables.
func TestGoldenItemsRead(t *testing.T) {
	t.Parallel()
	s := &Store{}
	for _, g := range goldens(t) {
		v, err := documentVersionOf(g.item)
		require.NoError(t, err, g.name)
		require.Equal(t, g.version, v, "%s: the item's document version", g.name)
		j, err := decodeDocument(g.doc, v, true)
		require.NoError(t, err, g.name)
		require.Equal(t, g.want, j, g.name)
		require.NoError(t, domain.CheckReplay(j), g.name)
		got, err := s.decodeJob(g.item)
		require.NoError(t, err, g.name)
		require.Equal(t, g.want, got, g.name)
	}
}

// This build writes its version's golden items exactly (a change to what
// is written is a new version), and an older version's document
// unchanged, with only the version attribute added (version 1) or raised
// to this build's.
func TestGoldenItemsWrite(t *testing.T) {
	t.Parallel()
	for _, g := range goldens(t) {
		it, err := item(g.want)
		require.NoError(t, err, g.name)
		doc, err := inflateAttr(it, "doc")
		require.NoError(t, err, g.name)
		// Written compressed with this build's dictionary; the document
		// is compared below.
		require.Equal(t, &ddb.AttributeValueMemberN{Value: strconv.Itoa(writeDict)}, it[dictAttr], g.name)
		delete(it, dictAttr)
		if g.version == 1 && (bytes.Contains(g.doc, []byte(`"CANCELED"`)) || bytes.Contains(g.doc, []byte(`"step_canceled"`))) {
			continue // written in a spelling no build writes since
		}
		require.Equal(t, string(g.doc), string(doc), "%s: the document", g.name)
		it[writeTokenAttr] = g.item[writeTokenAttr]
		if g.version < documentVersion {
			require.Equal(t, &ddb.AttributeValueMemberN{Value: strconv.Itoa(documentVersion)}, it[docVersionAttr], g.name)
			if g.version == 1 {
				delete(it, docVersionAttr)
			} else {
				it[docVersionAttr] = g.item[docVersionAttr]
			}
		}
		for k, want := range g.item {
			if k != "doc" { // flate's bytes may differ between Go releases; the document is compared above
				require.Equal(t, want, it[k], "%s: attribute %s", g.name, k)
			}
		}
		require.Len(t, it, len(g.item), g.name)
	}
}

// A stored document with a field this build does not store fails the
// strict read (the tests'); the store itself reads it as far as it knows
// it and logs that, as it does a document of a newer version.
func TestUnknownFieldFails(t *testing.T) {
	t.Parallel()
	var base golden
	for _, g := range goldens(t) {
		if g.name == fmt.Sprintf("v%d/single-step", documentVersion) {
			base = g
		}
	}
	require.NotNil(t, base.item, "no golden single-step item of the current version")
	// Inserted as text, so the rest of the document stays byte for byte.
	for _, tc := range []struct{ name, field, at, with string }{
		{"top level", `"archived"`, `{"tenant":`, `{"archived":true,"tenant":`},
		{"in a step's action", `"region"`, `"action":{"type":"pass"`, `"action":{"type":"pass","region":"eu-west-1"`},
		{"in an event", `"actor"`, `{"seq":1,`, `{"seq":1,"actor":"alice",`},
	} {
		require.Equal(t, 1, bytes.Count(base.doc, []byte(tc.at)), tc.name)
		raw := bytes.Replace(base.doc, []byte(tc.at), []byte(tc.with), 1)

		_, err := decodeDocument(raw, documentVersion, true)
		require.ErrorIs(t, err, errUnknownField, tc.name)
		require.ErrorContains(t, err, tc.field, tc.name)

		var logged bytes.Buffer
		s := &Store{Log: slog.New(slog.NewTextHandler(&logged, nil))}
		z, err := deflate(raw)
		require.NoError(t, err)
		it := map[string]ddb.AttributeValue{"doc": &ddb.AttributeValueMemberB{Value: z}, docVersionAttr: base.item[docVersionAttr]}
		j, err := s.decodeJob(it)
		require.NoError(t, err, tc.name)
		require.Equal(t, base.want, j, tc.name)
		require.Contains(t, logged.String(), "level=WARN", tc.name)
		require.Contains(t, logged.String(), strings.Trim(tc.field, `"`), tc.name)
	}

	// A newer build's document is read too, not quarantined: a rollback
	// must leave its jobs running.
	var logged bytes.Buffer
	s := &Store{Log: slog.New(slog.NewTextHandler(&logged, nil))}
	it := map[string]ddb.AttributeValue{"doc": base.item["doc"], docVersionAttr: &ddb.AttributeValueMemberN{Value: fmt.Sprint(documentVersion + 1)}}
	j, err := s.decodeJob(it)
	require.NoError(t, err)
	require.Equal(t, base.want, j)
	require.Contains(t, logged.String(), "this build reads 1 to")

	// What is no document at all stays unreadable.
	z, err := deflate([]byte(`{"steps": "none"}`))
	require.NoError(t, err)
	_, err = s.decodeJob(map[string]ddb.AttributeValue{"doc": &ddb.AttributeValueMemberB{Value: z}})
	require.Error(t, err)
}

// Every field of a job, set, survives the document: a field added to the
// domain without one in the document fails here.
func TestDocumentCoversTheJob(t *testing.T) {
	t.Parallel()
	var j domain.Job
	j.Marks = map[string][]byte{} // attributes of the item beside the document (markPrefix), as are
	// what a decision had fetched for it, never stored:
	j.Fetched, j.Unfetchable = map[string][]byte{}, map[string]string{}
	j.Released = []domain.Dispatch{}
	fillAll(reflect.ValueOf(&j).Elem(), 0)
	j.CancelRequested, j.Marks, j.MarksMade = false, nil, 0                                             // cancelAttr and marksAttr
	j.Usage, j.Spent, j.ItemBytes, j.ItemDue, j.CarriedDue = domain.Usage{}, domain.Usage{}, 0, "", nil // usageAttr, and notes of the item
	j.Fetched, j.Unfetchable, j.Released = nil, nil, nil
	raw, err := encodeDocument(&j)
	require.NoError(t, err)
	got, err := decodeDocument(raw, documentVersion, true)
	require.NoError(t, err)
	require.Equal(t, &j, got)
}

// fillAll sets every field reachable from v to a value that is not zero,
// one element per list and map, nested types to depth 3.
func fillAll(v reflect.Value, depth int) {
	if depth > 3 {
		return
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(goldenT0.Add(time.Duration(depth+1) * time.Hour)))
		return
	case v.Type() == reflect.TypeFor[json.RawMessage]():
		v.Set(reflect.ValueOf(json.RawMessage(`{"k":1}`)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x" + v.Type().Name())
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillAll(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fillAll(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		if !v.IsNil() {
			return // set beforehand: not the document's
		}
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k, depth+1)
		fillAll(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			// A store's note of how it keeps the job (domain.Job.Stored)
			// is not the job, and not in its document.
			if f := v.Type().Field(i); f.IsExported() && f.Type != reflect.TypeFor[domain.StoredLayout]() {
				fillAll(v.Field(i), depth)
			}
		}
	default:
		panic(fmt.Sprintf("fillAll: no value for %s", v.Type()))
	}
}

// actionDocV2 is how document version 2 stored an action before the
// store kept it in the domain's encoding: a field per parameter of every
// action type, frozen here as what today's actions must still be stored
// as.
type actionDocV2 struct {
	Type           string          `json:"type"`
	Seconds        *float64        `json:"seconds,omitempty"`
	Class          string          `json:"class,omitempty"`
	Message        string          `json:"message,omitempty"`
	Prompt         string          `json:"prompt,omitempty"`
	Steps          []stepSpecDocV2 `json:"steps,omitempty"`
	URL            string          `json:"url,omitempty"`
	Queue          string          `json:"queue,omitempty"`
	LeaseSeconds   int             `json:"lease_seconds,omitempty"`
	Signal         string          `json:"signal,omitempty"`
	Function       string          `json:"function,omitempty"`
	Qualifier      string          `json:"qualifier,omitempty"`
	TimeoutSeconds int             `json:"timeout_seconds,omitempty"`
}

type stepSpecDocV2 struct {
	ID                  string           `json:"id"`
	Action              actionDocV2      `json:"action"`
	DependsOn           []string         `json:"depends_on,omitempty"`
	Retry               *retryDoc        `json:"retry,omitempty"`
	TimeoutSeconds      int              `json:"timeout_seconds,omitempty"`
	Requires            *requirementsDoc `json:"requires,omitempty"`
	ResourceWaitSeconds int              `json:"resource_wait_seconds,omitempty"`
}

func stepSpecDocV2Of(s domain.StepSpec) stepSpecDocV2 {
	a := s.Action
	return stepSpecDocV2{
		ID: s.ID,
		Action: actionDocV2{Type: a.Type, Seconds: a.Seconds, Class: a.Class, Message: a.Message, Prompt: a.Prompt,
			Steps: mapSlice(a.Steps, stepSpecDocV2Of), URL: a.URL, Queue: a.Queue, LeaseSeconds: a.LeaseSeconds,
			Signal: a.Signal, Function: a.Function, Qualifier: a.Qualifier, TimeoutSeconds: a.TimeoutSeconds},
		DependsOn: s.DependsOn, Retry: mapPtr(s.Retry, retryDocOf), TimeoutSeconds: s.TimeoutSeconds,
		Requires: mapPtr(s.Requires, func(r domain.Requirements) requirementsDoc {
			return requirementsDoc{Capabilities: r.Capabilities, Labels: r.Labels}
		}),
		ResourceWaitSeconds: s.ResourceWaitSeconds,
	}
}

// A job written today stores each action, every parameter of every type
// set, as version 2 did when it mapped them one by one; and that is read
// back, strictly, as the job.
func TestActionsStoredAsBefore(t *testing.T) {
	t.Parallel()
	spec, err := domain.ParseJobSpec([]byte(`{"steps": [
		{"id": "pass", "action": {"type": "pass"}},
		{"id": "sleep", "action": {"type": "sleep", "seconds": 1.5}},
		{"id": "fatal", "action": {"type": "fail", "class": "fatal", "message": "no"}},
		{"id": "ask", "action": {"type": "fail", "class": "needs_user", "message": "which?", "prompt": "Pick one"}},
		{"id": "replan", "action": {"type": "fail", "class": "replan", "steps": [
			{"id": "r1", "action": {"type": "worker", "queue": "gpu"}, "requires": {"capabilities": ["gpu"], "labels": {"zone": "a"}},
			 "resource_wait_seconds": 30, "timeout_seconds": 90,
			 "retry": {"max_attempts": 2, "backoff": "linear", "initial_delay_ms": 100, "classes": {"network": {"max_attempts": 4}}}},
			{"id": "r2", "action": {"type": "fail", "class": "replan", "steps": [{"id": "r3", "action": {"type": "pass"}}]}, "depends_on": ["r1"]}]}},
		{"id": "http", "action": {"type": "http", "url": "https://example.com/x"}},
		{"id": "worker", "action": {"type": "worker", "queue": "gpu", "lease_seconds": 120}},
		{"id": "gate", "action": {"type": "approval", "timeout_seconds": 60}},
		{"id": "wait", "action": {"type": "wait", "signal": "go", "timeout_seconds": 60}},
		{"id": "lambda", "action": {"type": "lambda", "function": "fn", "qualifier": "live"}}]}`))
	require.NoError(t, err)
	j, err := domain.NewJob("tenant-a", "01JACTIONS0000000000000000", spec, "", goldenT0)
	require.NoError(t, err)
	raw, err := encodeDocument(j)
	require.NoError(t, err)

	var stored struct {
		Steps []struct {
			Spec struct {
				Action json.RawMessage `json:"action"`
			} `json:"spec"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(raw, &stored))
	require.Len(t, stored.Steps, len(j.Steps))
	set := map[string]bool{}
	for i, s := range j.Steps {
		before, err := json.Marshal(stepSpecDocV2Of(s.Spec).Action)
		require.NoError(t, err)
		require.Equal(t, string(before), string(stored.Steps[i].Spec.Action), s.ID())
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(before, &fields))
		for f := range fields {
			set[f] = true
		}
	}
	for _, p := range ownJSONFields(reflect.TypeFor[actionDocV2]()) {
		require.True(t, set[p], "no action above sets %s", p)
	}

	got, err := decodeDocument(raw, documentVersion, true)
	require.NoError(t, err)
	require.Equal(t, j, got)
}

// ownJSONFields names the JSON fields of struct t.
func ownJSONFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if t.Field(i).IsExported() && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
