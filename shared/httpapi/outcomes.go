package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
	"github.com/stepflow/stepflow/shared/wire"
)

// OutcomesAnswer answers POST /v1/leases/batch: one item per outcome, in
// request order.
type OutcomesAnswer struct {
	Outcomes []OutcomeItem `json:"outcomes"`
}

// OutcomeItem is one outcome's answer in a batch: the status /complete or
// /fail would have answered it with, and where the step and job went, or
// the error.
type OutcomeItem struct {
	Index  int                 `json:"index"`
	Status int                 `json:"status"`
	Result *wire.OutcomeResult `json:"result,omitempty"`
	Error  *ErrorDetail        `json:"error,omitempty"`
}

// outcomes records up to MaxBatchOutcomes workers' outcomes in one
// request (engine.Outcomes). Only a request that is no batch at all is
// refused whole; an item refused (a lost lease, a bad class) is answered
// on its own, its field named within the batch (outcomes[2].class).
func (a *API) outcomes(ctx context.Context, tenant string, r *request) (int, any, error) {
	var body struct {
		Outcomes []json.RawMessage `json:"outcomes"`
	}
	if err := r.decodeUpTo(&body, MaxBatchBodyBytes); err != nil {
		return 0, nil, err
	}
	if len(body.Outcomes) == 0 || len(body.Outcomes) > engine.MaxBatchOutcomes {
		return 0, nil, domain.Invalid("outcomes", "holds %d outcomes; a batch takes 1 to %d", len(body.Outcomes), engine.MaxBatchOutcomes)
	}
	answer := OutcomesAnswer{Outcomes: make([]OutcomeItem, len(body.Outcomes))}
	var batch []engine.LeaseOutcome
	var at []int // the index of each item sent to the engine
	for i, raw := range body.Outcomes {
		o, err := leaseOutcome(raw)
		if err != nil {
			answer.Outcomes[i] = a.outcomeError(r, i, err)
			continue
		}
		batch = append(batch, o)
		at = append(at, i)
	}
	for n, res := range a.Engine.Outcomes(ctx, tenant, batch) {
		i := at[n]
		if res.Err != nil {
			answer.Outcomes[i] = a.outcomeError(r, i, res.Err)
			continue
		}
		w := outcomeResult(res.Result)
		answer.Outcomes[i] = OutcomeItem{Index: i, Status: http.StatusOK, Result: &w}
	}
	return http.StatusOK, answer, nil
}

// leaseOutcome reads one item of a batch: a success when it has no class,
// a failure when it has one.
func leaseOutcome(raw json.RawMessage) (engine.LeaseOutcome, error) {
	var w wire.LeaseOutcome
	if err := domain.DecodeStrict(raw, &w); err != nil {
		return engine.LeaseOutcome{}, err
	}
	if w.LeaseID == "" {
		return engine.LeaseOutcome{}, domain.Invalid("lease_id", "is required: the lease_id a claim answered")
	}
	if w.Class == "" {
		if w.Message != "" || w.RetryAfterSeconds != 0 || w.Prompt != "" || w.Steps != nil {
			return engine.LeaseOutcome{}, domain.Invalid("class", "is required for a failure (message, retry_after_seconds, prompt and steps are a failure's); a success takes only output")
		}
		return engine.LeaseOutcome{LeaseID: w.LeaseID, Output: w.Output, CostUSD: w.Cost.Dollars()}, nil
	}
	if len(w.Output) > 0 {
		return engine.LeaseOutcome{}, domain.Invalid("output", "belongs to a success; a failure (with class) takes none")
	}
	f := failure(w.Outcome)
	return engine.LeaseOutcome{LeaseID: w.LeaseID, Failure: &f}, nil
}

// outcomeError is item i's answer for err, its field named within the
// batch.
func (a *API) outcomeError(r *request, i int, err error) OutcomeItem {
	status, detail := a.errorDetail(r.ev, withinBatch(err, fmt.Sprintf("outcomes[%d]", i)))
	return OutcomeItem{Index: i, Status: status, Error: &detail}
}
