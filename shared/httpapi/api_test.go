package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/httpapi"
)

const (
	passJob   = `{"steps":[{"id":"only","action":{"type":"pass"}}]}`
	workerJob = `{"steps":[{"id":"w","action":{"type":"worker"}}]}`
)

// requireError checks an error answer: its status, the exact shape
// {"error":{"code","message"[,"field"]}}, its code, and for a 400 the field
// it names (no field member otherwise). It answers the message.
func requireError(t *testing.T, status int, raw []byte, wantStatus int, wantCode domain.Code, wantField string) string {
	t.Helper()
	require.Equal(t, wantStatus, status, "answer %s", raw)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &top), "answer %s is not a JSON object", raw)
	require.Len(t, top, 1, "answer %s has members besides error", raw)
	require.Contains(t, top, "error", "answer %s", raw)
	var e map[string]any
	require.NoError(t, json.Unmarshal(top["error"], &e), "answer %s: error is not an object", raw)
	for k := range e {
		require.Contains(t, []string{"code", "message", "field"}, k, "answer %s has an unexpected member", raw)
	}
	require.Equal(t, string(wantCode), e["code"], "answer %s", raw)
	msg, _ := e["message"].(string)
	require.NotEmpty(t, msg, "answer %s has no message", raw)
	if wantField != "" {
		require.Equal(t, wantField, e["field"], "answer %s", raw)
	} else {
		require.NotContains(t, e, "field", "answer %s", raw)
	}
	return msg
}

// call makes a request and answers the whole response (headers included)
// and its body. auth is the Authorization header's value, sent as is.
func call(t *testing.T, h *stacktest.Harness, method, path, auth, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	if auth != "" {
		headers = append([]string{"Authorization", auth}, headers...)
	}
	return h.Raw(t, method, path, r, headers...)
}

type listPage struct {
	Jobs []struct {
		ID    string          `json:"id"`
		State domain.JobState `json:"state"`
		Queue string          `json:"queue"`
	} `json:"jobs"`
	NextCursor *string `json:"next_cursor"`
}

// listAll pages through a listing with query q and answers every id, in
// order, and the number of pages read.
func listAll(t *testing.T, h *stacktest.Harness, key, q string) ([]string, int) {
	t.Helper()
	var ids []string
	cursor, pages := "", 0
	for {
		v, err := url.ParseQuery(q)
		require.NoError(t, err)
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var p listPage
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?"+v.Encode(), key, nil, &p)
		require.NotNil(t, p.Jobs, "jobs is always a list")
		require.NotNil(t, p.NextCursor, "next_cursor is always present")
		pages++
		require.Less(t, pages, 20, "the listing never ends")
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		if *p.NextCursor == "" {
			return ids, pages
		}
		cursor = *p.NextCursor
	}
}

func newID() string { return ulid.Make().String() }

// A job of thousands of steps is one POST: 5,000 chained steps are some
// 300 KB, past the bound of other bodies and well within a job spec's.
// Its first step waits for a worker, so the job rests as submitted.
func TestAJobOfThousandsOfStepsIsAccepted(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	const n = 5000
	steps := make([]string, n)
	steps[0] = `{"id":"s0","action":{"type":"worker","queue":"nobody"}}`
	for i := 1; i < n; i++ {
		steps[i] = fmt.Sprintf(`{"id":"s%d","action":{"type":"pass"},"depends_on":["s%d"]}`, i, i-1)
	}
	body := `{"steps":[` + strings.Join(steps, ",") + `]}`
	require.Greater(t, len(body), domain.MaxBodyBytes)
	res, raw := call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, body)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%.500s", raw)
	var j stacktest.Job
	require.NoError(t, json.Unmarshal(raw, &j))
	require.Len(t, j.Steps, n)
	require.Equal(t, domain.StepPending, j.Steps[0].State)
	require.Equal(t, domain.StepWaitingDeps, j.Steps[n-1].State)
}

