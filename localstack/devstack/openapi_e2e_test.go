package devstack_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/api"
	"github.com/stepflow/stepflow/localstack/devstack/openapicheck"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// openapiRun drives a stack whose traffic a Conformance checks against
// api/openapi.yaml.
type openapiRun struct {
	t *testing.T
	h *stacktest.Harness
	c *openapicheck.Conformance
}

// call makes a request, requires its status and answers its body.
func (r openapiRun) call(want int, method, path, key string, body any) []byte {
	r.t.Helper()
	status, raw := r.h.Call(r.t, method, path, key, body)
	require.Equal(r.t, want, status, "%s %s answered %s", method, path, raw)
	return raw
}

// refused makes a request the API refuses with 400 naming field, and
// requires that the document refuses it too: its constraints are the API's.
func (r openapiRun) refused(field, method, path, key string, body any) {
	r.t.Helper()
	raw := r.call(http.StatusBadRequest, method, path, key, body)
	require.Contains(r.t, string(raw), `"field":"`+field+`"`)
	require.NotEmpty(r.t, r.c.Last().RequestErrors, "%s %s: the API refuses it, the document allows it", method, path)
}

func (r openapiRun) decode(raw []byte, out any) {
	r.t.Helper()
	require.NoError(r.t, json.Unmarshal(raw, out), "decode %s", raw)
}

func (r openapiRun) submit(spec string) string {
	r.t.Helper()
	var j struct{ ID string }
	r.decode(r.call(http.StatusCreated, http.MethodPost, "/v1/jobs", keyA, spec), &j)
	return j.ID
}

