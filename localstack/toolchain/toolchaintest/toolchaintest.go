// Package toolchaintest makes stand-ins for the tools localstack/toolchain
// looks for, so a test decides what a machine has (no python3, a pip that
// cannot reach its index, a moto_server) whatever this machine has.
package toolchaintest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// BasicBin is a PATH directory with the commands a stand-in script uses
// (linked from this machine) and nothing else: no python3, moto_server
// or cfn-lint.
func BasicBin(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"sh", "mkdir", "cat", "chmod", "dirname"} {
		p, err := exec.LookPath(name)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(p, filepath.Join(dir, name)))
	}
	return dir
}

// Script writes an executable shell script of body at path.
func Script(t testing.TB, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
}
