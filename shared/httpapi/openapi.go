package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/stepflow/stepflow/api"
)

// openapiPath is the route's path, which the document's own URL ends with.
const openapiPath = "/v1/openapi.json"

// openapi answers the API's own description (api/openapi.yaml) as JSON,
// its servers naming the address it was fetched from, so a client
// generated from it or a viewer's "try it" reaches this API rather than
// the document's placeholder.
func (a *API) openapi(_ context.Context, _ string, req *request) (int, any, error) {
	doc, err := api.JSON()
	if err != nil {
		return 0, nil, fmt.Errorf("openapi document: %w", err)
	}
	base, ok := req.servedAt(openapiPath)
	if !ok {
		return http.StatusOK, json.RawMessage(doc), nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return 0, nil, fmt.Errorf("openapi document: %w", err)
	}
	servers, err := json.Marshal([]map[string]string{{"url": base, "description": "where this document was served"}})
	if err != nil {
		return 0, nil, fmt.Errorf("openapi servers: %w", err)
	}
	top["servers"] = servers
	return http.StatusOK, top, nil
}

// servedAt answers the base URL the client reached this API at, from the
// request to route (a path of the API): the scheme API Gateway forwards
// (X-Forwarded-Proto; it serves only HTTPS), the domain it was reached
// on, and whatever precedes the route's path in the raw path. On a
// payload 2.0 event that prefix is a named stage's segment or a custom
// domain's base path, exactly as the client sent them; the $default stage
// and a custom domain's root add none. It answers false when the request
// names no usable host.
func (r *request) servedAt(route string) (string, bool) {
	scheme := "https"
	if p, _, _ := strings.Cut(r.header("x-forwarded-proto"), ","); strings.EqualFold(strings.TrimSpace(p), "http") {
		scheme = "http"
	}
	host := r.ev.RequestContext.DomainName
	if host == "" {
		host = r.header("host")
	}
	prefix, ok := strings.CutSuffix(r.ev.RawPath, route)
	if !ok {
		prefix = ""
	}
	if host == "" || prefix != "" && !strings.HasPrefix(prefix, "/") {
		return "", false
	}
	base := scheme + "://" + host + prefix
	// A host or prefix that does not read back as itself (a space, a
	// userinfo, a query) is not an address to hand a client.
	u, err := url.Parse(base)
	if err != nil || u.Host != host || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.EscapedPath() != prefix {
		return "", false
	}
	return base, true
}
