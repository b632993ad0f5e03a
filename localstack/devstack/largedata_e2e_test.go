package devstack_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/engine"
)

// Large data over HTTP on moto: outputs and payloads over the inline limit
// go to the stack's S3 bucket, the job holds references, workers fetch
// large inputs from presigned URLs, and GET .../output answers whole.

// largeJSON answers a JSON string of about n bytes that does not compress.
func largeJSON(t *testing.T, n int) json.RawMessage {
	t.Helper()
	raw := make([]byte, (n-2)*3/4)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return json.RawMessage(`"` + base64.StdEncoding.EncodeToString(raw) + `"`)
}

// refJob is GET /v1/jobs/{id} with the references it shows.
type refJob struct {
	State      domain.JobState `json:"state"`
	Payload    json.RawMessage `json:"payload"`
	PayloadRef *domain.DataRef `json:"payload_ref"`
	Steps      []struct {
		ID        string           `json:"id"`
		State     domain.StepState `json:"state"`
		Output    json.RawMessage  `json:"output"`
		OutputRef *domain.DataRef  `json:"output_ref"`
		Attempts  []struct {
			OutputRef *domain.DataRef `json:"output_ref"`
		} `json:"attempts"`
	} `json:"steps"`
}

// fetch GETs a URL as a worker does: no credentials.
func fetch(t *testing.T, url string) []byte {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "GET %s: %.300s", url, b)
	return b
}

// complete completes a lease with output, requiring 200.
func complete(t *testing.T, h *stacktest.Harness, leaseID string, output json.RawMessage) {
	t.Helper()
	body := append(append([]byte(`{"output":`), output...), '}')
	status, answer := h.Call(t, http.MethodPost, "/v1/leases/"+leaseID+"/complete", keyA, body)
	require.Equal(t, http.StatusOK, status, "%.300s", answer)
}

// getOutput answers GET .../output, not following a redirect.
func getOutput(t *testing.T, h *stacktest.Harness, key, id, step string) (*http.Response, []byte) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, h.URL+"/v1/jobs/"+id+"/steps/"+step+"/output", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, b
}

func workerSteps(n int, queue string) []any {
	var steps []any
	for i := range n {
		steps = append(steps, map[string]any{"id": fmt.Sprintf("s%d", i+1), "action": map[string]any{"type": "worker", "queue": queue, "lease_seconds": 300}})
	}
	return steps
}

func TestThreeWorkerOutputsOf900KBComplete(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": workerSteps(3, "big")})

	status, _ := getOutput(t, h, keyA, j.ID, "s1")
	require.Equal(t, http.StatusNotFound, status.StatusCode, "no output yet")

	outs := map[string]json.RawMessage{}
	var prev json.RawMessage
	for i := range 3 {
		ls := claim(t, h, keyA, "big", "w1", 1, 5)
		require.Len(t, ls, 1)
		l := ls[0]
		if i == 0 {
			require.JSONEq(t, `{}`, string(l.Input))
			require.Nil(t, l.InputRef)
		} else {
			// The previous step's 900 KB: by reference and URL, not inline.
			require.Equal(t, "null", string(l.Input))
			require.NotNil(t, l.InputRef)
			require.Equal(t, len(prev), l.InputRef.Size)
			got := fetch(t, l.InputURL)
			require.Equal(t, []byte(prev), got)
			require.NoError(t, l.InputRef.Verify(got))
		}
		// As a worker writes it, with spaces: it is kept and answered byte
		// for byte, so its reference's SHA-256 checks what GET answers.
		out := json.RawMessage(`{"blob": ` + string(largeJSON(t, 900*1024)) + `}`)
		complete(t, h, l.LeaseID, out)
		outs[l.StepID], prev = out, out
	}

	var got refJob
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.Equal(t, domain.JobCompleted, got.State)
	for _, s := range got.Steps {
		require.Nil(t, s.Output, "the document shows the reference, not 900 KB")
		require.NotNil(t, s.OutputRef)
		require.Equal(t, len(outs[s.ID]), s.OutputRef.Size)
		require.Equal(t, domain.OutputKey(tenantA, j.ID, s.ID, 1), s.OutputRef.Key)
		require.Equal(t, s.OutputRef, s.Attempts[0].OutputRef)

		res, body := getOutput(t, h, keyA, j.ID, s.ID)
		require.Equal(t, http.StatusOK, res.StatusCode, "%.300s", body)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		require.Equal(t, []byte(outs[s.ID]), body, "step %s answered whole", s.ID)
		require.NoError(t, s.OutputRef.Verify(body))
	}

	res, _ := getOutput(t, h, stacktest.KeyB, j.ID, "s1")
	require.Equal(t, http.StatusNotFound, res.StatusCode, "another tenant's job")
	res, _ = getOutput(t, h, keyA, j.ID, "nope")
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	// Retention: as the job expires (30 days after it completed), the
	// sweep deletes its objects in S3; the item itself goes by TTL later.
	key := got.Steps[0].OutputRef.Key
	_, err := h.Blobs.Get(context.Background(), key)
	require.NoError(t, err)
	h.Clock.Advance(30*24*time.Hour + time.Minute)
	require.GreaterOrEqual(t, h.Sweep(t).DataDeleted, 1)
	for _, s := range got.Steps {
		_, err := h.Blobs.Get(context.Background(), s.OutputRef.Key)
		require.ErrorIs(t, err, domain.ErrNotFound, "%s is deleted from S3", s.OutputRef.Key)
	}
	res, _ = getOutput(t, h, keyA, j.ID, "s1")
	require.Equal(t, http.StatusNotFound, res.StatusCode, "its data is gone with it")
}

