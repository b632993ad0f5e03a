package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/stepflow/stepflow/api"
)

// openapi answers the API's own description (api/openapi.yaml) as JSON.
func (a *API) openapi(context.Context, string, *request) (int, any, error) {
	doc, err := api.JSON()
	if err != nil {
		return 0, nil, fmt.Errorf("openapi document: %w", err)
	}
	return http.StatusOK, json.RawMessage(doc), nil
}
