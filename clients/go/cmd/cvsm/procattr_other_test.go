//go:build unix && !linux

package main

import "syscall"

func serverProcAttr() *syscall.SysProcAttr { return nil }
