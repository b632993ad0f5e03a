// Package devstate is the file a running `make dev` leaves for the tools
// that act on its stack directly (the stepflow CLI's keys and dlq,
// `stepflow-local invoke`): the API's URL, the emulator's endpoint and
// region, the stack's name and the functions' environment (table, queue
// URLs). It lives in $XDG_STATE_HOME/stepflow (default
// ~/.local/state/stepflow) as dev-<port>.json, one per dev stack, so a
// tool finds it from any directory by the port of the URL it talks to;
// `make dev` removes it when it stops.
package devstate

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
)

// ModeEmbedded is State.Mode of a dev stack that runs with no emulator
// (localstack/embedded): it has no table or queues to act on.
const ModeEmbedded = "embedded"

// State is what a dev stack leaves.
type State struct {
	Mode     string            `json:"mode,omitempty"` // ModeEmbedded, or empty: over the emulator
	URL      string            `json:"url"`            // the HTTP API
	Endpoint string            `json:"endpoint"`       // the AWS endpoint (the emulator's proxy)
	Region   string            `json:"region"`
	Stack    string            `json:"stack"`
	Env      map[string]string `json:"env"` // the functions' environment: STEPFLOW_TABLE, STEPFLOW_QUEUE_P0...
}

// Dir answers the directory the state files live in.
func Dir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "stepflow"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the state directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "stepflow"), nil
}

// Path answers the state file of the dev stack serving on port.
func Path(port string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "dev-"+port+".json"), nil
}

// PathForURL answers the state file of the dev stack serving apiURL.
func PathForURL(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%q is not an API URL", apiURL)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return Path(port)
}

// PortOf answers the port of a listen address like 127.0.0.1:3000.
func PortOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return port
}

// Write writes s to path (readable by its owner only: it names the
// stack's resources).
func Write(path string, s State) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Read reads the state file at path.
func Read(path string) (State, error) {
	var s State
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}
