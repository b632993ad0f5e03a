package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/httpapi"
)

type outcomesAnswer struct {
	Outcomes []struct {
		Index  int `json:"index"`
		Status int `json:"status"`
		Result *struct {
			JobID     string          `json:"job_id"`
			StepID    string          `json:"step_id"`
			StepState string          `json:"step_state"`
			JobState  domain.JobState `json:"job_state"`
		} `json:"result"`
		Error *batchItemError `json:"error"`
	} `json:"outcomes"`
}

// POST /v1/leases/batch answers each outcome as /complete or /fail would:
// recorded ones 200 with where the job went, a bad one its error naming
// the item's field, another tenant's lease 404; a refused item stops no
// other and changes nothing.
func TestOutcomesBatchAnswersEachOutcome(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	const worker = `{"steps":[{"id":"w","action":{"type":"worker","queue":"q","lease_seconds":60}}]}`
	var jobs []string
	for range 3 {
		jobs = append(jobs, h.Submit(t, stacktest.KeyA, worker).ID)
	}
	other := h.Submit(t, stacktest.KeyB, worker)
	var a, b struct{ Leases []claimed }
	h.JSON(t, http.StatusOK, "POST", "/v1/claim", stacktest.KeyA, `{"queue":"q","max":10,"wait_seconds":1}`, &a)
	require.Len(t, a.Leases, 3)
	h.JSON(t, http.StatusOK, "POST", "/v1/claim", stacktest.KeyB, `{"queue":"q","max":10,"wait_seconds":1}`, &b)
	require.Len(t, b.Leases, 1)
	lease := map[string]string{}
	for _, l := range a.Leases {
		lease[l.JobID] = l.LeaseID
	}

	items := []string{
		`{"lease_id":"` + lease[jobs[0]] + `","output":{"n":0}}`,
		`{"lease_id":"` + lease[jobs[1]] + `","class":"fatal","message":"no"}`,
		`{"lease_id":"` + lease[jobs[2]] + `","class":"sideways"}`,
		`{"lease_id":"` + lease[jobs[2]] + `","output":1,"class":"fatal"}`,
		`{"lease_id":"` + lease[jobs[2]] + `","message":"a failure without its class"}`,
		`{"output":1}`,
		`{"lease_id":"` + lease[jobs[2]] + `","bogus":1}`,
		`{"lease_id":"` + b.Leases[0].LeaseID + `","output":1}`,
	}
	res, raw := call(t, h, "POST", "/v1/leases/batch", "Bearer "+stacktest.KeyA, `{"outcomes":[`+strings.Join(items, ",")+`]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	var got outcomesAnswer
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Outcomes, len(items))
	for i, it := range got.Outcomes {
		require.Equal(t, i, it.Index, "request order")
		require.True(t, (it.Result == nil) != (it.Error == nil), "item %d has a result or an error: %s", i, raw)
	}
	require.Equal(t, http.StatusOK, got.Outcomes[0].Status)
	require.Equal(t, domain.JobCompleted, got.Outcomes[0].Result.JobState)
	require.Equal(t, http.StatusOK, got.Outcomes[1].Status)
	require.Equal(t, domain.JobFailed, got.Outcomes[1].Result.JobState)
	for i, field := range map[int]string{2: "outcomes[2].class", 3: "outcomes[3].output", 4: "outcomes[4].class", 5: "outcomes[5].lease_id", 6: "outcomes[6].bogus"} {
		require.Equal(t, http.StatusBadRequest, got.Outcomes[i].Status, "item %d: %s", i, raw)
		require.Equal(t, field, got.Outcomes[i].Error.Field)
		require.True(t, strings.HasPrefix(got.Outcomes[i].Error.Message, field+": "), "the message names the field: %+v", got.Outcomes[i].Error)
	}
	require.Equal(t, http.StatusNotFound, got.Outcomes[7].Status, "another tenant's lease is not found")

	require.Equal(t, domain.JobCompleted, h.Get(t, stacktest.KeyA, jobs[0]).State)
	require.Equal(t, domain.JobFailed, h.Get(t, stacktest.KeyA, jobs[1]).State)
	require.Equal(t, domain.JobRunning, h.Get(t, stacktest.KeyA, jobs[2]).State, "refused outcomes changed nothing")
	require.Equal(t, domain.JobRunning, h.Get(t, stacktest.KeyB, other.ID).State, "another tenant's job is untouched")
}

// A batch that is no batch is refused whole, before any write.
func TestOutcomesBatchLimits(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	item := `{"lease_id":"x","output":1}`
	many := strings.Repeat(item+",", 25) + item
	for _, c := range []struct {
		body, field string
		status      int
		code        domain.Code
	}{
		{`{"outcomes":[` + many + `]}`, "outcomes", 400, domain.CodeInvalid},
		{`{"outcomes":[]}`, "outcomes", 400, domain.CodeInvalid},
		{`{}`, "outcomes", 400, domain.CodeInvalid},
		{`{"outcomes":[` + item + `],"x":1}`, "x", 400, domain.CodeInvalid},
		{``, "outcomes", 400, domain.CodeInvalid},
		{`{"outcomes":[{"lease_id":"x","output":"` + strings.Repeat("x", httpapi.MaxBatchBodyBytes) + `"}]}`, "", 413, domain.CodeTooLarge},
	} {
		res, raw := call(t, h, "POST", "/v1/leases/batch", "Bearer "+stacktest.KeyA, c.body)
		requireError(t, res.StatusCode, raw, c.status, c.code, c.field)
	}
	res, raw := call(t, h, "POST", "/v1/leases/batch", "", `{"outcomes":[`+item+`]}`)
	requireError(t, res.StatusCode, raw, 401, domain.CodeUnauthorized, "")
}
