package sandbox

import "io"

// ExecRequest is one command to run in a sandbox. Exactly one of Argv,
// Shell and ShellSize is set. It travels as a JSON message (never in a
// URL) whose size each door bounds; a large shell script follows the
// request as a stream of its own (ShellSize), and reaches the shell through
// a file descriptor rather than argv.
type ExecRequest struct {
	// Argv is the program and its arguments, run without a shell; the program
	// is looked up in PATH.
	Argv []string `json:"argv,omitempty"`
	// Shell is a script run by /bin/sh.
	Shell string `json:"shell,omitempty"`
	// ShellSize, instead of Shell, says that the script run by /bin/sh
	// follows the request as a stream of exactly this many bytes, at most
	// MaxScriptBytes (each door says how: the exec WebSocket's stream 5),
	// so that no message has to hold it whole. Script is that stream on
	// this side of a door.
	ShellSize int64 `json:"shell_size,omitempty"`
	// Script is the stream of a ShellSize script, read once by the exec
	// that takes the request: exactly ShellSize bytes, and a read error ends
	// the exec before the command starts. It never travels in JSON.
	Script io.Reader `json:"-"`
	// Env is merged over the sandbox's default environment.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory; empty means the sandbox user's home.
	Cwd string `json:"cwd,omitempty"`
	// Timeout kills the whole process group, and its descendants, when it
	// passes; zero means none. The result then says timed_out.
	Timeout Duration `json:"timeout,omitempty"`
	// Grace is how long the command keeps running after its caller goes away
	// (a client disconnect or a daemon restart) before it is killed; zero
	// means the default, DefaultGrace.
	Grace Duration `json:"grace,omitempty"`
	// Stdin says the caller will stream stdin; without it stdin is empty.
	Stdin bool `json:"stdin,omitempty"`
	// Secrets names secrets of the sandbox's tenant to give this one
	// command, each in the environment variable of its name. Their values
	// are never written to the sandbox's disk nor logged, and are replaced
	// by "[secret NAME]" in the output returned to the caller.
	Secrets []string `json:"secrets,omitempty"`
	// TTY, when set, runs the command on a new pseudo-terminal of that
	// size, as its controlling terminal and the leader of a new session:
	// stdin goes to the terminal, and everything the command writes comes
	// back as stdout (there is no separate stderr). The terminal does what
	// terminals do: it echoes its input, turns "\n" into "\r\n" on output,
	// and hangs up when the command exits, which sends SIGHUP to what the
	// command left running in its foreground process group. The end of
	// stdin does not end the terminal's input: a reader sees end of file
	// when the caller types the terminal's EOF character (^D, "\x04") at
	// the start of a line. TERM is xterm-256color unless Env sets it: the
	// terminal's type is the caller's to say, the sandbox cannot know it.
	TTY *TTYSize `json:"tty,omitempty"`
	// MaxOutputBytes, when set, asks the door for the command's output in
	// the result rather than as it streams: each of stdout and stderr is
	// kept whole up to this many bytes, and a longer one is cut to its
	// head and tail around a marker line, the whole stream saved in the
	// sandbox (ExecResult.Output). It is the door's option (MCP's
	// sandbox_exec always sets it) and never reaches the sandbox; at most
	// MaxOutputBytes.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
}

// MaxOutputBytes bounds ExecRequest.MaxOutputBytes: what a result may
// hold of each stream.
const MaxOutputBytes = 1 << 20

// TTYSize is a terminal's size in characters. A zero Rows or Cols means
// the default, 24 rows or 80 columns: the agent fills it in when it sizes
// the terminal, so requests and controls carry what the caller sent. More
// than 1000 either way is invalid_argument.
type TTYSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// maxTTYSize bounds both dimensions of a TTYSize: a larger terminal is a
// caller's mistake, not a screen.
const maxTTYSize = 1000

