//go:build !unix

package main

import "os"

// forwardedSignals are the signals cvsm run passes to its command: where
// there are no Unix signals, an interrupt only.
var forwardedSignals = []os.Signal{os.Interrupt}
