// Package api holds stepflow's HTTP API description, api/openapi.yaml
// (OpenAPI 3.1), the one document the API is served, validated and
// documented from: GET /v1/openapi.json answers it as JSON, the stack tests
// check real answers against it, and docs/api.md is generated from it.
package api

//go:generate go run ./gendoc -o ../docs/api.md

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"
)

// YAML is api/openapi.yaml as written.
//
//go:embed openapi.yaml
var YAML []byte

var (
	jsonOnce sync.Once
	jsonDoc  []byte
	jsonErr  error
)

// JSON answers the document as JSON, converted once.
func JSON() ([]byte, error) {
	jsonOnce.Do(func() { jsonDoc, jsonErr = toJSON(YAML) })
	return jsonDoc, jsonErr
}

// toJSON converts a YAML document to JSON. Mapping keys are strings in
// JSON; YAML may read some as numbers or booleans ('200' unquoted), so
// every key is written as the text it was.
func toJSON(doc []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("parse openapi.yaml: %w", err)
	}
	v, err := plain(&root)
	if err != nil {
		return nil, fmt.Errorf("convert openapi.yaml: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode openapi.json: %w", err)
	}
	return out, nil
}

// plain answers n as the values encoding/json writes: maps keyed by the
// keys' text, slices, and scalars decoded by YAML's rules.
func plain(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: want one document", n.Line)
		}
		return plain(n.Content[0])
	case yaml.AliasNode:
		return plain(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q repeated", k.Line, k.Value)
			}
			pv, err := plain(v)
			if err != nil {
				return nil, err
			}
			m[k.Value] = pv
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			pc, err := plain(c)
			if err != nil {
				return nil, err
			}
			s = append(s, pc)
		}
		return s, nil
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	}
}
