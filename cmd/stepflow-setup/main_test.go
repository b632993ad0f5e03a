package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/toolchain"
	"github.com/stepflow/stepflow/localstack/toolchain/toolchaintest"
)

func runSetup(t *testing.T, tc toolchain.Toolchain, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(context.Background(), args, tc, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Without moto on PATH or in the virtualenv, and no way to install it
// (no python3 here), `make test`'s check fails at once with one line
// that names the command to run.
func TestMakeTestsCheckFailsWithOneLineNamingMakeSetup(t *testing.T) {
	t.Parallel()
	tc := toolchain.Toolchain{Root: t.TempDir(), Path: toolchaintest.BasicBin(t)}
	code, _, stderr := runSetup(t, tc, "-for-test")
	require.Equal(t, 1, code)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	require.True(t, strings.HasPrefix(stderr, "make test: moto_server and cfn-lint missing"), stderr)
	require.True(t, strings.HasSuffix(stderr, ": run make setup\n"), stderr)

	// The next check does not wait on pip again: it fails at once, as
	// plainly.
	code, stdout, stderr := runSetup(t, tc, "-for-test")
	require.Equal(t, 1, code)
	require.Empty(t, stdout, "no install attempted")
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	require.True(t, strings.HasSuffix(stderr, ": run make setup\n"), stderr)
}

// With the tools on PATH, as on CI, the check says nothing and installs
// nothing.
func TestMakeTestsCheckIsSilentWhenTheToolsAreThere(t *testing.T) {
	t.Parallel()
	bin := toolchaintest.BasicBin(t)
	toolchaintest.Script(t, filepath.Join(bin, toolchain.MotoServer), "")
	toolchaintest.Script(t, filepath.Join(bin, toolchain.CfnLint), "")
	toolchaintest.Script(t, filepath.Join(bin, "python3"), "echo python3 must not run >&2; exit 1\n")
	root := t.TempDir()
	code, stdout, stderr := runSetup(t, toolchain.Toolchain{Root: root, Path: bin}, "-for-test")
	require.Zero(t, code)
	require.Empty(t, stdout+stderr)
	require.NoDirExists(t, filepath.Join(root, toolchain.VenvDir))
}

// Where pip can install them, the check does, into the virtualenv, and
// the tests go on.
func TestMakeTestsCheckInstallsWhatIsMissing(t *testing.T) {
	t.Parallel()
	bin := toolchaintest.BasicBin(t)
	toolchaintest.Script(t, filepath.Join(bin, "python3"), `mkdir -p "$3/bin" && cat > "$3/bin/python" <<'EOF'
#!/bin/sh
for tool in moto_server cfn-lint; do echo '#!/bin/sh' > "$(dirname "$0")/$tool"; chmod +x "$(dirname "$0")/$tool"; done
EOF
chmod +x "$3/bin/python" && echo '#!/bin/sh' > "$3/bin/pip"
`)
	tc := toolchain.Toolchain{Root: t.TempDir(), Path: bin}
	code, stdout, stderr := runSetup(t, tc, "-for-test")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "installing moto[server]=="+toolchain.MotoVersion)
	require.Empty(t, tc.Missing(toolchain.MotoServer, toolchain.CfnLint))

	code, stdout, _ = runSetup(t, tc)
	require.Zero(t, code)
	require.Contains(t, stdout, filepath.Join(tc.VenvBin(), toolchain.MotoServer), "make setup says where each tool is")
}
