package agent

import (
	"path/filepath"
	"syscall"
)

// QuiesceSignal, sent to the agent (PID 1 of the sandbox), makes it quiet
// for a memory checkpoint, which cannot save a socket to the host: it
// takes the connections queued on its listener and closes it, lets the
// operations in flight end (for at most two seconds; then their
// connections are closed: see Server.Quiesce) and only then removes its
// socket's file, which tells the host it is quiet; then it waits, serving
// nothing, until the file ResumeMarker(socket) appears, removes it and
// listens again. A sandbox restored from a checkpoint taken while it was
// quiet is quiet too, and resumes the same way. A signal that finds the
// marker there already is late (the host that sent it gave up on the
// checkpoint and resumed the agent before it arrived): the agent removes
// the marker and goes on serving.
const QuiesceSignal = syscall.SIGUSR1

// ResumeMarker is the file that resumes a quiet agent listening on
// socket: "resume" beside the socket, in the directory the host shares
// with the sandbox.
func ResumeMarker(socket string) string { return filepath.Join(filepath.Dir(socket), "resume") }
