//go:build !linux

package emulator

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