// TestErrorAnswers sends every kind of bad request as tenant B on a fresh
// stack: each answers its status and error shape, and none of them leaves a
// job of B's behind.
func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	// Tenant A's job, which B must not see or touch.
	aJob := h.Submit(t, stacktest.KeyA, workerJob)
	bearerB := "Bearer " + stacktest.KeyB

	big := `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"blob":"` + strings.Repeat("x", domain.MaxJobSpecBytes) + `"}}`
	// Other bodies keep their own, smaller bound.
	overBody := `{"id":"big","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"blob":"` + strings.Repeat("x", domain.MaxBodyBytes) + `"}}}`
	cases := []struct {
		name         string
		method, path string
		auth         string
		body         string
		status       int
		code         domain.Code
		field        string
	}{
		// 400: submissions.
		{"malformed JSON", "POST", "/v1/jobs", bearerB, `{"steps": [`, 400, domain.CodeInvalid, "body"},
		{"bad JSON syntax", "POST", "/v1/jobs", bearerB, `{"steps": x}`, 400, domain.CodeInvalid, "body"},
		{"empty body", "POST", "/v1/jobs", bearerB, "", 400, domain.CodeInvalid, "body"},
		{"not an object", "POST", "/v1/jobs", bearerB, `[1,2]`, 400, domain.CodeInvalid, "body"},
		{"trailing data", "POST", "/v1/jobs", bearerB, passJob + ` {}`, 400, domain.CodeInvalid, "body"},
		{"no steps member", "POST", "/v1/jobs", bearerB, `{}`, 400, domain.CodeInvalid, "steps"},
		{"empty steps", "POST", "/v1/jobs", bearerB, `{"steps":[]}`, 400, domain.CodeInvalid, "steps"},
		{"steps of the wrong type", "POST", "/v1/jobs", bearerB, `{"steps":"pass"}`, 400, domain.CodeInvalid, "steps"},
		{"unknown action", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"teleport"}}]}`, 400, domain.CodeInvalid, "steps[0].action.type"},
		{"missing action", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a"}]}`, 400, domain.CodeInvalid, "steps[0].action.type"},
		{"bad step id", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a b","action":{"type":"pass"}}]}`, 400, domain.CodeInvalid, "steps[0].id"},
		{"bad backoff", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"},"retry":{"backoff":"bogus"}}]}`, 400, domain.CodeInvalid, "steps[0].retry.backoff"},
		{"too many attempts", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"},"retry":{"max_attempts":101}}]}`, 400, domain.CodeInvalid, "steps[0].retry.max_attempts"},
		{"negative attempts", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"},"retry":{"max_attempts":-1}}]}`, 400, domain.CodeInvalid, "steps[0].retry.max_attempts"},
		{"duplicate step ids", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"a","action":{"type":"pass"}}]}`, 400, domain.CodeInvalid, "steps[1].id"},
		{"unknown field", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}}],"colour":"red"}`, 400, domain.CodeInvalid, "colour"},
		{"unknown field in a step", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"colour":1}]}`, 400, domain.CodeInvalid, "steps[1].colour"},
		{"wrong type in a step", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"pass"},"retry":{"max_attempts":"x"}}]}`, 400, domain.CodeInvalid, "steps[1].retry.max_attempts"},
		{"wrong type at the top", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}}],"priority":"high"}`, 400, domain.CodeInvalid, "priority"},
		{"parameter of another action", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass","seconds":1}}]}`, 400, domain.CodeInvalid, "steps[0].action.seconds"},
		{"fail without class", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"fail"}}]}`, 400, domain.CodeInvalid, "steps[0].action.class"},
		{"bad priority", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}}],"priority":7}`, 400, domain.CodeInvalid, "priority"},
		{"bad queue", "POST", "/v1/jobs", bearerB, `{"steps":[{"id":"a","action":{"type":"pass"}}],"queue":"no spaces"}`, 400, domain.CodeInvalid, "queue"},
		{"idempotency key too long", "POST", "/v1/jobs", bearerB, passJob, 400, domain.CodeInvalid, "Idempotency-Key"},
		// 400: listing.
		{"bad state filter", "GET", "/v1/jobs?state=bogus", bearerB, "", 400, domain.CodeInvalid, "state"},
		{"limit 0", "GET", "/v1/jobs?limit=0", bearerB, "", 400, domain.CodeInvalid, "limit"},
		{"limit 101", "GET", "/v1/jobs?limit=101", bearerB, "", 400, domain.CodeInvalid, "limit"},
		{"limit not a number", "GET", "/v1/jobs?limit=ten", bearerB, "", 400, domain.CodeInvalid, "limit"},
		{"garbage cursor", "GET", "/v1/jobs?cursor=garbage", bearerB, "", 400, domain.CodeInvalid, "cursor"},
		// 400: claims and leases.
		{"claim max 11", "POST", "/v1/claim", bearerB, `{"max":11}`, 400, domain.CodeInvalid, "max"},
		{"claim max -1", "POST", "/v1/claim", bearerB, `{"max":-1}`, 400, domain.CodeInvalid, "max"},
		{"claim wait 21", "POST", "/v1/claim", bearerB, `{"wait_seconds":21}`, 400, domain.CodeInvalid, "wait_seconds"},
		{"claim bad queue", "POST", "/v1/claim", bearerB, `{"queue":"a/b"}`, 400, domain.CodeInvalid, "queue"},
		{"claim unknown field", "POST", "/v1/claim", bearerB, `{"count":1}`, 400, domain.CodeInvalid, "count"},
		{"claim malformed", "POST", "/v1/claim", bearerB, `{"max":`, 400, domain.CodeInvalid, "body"},
		{"fail with a bad class", "POST", "/v1/leases/" + aJob.ID + ".0.1.abc/fail", bearerB, `{"class":"bogus"}`, 400, domain.CodeInvalid, "class"},
		{"fail with no class", "POST", "/v1/leases/" + aJob.ID + ".0.1.abc/fail", bearerB, `{}`, 400, domain.CodeInvalid, "class"},
		{"heartbeat negative extend", "POST", "/v1/leases/" + aJob.ID + ".0.1.abc/heartbeat", bearerB, `{"extend_seconds":-1}`, 400, domain.CodeInvalid, "extend_seconds"},
		// 401.
		{"no Authorization", "POST", "/v1/jobs", "", passJob, 401, domain.CodeUnauthorized, ""},
		{"unknown key", "POST", "/v1/jobs", "Bearer no-such-key", passJob, 401, domain.CodeUnauthorized, ""},
		{"Basic auth", "POST", "/v1/jobs", "Basic xyz", passJob, 401, domain.CodeUnauthorized, ""},
		{"Bearer without a key", "POST", "/v1/jobs", "Bearer ", passJob, 401, domain.CodeUnauthorized, ""},
		{"no Authorization on a read", "GET", "/v1/jobs/" + aJob.ID, "", "", 401, domain.CodeUnauthorized, ""},
		// 404.
		{"unknown job", "GET", "/v1/jobs/" + newID(), bearerB, "", 404, domain.CodeNotFound, ""},
		{"unknown job's events", "GET", "/v1/jobs/" + newID() + "/events", bearerB, "", 404, domain.CodeNotFound, ""},
		{"cancel unknown job", "POST", "/v1/jobs/" + newID() + "/cancel", bearerB, "", 404, domain.CodeNotFound, ""},
		{"another tenant's job", "GET", "/v1/jobs/" + aJob.ID, bearerB, "", 404, domain.CodeNotFound, ""},
		{"another tenant's events", "GET", "/v1/jobs/" + aJob.ID + "/events", bearerB, "", 404, domain.CodeNotFound, ""},
		{"cancel another tenant's job", "POST", "/v1/jobs/" + aJob.ID + "/cancel", bearerB, "", 404, domain.CodeNotFound, ""},
		{"unknown lease", "POST", "/v1/leases/" + newID() + ".0.1.abc/heartbeat", bearerB, "", 404, domain.CodeNotFound, ""},
		{"unknown lease complete", "POST", "/v1/leases/" + newID() + ".0.1.abc/complete", bearerB, `{"output":1}`, 404, domain.CodeNotFound, ""},
		{"another tenant's lease", "POST", "/v1/leases/" + aJob.ID + ".0.1.abc/heartbeat", bearerB, "", 404, domain.CodeNotFound, ""},
		{"malformed lease", "POST", "/v1/leases/garbage/heartbeat", bearerB, "", 404, domain.CodeNotFound, ""},
		{"malformed lease fail", "POST", "/v1/leases/a.b.c/fail", bearerB, `{"class":"fatal"}`, 404, domain.CodeNotFound, ""},
		{"lease with a bad step", "POST", "/v1/leases/" + aJob.ID + ".7.1.abc/complete", bearerB, "", 404, domain.CodeNotFound, ""},
		{"unknown route", "GET", "/v1/nothing-here", bearerB, "", 404, domain.CodeNotFound, ""},
		// 405.
		{"wrong method", "DELETE", "/v1/jobs", bearerB, "", 405, domain.CodeMethodNotAllowed, ""},
		// 413.
		{"job spec over 4 MB", "POST", "/v1/jobs", bearerB, big, 413, domain.CodeTooLarge, ""},
		{"schedule over 256 KB", "POST", "/v1/schedules", bearerB, overBody, 413, domain.CodeTooLarge, ""},
	}
	t.Run("answers", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				var headers []string
				if tc.field == "Idempotency-Key" {
					headers = []string{"Idempotency-Key", strings.Repeat("k", 256)}
				}
				res, raw := call(t, h, tc.method, tc.path, tc.auth, tc.body, headers...)
				requireError(t, res.StatusCode, raw, tc.status, tc.code, tc.field)
				require.Contains(t, res.Header.Get("Content-Type"), "application/json")
			})
		}
	})

	// Nothing is half-written: B has no job, and A's job is untouched.
	var page listPage
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", stacktest.KeyB, nil, &page)
	require.Empty(t, page.Jobs, "a refused request left a job behind")
	require.Equal(t, "", *page.NextCursor)
	got := h.Get(t, stacktest.KeyA, aJob.ID)
	require.Equal(t, domain.JobQueued, got.State, "tenant B's cancel reached A's job")
	require.NotContains(t, h.EventTypes(t, stacktest.KeyA, aJob.ID), "job_cancelled")
}

