package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// MaxBatchBodyBytes bounds POST /v1/jobs/batch's body: the bound of one
// job's spec (domain.MaxJobSpecBytes), so any job POST /v1/jobs takes may
// also come in a batch, and one batch carries no more than one request
// may. Its answer carries each job back, each cut to its id and state
// when the whole would not fit Lambda's response (brief).
const MaxBatchBodyBytes = domain.MaxJobSpecBytes

// BatchAnswer answers POST /v1/jobs/batch: one item per job asked for, in
// request order.
type BatchAnswer struct {
	Jobs []BatchItem `json:"jobs"`
}

// BatchItem is one job's answer in a batch: the status POST /v1/jobs
// would have answered it (201 created, 200 an idempotent repeat, 4xx/5xx
// refused) with the job, or with the error.
type BatchItem struct {
	Index  int          `json:"index"`
	Status int          `json:"status"`
	Job    any          `json:"job,omitempty"`
	Error  *ErrorDetail `json:"error,omitempty"`
}

// brief is a job as a batch answers it when its whole views would not fit
// Lambda's response (replays of jobs with large outputs): enough to fetch
// each one.
type brief struct {
	ID      string          `json:"id"`
	State   domain.JobState `json:"state"`
	Partial bool            `json:"partial"`
}

// submitBatch answers POST /v1/jobs/batch: {"jobs": [job, ...]}, each job
// the body POST /v1/jobs takes with its own "idempotency_key". Each is
// submitted on its own (a refused one writes nothing and stops no other),
// and the accepted ones' first steps are sent together. The answer is 200
// with one item per job, as SQS's and Step Functions' batch calls answer;
// only a request that is not a batch at all is refused whole, before any
// write.
func (a *API) submitBatch(ctx context.Context, tenant string, r *request) (int, any, error) {
	if r.header("Idempotency-Key") != "" {
		return 0, nil, domain.Invalid("Idempotency-Key", "is not taken by a batch; give each job its own idempotency_key")
	}
	b, err := r.body()
	if err != nil {
		return 0, nil, err
	}
	if len(b) > MaxBatchBodyBytes {
		return 0, nil, &domain.Error{Code: domain.CodeTooLarge, Message: fmt.Sprintf("body is %d bytes; the limit is %d", len(b), MaxBatchBodyBytes)}
	}
	var body struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := domain.DecodeStrict(b, &body); err != nil {
		return 0, nil, err
	}
	if len(body.Jobs) == 0 || len(body.Jobs) > engine.MaxBatchJobs {
		return 0, nil, domain.Invalid("jobs", "holds %d jobs; a batch takes 1 to %d", len(body.Jobs), engine.MaxBatchJobs)
	}
	if err := a.Engine.CheckDailyBudget(ctx, tenant); err != nil {
		return 0, nil, err // the whole request: 402
	}
	answer := BatchAnswer{Jobs: make([]BatchItem, len(body.Jobs))}
	var items []engine.BatchItem
	var at []int // the index of each item sent to the engine
	for i, raw := range body.Jobs {
		job, key, err := cutIdempotencyKey(raw)
		if err != nil {
			answer.Jobs[i] = a.batchError(r, i, err)
			continue
		}
		items = append(items, engine.BatchItem{Body: job, IdemKey: key})
		at = append(at, i)
	}
	for n, res := range a.Engine.SubmitBatch(ctx, tenant, items) {
		i := at[n]
		switch {
		case res.Err != nil:
			answer.Jobs[i] = a.batchError(r, i, res.Err)
		case res.Created:
			answer.Jobs[i] = BatchItem{Index: i, Status: http.StatusCreated, Job: jobView(res.Job)}
		default:
			answer.Jobs[i] = BatchItem{Index: i, Status: http.StatusOK, Job: jobView(res.Job)}
		}
	}
	if b, err := json.Marshal(answer); err == nil && !fitsResponse(b) {
		for i, it := range answer.Jobs {
			if v, ok := it.Job.(JobView); ok {
				answer.Jobs[i].Job = brief{ID: v.ID, State: v.State, Partial: true}
			}
		}
	}
	return http.StatusOK, answer, nil
}

// batchError is item i's answer for err, its field named within the
// batch (jobs[3].steps[0].id).
func (a *API) batchError(r *request, i int, err error) BatchItem {
	status, detail := a.errorDetail(r.ev, withinBatch(err, fmt.Sprintf("jobs[%d]", i)))
	return BatchItem{Index: i, Status: status, Error: &detail}
}

// withinBatch names err's field within a batch's item (jobs[3] and its
// steps[0].id make jobs[3].steps[0].id).
func withinBatch(err error, item string) error {
	var de *domain.Error
	if errors.As(err, &de) && de.Code != domain.CodeInternal {
		field := item
		if de.Field != "" && de.Field != "body" {
			field += "." + de.Field
		}
		err = &domain.Error{Code: de.Code, Field: field, Message: de.Message, RetryAfter: de.RetryAfter}
	}
	return err
}

// cutIdempotencyKey answers a batch's item without its idempotency_key
// member, and the key: the rest is the job's body as POST /v1/jobs takes
// it, byte for byte, so a key used on both routes with the same job is
// one submission.
func cutIdempotencyKey(item json.RawMessage) (json.RawMessage, string, error) {
	trimmed := bytes.TrimSpace(item)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, "", domain.Invalid("", "must be a JSON object (a job, as POST /v1/jobs takes it)")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // {
		return nil, "", domain.Invalid("", "is not valid JSON")
	}
	for first := true; dec.More(); first = false {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, "", domain.Invalid("", "is not valid JSON")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, "", domain.Invalid("", "is not valid JSON")
		}
		if tok != engine.BatchKeyField {
			continue
		}
		var key string
		if err := json.Unmarshal(value, &key); err != nil {
			return nil, "", domain.Invalid(engine.BatchKeyField, "must be a string")
		}
		end := dec.InputOffset()
		rest := append([]byte{}, trimmed[:start]...)
		tail := trimmed[end:]
		if first {
			// The member was first: the comma after it goes instead of the
			// one before it.
			t := bytes.TrimLeft(tail, " \t\r\n")
			if len(t) > 0 && t[0] == ',' {
				tail = t[1:]
			}
		}
		rest = append(rest, tail...)
		return rest, key, checkCut(rest)
	}
	return trimmed, "", nil
}

// checkCut makes sure a cut left one JSON value (a repeated member, which
// the job's own decoding refuses, may have been cut instead).
func checkCut(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return domain.Invalid("", "is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return domain.Invalid("", "is not valid JSON")
	}
	return nil
}
