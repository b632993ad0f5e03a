package domain

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A step's fingerprint changes with every field a store keeps that can
// change once the job is made: each leaf of a step filled in full, changed
// alone, changes it. A field added to Step (or to what it holds) that
// Fingerprint does not hash fails here.
func TestFingerprintCoversTheStep(t *testing.T) {
	t.Parallel()
	filled := func() *Step {
		var s Step
		fillLeaves(reflect.ValueOf(&s).Elem(), 0)
		return &s
	}
	base := filled().Fingerprint()
	require.Equal(t, base, filled().Fingerprint(), "the same step, the same fingerprint")
	leaves := countLeaves(reflect.ValueOf(filled()).Elem(), "")
	require.Greater(t, len(leaves), 40)
	for k, path := range leaves {
		s := filled()
		changeLeaf(reflect.ValueOf(s).Elem(), "", k)
		require.NotEqual(t, base, s.Fingerprint(), "changing %s leaves the fingerprint as it was", path)
	}
	// Nil and empty are stored differently (omitempty), so they differ.
	s := filled()
	s.Avoid = []string{}
	n := filled()
	n.Avoid = nil
	require.NotEqual(t, s.Fingerprint(), n.Fingerprint())
}

// fixedSpec: a spec's fields other than its id and DependsOn never change
// once the job is made, so Fingerprint leaves them out.
func fixedSpec(path string) bool {
	return len(path) > len(".Spec.") && path[:len(".Spec.")] == ".Spec." &&
		path != ".Spec.ID" && (len(path) < len(".Spec.DependsOn") || path[:len(".Spec.DependsOn")] != ".Spec.DependsOn")
}

func fillLeaves(v reflect.Value, depth int) {
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 11, 26, 9, depth, 0, 0, time.UTC)))
		return
	case v.Type() == reflect.TypeFor[json.RawMessage]():
		v.Set(reflect.ValueOf(json.RawMessage(`{"k":1}`)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fillLeaves(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 4 {
			return
		}
		sl := reflect.MakeSlice(v.Type(), 1, 1)
		fillLeaves(sl.Index(0), depth+1)
		v.Set(sl)
	case reflect.Map:
		if depth > 4 {
			return
		}
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillLeaves(k, depth+1)
		fillLeaves(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillLeaves(v.Field(i), depth)
			}
		}
	case reflect.Interface:
	}
}

// countLeaves answers the paths of the leaves of v that can change, in
// the order changeLeaf numbers them.
func countLeaves(v reflect.Value, path string) []string {
	var out []string
	walkLeaves(v, path, func(p string, _ reflect.Value) bool { out = append(out, p); return false })
	return out
}

// changeLeaf changes the k-th leaf of v.
func changeLeaf(v reflect.Value, path string, k int) {
	n := 0
	walkLeaves(v, path, func(_ string, leaf reflect.Value) bool {
		if n == k {
			switch {
			case leaf.Type() == reflect.TypeFor[time.Time]():
				leaf.Set(reflect.ValueOf(leaf.Interface().(time.Time).Add(time.Nanosecond)))
			case leaf.Type() == reflect.TypeFor[json.RawMessage]():
				leaf.Set(reflect.ValueOf(json.RawMessage(`{"k":2}`)))
			case leaf.Kind() == reflect.String:
				leaf.SetString(leaf.String() + "y")
			case leaf.Kind() == reflect.Int || leaf.Kind() == reflect.Int64:
				leaf.SetInt(leaf.Int() + 1)
			case leaf.Kind() == reflect.Bool:
				leaf.SetBool(!leaf.Bool())
			case leaf.Kind() == reflect.Pointer || leaf.Kind() == reflect.Slice:
				leaf.Set(reflect.Zero(leaf.Type())) // present to absent
			}
			return true
		}
		n++
		return false
	})
}

// walkLeaves calls f on each changeable leaf of v (a value, and each
// pointer or slice itself, whose absence is a change too) until f
// answers true.
func walkLeaves(v reflect.Value, path string, f func(string, reflect.Value) bool) bool {
	if fixedSpec(path) {
		return false
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Time](), v.Type() == reflect.TypeFor[json.RawMessage]():
		return f(path, v)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if f(path, v) {
			return true
		}
		if !v.IsNil() {
			return walkLeaves(v.Elem(), path, f)
		}
	case reflect.Slice:
		if f(path, v) {
			return true
		}
		for i := range v.Len() {
			if walkLeaves(v.Index(i), path+"[]", f) {
				return true
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && walkLeaves(v.Field(i), path+"."+v.Type().Field(i).Name, f) {
				return true
			}
		}
	case reflect.String, reflect.Int, reflect.Int64, reflect.Bool:
		return f(path, v)
	}
	return false
}