func TestABuiltinStepFansInLargeOutputs(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	// Three workers' 900 KB outputs meet in a pass step: its input and
	// output are 2.7 MB, kept in S3 as a worker's output is.
	steps := workerSteps(3, "fan")
	steps = append(steps, map[string]any{"id": "collect", "action": map[string]any{"type": "pass"}, "depends_on": []string{"s1", "s2", "s3"}})
	j := h.Submit(t, keyA, map[string]any{"steps": steps})
	outs := map[string]json.RawMessage{}
	ls := claim(t, h, keyA, "fan", "w1", 3, 5)
	for len(ls) < 3 {
		ls = append(ls, claim(t, h, keyA, "fan", "w1", 3-len(ls), 5)...)
	}
	for _, l := range ls {
		outs[l.StepID] = json.RawMessage(`{"blob":` + string(largeJSON(t, 900*1024)) + `}`)
		complete(t, h, l.LeaseID, outs[l.StepID])
	}
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	var got refJob
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	res, body := getOutput(t, h, keyA, j.ID, "collect")
	require.Equal(t, http.StatusOK, res.StatusCode, "%.300s", body)
	require.Greater(t, len(body), 3*900*1024)
	var fanIn struct{ Deps map[string]json.RawMessage }
	require.NoError(t, json.Unmarshal(body, &fanIn))
	require.Len(t, fanIn.Deps, 3)
	for id, out := range outs {
		require.JSONEq(t, string(out), string(fanIn.Deps[id]), "collect's output holds %s's whole", id)
	}
	require.Equal(t, "collect", got.Steps[3].ID)
	require.Nil(t, got.Steps[3].Output, "the document shows the reference")
	require.NotNil(t, got.Steps[3].OutputRef)
	require.NoError(t, got.Steps[3].OutputRef.Verify(body))
}

func TestAFiveMBOutputCompletesAndIsAnsweredWhole(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": workerSteps(1, "huge")})
	ls := claim(t, h, keyA, "huge", "w1", 1, 5)
	require.Len(t, ls, 1)
	out := largeJSON(t, 5<<20)
	complete(t, h, ls[0].LeaseID, out)
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	res, body := getOutput(t, h, keyA, j.ID, "s1")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, []byte(out), body)

	// Past what a worker may complete with: 413, nothing recorded.
	j = h.Submit(t, keyA, map[string]any{"steps": workerSteps(1, "huge")})
	ls = claim(t, h, keyA, "huge", "w1", 1, 5)
	require.Len(t, ls, 1)
	status, answer := h.Call(t, http.MethodPost, "/v1/leases/"+ls[0].LeaseID+"/complete", keyA,
		[]byte(`{"output":`+string(largeJSON(t, engine.MaxOutputBytes+1024))+`}`))
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%.300s", answer)
	require.Equal(t, domain.StepRunning, h.Get(t, keyA, j.ID).Steps[0].State)
}