// TestOtherTenantIsNotFound: another tenant's job answers exactly what a
// missing job answers, so B cannot even learn that A's job exists.
func TestOtherTenantIsNotFound(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	aJob := h.Submit(t, stacktest.KeyA, workerJob)
	missing := newID()
	for _, tc := range []struct{ method, suffix string }{
		{"GET", ""},
		{"GET", "/events"},
		{"POST", "/cancel"},
	} {
		t.Run(tc.method+tc.suffix, func(t *testing.T) {
			t.Parallel()
			status, theirs := h.Call(t, tc.method, "/v1/jobs/"+aJob.ID+tc.suffix, stacktest.KeyB, nil)
			msgTheirs := requireError(t, status, theirs, 404, domain.CodeNotFound, "")
			status, none := h.Call(t, tc.method, "/v1/jobs/"+missing+tc.suffix, stacktest.KeyB, nil)
			msgNone := requireError(t, status, none, 404, domain.CodeNotFound, "")
			require.Equal(t, strings.ReplaceAll(msgNone, missing, aJob.ID), msgTheirs)
			require.JSONEq(t, strings.ReplaceAll(string(none), missing, aJob.ID), string(theirs))
		})
	}
}

// TestIdempotency: a key answers its job again for the same body, 422 for
// another, and is scoped to the tenant.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	const key = "order-42"
	body := `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"n":1}}`
	spaced := "{\n  \"steps\": [ { \"id\": \"a\", \"action\": {\"type\": \"pass\"} } ],\n  \"payload\": { \"n\": 1 }\n}\n"

	res, raw := call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, body, "Idempotency-Key", key)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", raw)
	var first stacktest.Job
	require.NoError(t, json.Unmarshal(raw, &first))
	require.NotEmpty(t, first.ID)
	require.Equal(t, "/v1/jobs/"+first.ID, res.Header.Get("Location"))
	require.Empty(t, res.Header.Get("Idempotent-Replayed"))

	for name, b := range map[string]string{"same body": body, "same body, other white space": spaced} {
		res, raw := call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, b, "Idempotency-Key", key)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", name, raw)
		var again stacktest.Job
		require.NoError(t, json.Unmarshal(raw, &again))
		require.Equal(t, first.ID, again.ID, name)
		require.Equal(t, "/v1/jobs/"+first.ID, res.Header.Get("Location"), name)
		require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"), name)
	}

	res, raw = call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA, `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"n":2}}`, "Idempotency-Key", key)
	requireError(t, res.StatusCode, raw, http.StatusUnprocessableEntity, domain.CodeIdempotencyMismatch, "")

	// Tenant B's key of the same name is B's own.
	res, raw = call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyB, body, "Idempotency-Key", key)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", raw)
	var bJob stacktest.Job
	require.NoError(t, json.Unmarshal(raw, &bJob))
	require.NotEqual(t, first.ID, bJob.ID)

	// Racing duplicates make one job.
	const racers = 5
	var wg sync.WaitGroup
	statuses := make([]int, racers)
	ids := make([]string, racers)
	for i := range racers {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", h.URL+"/v1/jobs", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+stacktest.KeyA)
			req.Header.Set("Idempotency-Key", "race")
			res, err := h.HTTP.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			var j stacktest.Job
			_ = json.NewDecoder(res.Body).Decode(&j)
			statuses[i], ids[i] = res.StatusCode, j.ID
		})
	}
	wg.Wait()
	slices.Sort(statuses)
	require.Equal(t, []int{200, 200, 200, 200, 201}, statuses)
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}

	// The refused body wrote nothing: A has its two jobs, B its one.
	aIDs, _ := listAll(t, h, stacktest.KeyA, "")
	require.ElementsMatch(t, []string{first.ID, ids[0]}, aIDs)
	bIDs, _ := listAll(t, h, stacktest.KeyB, "")
	require.Equal(t, []string{bJob.ID}, bIDs)

	for _, j := range []struct{ key, tenant, id string }{
		{stacktest.KeyA, stacktest.TenantA, first.ID},
		{stacktest.KeyA, stacktest.TenantA, ids[0]},
		{stacktest.KeyB, stacktest.TenantB, bJob.ID},
	} {
		h.AwaitState(t, j.key, j.id, domain.JobCompleted)
		h.CheckReplay(t, j.tenant, j.id)
	}
}

