package domain

import "net/url"

// ActionHTTP POSTs the step's input to a URL (shared/actions runs it).
const ActionHTTP = "http"

// HTTPAction is the http action type's parameters.
type HTTPAction struct {
	URL string `json:"url,omitempty"`
}

func (HTTPAction) Name() string       { return ActionHTTP }
func (HTTPAction) Executor() Executor { return ExecutorBuiltIn }

func (HTTPAction) Validate(a *ActionSpec, c ActionCheck) error {
	u, err := url.Parse(a.URL)
	if a.URL == "" {
		return Invalid(c.Field+".url", "is required for action type http")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Invalid(c.Field+".url", "must be an absolute http or https URL")
	}
	return nil
}
