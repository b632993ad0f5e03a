//go:build unix

package emulator

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup keeps moto out of the terminal's process group, so a
// Ctrl-C reaches `make dev` alone: it stops moto itself after saving the
// state moto holds (STEPFLOW_DEV_STATE), which a moto killed by the same
// SIGINT could no longer answer.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
