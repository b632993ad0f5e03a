package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/awsfault"
	"github.com/stepflow/stepflow/localstack/devstack/openapicheck"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// jobReads counts the engine's GetItems of one job: how often a long-poll
// re-read it.
type jobReads struct {
	id atomic.Value // string
	n  atomic.Int64
}

func (r *jobReads) option() stacktest.Option {
	return stacktest.WithAPIOptions(awsfault.Around("DynamoDB", "GetItem", func(_ context.Context, in any, call func() (any, error)) (any, error) {
		if sk, ok := in.(*dynamodb.GetItemInput).Key["sk"].(*ddb.AttributeValueMemberS); ok && sk.Value == r.id.Load() {
			r.n.Add(1)
		}
		return call()
	}))
}

type eventPage struct {
	JobID   string          `json:"job_id"`
	State   domain.JobState `json:"state"`
	Events  []domain.Event  `json:"events"`
	LastSeq int             `json:"last_seq"`
}

func types(evs []domain.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// GET /v1/jobs/{id}/events?after=&wait= long-polls: a quiet job is re-read
// until wait runs out and answers no events; a waiting request answers as
// soon as the job moves, with the events after the seq it named; a
// finished job's log is final and answers at once.
func TestEventsLongPollAnswersWhenTheJobMoves(t *testing.T) {
	t.Parallel()
	reads := &jobReads{}
	reads.id.Store("")
	h := stacktest.New(t, reads.option())
	r := openapiRun{t: t, h: h, c: openapicheck.Check(t, h)}
	id := r.submit(`{"steps":[{"id":"paid","action":{"type":"wait","signal":"payment"}},{"id":"ship","action":{"type":"pass"}}]}`)
	reads.id.Store(id)

	var all eventPage
	r.decode(r.call(http.StatusOK, http.MethodGet, "/v1/jobs/"+id+"/events", keyA, nil), &all)
	require.NotEmpty(t, all.Events)
	last := all.Events[len(all.Events)-1].Seq
	require.Equal(t, last, all.LastSeq)
	var tail eventPage
	r.decode(r.call(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/events?after=%d", id, last-1), keyA, nil), &tail)
	require.Equal(t, all.Events[len(all.Events)-1:], tail.Events, "after names the seq to answer past")

	// Quiet: it waits out its second, re-reading, and answers nothing new.
	before := reads.n.Load()
	start := time.Now()
	var quiet eventPage
	r.decode(r.call(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/events?after=%d&wait=1", id, last), keyA, nil), &quiet)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "it waited")
	require.Empty(t, quiet.Events)
	require.Equal(t, last, quiet.LastSeq, "the seq to continue from")
	require.Equal(t, domain.JobParked, quiet.State)
	require.GreaterOrEqual(t, reads.n.Load()-before, int64(3), "it re-read the job while it waited")

	// Waiting: the request is in, re-reading; the job moves; it answers.
	before = reads.n.Load()
	got := make(chan eventPage, 1)
	go func() {
		// Not h.Call: require may not stop the test from this goroutine.
		var p eventPage
		req, _ := http.NewRequest(http.MethodGet, h.URL+fmt.Sprintf("/v1/jobs/%s/events?after=%d&wait=20", id, last), nil)
		req.Header.Set("Authorization", "Bearer "+keyA)
		if res, err := h.HTTP.Do(req); err == nil {
			if res.StatusCode == http.StatusOK {
				_ = json.NewDecoder(res.Body).Decode(&p)
			}
			_ = res.Body.Close()
		}
		got <- p
	}()
	require.Eventually(t, func() bool { return reads.n.Load()-before >= 2 }, 10*time.Second, 10*time.Millisecond, "the long-poll re-reads the job")
	r.call(http.StatusOK, http.MethodPost, "/v1/jobs/"+id+"/signal", keyA, `{"name":"payment","payload":{"amount":5}}`)
	var moved eventPage
	select {
	case moved = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll did not answer when the job moved")
	}
	require.NotEmpty(t, moved.Events, "it answered the new events")
	require.Greater(t, moved.Events[0].Seq, last)
	require.Contains(t, types(moved.Events), "signal_received")
	require.Equal(t, moved.Events[len(moved.Events)-1].Seq, moved.LastSeq)

	// Continue from last_seq until the job completes; then its log is
	// final and a long-poll on it answers at once, with one read.
	after := moved.LastSeq
	seen := types(moved.Events)
	for state := moved.State; state != domain.JobCompleted; {
		var p eventPage
		r.decode(r.call(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/events?after=%d&wait=20", id, after), keyA, nil), &p)
		for _, e := range p.Events {
			require.Greater(t, e.Seq, after, "no event twice")
		}
		seen = append(seen, types(p.Events)...)
		after, state = p.LastSeq, p.State
	}
	require.Contains(t, seen, "job_completed")
	before = reads.n.Load()
	var final eventPage
	r.decode(r.call(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/events?after=%d&wait=20", id, after), keyA, nil), &final)
	require.Empty(t, final.Events)
	require.Equal(t, domain.JobCompleted, final.State)
	require.Equal(t, int64(1), reads.n.Load()-before, "a finished job's log is final: no re-read")
}
