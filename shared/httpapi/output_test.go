package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/httpapi"
)

// An output is answered in the body only when Lambda's response can carry
// it: the body is a string inside the function's JSON answer, so it is
// measured escaped.
func TestFitsResponseMeasuresTheBodyAsLambdaCarriesIt(t *testing.T) {
	t.Parallel()
	str := func(s string) json.RawMessage { return json.RawMessage(`"` + s + `"`) }
	plain := str(strings.Repeat("a", engine.MaxOutputBytes-2))
	require.True(t, httpapi.FitsResponse(plain), "the largest output of plain text fits")
	require.False(t, httpapi.FitsResponse(str(strings.Repeat("a", httpapi.MaxResponseBytes))))

	// Quotes are escaped once in the body and again in the response:
	// 4.5 MB of empty strings is 7.5 MB there.
	quotes := json.RawMessage(`[` + strings.Repeat(`"",`, 3<<19) + `""]`)
	require.Less(t, len(quotes), httpapi.MaxResponseBytes)
	require.False(t, httpapi.FitsResponse(quotes))
	// '<' becomes \u003c in the body, \\u003c in the response.
	angles := str(strings.Repeat("<", 1<<20))
	require.False(t, httpapi.FitsResponse(angles))
	require.True(t, httpapi.FitsResponse(str(strings.Repeat("<", 512<<10))))
}
