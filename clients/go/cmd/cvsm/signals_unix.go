//go:build unix

package main

import (
	"os"
	"syscall"
)

// forwardedSignals are the signals cvsm run passes to its command.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
