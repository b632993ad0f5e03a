package inmemory_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack/openapicheck"
	"github.com/stepflow/stepflow/localstack/devstack/stacktest"
	"github.com/stepflow/stepflow/shared/domain"
)

// listIDs pages through GET /v1/jobs with query q, a job at a time, and
// answers the ids in the order listed.
func listIDs(t *testing.T, h *stacktest.Harness, key string, q url.Values) []string {
	t.Helper()
	var ids []string
	q.Set("limit", "1")
	for pages := 0; ; pages++ {
		require.Less(t, pages, 50, "the listing does not end")
		var page struct {
			Jobs       []struct{ ID string }
			NextCursor string `json:"next_cursor"`
		}
		h.JSON(t, http.StatusOK, http.MethodGet, "/v1/jobs?"+q.Encode(), key, nil, &page)
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if page.NextCursor == "" {
			return ids
		}
		q.Set("cursor", page.NextCursor)
	}
}

// Jobs found by id prefix and by when they were made (a job id is a
// ULID, which begins with its time), paged a job at a time; bad values
// answer 400 naming their parameter.
func TestListSearchesByIDPrefixAndTime(t *testing.T) {
	t.Parallel()
	h := stacktest.NewInMemory(t)
	openapicheck.Check(t, h)
	pass := map[string]any{"steps": []any{map[string]any{"id": "s", "action": map[string]any{"type": "pass"}}}}
	// Three jobs an hour apart, each hour's made after the hour's mark.
	var ids []string
	var marks []time.Time
	for range 3 {
		marks = append(marks, h.Clock.Now())
		ids = append(ids, h.Submit(t, keyA, pass).ID, h.Submit(t, keyA, pass).ID)
		h.Submit(t, stacktest.KeyB, pass) // another tenant's, never listed
		h.Clock.Advance(time.Hour)
	}
	rfc := func(at time.Time) string { return at.Format(time.RFC3339Nano) }
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}

	require.Equal(t, []string{ids[3], ids[2]}, listIDs(t, h, keyA, q("created_after", rfc(marks[1]), "created_before", rfc(marks[2]))))
	require.Equal(t, []string{ids[5], ids[4]}, listIDs(t, h, keyA, q("created_after", rfc(marks[2]))))
	require.Equal(t, []string{ids[1], ids[0]}, listIDs(t, h, keyA, q("created_before", rfc(marks[1]))))
	require.Len(t, listIDs(t, h, keyA, q("created_after", rfc(marks[0].Add(-time.Minute)))), 6)
	require.Empty(t, listIDs(t, h, keyA, q("created_after", rfc(marks[2]), "created_before", rfc(marks[1]))), "a span no job can be in")

	// An id's prefix, in any case; its time's prefix finds its hour.
	require.Equal(t, []string{ids[4]}, listIDs(t, h, keyA, q("id_prefix", ids[4])))
	require.Equal(t, []string{ids[4]}, listIDs(t, h, keyA, q("id_prefix", strings.ToLower(ids[4]))))
	require.Equal(t, []string{ids[1], ids[0]}, listIDs(t, h, keyA, q("id_prefix", ids[0][:8], "created_before", rfc(marks[1]))))
	require.Empty(t, listIDs(t, h, keyA, q("id_prefix", ids[4], "created_before", rfc(marks[1]))))
	// With a state: all completed by now.
	for _, id := range ids {
		h.AwaitState(t, keyA, id, domain.JobCompleted)
	}
	require.Equal(t, []string{ids[3], ids[2]}, listIDs(t, h, keyA, q("state", "COMPLETED", "created_after", rfc(marks[1]), "created_before", rfc(marks[2]))))

	for _, c := range []struct{ query, field string }{
		{"id_prefix=01AB!", "id_prefix"},
		{"id_prefix=01ABCDEFGHJKMNPQRSTVWXYZ012", "id_prefix"}, // 27 characters
		{"id_prefix=01I", "id_prefix"},                         // I is no digit of an id
		{"created_after=yesterday", "created_after"},
		{"created_before=2025-06-01", "created_before"},
		{"created_before=1969-12-31T23:59:59Z", "created_before"},
		{"parent=" + ids[0] + "&id_prefix=01", "id_prefix"},
		{"parent=" + ids[0] + "&created_after=2025-06-01T00:00:00Z", "created_after"},
	} {
		status, raw := h.Call(t, http.MethodGet, "/v1/jobs?"+c.query, keyA, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", c.query, raw)
		require.Contains(t, string(raw), `"field":"`+c.field+`"`, "%s: %s", c.query, raw)
	}
}
