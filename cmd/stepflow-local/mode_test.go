package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/localstack/devstate"
	"github.com/stepflow/stepflow/localstack/toolchain"
	"github.com/stepflow/stepflow/localstack/toolchain/toolchaintest"
	"github.com/stepflow/stepflow/shared/domain"
	"github.com/stepflow/stepflow/shared/wire"
)

// runMainEnv makes this test binary run stepflow-local's main instead of
// the tests, so a test starts `stepflow-local dev` as a process of its own
// without building it.
const runMainEnv = "STEPFLOW_LOCAL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakePython3 stands in for python3 and the virtualenv it makes, whose
// pip runs pip (a shell script's body).
func fakePython3(t *testing.T, bin, pip string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "python3"), []byte(`#!/bin/sh
mkdir -p "$3/bin" && cat > "$3/bin/python" <<'EOF'
#!/bin/sh
`+pip+`
EOF
chmod +x "$3/bin/python" && echo '#!/bin/sh' > "$3/bin/pip"
`), 0o755))
}

const (
	pipOffline  = "echo 'ERROR: Could not find a version that satisfies the requirement moto[server]' >&2; exit 1"
	pipInstalls = `for tool in moto_server cfn-lint; do echo '#!/bin/sh' > "$(dirname "$0")/$tool"; chmod +x "$(dirname "$0")/$tool"; done`
)

// make dev runs over moto when it has it, installs it when pip can, and
// runs embedded, saying why, when pip cannot; a failed install is not
// tried again at the next start; STEPFLOW_DEV_MODE forces either mode.
func TestDevChoosesItsMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	offline := toolchaintest.BasicBin(t)
	fakePython3(t, offline, pipOffline)
	tc := toolchain.Toolchain{Root: t.TempDir(), Path: offline}
	var out strings.Builder
	m, err := chooseMode(ctx, "", "", tc, &out)
	require.NoError(t, err)
	require.True(t, m.embedded)
	require.Contains(t, m.why, "installing it failed: pip could not install")
	require.Contains(t, out.String(), "installing moto[server]=="+toolchain.MotoVersion)
	out.Reset()
	m, err = chooseMode(ctx, "", "", tc, &out)
	require.NoError(t, err)
	require.True(t, m.embedded)
	require.Empty(t, out.String(), "the next start does not wait on pip again")
	_, err = chooseMode(ctx, "emulator", "", tc, &out)
	require.ErrorContains(t, err, "STEPFLOW_DEV_MODE=emulator: pip could not install", "asked for the emulator, it tries and fails")

	online := toolchaintest.BasicBin(t)
	fakePython3(t, online, pipInstalls)
	tc = toolchain.Toolchain{Root: t.TempDir(), Path: online}
	m, err = chooseMode(ctx, "", "", tc, io.Discard)
	require.NoError(t, err)
	require.False(t, m.embedded)
	require.Equal(t, filepath.Join(tc.VenvBin(), "moto_server")+", installed now", m.why)
	m, err = chooseMode(ctx, "", "", tc, io.Discard)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(tc.VenvBin(), "moto_server"), m.why, "found in the virtualenv next time")

	m, err = chooseMode(ctx, "embedded", "", tc, io.Discard)
	require.NoError(t, err)
	require.True(t, m.embedded, "forced, even with moto installed")
	m, err = chooseMode(ctx, "", "http://127.0.0.1:4566", toolchain.Toolchain{Root: t.TempDir(), Path: toolchaintest.BasicBin(t)}, io.Discard)
	require.NoError(t, err)
	require.False(t, m.embedded, "AWS_ENDPOINT_URL names an emulator: no moto needed")
	_, err = chooseMode(ctx, "moto", "", tc, io.Discard)
	require.ErrorContains(t, err, "want emulator or embedded")
}

// The banner's first line names the mode; embedded, it says why and how
// to get the emulator.
func TestBannerNamesTheMode(t *testing.T) {
	t.Parallel()
	require.Equal(t, "  mode       emulator: the AWS emulator /usr/bin/moto_server\n", modeLines(devMode{why: "/usr/bin/moto_server"}))
	lines := modeLines(devMode{embedded: true, why: "moto_server is not installed"})
	require.True(t, strings.HasPrefix(lines, "  mode       embedded: no AWS emulator"), lines)
	require.Contains(t, lines, "why: moto_server is not installed\n")
	require.Contains(t, lines, "for the emulator: make setup (or pip install \"moto[server]=="+toolchain.MotoVersion)
}

