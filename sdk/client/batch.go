package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// MaxBatchJobs is the most jobs one SubmitBatch takes (POST
// /v1/jobs/batch).
const MaxBatchJobs = 25

// BatchJob is one job of a SubmitBatch.
type BatchJob struct {
	JobRequest
	// IdempotencyKey is the job's key, as WithIdempotencyKey is Submit's
	// (and the same key: a job submitted under it either way is answered
	// again). Empty, SubmitBatch makes one for the job, so the batch's
	// own retries never submit it twice.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// BatchResult is one job's answer in a batch, in the order submitted:
// its job (Job.Replayed for a repeat of its key), or Err.
type BatchResult struct {
	Job *Job
	// Err is why this job was refused; its Field names the job
	// (jobs[3].steps[0].id). The other jobs of the batch are not affected.
	Err *Error
	// IdempotencyKey is the key the job went under, given or made.
	IdempotencyKey string
}

// SubmitBatch submits up to MaxBatchJobs jobs in one request. Each job is
// submitted on its own: one refused (BatchResult.Err) writes nothing and
// does not stop the others. The error is for the request as a whole
// (none sent, refused whole, or no answer); a retried request repeats
// each job's idempotency key, so it never submits a job twice.
func (c *Client) SubmitBatch(ctx context.Context, jobs []BatchJob) ([]BatchResult, error) {
	bodies := make([]json.RawMessage, len(jobs))
	for i, j := range jobs {
		if j.IdempotencyKey == "" {
			j.IdempotencyKey = newToken("sdk-")
		}
		b, err := json.Marshal(j)
		if err != nil {
			return nil, fmt.Errorf("stepflow: encode job %d: %w", i, err)
		}
		bodies[i] = b
	}
	return c.SubmitBatchJSON(ctx, bodies)
}

// SubmitBatchJSON is SubmitBatch of job bodies as they are (JSON objects,
// e.g. read from files), each as POST /v1/jobs takes it, optionally with
// its "idempotency_key"; a body without one is given one.
func (c *Client) SubmitBatchJSON(ctx context.Context, bodies []json.RawMessage) ([]BatchResult, error) {
	if len(bodies) == 0 || len(bodies) > MaxBatchJobs {
		return nil, fmt.Errorf("stepflow: a batch takes 1 to %d jobs, not %d", MaxBatchJobs, len(bodies))
	}
	keyed := make([]json.RawMessage, len(bodies))
	keys := make([]string, len(bodies))
	for i, b := range bodies {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(b, &members); err != nil || members == nil {
			return nil, fmt.Errorf("stepflow: job %d is not a JSON object", i)
		}
		if k, ok := members["idempotency_key"]; ok {
			_ = json.Unmarshal(k, &keys[i]) // a key that is no string is the API's to refuse
			keyed[i] = b
			continue
		}
		keys[i] = newToken("sdk-")
		keyed[i] = withKey(b, keys[i])
	}
	var answer struct {
		Jobs []struct {
			Index  int             `json:"index"`
			Status int             `json:"status"`
			Job    json.RawMessage `json:"job"`
			Error  *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Field   string `json:"field"`
			} `json:"error"`
		} `json:"jobs"`
	}
	body := map[string][]json.RawMessage{"jobs": keyed}
	if _, _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/jobs/batch", body: body, out: &answer}); err != nil {
		return nil, err
	}
	if len(answer.Jobs) != len(bodies) {
		return nil, fmt.Errorf("stepflow: the batch answered %d jobs for %d", len(answer.Jobs), len(bodies))
	}
	out := make([]BatchResult, len(bodies))
	for _, it := range answer.Jobs {
		if it.Index < 0 || it.Index >= len(out) {
			return nil, fmt.Errorf("stepflow: the batch answered job %d of %d", it.Index, len(bodies))
		}
		r := BatchResult{IdempotencyKey: keys[it.Index]}
		switch {
		case it.Error != nil:
			r.Err = &Error{Status: it.Status, Code: it.Error.Code, Message: it.Error.Message, Field: it.Error.Field}
		case len(it.Job) > 0:
			var j Job
			if err := json.Unmarshal(it.Job, &j); err != nil {
				return nil, fmt.Errorf("stepflow: decode job %d of the batch: %w", it.Index, err)
			}
			j.Replayed = it.Status == http.StatusOK
			r.Job = &j
		}
		out[it.Index] = r
	}
	return out, nil
}

// withKey answers a JSON object with an idempotency_key member first.
func withKey(obj json.RawMessage, key string) json.RawMessage {
	k, _ := json.Marshal(key)
	rest := bytes.TrimSpace(obj)[1:] // after '{'
	sep := ","
	if len(bytes.TrimSpace(rest)) == 1 { // "}": no other member
		sep = ""
	}
	return json.RawMessage(`{"idempotency_key":` + string(k) + sep + string(rest))
}