// TestCancel: cancel is idempotent while the job is cancelled and a
// conflict once it finished otherwise.
func TestCancel(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)

	// A worker job nobody claims stays queued until it is cancelled.
	j := h.Submit(t, stacktest.KeyA, workerJob)
	require.Equal(t, domain.JobQueued, j.State)
	for range 2 {
		var got stacktest.Job
		h.JSON(t, http.StatusOK, "POST", "/v1/jobs/"+j.ID+"/cancel", stacktest.KeyA, nil, &got)
		require.Equal(t, domain.JobCancelled, got.State)
		require.Equal(t, domain.StepCancelled, got.Steps[0].State)
	}
	types := h.EventTypes(t, stacktest.KeyA, j.ID)
	n := 0
	for _, typ := range types {
		if typ == "job_cancelled" {
			n++
		}
	}
	require.Equal(t, 1, n, "events %v", types)
	require.Equal(t, "job_cancelled", types[len(types)-1])
	evs := h.Events(t, stacktest.KeyA, j.ID)
	for i, e := range evs {
		require.Equal(t, i+1, e.Seq, "events are in order")
	}
	h.CheckReplay(t, stacktest.TenantA, j.ID)

	// Cancels racing each other all answer CANCELLED; one of them wrote.
	racy := h.Submit(t, stacktest.KeyA, workerJob)
	var wg sync.WaitGroup
	states := make([]domain.JobState, 5)
	for i := range states {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", h.URL+"/v1/jobs/"+racy.ID+"/cancel", nil)
			req.Header.Set("Authorization", "Bearer "+stacktest.KeyA)
			res, err := h.HTTP.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			var got stacktest.Job
			if res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&got) == nil {
				states[i] = got.State
			}
		})
	}
	wg.Wait()
	for _, st := range states {
		require.Equal(t, domain.JobCancelled, st)
	}
	n = 0
	for _, typ := range h.EventTypes(t, stacktest.KeyA, racy.ID) {
		if typ == "job_cancelled" {
			n++
		}
	}
	require.Equal(t, 1, n)
	h.CheckReplay(t, stacktest.TenantA, racy.ID)

	// A completed job cannot be cancelled.
	done := h.Submit(t, stacktest.KeyA, passJob)
	h.AwaitState(t, stacktest.KeyA, done.ID, domain.JobCompleted)
	status, raw := h.Call(t, "POST", "/v1/jobs/"+done.ID+"/cancel", stacktest.KeyA, nil)
	requireError(t, status, raw, http.StatusConflict, domain.CodeConflict, "")
	require.Equal(t, domain.JobCompleted, h.Get(t, stacktest.KeyA, done.ID).State)
	require.NotContains(t, h.EventTypes(t, stacktest.KeyA, done.ID), "job_cancelled")
	h.CheckReplay(t, stacktest.TenantA, done.ID)
}

type claimed struct {
	LeaseID string `json:"lease_id"`
	JobID   string `json:"job_id"`
	StepID  string `json:"step_id"`
	Attempt int    `json:"attempt"`
}

