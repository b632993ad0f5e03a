//go:build !linux

package lambdaemu

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
