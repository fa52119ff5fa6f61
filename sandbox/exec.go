package sandbox

// ExecRequest is one command to run in a sandbox. Exactly one of Argv and
// Shell is set. It travels as a JSON message (never in a URL), so it has no
// size limit of its own; large shell scripts reach the shell through a file
// descriptor rather than argv.
type ExecRequest struct {
	// Argv is the program and its arguments, run without a shell; the program
	// is looked up in PATH.
	Argv []string `json:"argv,omitempty"`
	// Shell is a script run by /bin/sh.
	Shell string `json:"shell,omitempty"`
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
}

// DefaultGrace is how long a command outlives its caller by default.
const DefaultGrace = Duration(10_000_000_000) // 10s

// Validate checks the request's shape: exactly one of Argv and Shell,
// non-negative durations, no NUL bytes where the kernel cannot take them.
func (r *ExecRequest) Validate() error {
	switch {
	case len(r.Argv) == 0 && r.Shell == "":
		return Errorf(CodeInvalidArgument, "exec needs a command").WithHint("set argv (a program and its arguments) or shell (a script)")
	case len(r.Argv) > 0 && r.Shell != "":
		return Errorf(CodeInvalidArgument, "exec takes argv or shell, not both").WithHint("put the script in shell, or the program and its arguments in argv")
	case len(r.Argv) > 0 && r.Argv[0] == "":
		return Errorf(CodeInvalidArgument, "exec argv[0] is empty").WithHint("name the program to run in argv[0]")
	case r.Timeout < 0 || r.Grace < 0:
		return Errorf(CodeInvalidArgument, "exec timeout and grace must not be negative")
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
}