// claimUntil polls /v1/claim (each call long-polls) until it answers a
// lease, for 30 s at most.
func claimUntil(t *testing.T, h *stacktest.Harness, key, body string) claimed {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var out struct{ Leases []claimed }
		h.JSON(t, http.StatusOK, "POST", "/v1/claim", key, body, &out)
		if len(out.Leases) > 0 {
			require.Len(t, out.Leases, 1)
			return out.Leases[0]
		}
	}
	require.FailNow(t, "no lease was handed out")
	return claimed{}
}

// TestLostLease: once a lease expired and another claim took the step over,
// the first holder's heartbeat, complete and fail answer lease_lost.
func TestLostLease(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, stacktest.KeyA, `{"steps":[{"id":"w","action":{"type":"worker","lease_seconds":1}}]}`)
	const claim = `{"queue":"default","max":1,"wait_seconds":2,"worker":"w1"}`
	first := claimUntil(t, h, stacktest.KeyA, claim)
	require.Equal(t, j.ID, first.JobID)
	require.Equal(t, 1, first.Attempt)

	// Bad outcomes on a real lease are refused before they touch it.
	lease := "/v1/leases/" + first.LeaseID
	for _, tc := range []struct{ path, body, field string }{
		{"/fail", `{"class":"bogus"}`, "class"},
		{"/fail", `{"class":"fatal","output":{"x":1}}`, "output"},
		{"/complete", `{"output":1,"class":"fatal"}`, "class"},
		{"/complete", `{"output":`, "body"},
		{"/heartbeat", `{"extend_seconds":-5}`, "extend_seconds"},
		{"/heartbeat", `{"extend_seconds":999999}`, "extend_seconds"},
	} {
		status, raw := h.Call(t, "POST", lease+tc.path, stacktest.KeyA, tc.body)
		requireError(t, status, raw, http.StatusBadRequest, domain.CodeInvalid, tc.field)
	}
	// Tenant B cannot touch A's lease.
	status, raw := h.Call(t, "POST", lease+"/complete", stacktest.KeyB, `{"output":1}`)
	requireError(t, status, raw, http.StatusNotFound, domain.CodeNotFound, "")

	// The lease runs out; SQS hands the message out again and the next
	// claim reclaims the step and takes attempt 2.
	second := claimUntil(t, h, stacktest.KeyA, `{"max":1,"wait_seconds":2,"worker":"w2"}`)
	require.Equal(t, j.ID, second.JobID)
	require.Equal(t, 2, second.Attempt)
	require.NotEqual(t, first.LeaseID, second.LeaseID)

	for _, tc := range []struct{ path, body string }{
		{"/heartbeat", ""},
		{"/heartbeat", `{"extend_seconds":30}`},
		{"/complete", `{"output":{"from":"w1"}}`},
		{"/fail", `{"class":"retryable","message":"late"}`},
	} {
		status, raw := h.Call(t, "POST", lease+tc.path, stacktest.KeyA, tc.body)
		msg := requireError(t, status, raw, http.StatusConflict, domain.CodeLeaseLost, "")
		require.Contains(t, msg, `lease lost: attempt 1 was taken over: attempt 2 holds step "w" under another lease`)
	}

	// The new holder is unaffected.
	var hb struct {
		LeaseID         string `json:"lease_id"`
		CancelRequested bool   `json:"cancel_requested"`
	}
	h.JSON(t, http.StatusOK, "POST", "/v1/leases/"+second.LeaseID+"/heartbeat", stacktest.KeyA, `{"extend_seconds":60}`, &hb)
	require.Equal(t, second.LeaseID, hb.LeaseID)
	require.False(t, hb.CancelRequested)
	var out struct {
		JobState  domain.JobState  `json:"job_state"`
		StepState domain.StepState `json:"step_state"`
	}
	h.JSON(t, http.StatusOK, "POST", "/v1/leases/"+second.LeaseID+"/complete", stacktest.KeyA, `{"output":{"from":"w2"}}`, &out)
	require.Equal(t, domain.JobCompleted, out.JobState)
	require.Equal(t, domain.StepSucceeded, out.StepState)
	got := h.Get(t, stacktest.KeyA, j.ID)
	require.Equal(t, domain.JobCompleted, got.State)
	require.JSONEq(t, `{"from":"w2"}`, string(got.Steps[0].Output))
	// Completing again (a retry whose answer was lost) answers the same
	// outcome and changes nothing; anything else on a finished lease is lost.
	h.JSON(t, http.StatusOK, "POST", "/v1/leases/"+second.LeaseID+"/complete", stacktest.KeyA, `{"output":1}`, &out)
	require.Equal(t, domain.JobCompleted, out.JobState)
	require.JSONEq(t, `{"from":"w2"}`, string(h.Get(t, stacktest.KeyA, j.ID).Steps[0].Output), "the first outcome stands")
	status, raw = h.Call(t, "POST", "/v1/leases/"+second.LeaseID+"/fail", stacktest.KeyA, `{"class":"fatal"}`)
	msg := requireError(t, status, raw, http.StatusConflict, domain.CodeLeaseLost, "")
	require.Contains(t, msg, `lease lost: step "w" already completed under this lease (attempt 2)`)
	status, raw = h.Call(t, "POST", "/v1/leases/"+second.LeaseID+"/heartbeat", stacktest.KeyA, `{}`)
	requireError(t, status, raw, http.StatusConflict, domain.CodeLeaseLost, "")
	status, raw = h.Call(t, "POST", lease+"/complete", stacktest.KeyA, `{"output":{"from":"w1"}}`)
	msg = requireError(t, status, raw, http.StatusConflict, domain.CodeLeaseLost, "")
	require.Contains(t, msg, `lease lost: step "w" already completed under another lease (attempt 2)`)
	h.CheckReplay(t, stacktest.TenantA, j.ID)
}

