//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// sentByTerminal reports whether sig is one a terminal sends to its whole
// foreground process group (Ctrl-C, Ctrl-\), and cvsm (and so the command,
// which shares its process group) is that group: the command then has the
// signal already, and passing it on would deliver it twice.
func sentByTerminal(sig os.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return false
	}
	tty, err := os.Open("/dev/tty") // the controlling terminal, if there is one
	if err != nil {
		return false
	}
	defer tty.Close()
	var foreground int32 // pid_t
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&foreground))); errno != 0 {
		return false
	}
	return int(foreground) == syscall.Getpgrp()
}
