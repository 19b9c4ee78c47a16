//go:build !unix

package main

import "os"

// forwardedSignals are the signals cvsm run passes to its command: where
// there are no Unix signals, an interrupt only.
var forwardedSignals = []os.Signal{os.Interrupt}

// isStopSignal reports whether sig asks cvsm run --watch to end rather than
// restart its command.
func isStopSignal(sig os.Signal) bool { return sig == os.Interrupt }

// terminate stops a command: without Unix signals, at once.
func terminate(p *os.Process) error { return p.Kill() }