// TestCancelWhileLeased: a worker whose job was cancelled hears it on its
// next heartbeat, and its outcome is refused.
func TestCancelWhileLeased(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, stacktest.KeyA, `{"steps":[{"id":"w","action":{"type":"worker","lease_seconds":300}}]}`)
	l := claimUntil(t, h, stacktest.KeyA, `{"max":1,"wait_seconds":2}`)
	require.Equal(t, j.ID, l.JobID)
	h.JSON(t, http.StatusOK, "POST", "/v1/jobs/"+j.ID+"/cancel", stacktest.KeyA, nil, nil)
	var hb struct {
		CancelRequested bool `json:"cancel_requested"`
	}
	h.JSON(t, http.StatusOK, "POST", "/v1/leases/"+l.LeaseID+"/heartbeat", stacktest.KeyA, nil, &hb)
	require.True(t, hb.CancelRequested)
	status, raw := h.Call(t, "POST", "/v1/leases/"+l.LeaseID+"/complete", stacktest.KeyA, `{"output":1}`)
	msg := requireError(t, status, raw, http.StatusConflict, domain.CodeLeaseLost, "")
	require.Contains(t, msg, "lease lost: the job was cancelled; stop this attempt's work")
	require.Equal(t, domain.JobCancelled, h.Get(t, stacktest.KeyA, j.ID).State)
	h.CheckReplay(t, stacktest.TenantA, j.ID)
}

// TestList pages and filters a tenant's jobs, newest first, and never
// shows another tenant's.
func TestList(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	// A: four pass jobs on the default queue and a worker job on "other"
	// that nobody claims; B: one pass job.
	var aIDs, passIDs []string
	for i := range 5 {
		spec := passJob
		if i == 2 {
			spec = `{"queue":"other","steps":[{"id":"w","action":{"type":"worker"}}]}`
		}
		j := h.Submit(t, stacktest.KeyA, spec)
		aIDs = append(aIDs, j.ID)
		if i != 2 {
			passIDs = append(passIDs, j.ID)
		}
	}
	other := aIDs[2]
	bJob := h.Submit(t, stacktest.KeyB, passJob)
	newestFirst := func(ids []string) []string {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	got, pages := listAll(t, h, stacktest.KeyA, "limit=2")
	require.Equal(t, newestFirst(aIDs), got)
	require.GreaterOrEqual(t, pages, 3)
	all, pages := listAll(t, h, stacktest.KeyA, "")
	require.Equal(t, newestFirst(aIDs), all)
	require.Equal(t, 1, pages)
	bIDs, _ := listAll(t, h, stacktest.KeyB, "limit=2")
	require.Equal(t, []string{bJob.ID}, bIDs)

	// A's cursor means nothing to B.
	var p listPage
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs?limit=2", stacktest.KeyA, nil, &p)
	require.NotEmpty(t, *p.NextCursor)
	status, raw := h.Call(t, "GET", "/v1/jobs?cursor="+url.QueryEscape(*p.NextCursor), stacktest.KeyB, nil)
	requireError(t, status, raw, http.StatusBadRequest, domain.CodeInvalid, "cursor")

	for _, id := range passIDs {
		h.AwaitState(t, stacktest.KeyA, id, domain.JobCompleted)
		h.CheckReplay(t, stacktest.TenantA, id)
	}
	h.AwaitState(t, stacktest.KeyB, bJob.ID, domain.JobCompleted)
	h.CheckReplay(t, stacktest.TenantB, bJob.ID)

	for _, tc := range []struct {
		name, key, q string
		want         []string
	}{
		{"completed", stacktest.KeyA, "state=COMPLETED", newestFirst(passIDs)},
		{"completed, paged", stacktest.KeyA, "state=COMPLETED&limit=1", newestFirst(passIDs)},
		{"state in lower case", stacktest.KeyA, "state=completed", newestFirst(passIDs)},
		{"queued", stacktest.KeyA, "state=QUEUED", []string{other}},
		{"failed", stacktest.KeyA, "state=FAILED", nil},
		{"queue other", stacktest.KeyA, "queue=other", []string{other}},
		{"queue default, paged", stacktest.KeyA, "queue=default&limit=3", newestFirst(passIDs)},
		{"queue and state", stacktest.KeyA, "queue=other&state=COMPLETED", nil},
		{"no such queue", stacktest.KeyA, "queue=nowhere", nil},
		{"B completed", stacktest.KeyB, "state=COMPLETED", []string{bJob.ID}},
		{"B queue other", stacktest.KeyB, "queue=other", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := listAll(t, h, tc.key, tc.q)
			require.Equal(t, tc.want, got)
		})
	}

	// Each summary names its state and queue.
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs?queue=other", stacktest.KeyA, nil, &p)
	require.Len(t, p.Jobs, 1)
	require.Equal(t, domain.JobQueued, p.Jobs[0].State)
	require.Equal(t, "other", p.Jobs[0].Queue)
}

