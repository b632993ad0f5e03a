package lambdaemu

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills a function's process when the process that started
// it dies, so none outlives a killed `make dev` or test binary.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