// An output Lambda's response cannot carry (a sleep's, composed of two
// 3 MB outputs) answers 303 to a presigned URL.
func TestAnOutputTooLargeToAnswerRedirectsToS3(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"payload": map[string]any{"p": 1}, "steps": []any{
		map[string]any{"id": "a", "action": map[string]any{"type": "worker", "queue": "q"}},
		map[string]any{"id": "b", "action": map[string]any{"type": "worker", "queue": "q"}},
		map[string]any{"id": "nap", "action": map[string]any{"type": "sleep", "seconds": 0}, "depends_on": []string{"a", "b"}},
	}})
	ls := claim(t, h, keyA, "q", "w1", 2, 5)
	require.Len(t, ls, 2)
	outs := map[string]json.RawMessage{}
	for _, l := range ls {
		outs[l.StepID] = largeJSON(t, 3<<20)
		complete(t, h, l.LeaseID, outs[l.StepID])
	}
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)

	res, body := getOutput(t, h, keyA, j.ID, "nap")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "%.300s", body)
	loc := res.Header.Get("Location")
	var answer struct {
		OutputRef *domain.DataRef `json:"output_ref"`
		URL       string          `json:"url"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	require.Equal(t, loc, answer.URL)
	got := fetch(t, loc)
	require.NoError(t, answer.OutputRef.Verify(got))
	want := `{"payload":{"p":1},"deps":{"a":` + string(outs["a"]) + `,"b":` + string(outs["b"]) + `}}`
	require.Equal(t, len(want), len(got))
	require.JSONEq(t, want, string(got))
}

// The output that once overflowed its job's item (a 200 KB payload and a
// 250 KB output, incompressible) now completes: both are kept in S3.
func TestAnOutputThatOnceOverflowedTheJobCompletes(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	payload := largeJSON(t, 200*1024)
	j := h.Submit(t, keyA, []byte(`{"payload":{"blob":`+string(payload)+`},"steps":[{"id":"w","action":{"type":"worker"}}]}`))
	ls := claim(t, h, keyA, "default", "w1", 1, 5)
	require.Len(t, ls, 1)
	require.NotNil(t, ls[0].InputRef, "the payload, by reference")
	require.JSONEq(t, `{"blob":`+string(payload)+`}`, string(fetch(t, ls[0].InputURL)))
	out := largeJSON(t, 250*1024)
	complete(t, h, ls[0].LeaseID, out)

	var got refJob
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs/"+j.ID, keyA, nil, &got)
	require.Equal(t, domain.JobCompleted, got.State)
	require.Equal(t, "null", string(got.Payload))
	require.Equal(t, domain.PayloadKey(tenantA, j.ID), got.PayloadRef.Key)
	require.Equal(t, len(out), got.Steps[0].OutputRef.Size)
}

// A job whose steps produce tens of MB in all: steps of 5 MB, each handed
// the one before by URL. 20 MB by default, to keep make test (-race)
// quick; STEPFLOW_LARGE_DATA_MB=50 runs the 50 MB (10 steps: about
// 3 s of steps without -race, 30 s with it, on a 2-core machine).
func TestAJobOfTensOfMBInAllCompletes(t *testing.T) {
	t.Parallel()
	total := 20
	if v := os.Getenv("STEPFLOW_LARGE_DATA_MB"); v != "" {
		_, err := fmt.Sscan(v, &total)
		require.NoError(t, err)
	}
	const each = 5 << 20
	n := max(1, total*(1<<20)/each)
	h := stacktest.New(t)
	j := h.Submit(t, keyA, map[string]any{"steps": workerSteps(n, "bulk")})
	start := time.Now()
	var prev json.RawMessage
	for i := range n {
		ls := claim(t, h, keyA, "bulk", "w1", 1, 5)
		require.Len(t, ls, 1)
		if i > 0 {
			require.Equal(t, len(prev), ls[0].InputRef.Size)
			if i == n-1 {
				require.True(t, bytes.Equal(prev, fetch(t, ls[0].InputURL)))
			}
		}
		prev = largeJSON(t, each)
		complete(t, h, ls[0].LeaseID, prev)
	}
	h.AwaitState(t, keyA, j.ID, domain.JobCompleted)
	t.Logf("%d steps of %d MB: %s", n, each>>20, time.Since(start).Round(time.Millisecond))
	res, body := getOutput(t, h, keyA, j.ID, fmt.Sprintf("s%d", n))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, strings.HasPrefix(string(body), `"`))
	require.Equal(t, []byte(prev), body)
}
