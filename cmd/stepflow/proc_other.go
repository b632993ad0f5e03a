//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup: process groups are a Unix notion; elsewhere the command alone
// is signalled.
func ownGroup(*exec.Cmd) {}

// signalGroup ends the command: a polite signal where the system has one,
// else a kill.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	if sig == syscall.SIGKILL || cmd.Process.Signal(sig) != nil {
		_ = cmd.Process.Kill()
	}
}
