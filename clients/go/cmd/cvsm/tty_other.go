//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import "os"

// sentByTerminal: without a way to ask for the terminal's foreground
// process group, every signal is passed on.
func sentByTerminal(os.Signal) bool { return false }