// Every route of the API, driven through the local stack with good and
// bad input: each answer is one the document describes for its route and
// status (no undocumented member), each request the stack accepts is one
// the document allows, and bad input the document can express is refused
// by both.
func TestEveryAnswerIsTheOpenAPIDocuments(t *testing.T) {
	t.Parallel()
	h := stacktest.New(t)
	r := openapiRun{t: t, h: h, c: openapicheck.Check(t, h)}

	// The document itself, without a key: as written, but for servers,
	// which name where it was served.
	doc := r.call(http.StatusOK, http.MethodGet, "/v1/openapi.json", "", nil)
	want, err := api.JSON()
	require.NoError(t, err)
	var wantTop, gotTop map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(want, &wantTop))
	require.NoError(t, json.Unmarshal(doc, &gotTop))
	require.JSONEq(t, `[{"url":"`+h.URL+`","description":"where this document was served"}]`, string(gotTop["servers"]))
	delete(wantTop, "servers")
	delete(gotTop, "servers")
	wantRest, _ := json.Marshal(wantTop)
	gotRest, _ := json.Marshal(gotTop)
	require.JSONEq(t, string(wantRest), string(gotRest))

	// The web UI's page and files, without a key; revalidated by ETag.
	res, _ := h.Raw(t, http.MethodGet, "/ui", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, _ = h.Raw(t, http.MethodGet, "/ui", nil, "If-None-Match", res.Header.Get("ETag"))
	require.Equal(t, http.StatusNotModified, res.StatusCode)
	r.call(http.StatusOK, http.MethodGet, "/ui/app.js", "", nil)
	r.call(http.StatusNotFound, http.MethodGet, "/ui/nothing.js", "", nil)

	r.call(http.StatusOK, http.MethodGet, "/v1/health", keyA, nil)
	r.call(http.StatusUnauthorized, http.MethodGet, "/v1/health", "", nil)
	r.call(http.StatusUnauthorized, http.MethodGet, "/v1/health", "no-such-key", nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/metrics", keyA, nil)
	r.call(http.StatusUnauthorized, http.MethodGet, "/v1/metrics", "", nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/nothing-here", keyA, nil)
	r.call(http.StatusMethodNotAllowed, http.MethodDelete, "/v1/jobs", keyA, nil)

	// Submit: a job with every action type and every step member, held
	// back by run_at so nothing runs; replayed and mismatched under an
	// Idempotency-Key; refused.
	every := `{"payload":{"n":1},"queue":"q1","priority":"P2","run_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `","steps":[
	  {"id":"p","action":{"type":"pass"}},
	  {"id":"s","action":{"type":"sleep","seconds":1.5},"depends_on":["p"]},
	  {"id":"h","action":{"type":"http","url":"https://example.com/hook"},"timeout_seconds":30,
	   "retry":{"max_attempts":2,"backoff":"linear","initial_delay_ms":10,"max_delay_ms":100,"jitter":true,"classes":{"blocked":{"max_attempts":48,"backoff":"fixed","initial_delay_ms":600000}}}},
	  {"id":"w","action":{"type":"worker","queue":"gpu","lease_seconds":60},"requires":{"capabilities":["gpu"],"labels":{"zone":"a"}}},
	  {"id":"l","action":{"type":"lambda","function":"stepflow-fn-echo","qualifier":"live"}},
	  {"id":"a","action":{"type":"approval","timeout_seconds":3600}},
	  {"id":"v","action":{"type":"wait","signal":"go","timeout_seconds":3600}},
	  {"id":"f","action":{"type":"fail","class":"replan","message":"again","steps":[{"id":"f2","action":{"type":"pass"}}]}},
	  {"id":"u","action":{"type":"fail","class":"needs_user","prompt":"which?"}}]}`
	var first struct{ ID string }
	status, raw := h.Call(t, http.MethodPost, "/v1/jobs", keyA, every, "Idempotency-Key", "every-1")
	require.Equal(t, http.StatusCreated, status, "%s", raw)
	r.decode(raw, &first)
	status, raw = h.Call(t, http.MethodPost, "/v1/jobs", keyA, every, "Idempotency-Key", "every-1")
	require.Equal(t, http.StatusOK, status, "%s", raw)
	status, _ = h.Call(t, http.MethodPost, "/v1/jobs", keyA, `{"steps":[{"id":"x","action":{"type":"pass"}}]}`, "Idempotency-Key", "every-1")
	require.Equal(t, http.StatusUnprocessableEntity, status)
	r.refused("steps[0].action.url", http.MethodPost, "/v1/jobs", keyA, `{"steps":[{"id":"x","action":{"type":"pass","url":"https://example.com"}}]}`)
	r.refused("steps[0].action.type", http.MethodPost, "/v1/jobs", keyA, `{"steps":[{"id":"x","action":{"type":"teleport"}}]}`)
	r.refused("steps", http.MethodPost, "/v1/jobs", keyA, `{"steps":[]}`)
	r.refused("priority", http.MethodPost, "/v1/jobs", keyA, `{"priority":3,"steps":[{"id":"x","action":{"type":"pass"}}]}`)
	r.call(http.StatusBadRequest, http.MethodPost, "/v1/jobs", keyA, `{"steps":[{"id":"x","action":{"type":"pass"}},{"id":"x","action":{"type":"pass"}}]}`)
	r.call(http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/jobs", keyA, `{"payload":"`+strings.Repeat("x", domain.MaxJobSpecBytes)+`","steps":[{"id":"x","action":{"type":"pass"}}]}`)
	r.call(http.StatusUnauthorized, http.MethodPost, "/v1/jobs", "", every)

	// A batch: each job answered on its own, one accepted, one refused.
	var batch struct {
		Jobs []struct {
			Index, Status int
		}
	}
	r.decode(r.call(http.StatusOK, http.MethodPost, "/v1/jobs/batch", keyA, `{"jobs":[
	  {"idempotency_key":"batch-1","run_at":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`","steps":[{"id":"p","action":{"type":"pass"}}]},
	  {"steps":[{"id":"x","action":{"type":"teleport"}}]}]}`), &batch)
	require.Len(t, batch.Jobs, 2)
	require.Equal(t, http.StatusCreated, batch.Jobs[0].Status)
	require.Equal(t, http.StatusBadRequest, batch.Jobs[1].Status)
	r.call(http.StatusBadRequest, http.MethodPost, "/v1/jobs/batch", keyA, `{"jobs":[]}`)

	// Read, list, page, events.
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+first.ID, keyA, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/jobs/"+first.ID, stacktest.KeyB, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/jobs/not-a-job", keyA, nil)
	var page struct {
		Jobs       []struct{ ID string }
		NextCursor string `json:"next_cursor"`
	}
	r.decode(r.call(http.StatusOK, http.MethodGet, "/v1/jobs?limit=1", keyA, nil), &page)
	require.NotEmpty(t, page.NextCursor)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs?limit=1&cursor="+page.NextCursor, keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs?state=queued&queue=q1", keyA, nil)
	r.call(http.StatusBadRequest, http.MethodGet, "/v1/jobs?state=sideways", keyA, nil)
	r.refused("limit", http.MethodGet, "/v1/jobs?limit=0", keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+first.ID+"/events?after=1", keyA, nil)
	r.refused("after", http.MethodGet, "/v1/jobs/"+first.ID+"/events?after=-1", keyA, nil)
	r.refused("wait", http.MethodGet, "/v1/jobs/"+first.ID+"/events?wait=21", keyA, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/jobs/"+first.ID+"/events", stacktest.KeyB, nil)

	// Cancel, and again (idempotent); a finished job's cancel is a conflict.
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+first.ID+"/cancel", keyA, nil)
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+first.ID+"/cancel", keyA, nil)
	done := r.submit(`{"steps":[{"id":"x","action":{"type":"pass"}}]}`)
	h.AwaitState(t, keyA, done, domain.JobCompleted)
	r.call(http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/cancel", keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+done+"/steps/x/output", keyA, nil)

	// Budgets: a job's set above its cost, refused below it or unnamed,
	// a finished job's a conflict; the tenant's daily budget.
	budgeted := r.submit(`{"budget":{"usd":1},"steps":[{"id":"w","action":{"type":"worker","queue":"q1"}}]}`)
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+budgeted+"/budget", keyA, `{"usd":2.5}`)
	r.call(http.StatusBadRequest, http.MethodPost, "/v1/jobs/"+budgeted+"/budget", keyA, `{"usd":0.0000001}`) // below its cost: the API knows it, the document cannot
	r.refused("usd", http.MethodPost, "/v1/jobs/"+budgeted+"/budget", keyA, `{}`)
	r.call(http.StatusNotFound, http.MethodPost, "/v1/jobs/"+budgeted+"/budget", stacktest.KeyB, `{"usd":3}`)
	r.call(http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/budget", keyA, `{"usd":3}`)
	r.call(http.StatusOK, http.MethodGet, "/v1/budget", keyA, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/jobs/"+done+"/steps/nope/output", keyA, nil)

	// Gates: approve, again, reject after approve, reject, refused fields.
	gated := r.submit(`{"steps":[{"id":"gate","action":{"type":"approval"}},{"id":"after","action":{"type":"pass"}}]}`)
	gate := "/v1/jobs/" + gated + "/steps/gate/"
	r.refused("comment", http.MethodPost, gate+"approve", keyA, `{"by":"ann","comment":"`+strings.Repeat("c", 4097)+`"}`)
	r.call(http.StatusOK, http.MethodPost, gate+"approve", keyA, `{"by":"ann","comment":"ship it"}`)
	r.call(http.StatusOK, http.MethodPost, gate+"approve", keyA, nil)
	r.call(http.StatusConflict, http.MethodPost, gate+"reject", keyA, `{"by":"bob"}`)
	rejected := r.submit(`{"steps":[{"id":"gate","action":{"type":"approval"}}]}`)
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+rejected+"/steps/gate/reject", keyA, `{"by":"bob","comment":"no"}`)
	r.call(http.StatusNotFound, http.MethodPost, "/v1/jobs/"+rejected+"/steps/nope/approve", keyA, nil)

	// Redrive of the FAILED job; of a finished one, a conflict.
	r.refused("x", http.MethodPost, "/v1/jobs/"+rejected+"/redrive", keyA, `{"x":1}`)
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+rejected+"/redrive", keyA, nil)
	r.call(http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/redrive", keyA, nil)

	// Signals: kept for a wait, taken, repeated by id, refused.
	waiting := r.submit(`{"steps":[{"id":"nap","action":{"type":"sleep","seconds":3600}},{"id":"paid","action":{"type":"wait","signal":"payment"}}]}`)
	sig := "/v1/jobs/" + waiting + "/signal"
	r.refused("name", http.MethodPost, sig, keyA, `{"name":"no spaces"}`)
	r.call(http.StatusOK, http.MethodPost, sig, keyA, `{"name":"payment","payload":{"amount":5},"id":"pay-1"}`)
	r.call(http.StatusOK, http.MethodPost, sig, keyA, `{"name":"payment","payload":{"amount":5},"id":"pay-1"}`)
	r.call(http.StatusOK, http.MethodPost, sig, keyA, `{"name":"nothing-waits"}`) // dropped
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+waiting, keyA, nil)
	r.call(http.StatusConflict, http.MethodPost, "/v1/jobs/"+done+"/signal", keyA, `{"name":"late"}`)

	// Resources: create, change, read, list; a held slot blocks delete.
	r.call(http.StatusCreated, http.MethodPut, "/v1/resources/gpu-1", keyA, `{"capabilities":["gpu"],"labels":{"zone":"a"},"capacity":1}`)
	r.call(http.StatusOK, http.MethodPut, "/v1/resources/gpu-1", keyA, `{"capabilities":["gpu"],"labels":{"zone":"a"},"capacity":2}`)
	r.refused("capacity", http.MethodPut, "/v1/resources/gpu-2", keyA, `{"capacity":0}`)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/resources/gpu-1", stacktest.KeyB, nil)

	// The worker protocol, on a step that holds a slot of gpu-1.
	worked := r.submit(`{"steps":[{"id":"render","action":{"type":"worker","queue":"gpu","lease_seconds":30},"requires":{"capabilities":["gpu"]}},{"id":"review","action":{"type":"worker","queue":"gpu"}}]}`)
	r.refused("max", http.MethodPost, "/v1/claim", keyA, `{"queue":"gpu","max":11}`)
	var claimed struct{ Leases []wire.ClaimedLease }
	r.decode(r.call(http.StatusOK, http.MethodPost, "/v1/claim", keyA, `{"queue":"gpu","max":1,"wait_seconds":5,"worker":"box-1"}`), &claimed)
	require.Len(t, claimed.Leases, 1)
	lease := "/v1/leases/" + claimed.Leases[0].LeaseID
	r.call(http.StatusOK, http.MethodGet, "/v1/resources/gpu-1", keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/resources", keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/queues", keyA, nil) // gpu, with what it holds
	r.call(http.StatusConflict, http.MethodDelete, "/v1/resources/gpu-1", keyA, nil)
	r.refused("extend_seconds", http.MethodPost, lease+"/heartbeat", keyA, `{"extend_seconds":-1}`)
	r.call(http.StatusOK, http.MethodPost, lease+"/heartbeat", keyA, `{"extend_seconds":60}`)
	r.call(http.StatusOK, http.MethodPost, lease+"/heartbeat", keyA, nil)
	r.call(http.StatusNotFound, http.MethodPost, "/v1/leases/forged/heartbeat", keyA, nil)
	r.refused("class", http.MethodPost, lease+"/complete", keyA, `{"output":1,"class":"fatal"}`)
	r.call(http.StatusOK, http.MethodPost, lease+"/complete", keyA, `{"output":{"png":"s3://x"}}`)
	r.call(http.StatusOK, http.MethodPost, lease+"/complete", keyA, `{"output":{"png":"s3://x"}}`)
	r.call(http.StatusConflict, http.MethodPost, lease+"/fail", keyA, `{"class":"fatal"}`)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+worked+"/steps/render/output", keyA, nil)
	r.call(http.StatusOK, http.MethodDelete, "/v1/resources/gpu-1", keyA, nil)
	r.call(http.StatusNotFound, http.MethodDelete, "/v1/resources/gpu-1", keyA, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/resources/gpu-1", keyA, nil)

	// A failure that asks a person, and the person's answer.
	r.decode(r.call(http.StatusOK, http.MethodPost, "/v1/claim", keyA, `{"queue":"gpu","wait_seconds":5}`), &claimed)
	require.Len(t, claimed.Leases, 1)
	lease = "/v1/leases/" + claimed.Leases[0].LeaseID
	r.refused("class", http.MethodPost, lease+"/fail", keyA, `{"class":"shrug"}`)
	r.call(http.StatusOK, http.MethodPost, lease+"/fail", keyA, `{"class":"needs_user","message":"unsure","prompt":"Which locale?"}`)
	resume := "/v1/jobs/" + worked + "/steps/review/resume"
	r.call(http.StatusConflict, http.MethodPost, "/v1/jobs/"+worked+"/steps/render/resume", keyA, `{"input":"fr"}`)
	r.call(http.StatusOK, http.MethodPost, resume, keyA, `{"input":{"locale":"fr"}}`)
	r.call(http.StatusNotFound, http.MethodPost, "/v1/jobs/"+worked+"/steps/nope/resume", keyA, nil)
	r.decode(r.call(http.StatusOK, http.MethodPost, "/v1/claim", keyA, `{"queue":"gpu","wait_seconds":5}`), &claimed)
	require.Len(t, claimed.Leases, 1)
	r.call(http.StatusOK, http.MethodPost, "/v1/leases/"+claimed.Leases[0].LeaseID+"/fail", keyA, `{"class":"retryable","message":"busy","retry_after_seconds":3600}`)
	r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+worked, keyA, nil)

	// Outcomes reported together: a success, a failure and a refused one.
	r.submit(`{"steps":[{"id":"a","action":{"type":"worker","queue":"many"}}]}`)
	r.submit(`{"steps":[{"id":"b","action":{"type":"worker","queue":"many"}}]}`)
	var many struct{ Leases []wire.ClaimedLease }
	for len(many.Leases) < 2 {
		var more struct{ Leases []wire.ClaimedLease }
		r.decode(r.call(http.StatusOK, http.MethodPost, "/v1/claim", keyA, `{"queue":"many","max":2,"wait_seconds":5}`), &more)
		many.Leases = append(many.Leases, more.Leases...)
	}
	r.refused("outcomes", http.MethodPost, "/v1/leases/batch", keyA, `{"outcomes":[]}`)
	r.call(http.StatusOK, http.MethodPost, "/v1/leases/batch", keyA, `{"outcomes":[{"lease_id":"`+many.Leases[0].LeaseID+`","output":{"n":1}},{"lease_id":"`+many.Leases[1].LeaseID+`","class":"fatal","message":"no"},{"lease_id":"forged","output":1}]}`)

	// Schedules: made, made again, conflicting, listed, paged, paused,
	// resumed, deleted.
	sched := `{"id":"nightly","cron":"0 3 * * *","time_zone":"Europe/Berlin","overlap":"allow","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`
	r.call(http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, sched)
	r.call(http.StatusOK, http.MethodPost, "/v1/schedules", keyA, sched)
	r.call(http.StatusConflict, http.MethodPost, "/v1/schedules", keyA, `{"id":"nightly","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	r.call(http.StatusCreated, http.MethodPost, "/v1/schedules", keyA, `{"id":"hourly","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	r.refused("every", http.MethodPost, "/v1/schedules", keyA, `{"id":"both","cron":"0 3 * * *","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	var schedules struct {
		NextCursor string `json:"next_cursor"`
	}
	r.decode(r.call(http.StatusOK, http.MethodGet, "/v1/schedules?limit=1", keyA, nil), &schedules)
	require.NotEmpty(t, schedules.NextCursor)
	r.call(http.StatusOK, http.MethodGet, "/v1/schedules?cursor="+schedules.NextCursor, keyA, nil)
	r.call(http.StatusOK, http.MethodGet, "/v1/schedules/nightly", keyA, nil)
	r.call(http.StatusOK, http.MethodPost, "/v1/schedules/nightly/pause", keyA, nil)
	r.call(http.StatusOK, http.MethodPost, "/v1/schedules/nightly/resume", keyA, `{}`)
	r.refused("x", http.MethodPost, "/v1/schedules/nightly/pause", keyA, `{"x":1}`)
	r.call(http.StatusNotFound, http.MethodPost, "/v1/schedules/nope/resume", keyA, nil)
	r.call(http.StatusOK, http.MethodPut, "/v1/schedules/hourly", keyA, `{"id":"hourly","every":"2h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	r.refused("every", http.MethodPut, "/v1/schedules/hourly", keyA, `{"id":"hourly","cron":"0 3 * * *","every":"1h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	r.call(http.StatusNotFound, http.MethodPut, "/v1/schedules/nope", keyA, `{"id":"nope","every":"2h","job":{"steps":[{"id":"a","action":{"type":"pass"}}]}}`)
	r.call(http.StatusOK, http.MethodDelete, "/v1/schedules/nightly", keyA, nil)
	r.call(http.StatusNotFound, http.MethodGet, "/v1/schedules/nightly", keyA, nil)
	r.call(http.StatusNotFound, http.MethodDelete, "/v1/schedules/nightly", keyA, nil)

	// Every route was driven, and every client error status the error table
	// can answer was met.
	seen := r.c.Seen()
	var driven []string
	statuses := map[int]bool{}
	for op, ss := range seen {
		driven = append(driven, op)
		for _, s := range ss {
			statuses[s] = true
		}
	}
	slices.Sort(driven)
	require.Equal(t, r.c.Operations(), driven, "every operation of the document was driven")
	for _, s := range []int{200, 201, 400, 401, 404, 409, 413, 422} {
		require.True(t, statuses[s], "no answer was %d: %v", s, seen)
	}
}
