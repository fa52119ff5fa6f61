// Package agent is the protocol between the hearth daemon and hearth-agent,
// the static PID 1 inside every sandbox, and both of its ends: Server runs in
// the sandbox, Client in the daemon.
//
// The channel is a stream connection (a unix socket on a host directory that
// is bind-mounted into the sandbox, or TCP to a pod): it does not depend on
// the daemon's process, so a daemon restart only drops connections. Each
// connection carries one operation. The client sends a FrameRequest holding
// a JSON Request, then, for exec and write, input frames (FrameStdin,
// FrameData) closed by FrameEOF. The agent answers with output frames
// (FrameStdout, FrameStderr, FrameData) and ends with exactly one FrameResult
// (the op's JSON result) or FrameError (a JSON sandbox.Error).
package agent