// devProcess is `stepflow-local dev` running as a process of its own.
type devProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
}

func (p *devProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// startDev starts `stepflow-local dev` in dir with env, and waits for its
// banner.
func startDev(t *testing.T, dir string, env []string) *devProcess {
	t.Helper()
	p := &devProcess{cmd: exec.Command(os.Args[0], "dev")}
	p.cmd.Dir, p.cmd.Env = dir, append(os.Environ(), append(env, runMainEnv+"=1")...)
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	running := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			if s.Text() == "Ctrl-C stops it." {
				close(running)
			}
		}
	}()
	select {
	case <-running:
	case <-time.After(60 * time.Second):
		t.Fatalf("stepflow-local dev did not start:\n%s", p.output())
	}
	return p
}

// stop sends SIGTERM, as a closed terminal or a service manager does, and
// waits for the process to end.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.cmd.Wait(), p.output())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// callDev calls the dev stack's API with the dev key.
func callDev(t *testing.T, base, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer dev-key")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "%s %s: %s", method, path, raw)
	}
	return res.StatusCode
}

// With no emulator, `make dev` serves the same API embedded and says so;
// a job submitted before a restart completes after it: its pass step ran,
// its worker step's lease, taken before, completes after, and the job is
// COMPLETED.
func TestDevEmbeddedKeepsJobsAcrossARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"template.yaml", "statemachine"} {
		abs, err := filepath.Abs(filepath.Join("..", "..", f))
		require.NoError(t, err)
		require.NoError(t, os.Symlink(abs, filepath.Join(dir, f)))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "examples", "functions"), 0o755)) // no Lambda functions to build
	addr := freeAddr(t)
	base := "http://" + addr
	state := filepath.Join(dir, "state.json")
	env := []string{"STEPFLOW_DEV_MODE=embedded", "STEPFLOW_API_KEYS=dev:dev-key", "STEPFLOW_ADDR=" + addr, "STEPFLOW_DEV_STATE=" + state, "XDG_STATE_HOME=" + filepath.Join(dir, "xdg")}

	first := startDev(t, dir, env)
	banner := first.output()
	require.Contains(t, banner, "  mode       embedded: no AWS emulator")
	require.Contains(t, banner, "for the emulator: make setup")
	require.Contains(t, banner, "  HTTP API   "+base)
	cli, err := devstate.Read(filepath.Join(dir, "xdg", "stepflow", "dev-"+devstate.PortOf(addr)+".json"))
	require.NoError(t, err)
	require.Equal(t, devstate.ModeEmbedded, cli.Mode, "the CLI's state file says the stack is embedded")

	var j struct {
		ID    string          `json:"id"`
		State domain.JobState `json:"state"`
	}
	require.Equal(t, http.StatusCreated, callDev(t, base, http.MethodPost, "/v1/jobs",
		`{"steps":[{"id":"prep","action":{"type":"pass"}},{"id":"work","action":{"type":"worker","queue":"restart"},"depends_on":["prep"]}]}`, &j))
	var claimed struct {
		Leases []wire.ClaimedLease `json:"leases"`
	}
	require.Equal(t, http.StatusOK, callDev(t, base, http.MethodPost, "/v1/claim", `{"queue":"restart","wait_seconds":10,"worker":"w"}`, &claimed))
	require.Len(t, claimed.Leases, 1)
	require.Equal(t, j.ID, claimed.Leases[0].JobID)
	first.stop(t)
	require.Contains(t, first.output(), "state saved")

	second := startDev(t, dir, env)
	require.Contains(t, second.output(), "restored 2 jobs", "the job and the sample job")
	require.Equal(t, http.StatusOK, callDev(t, base, http.MethodPost, "/v1/leases/"+claimed.Leases[0].LeaseID+"/complete", `{"output":{"done":true}}`, nil))
	require.Eventually(t, func() bool {
		callDev(t, base, http.MethodGet, "/v1/jobs/"+j.ID, "", &j)
		return j.State == domain.JobCompleted
	}, 10*time.Second, 20*time.Millisecond, "job %s is %s", j.ID, j.State)
	second.stop(t)
}