// TestHealth: the verdict and its counts, per tenant.
func TestHealth(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	health := func(key string) map[string]any {
		var out map[string]any
		h.JSON(t, http.StatusOK, "GET", "/v1/health", key, nil, &out)
		return out
	}
	fresh := health(stacktest.KeyA)
	require.Equal(t, "ok", fresh["status"])
	for _, k := range []string{"backlog", "blocked", "completed_24h", "failed_24h", "cancelled_24h"} {
		require.Contains(t, fresh, k)
		require.IsType(t, float64(0), fresh[k], k)
	}
	require.EqualValues(t, 0, fresh["failed_24h"])
	require.EqualValues(t, 0, fresh["blocked"])
	require.NotContains(t, fresh, "success_rate", "no job finished yet")

	failed := h.Submit(t, stacktest.KeyA, `{"steps":[{"id":"f","action":{"type":"fail","class":"fatal","message":"boom"}}]}`)
	h.AwaitState(t, stacktest.KeyA, failed.ID, domain.JobFailed)
	h.CheckReplay(t, stacktest.TenantA, failed.ID)

	after := health(stacktest.KeyA)
	require.EqualValues(t, 1, after["failed_24h"])
	require.EqualValues(t, 0, after["completed_24h"])
	require.EqualValues(t, 0, after["success_rate"], "reported")
	require.Equal(t, "ok", after["status"], "a 0%% success rate of one job is not graded: %v", after)
	require.NotContains(t, after, "reasons")
	require.Equal(t, []any{"too few finished jobs (1 of 20) to grade the success rate"}, after["notes"])

	// B's health knows nothing of A's failure.
	b := health(stacktest.KeyB)
	require.EqualValues(t, 0, b["failed_24h"])
	require.Equal(t, "ok", b["status"])

	status, raw := h.Call(t, "GET", "/v1/health", "", nil)
	requireError(t, status, raw, http.StatusUnauthorized, domain.CodeUnauthorized, "")
}

// TestSubmitAnswers: a 201 names the new job in Location and answers the
// job view.
func TestSubmitAnswers(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	res, raw := call(t, h, "POST", "/v1/jobs", "Bearer "+stacktest.KeyA,
		`{"steps":[{"id":"a","action":{"type":"pass"}},{"id":"b","action":{"type":"sleep","seconds":0}}],"payload":{"k":"v"},"priority":0}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", raw)
	require.Contains(t, res.Header.Get("Content-Type"), "application/json")
	var v struct {
		ID       string          `json:"id"`
		State    domain.JobState `json:"state"`
		Queue    string          `json:"queue"`
		Priority int             `json:"priority"`
		Payload  json.RawMessage `json:"payload"`
		Steps    []struct {
			ID          string           `json:"id"`
			Action      string           `json:"action"`
			State       domain.StepState `json:"state"`
			MaxAttempts int              `json:"max_attempts"`
			Attempts    []any            `json:"attempts"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal(raw, &v))
	require.Equal(t, "/v1/jobs/"+v.ID, res.Header.Get("Location"))
	require.Equal(t, domain.JobQueued, v.State)
	require.Equal(t, "default", v.Queue)
	require.Equal(t, 0, v.Priority)
	require.JSONEq(t, `{"k":"v"}`, string(v.Payload))
	require.Len(t, v.Steps, 2)
	require.Equal(t, "a", v.Steps[0].ID)
	require.Equal(t, "pass", v.Steps[0].Action)
	require.Equal(t, domain.DefaultMaxAttempts, v.Steps[0].MaxAttempts)
	require.NotNil(t, v.Steps[0].Attempts, "attempts is a list, never null")

	// Location is where the job is.
	loc := res.Header.Get("Location")
	done := h.AwaitState(t, stacktest.KeyA, strings.TrimPrefix(loc, "/v1/jobs/"), domain.JobCompleted)
	require.Equal(t, v.ID, done.ID)
	h.CheckReplay(t, stacktest.TenantA, v.ID)
}

// TestInternalErrorsAreOpaque: a store failure answers 500 in the error
// shape, naming the request but not the cause.
func TestInternalErrorsAreOpaque(t *testing.T) {
	t.Parallel()
	// Every read of one job's item fails in the engine's DynamoDB client,
	// before the request is made.
	var failPK atomic.Pointer[string]
	fault := awsfault.FailOperation("DynamoDB", "GetItem", -1, func(in any) bool {
		pk, ok := in.(*dynamodb.GetItemInput).Key["sk"].(*ddb.AttributeValueMemberS) // the job id
		bad := failPK.Load()
		return ok && bad != nil && pk.Value == *bad
	}, errors.New("injected fault: secret-table-detail"))
	h := stacktest.New(t, stacktest.WithAPIOptions(fault.Install))
	j := h.Submit(t, stacktest.KeyA, workerJob)
	pk := j.ID
	failPK.Store(&pk)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/jobs/" + j.ID},
		{"GET", "/v1/jobs/" + j.ID + "/events"},
		{"POST", "/v1/jobs/" + j.ID + "/cancel"},
	} {
		status, raw := h.Call(t, tc.method, tc.path, stacktest.KeyA, nil)
		msg := requireError(t, status, raw, http.StatusInternalServerError, domain.CodeInternal, "")
		require.NotContains(t, msg, "secret-table-detail")
		require.Contains(t, msg, "request id")
	}
	require.Positive(t, fault.Failed())
	failPK.Store(nil)
	require.Equal(t, domain.JobQueued, h.Get(t, stacktest.KeyA, j.ID).State)
}

