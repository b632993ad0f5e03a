package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// The web UI's page and files load without a key, through the routes
// template.yaml gives API Gateway; the API's own routes still need one.
func TestUIIsServedWithoutAKey(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)

	res, body := call(t, h, http.MethodGet, "/ui", "", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Contains(t, string(body), `src="ui/app.js"`)

	res, _ = call(t, h, http.MethodGet, "/ui", "Bearer not-a-key", "")
	require.Equal(t, http.StatusOK, res.StatusCode, "a key, even a wrong one, is not looked at")

	res, body = call(t, h, http.MethodGet, "/ui/app.js", "", "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/javascript; charset=utf-8", res.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	require.Contains(t, string(body), "import ")
	etag := res.Header.Get("ETag")
	require.NotEmpty(t, etag)

	res, body = call(t, h, http.MethodGet, "/ui/app.js", "", "", "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, res.StatusCode)
	require.Empty(t, body)
	res, _ = call(t, h, http.MethodGet, "/ui/app.js", "", "", "If-None-Match", `"0000000000000000"`)
	require.Equal(t, http.StatusOK, res.StatusCode, "another version is sent whole")

	for _, path := range []string{"/ui/nope.js", "/ui/index.html", "/ui/", "/ui/static/app.js"} {
		res, body = call(t, h, http.MethodGet, path, "", "")
		requireError(t, res.StatusCode, body, http.StatusNotFound, domain.CodeNotFound, "")
	}
	res, body = call(t, h, http.MethodPost, "/ui", "", "")
	requireError(t, res.StatusCode, body, http.StatusMethodNotAllowed, domain.CodeMethodNotAllowed, "")

	res, body = call(t, h, http.MethodGet, "/v1/jobs", "", "")
	requireError(t, res.StatusCode, body, http.StatusUnauthorized, domain.CodeUnauthorized, "")
}
