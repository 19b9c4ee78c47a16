//go:build unix

package main

import (
	"os"
	"syscall"
)

// forwardedSignals are the signals cvsm run passes to its command.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// isStopSignal reports whether sig asks cvsm run --watch to end rather than
// restart its command.
func isStopSignal(sig os.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGQUIT
}

// terminate asks a command to stop (SIGTERM).
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
