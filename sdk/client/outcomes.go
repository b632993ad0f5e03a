package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// MaxBatchOutcomes is the most outcomes one ReportOutcomes takes (POST
// /v1/leases/batch).
const MaxBatchOutcomes = 25

// LeaseOutcome is one lease's outcome for ReportOutcomes: a success with
// Output, or, when Failure is set, that failure. Cost is what the attempt
// spent itself, with either (when nil, a Failure's own Cost is sent).
type LeaseOutcome struct {
	LeaseID string
	Output  any
	Failure *Failure
	Cost    *ReportedCost
}

// OutcomeAnswer is one outcome's answer in a batch, in the order
// reported: where its step and job went, or Err.
type OutcomeAnswer struct {
	Result *OutcomeResult
	// Err is why this outcome was refused (lease_lost, not_found, a bad
	// class naming outcomes[2].class), as Complete or Fail would have
	// answered it; the others are not affected.
	Err *Error
}

// ReportOutcomes records up to MaxBatchOutcomes outcomes in one request,
// each as Complete or Fail would record it: a worker finishing many tasks
// pays one request for them. The error is for the request as a whole
// (none sent, refused whole, or no answer); a repeat of a recorded
// outcome is answered again, so a retried request is safe.
func (c *Client) ReportOutcomes(ctx context.Context, outcomes []LeaseOutcome) ([]OutcomeAnswer, error) {
	if len(outcomes) == 0 || len(outcomes) > MaxBatchOutcomes {
		return nil, fmt.Errorf("stepflow: a batch takes 1 to %d outcomes, not %d", MaxBatchOutcomes, len(outcomes))
	}
	items := make([]map[string]any, len(outcomes))
	for i, o := range outcomes {
		item := map[string]any{"lease_id": o.LeaseID}
		cost := o.Cost
		if cost == nil && o.Failure != nil {
			cost = o.Failure.Cost
		}
		if cost != nil {
			item["cost"] = cost
		}
		if f := o.Failure; f != nil {
			item["class"] = f.Class
			if f.Message != "" {
				item["message"] = f.Message
			}
			if f.RetryAfterSeconds != 0 {
				item["retry_after_seconds"] = f.RetryAfterSeconds
			}
			if f.Prompt != "" {
				item["prompt"] = f.Prompt
			}
			if f.Steps != nil {
				item["steps"] = f.Steps
			}
		} else {
			item["output"] = o.Output
		}
		items[i] = item
	}
	var answer struct {
		Outcomes []struct {
			Index  int             `json:"index"`
			Status int             `json:"status"`
			Result *OutcomeResult  `json:"result"`
			Error  json.RawMessage `json:"error"`
		} `json:"outcomes"`
	}
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/leases/batch", body: map[string]any{"outcomes": items}, out: &answer}); err != nil {
		return nil, err
	}
	if len(answer.Outcomes) != len(outcomes) {
		return nil, fmt.Errorf("stepflow: the batch answered %d outcomes for %d", len(answer.Outcomes), len(outcomes))
	}
	out := make([]OutcomeAnswer, len(outcomes))
	for _, it := range answer.Outcomes {
		if it.Index < 0 || it.Index >= len(out) {
			return nil, fmt.Errorf("stepflow: the batch answered outcome %d of %d", it.Index, len(outcomes))
		}
		if len(it.Error) > 0 {
			var e struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Field   string `json:"field"`
			}
			if err := json.Unmarshal(it.Error, &e); err != nil {
				return nil, fmt.Errorf("stepflow: decode outcome %d of the batch: %w", it.Index, err)
			}
			out[it.Index].Err = &Error{Status: it.Status, Code: e.Code, Message: e.Message, Field: e.Field}
			continue
		}
		out[it.Index].Result = it.Result
	}
	return out, nil
}
