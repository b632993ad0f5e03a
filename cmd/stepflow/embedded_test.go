package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstate"
)

// make dev with no emulator leaves a state file that says so: keys and dlq
// answer what to do instead of failing to reach a table.
func TestKeysAndDLQSayWhatToDoOnTheEmbeddedDevStack(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "dev-3000.json")
	require.NoError(t, devstate.Write(state, devstate.State{Mode: devstate.ModeEmbedded, URL: "http://127.0.0.1:3000"}))
	for _, args := range [][]string{{"keys", "list"}, {"dlq", "list"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "--local-state", state), nil, &out, &errOut)
		require.Equal(t, exitError, code, args)
		require.Contains(t, errOut.String(), "runs embedded, with no AWS emulator", args)
		require.Contains(t, errOut.String(), "make setup", args)
	}
}
