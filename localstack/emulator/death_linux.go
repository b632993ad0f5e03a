package emulator

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills moto when the process that started it dies, so no
// emulator outlives a killed `make dev` or test binary.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
