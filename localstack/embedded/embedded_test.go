package embedded_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstack"
	"github.com/stepflow/stepflow/localstack/embedded"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

const key = "dev-key"

func start(t *testing.T, state string) *embedded.Stack {
	t.Helper()
	st, err := embedded.Start(context.Background(), embedded.Options{
		APIKeys: map[string]string{key: "dev"}, StatePath: state, SaveEvery: 20 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

func call(t *testing.T, st *embedded.Stack, method, path string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		r = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, st.URL+path, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil && res.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(raw, out), "%s", raw)
	}
	return res.StatusCode
}

type job struct {
	ID    string          `json:"id"`
	State domain.JobState `json:"state"`
}

func submit(t *testing.T, st *embedded.Stack, spec string) string {
	t.Helper()
	var j job
	require.Equal(t, http.StatusCreated, call(t, st, http.MethodPost, "/v1/jobs", json.RawMessage(spec), &j))
	return j.ID
}

func claim(t *testing.T, st *embedded.Stack, queue string) wire.ClaimedLease {
	t.Helper()
	var c struct {
		Leases []wire.ClaimedLease `json:"leases"`
	}
	require.Equal(t, http.StatusOK, call(t, st, http.MethodPost, "/v1/claim", map[string]any{"queue": queue, "wait_seconds": 5, "worker": "w"}, &c))
	require.Len(t, c.Leases, 1)
	return c.Leases[0]
}

func awaitState(t *testing.T, st *embedded.Stack, id string, want domain.JobState) {
	t.Helper()
	var j job
	require.Eventually(t, func() bool {
		call(t, st, http.MethodGet, "/v1/jobs/"+id, nil, &j)
		return j.State == want
	}, 10*time.Second, 10*time.Millisecond, "job %s is %s, not %s", id, j.State, want)
}

// A job runs over HTTP as on the emulator: its pass step by the ready
// queues' mapping, its worker step claimed and completed; the state
// survives a Close and a Start, a lease taken before completing after.
func TestAJobCarriesOnAcrossARestart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.json")
	first := start(t, state)
	id := submit(t, first, `{"steps":[{"id":"p","action":{"type":"pass"}},{"id":"w","action":{"type":"worker","queue":"q"},"depends_on":["p"]}]}`)
	lease := claim(t, first, "q")
	require.Equal(t, id, lease.JobID)
	first.Close()

	second := start(t, state)
	require.Equal(t, 1, second.Restored.Jobs)
	require.Equal(t, http.StatusOK, call(t, second, http.MethodPost, "/v1/leases/"+lease.LeaseID+"/complete", map[string]any{"output": map[string]any{"ok": true}}, nil))
	awaitState(t, second, id, domain.JobCompleted)
}

// The state is written soon after each change, not only at Close: a
// process killed without one loses nothing but the last moment.
func TestTheStateIsWrittenAsItChanges(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.json")
	running := start(t, state)
	id := submit(t, running, `{"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)

	var saved struct {
		Format string `json:"format"`
		Store  struct {
			Jobs []struct{ ID string } `json:"jobs"`
		} `json:"store"`
	}
	require.Eventually(t, func() bool {
		raw, err := os.ReadFile(state)
		return err == nil && json.Unmarshal(raw, &saved) == nil && len(saved.Store.Jobs) == 1
	}, 5*time.Second, 10*time.Millisecond, "the job reaches the file with no Close")
	require.Equal(t, id, saved.Store.Jobs[0].ID)
	require.Equal(t, embedded.Format, saved.Format)

	// Another stack started from that file, as after a kill -9, runs it.
	copyOf := filepath.Join(t.TempDir(), "copy.json")
	raw, err := os.ReadFile(state)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(copyOf, raw, 0o600))
	after := start(t, copyOf)
	lease := claim(t, after, "q")
	require.Equal(t, http.StatusOK, call(t, after, http.MethodPost, "/v1/leases/"+lease.LeaseID+"/complete", map[string]any{"output": 1}, nil))
	awaitState(t, after, id, domain.JobCompleted)
}

// Each mode's state file is refused by the other, and left as it was: a
// file restored into nothing would be saved over and lost.
func TestEachModeRefusesTheOthersStateFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	emulators := filepath.Join(dir, "emulator.json")
	raw := []byte(`{"saved_at":"2030-01-01T00:00:00Z","table":"stepflow-3000-JobsTable","items":[],"objects":[]}`)
	require.NoError(t, os.WriteFile(emulators, raw, 0o600))
	_, err := embedded.Start(context.Background(), embedded.Options{StatePath: emulators, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.ErrorContains(t, err, "is not a state file of make dev's embedded mode")
	after, err := os.ReadFile(emulators)
	require.NoError(t, err)
	require.Equal(t, raw, after)

	embeddeds := filepath.Join(dir, "embedded.json")
	st := start(t, embeddeds)
	_, err = st.Save()
	require.NoError(t, err)
	_, err = (&devstack.Stack{}).RestoreState(context.Background(), embeddeds)
	require.ErrorContains(t, err, "holds the state of make dev's embedded mode")
}

// Data kept apart from a job (an input over the inline limit) is handed
// to a worker by a URL it GETs without credentials, as S3's presigned
// URLs; a URL with another signature is refused.
func TestLargeInputsAreHandedOutByURL(t *testing.T) {
	t.Parallel()
	st := start(t, "")
	big := strings.Repeat("x", 20_000)
	submit(t, st, `{"payload":{"big":"`+big+`"},"steps":[{"id":"w","action":{"type":"worker","queue":"q"}}]}`)
	lease := claim(t, st, "q")
	require.JSONEq(t, "null", string(lease.Input), "not inline")
	require.True(t, strings.HasPrefix(lease.InputURL, st.DataURL+"/"), lease.InputURL)

	res, err := http.Get(lease.InputURL)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
	require.Contains(t, string(body), big)

	res, err = http.Get(strings.Replace(lease.InputURL, "signature=", "signature=0", 1))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}