// validate checks the size of the terminal that what names.
func (s TTYSize) validate(what string) error {
	if s.Rows > maxTTYSize || s.Cols > maxTTYSize {
		return Errorf(CodeInvalidArgument, "%s of %d rows and %d columns exceeds %d either way", what, s.Rows, s.Cols, maxTTYSize).
			With("max", maxTTYSize).
			WithHint("give the terminal's size in characters; 0 means the default, 24 rows or 80 columns")
	}
	return nil
}

// ExecControl is a message to a running command: exactly one of Resize
// (the new size of its terminal, zeros meaning the default as in
// ExecRequest.TTY; ignored without a terminal) and Signal (a signal name
// with or without "SIG", in any case: "TERM", "SIGTERM", "sigterm"; or its
// number, "15"), sent to the command's process group, as kill(2) with a
// negative pid does: the command and what it started in its group, but not
// a job that an interactive shell moved to a group of its own (type ^C,
// "\x03", to the terminal to interrupt the foreground job instead). A
// control that Validate refuses, one for a command that has ended, a
// resize without a terminal and a signal the sandbox's kernel does not know
// are ignored: a control never fails the exec.
type ExecControl struct {
	Resize *TTYSize `json:"resize,omitempty"`
	Signal string   `json:"signal,omitempty"`
}

// Validate checks the control's shape: exactly one of Resize and Signal,
// and a size of at most 1000 either way. Whether the signal exists is for
// the sandbox's kernel to say.
func (c *ExecControl) Validate() error {
	switch {
	case (c.Resize == nil) == (c.Signal == ""):
		return Errorf(CodeInvalidArgument, "exec control takes exactly one of resize and signal").
			WithHint(`send {"resize":{"rows":R,"cols":C}} or {"signal":"TERM"}`)
	case c.Resize != nil:
		return c.Resize.validate("terminal resize")
	}
	return nil
}

// ExecControls is implemented by the stdin of an exec whose caller also
// controls the command while it runs: each value Controls delivers is
// passed on to the command in order, until the command ends or the channel
// is closed. Controls share the way to the sandbox with stdin but are not
// ordered with it; and when the command stops reading while more input is
// pending than its pipe or terminal holds (some 64 KiB), they wait behind
// that input. A caller with controls but no input passes a stdin that is
// at its end at once: the command then reads an empty stdin.
type ExecControls interface {
	Controls() <-chan ExecControl
}

// DefaultGrace is how long a command outlives its caller by default.
const DefaultGrace = Duration(10_000_000_000) // 10s

// MaxScriptBytes bounds a script that follows its request (ShellSize):
// the sandbox's agent holds it in memory charged to the sandbox, and the
// destructive-command gate reads all of it before the command starts.
const MaxScriptBytes = 64 << 20