// TestPoisonJSONIsRefused: JSON that could never be read back once stored
// (nested past what a decoder takes, or not UTF-8) is refused at the door
// with a 400 naming where, and nothing is written.
func TestPoisonJSONIsRefused(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	bearer := "Bearer " + stacktest.KeyB
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	cases := []struct{ name, path, body, field, inMsg string }{
		{"payload 10,000 deep", "/v1/jobs", `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":` + deep + `}`, "payload", "levels deep; the limit is 64"},
		{"payload one level too deep", "/v1/jobs", `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":` + strings.Repeat("[", domain.MaxJSONDepth) + strings.Repeat("]", domain.MaxJSONDepth) + `}`, "payload", "nests 65 levels deep"},
		{"invalid UTF-8 in the payload", "/v1/jobs", `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"name":"caf` + "\xe9" + `"}}`, "payload.name", "invalid UTF-8"},
		{"STEPS", "/v1/jobs", `{"STEPS":[{"id":"a","action":{"type":"pass"}}]}`, "STEPS", "is not a known field"},
		{"duplicate member", "/v1/jobs", `{"steps":[{"id":"a","action":{"type":"pass"}}],"payload":{"a":1,"a":2}}`, "payload.a", "appears twice"},
		{"worker output 10,000 deep", "/v1/leases/" + newID() + ".0.1.abc/complete", `{"output":` + deep + `}`, "output", "levels deep; the limit is 64"},
		{"worker output with a duplicate member", "/v1/leases/" + newID() + ".0.1.abc/complete", `{"output":{"a":1,"\u0061":2}}`, "output.a", "appears twice"},
		{"invalid UTF-8 in the worker output", "/v1/leases/" + newID() + ".0.1.abc/complete", `{"output":{"p":"` + "\xff" + `"}}`, "output.p", "invalid UTF-8"},
		{"OUTPUT in capitals", "/v1/leases/" + newID() + ".0.1.abc/complete", `{"OUTPUT":{}}`, "OUTPUT", "is not a known field"},
		{"claim with invalid UTF-8", "/v1/claim", `{"worker":"w` + "\xff" + `"}`, "worker", "invalid UTF-8"},
	}
	t.Run("answers", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				res, raw := call(t, h, "POST", tc.path, bearer, tc.body)
				msg := requireError(t, res.StatusCode, raw, http.StatusBadRequest, domain.CodeInvalid, tc.field)
				require.Contains(t, msg, tc.inMsg)
				require.True(t, utf8.Valid(raw), "the answer echoes bytes that are not UTF-8: %q", raw)
			})
		}
	})
	var page listPage
	h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs", stacktest.KeyB, nil, &page)
	require.Empty(t, page.Jobs, "a refused body left a job behind")
}

// TestAnUnknownErrorCodeAnswersInternal: an error whose code the table
// lacks answers 500 as an internal error, logged, never a status 0 or a
// code the API does not document.
func TestAnUnknownErrorCodeAnswersInternal(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	api := httpapi.New(nil, slog.New(slog.NewTextHandler(&logged, nil)))
	ev := events.APIGatewayV2HTTPRequest{RouteKey: "GET /v1/jobs/{id}"}
	ev.RequestContext.RequestID = "req-1"
	res := api.Fail(ev, &domain.Error{Code: "no_such_code", Message: "secret detail"})
	msg := requireError(t, res.StatusCode, []byte(res.Body), http.StatusInternalServerError, domain.CodeInternal, "")
	require.Equal(t, "internal error; request id req-1", msg)
	require.Contains(t, logged.String(), "secret detail", "the cause is logged")
	_, known := httpapi.ErrorCodes()["no_such_code"]
	require.False(t, known)
}

// TestEventsPage: a job's log comes at most ?limit= events at a time, with
// more and the seq to ask after; a limit out of range names the field.
func TestEventsPage(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	j := h.Submit(t, stacktest.KeyA, workerJob)
	h.JSON(t, http.StatusOK, "POST", "/v1/jobs/"+j.ID+"/cancel", stacktest.KeyA, nil, nil)
	all := h.Events(t, stacktest.KeyA, j.ID)
	require.Len(t, all, 3, "created, step cancelled, job cancelled")

	var page httpapi.EventsView
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs/"+j.ID+"/events?limit=2", stacktest.KeyA, nil, &page)
	require.Len(t, page.Events, 2)
	require.True(t, page.More)
	require.Equal(t, 2, page.LastSeq, "ask again after the last event answered")
	var rest httpapi.EventsView
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs/"+j.ID+"/events?limit=2&after=2", stacktest.KeyA, nil, &rest)
	require.Len(t, rest.Events, 1)
	require.False(t, rest.More)
	require.Equal(t, 3, rest.LastSeq)
	require.Equal(t, all, append(page.Events, rest.Events...))

	var whole httpapi.EventsView
	h.JSON(t, http.StatusOK, "GET", "/v1/jobs/"+j.ID+"/events", stacktest.KeyA, nil, &whole)
	require.Len(t, whole.Events, 3, "a short log comes whole by default")
	require.False(t, whole.More)

	var bad struct {
		Error struct{ Field string } `json:"error"`
	}
	h.JSON(t, http.StatusBadRequest, "GET", "/v1/jobs/"+j.ID+"/events?limit=1001", stacktest.KeyA, nil, &bad)
	require.Equal(t, "limit", bad.Error.Field)
}
