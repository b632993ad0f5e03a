package httpapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
	"github.com/stepflow/stepflow/shared/domain"
)

// actionSchemas is what api/openapi.yaml says of actions.
type actionSchemas struct {
	Components struct {
		Schemas map[string]struct {
			Enum  []string `json:"enum"`
			OneOf []struct {
				Ref string `json:"$ref"`
			} `json:"oneOf"`
			Discriminator struct {
				PropertyName string            `json:"propertyName"`
				Mapping      map[string]string `json:"mapping"`
			} `json:"discriminator"`
			Required   []string `json:"required"`
			Properties map[string]struct {
				Const string `json:"const"`
			} `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

const schemaRef = "#/components/schemas/"

// undescribed answers why the document does not describe the action types
// kinds exactly: each in the ActionType enum, and under Action's oneOf and
// discriminator by a schema with its type as a const and exactly its
// parameters; nothing more.
func undescribed(doc actionSchemas, kinds []domain.ActionKind) error {
	schemas := doc.Components.Schemas
	action := schemas["Action"]
	if action.Discriminator.PropertyName != "type" {
		return fmt.Errorf("components.schemas.Action: discriminator.propertyName is %q, not type", action.Discriminator.PropertyName)
	}
	var names, refs []string
	for _, o := range action.OneOf {
		refs = append(refs, o.Ref)
	}
	for _, k := range kinds {
		name := k.Name()
		names = append(names, name)
		if !slices.Contains(schemas["ActionType"].Enum, name) {
			return fmt.Errorf("action type %q: not in components.schemas.ActionType.enum", name)
		}
		ref, ok := action.Discriminator.Mapping[name]
		if !ok {
			return fmt.Errorf("action type %q: components.schemas.Action.discriminator.mapping names no schema for it", name)
		}
		if !slices.Contains(refs, ref) {
			return fmt.Errorf("action type %q: components.schemas.Action.oneOf lacks %s", name, ref)
		}
		s, ok := schemas[ref[len(schemaRef):]]
		if !ok {
			return fmt.Errorf("action type %q: %s is no schema", name, ref)
		}
		if s.Properties["type"].Const != name || !slices.Contains(s.Required, "type") {
			return fmt.Errorf("action type %q: %s must require type, a const %q", name, ref, name)
		}
		want := append([]string{"type"}, domain.ActionParams(k)...)
		if got := slices.Sorted(maps.Keys(s.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			return fmt.Errorf("action type %q: %s describes %v, but the type takes %v", name, ref, got, want)
		}
	}
	for name := range action.Discriminator.Mapping {
		if !slices.Contains(names, name) {
			return fmt.Errorf("components.schemas.Action.discriminator.mapping names %q, which is no action type", name)
		}
	}
	if len(refs) != len(kinds) {
		return fmt.Errorf("components.schemas.Action.oneOf has %d schemas for %d action types", len(refs), len(kinds))
	}
	return nil
}

func loadActionSchemas(t *testing.T) actionSchemas {
	t.Helper()
	raw, err := api.JSON()
	require.NoError(t, err)
	var doc actionSchemas
	require.NoError(t, json.Unmarshal(raw, &doc))
	return doc
}

// Every registered action type is described in the document, in the
// enum and by a schema of exactly its parameters.
func TestOpenAPIDescribesEveryActionType(t *testing.T) {
	t.Parallel()
	require.NoError(t, undescribed(loadActionSchemas(t), domain.ActionKinds()))
}

// undescribedAction is an action type registered without a schema.
type undescribedAction struct{}

func (undescribedAction) Name() string                                          { return "undescribed" }
func (undescribedAction) Executor() domain.Executor                             { return domain.ExecutorBuiltIn }
func (undescribedAction) Validate(*domain.ActionSpec, domain.ActionCheck) error { return nil }

// A type registered and not described fails the test above.
func TestOpenAPIMissingActionSchemaIsCaught(t *testing.T) {
	t.Parallel()
	doc := loadActionSchemas(t)
	kinds := append(domain.ActionKinds(), undescribedAction{})
	require.EqualError(t, undescribed(doc, kinds), `action type "undescribed": not in components.schemas.ActionType.enum`)

	// In the enum, but with no schema.
	at := doc.Components.Schemas["ActionType"]
	at.Enum = append(at.Enum, "undescribed")
	doc.Components.Schemas["ActionType"] = at
	require.EqualError(t, undescribed(doc, kinds), `action type "undescribed": components.schemas.Action.discriminator.mapping names no schema for it`)

	// A schema that leaves out a parameter its type takes.
	delete(doc.Components.Schemas["WaitAction"].Properties, "signal")
	require.EqualError(t, undescribed(doc, domain.ActionKinds()),
		`action type "wait": #/components/schemas/WaitAction describes [timeout_seconds type], but the type takes [type signal timeout_seconds]`)
}
