// Package agent is the protocol between the hearth daemon and hearth-agent,
// the static PID 1 inside every sandbox, and both of its ends: Server runs in
// the sandbox, Client in the daemon.
//
// The channel is a stream connection (a unix socket on a host directory that
// is bind-mounted into the sandbox, or TCP to a pod): it does not depend on
// the daemon's process, so a daemon restart only drops connections. Each
// connection carries one operation. The client sends a FrameRequest holding
// a JSON Request, then, for exec and write, input frames (FrameStdin,
// FrameData) closed by FrameEOF, and for exec, FrameControl frames at any
// time, before or after that FrameEOF. The agent answers with output frames
// (FrameStdout, FrameStderr, FrameData) and ends with exactly one FrameResult
// (the op's JSON result) or FrameError (a JSON sandbox.Error). An error that
// the agent finds before it starts a command or sends a file's first byte is
// the only frame it sends, so the daemon can still answer with an HTTP error.
// Connect is the one exception to framing: after its FrameResult the
// connection carries a raw TCP stream (see Ports and connections below).
//
// # Exec
//
// Each command runs as the sandbox user (Options.UID and GID, no
// supplementary groups) in a session and process group of its own, with the
// sandbox's environment merged under the request's and the request's
// working directory (relative to the home). Shell scripts run as `sh -c`, or,
// over 64 KiB, from a sealed memfd at fd 3 (`sh /proc/self/fd/3`), so no
// argument limit applies; Client.Exec sends such scripts after the request
// (Request.ShellSize) so no frame limit applies either.
//
// Output is streamed as it is read. The result comes only after the command
// has exited and its pipes are drained: a process it left in the background
// may keep them open, so after the exit each read may wait 200ms at most,
// and the background process's later output is dropped (never SIGPIPE'd).
//
// At the deadline, the command's whole tree is killed: its session, its
// process group, and every descendant found by walking /proc, including
// those that left with setsid; they are stopped first so that none forks or
// is reparented during the kill, then SIGKILLed until none is left. When
// the caller goes away (the connection breaks, even while the agent is
// blocked feeding a stdin the command does not read) the command runs on,
// unheard, for its grace period and is then killed the same way. A process
// that both left the session and lost its parent is out of reach: only a
// cgroup per command could find it.
//
// Options.NProc becomes the command's RLIMIT_NPROC: the agent traces the
// child up to its exec, sets it with prlimit(2) while the new program is
// stopped before its first instruction, and detaches. Options.Memory makes
// the agent the sandbox's OOM killer (gVisor's memory cgroup only reports):
// past the limit it kills the process with the largest resident set, and a
// command so killed ends with OOMKilled set, as one the kernel's OOM killer
// ended under runc.
//
// Secrets (Request.SecretEnv, Client.ExecSecrets) follow the request as
// FrameSecret frames of raw "NAME=VALUE" bytes, never in its JSON. The
// agent starts the command with a placeholder of the same length in each
// one's place and, at the same exec stop, writes the values over them on
// the new program's stack; then it wipes its only copy. The values are in
// the command's environment and nowhere else in the sandbox, so a memory
// checkpoint taken after the command has ended holds none.
//
// # Terminals and controls
//
// With sandbox.ExecRequest.TTY a command runs on a new pseudo-terminal of
// the sandbox's devpts (/dev/ptmx): its slave, owned by the sandbox user, is
// the command's fds 0, 1 and 2 and its controlling terminal (set between
// setsid and the exec, so the rlimits above apply as they do without one).
// The agent streams what it reads from the master as FrameStdout, writes
// stdin frames to it, and after the exit drains it as it drains pipes: the
// master reads EIO once no process holds the slave. FrameEOF ends the
// input but not the terminal, whose hangup would SIGHUP the command.
//
// While a command runs, FrameControl frames (each a JSON
// sandbox.ExecControl) resize its terminal with TIOCSWINSZ, upon which the
// kernel sends SIGWINCH to the terminal's foreground process group, or send
// a signal to the command's process group. A control that cannot apply is
// logged at debug level and dropped: it never ends the exec. Controls are
// read in line with stdin frames, so a command that stops reading its
// stdin with more pending than its pipe or terminal holds delays them.
//
// # Ports and connections
//
// Connect (OpConnect, Request.Port) reaches a TCP port on the sandbox's own
// loopback from the agent, which shares the sandbox's network namespace
// (under gVisor, its netstack): it works whatever the sandbox's network,
// even none, and backs the daemon's proxying of HTTP and WebSockets into a
// sandbox. The client sends the request frame and nothing else until the
// answer. The agent dials 127.0.0.1:port and, when that is refused,
// [::1]:port (a server bound to "::" accepts on both, one bound to "::1"
// only on the second), within 5 seconds in all. When nothing listens, or
// the server does not accept in time, it answers with a FrameError
// (unavailable, naming the port) and closes. Otherwise it answers with a
// FrameResult holding ConnectResult, the address it reached, and from the
// next byte on the connection carries the stream, unframed, both ways at
// once. EOF from either side is passed on as a half-close (shutdown of
// writing) of the other side's connection, so "send the request, shut down
// writing, read the answer" works; an error either way closes both, and so
// does the end of both directions. No deadline applies to the stream, which
// lasts as long as its ends keep it open. A client that closes its
// connection entirely looks to the agent like one that half-closed: the
// agent closes the server's connection once the server closes it too or
// writes to the agent in vain. Shutdown waits for streams as for any op in
// flight, and closes them when its context ends.
//
// Ports (OpPorts) answers with PortsResult: the listening TCP sockets of
// /proc/net/tcp and /proc/net/tcp6 of the agent's network namespace, each
// as a port and the address it is bound to, sorted by port then address.
//
// # Quiet for a memory checkpoint
//
// A memory checkpoint (gVisor's) cannot save a socket to the host, so the
// agent goes quiet on QuiesceSignal: no listener and no connection until
// the host writes ResumeMarker beside the socket (see quiesce.go).
//
// # Files
//
// File operations run with the sandbox user's ids (Options.UID and GID, no
// supplementary groups), on a thread the agent switches for the operation
// (see asUser): the kernel checks every path and change as the user's, so
// the API can do what the user could do in a shell and nothing more, and
// what it creates belongs to the user. Writes are atomic (a temporary file
// renamed over the target after fsync); nothing is kept on any error.
// Errors are sandbox.Errors with the errno in details "errno"; one that
// becomes internal carries its cause to the daemon, which logs it.
package agent
