package main

import "syscall"

// serverProcAttr makes the kernel stop the server if the test process dies
// without stopping it (a killed `go test`).
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
