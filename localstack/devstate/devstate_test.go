package devstate_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstate"
)

// A tool finds the state file of the dev stack serving the URL it talks
// to, from the URL's port, under $XDG_STATE_HOME.
func TestStateFileIsFoundByTheURLsPort(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", dir)
	written, err := devstate.Path(devstate.PortOf("127.0.0.1:3437"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "stepflow", "dev-3437.json"), written)
	want := devstate.State{URL: "http://127.0.0.1:3437", Endpoint: "http://127.0.0.1:5000", Region: "us-east-1", Stack: "stepflow-3437", Env: map[string]string{"STEPFLOW_TABLE": "t"}}
	require.NoError(t, devstate.Write(written, want))

	found, err := devstate.PathForURL("http://localhost:3437/")
	require.NoError(t, err)
	require.Equal(t, written, found)
	got, err := devstate.Read(found)
	require.NoError(t, err)
	require.Equal(t, want, got)

	other, err := devstate.PathForURL("https://api.example.com")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "stepflow", "dev-443.json"), other)
	_, err = devstate.PathForURL("not a url")
	require.Error(t, err)
}
