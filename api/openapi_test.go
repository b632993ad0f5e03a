package api_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
)

// The served description meets the OpenAPI Initiative's own JSON Schema
// for OpenAPI 3.1, in the version strict tools such as swagger-parser
// bundle and in the current one (testdata/README.md), checked by a
// validator independent of libopenapi (shared/httpapi's test).
func TestDocumentMeetsTheOfficialSchemas(t *testing.T) {
	t.Parallel()
	raw, err := api.JSON() // what GET /v1/openapi.json answers
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	for _, version := range []string{"2021-09-28", "2022-10-07"} {
		f, err := os.Open(filepath.Join("testdata", "oas-3.1-schema-"+version+".json"))
		require.NoError(t, err)
		schemaDoc, err := jsonschema.UnmarshalJSON(f)
		_ = f.Close()
		require.NoError(t, err)
		id := "https://spec.openapis.org/oas/3.1/schema/" + version
		c := jsonschema.NewCompiler()
		c.AssertFormat() // a uri must be a URI, an email an email: as strict as they come
		require.NoError(t, c.AddResource(id, schemaDoc))
		schema, err := c.Compile(id)
		require.NoError(t, err, version)
		require.NoError(t, schema.Validate(doc), "the description fails the OpenAPI 3.1 schema %s", version)
	}
}
