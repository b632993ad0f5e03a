// Package toolchain finds the Python tools the local stack runs, and
// installs them when they are missing: moto_server, the AWS emulator `make
// dev` and the end-to-end tests start, and cfn-lint, which `make test` runs
// on template.yaml. It looks on PATH first, then in the project's own
// virtualenv, .stepflow/venv, where Install puts them with pip (`make
// setup`), so nothing is installed outside the project.
package toolchain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The tools, by the names of their commands.
const (
	MotoServer = "moto_server"
	CfnLint    = "cfn-lint"
)

// Versions Install asks pip for: moto's is the one localstack/emulator's
// motopatch.py patches (it reaches into moto's internals), cfn-lint's the
// one template.yaml is linted with on CI.
const (
	MotoVersion    = "5.2.1"
	CfnLintVersion = "1.51.0"
)

// Requirements are what Install asks pip for.
var Requirements = []string{"moto[server]==" + MotoVersion, "cfn-lint==" + CfnLintVersion}

// SetupCommand is the one command that installs the tools.
const SetupCommand = "make setup"

// PipCommand is what a person installs them with by hand instead.
var PipCommand = `pip install "moto[server]==` + MotoVersion + `" "cfn-lint==` + CfnLintVersion + `"`

// VenvDir is the project's virtualenv, relative to its root.
var VenvDir = filepath.Join(".stepflow", "venv")

// RetryAfter is how long a failed Install is trusted by the commands that
// install on their own (`make dev`, `make test`): pip failing again at
// once would only slow each of them down on a machine without its index.
// `make setup` always tries.
const RetryAfter = time.Hour

// failedFile notes when pip last failed, so that `make dev` on a machine
// pip cannot serve starts at once rather than waiting on pip every time.
var failedFile = filepath.Join(".stepflow", "setup-failed")

// Toolchain finds and installs the tools of one project.
type Toolchain struct {
	// Root is the project's directory (holding go.mod and template.yaml);
	// the virtualenv is Root/.stepflow/venv.
	Root string
	// Path is the PATH searched first, and the one pip and python run with.
	Path string
	// PipTimeout bounds each of pip's network reads (seconds; 15 when
	// zero), so a network that drops packets fails the install soon.
	PipTimeout int
}

// New answers the toolchain of the project around the working directory
// (the working directory itself when FindRoot finds none), searching this
// process's PATH.
func New() Toolchain {
	root, err := FindRoot()
	if err != nil {
		root = "."
	}
	return Toolchain{Root: root, Path: os.Getenv("PATH")}
}

// FindRoot answers the project's directory: the working directory or the
// first above it that holds both go.mod and template.yaml.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isFile(filepath.Join(dir, "go.mod")) && isFile(filepath.Join(dir, "template.yaml")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no directory holding go.mod and template.yaml here or above: run this in the stepflow repository")
		}
		dir = parent
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Venv answers the virtualenv's directory.
func (t Toolchain) Venv() string { return filepath.Join(t.Root, VenvDir) }

// VenvBin answers the virtualenv's bin directory.
func (t Toolchain) VenvBin() string { return filepath.Join(t.Venv(), "bin") }

// Find answers the path of tool: on Path, else in the virtualenv.
func (t Toolchain) Find(tool string) (string, bool) {
	if p, ok := t.lookPath(tool); ok {
		return p, true
	}
	return executable(filepath.Join(t.VenvBin(), tool))
}

// Missing answers those of tools Find does not find.
func (t Toolchain) Missing(tools ...string) []string {
	var out []string
	for _, tool := range tools {
		if _, ok := t.Find(tool); !ok {
			out = append(out, tool)
		}
	}
	return out
}

// NotFound says that tools are missing and what installs them.
func (t Toolchain) NotFound(tools ...string) error {
	return fmt.Errorf("%s not on PATH or in %s: run %s (or %s)", strings.Join(tools, " and "), VenvDir, SetupCommand, PipCommand)
}

// Install makes the virtualenv with python3 (unless it exists) and
// installs Requirements into it with pip; out receives their output. It
// fails when there is no python3, when the virtualenv cannot be made, or
// when pip cannot install them (most often: its index is out of reach),
// and notes the failure (LastFailure) until an install succeeds.
func (t Toolchain) Install(ctx context.Context, out io.Writer) error {
	err := t.install(ctx, out)
	note := filepath.Join(t.Root, failedFile)
	if err != nil {
		_ = os.MkdirAll(filepath.Dir(note), 0o755)
		_ = os.WriteFile(note, []byte(err.Error()+"\n"), 0o644)
		return err
	}
	_ = os.Remove(note)
	return nil
}

func (t Toolchain) install(ctx context.Context, out io.Writer) error {
	python := filepath.Join(t.VenvBin(), "python")
	// pip is the last thing venv makes: a virtualenv without it is one a
	// failed venv left (python3 without ensurepip), and is made again.
	if !isFile(filepath.Join(t.VenvBin(), "pip")) {
		sys, ok := t.lookPath("python3")
		if !ok {
			return errors.New("python3 is not on PATH, so pip cannot install moto")
		}
		if err := t.run(ctx, out, sys, "-m", "venv", t.Venv()); err != nil {
			return fmt.Errorf("python3 -m venv %s failed (on Debian and Ubuntu: apt install python3-venv): %w", VenvDir, err)
		}
	}
	timeout := t.PipTimeout
	if timeout <= 0 {
		timeout = 15
	}
	args := append([]string{"-m", "pip", "install", "--disable-pip-version-check", "--retries", "1", "--timeout", fmt.Sprint(timeout)}, Requirements...)
	if err := t.run(ctx, out, python, args...); err != nil {
		return fmt.Errorf("pip could not install %s into %s (can pip reach its index?): %w", strings.Join(Requirements, " "), VenvDir, err)
	}
	if missing := t.Missing(MotoServer, CfnLint); len(missing) > 0 {
		return fmt.Errorf("pip installed %s but %s has no %s", strings.Join(Requirements, " "), t.VenvBin(), strings.Join(missing, " or "))
	}
	return nil
}

// LastFailure answers when the last Install failed and why, if it did and
// none has succeeded since.
func (t Toolchain) LastFailure() (at time.Time, why string, failed bool) {
	path := filepath.Join(t.Root, failedFile)
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, "", false
	}
	b, _ := os.ReadFile(path)
	return fi.ModTime(), strings.TrimSpace(string(b)), true
}

// lookPath finds an executable on Path alone (not in the virtualenv).
func (t Toolchain) lookPath(name string) (string, bool) {
	for _, dir := range filepath.SplitList(t.Path) {
		if dir == "" {
			continue
		}
		if p, ok := executable(filepath.Join(dir, name)); ok {
			return p, true
		}
	}
	return "", false
}

func executable(p string) (string, bool) {
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p, true
	}
	return "", false
}

// run runs a command with Path as its PATH, its output to out.
func (t Toolchain) run(ctx context.Context, out io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(withoutPath(os.Environ()), "PATH="+t.Path)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

func withoutPath(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return out
}
