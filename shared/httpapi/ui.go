package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/webui"
)

// uiPolicy lets the page load its own scripts, styles and images and call
// its own origin, and nothing else: no inline script, no third party, no
// framing.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiFile is a UI file as a route answers it; respond writes it as it is
// rather than as JSON.
type uiFile struct{ webui.File }

func (a *API) uiPage(_ context.Context, _ string, r *request) (int, any, error) {
	return serveFile(r, webui.Page())
}

func (a *API) uiAsset(_ context.Context, _ string, r *request) (int, any, error) {
	name := r.ev.PathParameters["asset"]
	f, ok := webui.Asset(name)
	if !ok {
		return 0, nil, &domain.Error{Code: domain.CodeNotFound, Message: fmt.Sprintf("no UI file %.70q", name)}
	}
	return serveFile(r, f)
}

// serveFile answers f, or 304 when the browser holds this version: the
// files change with a deploy under the same names, so browsers revalidate
// each time (no-cache) and mostly hear 304.
func serveFile(r *request, f webui.File) (int, any, error) {
	r.setHeader("etag", f.ETag)
	r.setHeader("cache-control", "no-cache")
	r.setHeader("x-content-type-options", "nosniff")
	r.setHeader("referrer-policy", "no-referrer")
	if f.Name == webui.Page().Name {
		r.setHeader("content-security-policy", uiPolicy)
	}
	for _, tag := range strings.Split(r.header("If-None-Match"), ",") {
		if t := strings.TrimSpace(tag); t == f.ETag || t == "W/"+f.ETag || t == "*" {
			return http.StatusNotModified, uiFile{}, nil
		}
	}
	return http.StatusOK, uiFile{f}, nil
}

func (f uiFile) response(status int, headers map[string]string) events.APIGatewayV2HTTPResponse {
	h := map[string]string{}
	for k, v := range headers {
		h[k] = v
	}
	if f.ContentType != "" {
		h["content-type"] = f.ContentType
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: h, Body: string(f.Body)}
}