// Validate checks the request's shape: exactly one of Argv, Shell and
// ShellSize, a ShellSize of at most MaxScriptBytes (too_large), non-negative
// durations, no NUL bytes where the kernel cannot take them, a terminal of
// at most 1000 rows and columns. It changes nothing: defaults (Grace, the
// terminal's size) are filled in where they are applied. Whether Script
// holds the ShellSize bytes is for the exec that reads it to find out.
func (r *ExecRequest) Validate() error {
	commands := 0
	for _, set := range []bool{len(r.Argv) > 0, r.Shell != "", r.ShellSize != 0} {
		if set {
			commands++
		}
	}
	switch {
	case commands == 0:
		return Errorf(CodeInvalidArgument, "exec needs a command").WithHint("set argv (a program and its arguments) or shell (a script)")
	case commands > 1:
		return Errorf(CodeInvalidArgument, "exec takes one of argv, shell and shell_size").WithHint("put the script in shell (or stream it after the request with shell_size), or the program and its arguments in argv")
	case r.ShellSize < 0:
		return Errorf(CodeInvalidArgument, "exec shell_size %d is negative", r.ShellSize).WithHint("give the script's length in bytes")
	case r.ShellSize > MaxScriptBytes:
		return Errorf(CodeTooLarge, "shell script of %d bytes is larger than the %d-byte limit", r.ShellSize, MaxScriptBytes).
			With("size", r.ShellSize).With("max_bytes", MaxScriptBytes).
			WithHint("put the data in a file (PUT .../fs/file) and keep the script short")
	case len(r.Argv) > 0 && r.Argv[0] == "":
		return Errorf(CodeInvalidArgument, "exec argv[0] is empty").WithHint("name the program to run in argv[0]")
	case r.Timeout < 0 || r.Grace < 0:
		return Errorf(CodeInvalidArgument, "exec timeout and grace must not be negative")
	case r.MaxOutputBytes < 0:
		return Errorf(CodeInvalidArgument, "exec max_output_bytes %d is negative", r.MaxOutputBytes).WithHint("give the bytes of each stream the result may hold, or leave it out to stream the output")
	case r.MaxOutputBytes > MaxOutputBytes:
		return Errorf(CodeInvalidArgument, "exec max_output_bytes %d is over the limit of %d", r.MaxOutputBytes, MaxOutputBytes).
			With("max_bytes", MaxOutputBytes).WithHint("ask for at most %d bytes; the whole output is saved in the sandbox anyway", MaxOutputBytes)
	}
	for _, s := range r.Argv {
		if hasNUL(s) {
			return Errorf(CodeInvalidArgument, "exec argv contains a NUL byte").WithHint("NUL cannot be passed in an argument; send data through stdin or a file")
		}
	}
	for k, v := range r.Env {
		if k == "" || hasNUL(k) || hasNUL(v) || containsByte(k, '=') {
			return Errorf(CodeInvalidArgument, "invalid environment variable name %q", k).WithHint("names are non-empty and contain no '=' or NUL")
		}
	}
	if hasNUL(r.Cwd) || hasNUL(r.Shell) {
		return Errorf(CodeInvalidArgument, "exec cwd or shell contains a NUL byte")
	}
	if r.TTY != nil {
		if err := r.TTY.validate("exec terminal"); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, name := range r.Secrets {
		if err := ValidateSecretName(name); err != nil {
			return err
		}
		if _, inEnv := r.Env[name]; inEnv || seen[name] {
			return Errorf(CodeInvalidArgument, "secret %q is named twice, or also set in env", name).WithHint("name each secret once, and leave it out of env")
		}
		seen[name] = true
	}
	return nil
}

func hasNUL(s string) bool { return containsByte(s, 0) }

func containsByte(s string, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return true
		}
	}
	return false
}

// ExecResult is how a command ended.
type ExecResult struct {
	// ExitCode is the process's exit status, or -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the process ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// TimedOut says the deadline passed and the process group was killed.
	TimedOut bool `json:"timed_out"`
	// OOMKilled says the kernel's OOM killer ended the command.
	OOMKilled bool `json:"oom_killed"`
	// DurationMs is the wall time from start to exit, in milliseconds.
	DurationMs int64 `json:"duration_ms"`
	// Checkpoint is the automatic checkpoint hearth took just before the
	// command, because it matched a destructive pattern: restore it to
	// undo what the command did. Gate says which pattern matched (and,
	// when the tenant's policy lets a command run although its checkpoint
	// failed, that it failed).
	Checkpoint string `json:"checkpoint,omitempty"`
	Gate       string `json:"gate,omitempty"`
	// Output is the command's output, when the request set
	// MaxOutputBytes.
	Output *ExecOutput `json:"output,omitempty"`
}

// ExecOutput is a command's output held in its result
// (ExecRequest.MaxOutputBytes). A stream longer than the cap is cut
// (Truncated): the result keeps its head and tail around a marker line,
// *Bytes count the whole stream, and *File names where in the sandbox the
// whole stream was saved (empty when saving failed, which the marker
// says).
type ExecOutput struct {
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	Truncated   bool   `json:"truncated,omitempty"`
	StdoutFile  string `json:"stdout_file,omitempty"`
	StderrFile  string `json:"stderr_file,omitempty"`
}
