package toolchain_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/toolchain"
	"github.com/stepflow/stepflow/localstack/toolchain/toolchaintest"
)

// fakePython3 puts a stand-in python3 in bin: `python3 -m venv DIR` makes
// DIR/bin/python, whose body is venvPython (a stand-in for the
// virtualenv's python, pip included).
func fakePython3(t *testing.T, bin, venvPython string) {
	t.Helper()
	toolchaintest.Script(t, filepath.Join(bin, "python3"), `[ "$1" = -m ] && [ "$2" = venv ] || exit 2
mkdir -p "$3/bin" && cat > "$3/bin/python" <<'EOF'
#!/bin/sh
`+venvPython+`
EOF
chmod +x "$3/bin/python" && echo '#!/bin/sh' > "$3/bin/pip"
`)
}

// pipInstalls stands in for a pip that reaches its index: it records its
// arguments and installs both tools.
const pipInstalls = `bin=$(dirname "$0")
echo "$@" > "$bin/pip-args"
for tool in moto_server cfn-lint; do echo '#!/bin/sh' > "$bin/$tool"; chmod +x "$bin/$tool"; done`

// pipOffline stands in for a pip that cannot reach its index, as on a
// machine without access to PyPI.
const pipOffline = `echo "ERROR: Could not find a version that satisfies the requirement moto[server]==5.2.1 (from versions: none)" >&2
exit 1`

func TestFindLooksOnPathThenInTheVirtualenv(t *testing.T) {
	t.Parallel()
	root, bin := t.TempDir(), toolchaintest.BasicBin(t)
	tc := toolchain.Toolchain{Root: root, Path: bin}
	require.Equal(t, []string{toolchain.MotoServer, toolchain.CfnLint}, tc.Missing(toolchain.MotoServer, toolchain.CfnLint))

	venvMoto := filepath.Join(tc.VenvBin(), toolchain.MotoServer)
	toolchaintest.Script(t, venvMoto, "")
	got, ok := tc.Find(toolchain.MotoServer)
	require.True(t, ok)
	require.Equal(t, venvMoto, got)

	pathMoto := filepath.Join(bin, toolchain.MotoServer)
	toolchaintest.Script(t, pathMoto, "")
	got, _ = tc.Find(toolchain.MotoServer)
	require.Equal(t, pathMoto, got, "PATH's own comes first")

	require.NoError(t, os.WriteFile(filepath.Join(bin, toolchain.CfnLint), nil, 0o644))
	require.Equal(t, []string{toolchain.CfnLint}, tc.Missing(toolchain.MotoServer, toolchain.CfnLint), "a file that is not executable is not the tool")
}

func TestInstallMakesTheVirtualenvAndPipInstallsThePinnedVersions(t *testing.T) {
	t.Parallel()
	root, bin := t.TempDir(), toolchaintest.BasicBin(t)
	fakePython3(t, bin, pipInstalls)
	tc := toolchain.Toolchain{Root: root, Path: bin}

	var out strings.Builder
	require.NoError(t, tc.Install(context.Background(), &out), out.String())
	require.Empty(t, tc.Missing(toolchain.MotoServer, toolchain.CfnLint))
	moto, _ := tc.Find(toolchain.MotoServer)
	require.Equal(t, filepath.Join(root, ".stepflow", "venv", "bin", "moto_server"), moto)
	args, err := os.ReadFile(filepath.Join(tc.VenvBin(), "pip-args"))
	require.NoError(t, err)
	require.Contains(t, string(args), "-m pip install")
	require.Contains(t, string(args), "moto[server]=="+toolchain.MotoVersion+" cfn-lint=="+toolchain.CfnLintVersion)
	_, _, failed := tc.LastFailure()
	require.False(t, failed)
}

func TestInstallFailsWhenPipCannotReachItsIndex(t *testing.T) {
	t.Parallel()
	root, bin := t.TempDir(), toolchaintest.BasicBin(t)
	fakePython3(t, bin, pipOffline)
	tc := toolchain.Toolchain{Root: root, Path: bin}

	var out strings.Builder
	err := tc.Install(context.Background(), &out)
	require.ErrorContains(t, err, "pip could not install moto[server]=="+toolchain.MotoVersion)
	require.Contains(t, out.String(), "Could not find a version", "pip's own output goes to out")
	require.Equal(t, []string{toolchain.MotoServer}, tc.Missing(toolchain.MotoServer))
	_, why, failed := tc.LastFailure()
	require.True(t, failed, "the failure is noted, so make dev does not wait on pip at every start")
	require.Equal(t, err.Error(), why)

	// Once pip can reach its index, an install succeeds over the
	// virtualenv the failed one made, and the note goes.
	toolchaintest.Script(t, filepath.Join(tc.VenvBin(), "python"), pipInstalls)
	require.NoError(t, tc.Install(context.Background(), &out))
	require.Empty(t, tc.Missing(toolchain.MotoServer, toolchain.CfnLint))
	_, _, failed = tc.LastFailure()
	require.False(t, failed)
}

func TestInstallNeedsPython3(t *testing.T) {
	t.Parallel()
	tc := toolchain.Toolchain{Root: t.TempDir(), Path: toolchaintest.BasicBin(t)}
	require.ErrorContains(t, tc.Install(context.Background(), &strings.Builder{}), "python3 is not on PATH")
}

// A python3 without ensurepip (Debian's, without python3-venv) makes half
// a virtualenv and fails: Install says what to install, and makes it again
// next time.
func TestInstallSaysWhenTheVirtualenvCannotBeMade(t *testing.T) {
	t.Parallel()
	bin := toolchaintest.BasicBin(t)
	toolchaintest.Script(t, filepath.Join(bin, "python3"), `mkdir -p "$3/bin" && echo '#!/bin/sh' > "$3/bin/python" && chmod +x "$3/bin/python"
echo 'The virtual environment was not created successfully because ensurepip is not available.' >&2; exit 1
`)
	tc := toolchain.Toolchain{Root: t.TempDir(), Path: bin}
	require.ErrorContains(t, tc.Install(context.Background(), &strings.Builder{}), "apt install python3-venv")

	require.NoError(t, os.Remove(filepath.Join(bin, "python3")))
	fakePython3(t, bin, pipInstalls)
	require.NoError(t, tc.Install(context.Background(), &strings.Builder{}))
	require.Empty(t, tc.Missing(toolchain.MotoServer, toolchain.CfnLint))
}
