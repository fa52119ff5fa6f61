package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// Exit codes exec gives for how a command ended, following the shells.
const (
	exitTimedOut     = 124 // as timeout(1) exits when its deadline passes
	exitSignalOffset = 128 // a command killed by signal N exits 128+N
)

const execSummary = `Run a command in a sandbox. Its stdout and stderr stream to this terminal
byte for byte and hearth exits with the command's exit code: 128+N when
signal N killed it, 124 when --timeout passed. With --shell the words after
-- are joined with spaces and run as one /bin/sh script.

Stdin is forwarded only with --stdin (it is never guessed from whether stdin
is a terminal); without it the command's stdin is empty. With -t the command
runs on a terminal, interactively, as in 'hearth shell NAME -- CMD'.

With --json the output is collected instead of streamed and printed as one
object: the result (exit_code, signal, timed_out, oom_killed, duration_ms)
plus stdout and stderr as strings, or stdout_base64 and stderr_base64 when
they are not valid UTF-8 (timed_out replaces the timeout note on stderr).
The exit code is the command's in both modes.

With --max-output N the output is printed when the command ends, each
stream cut to its head and tail around a marker line once it is longer
than N bytes; the whole of a cut stream is saved in the sandbox, at the
path the marker names (with --json, the result's output object has the
bytes and the paths). It is what MCP's sandbox_exec returns.`

// execOptions are exec's flags, gathered for execRequest.
type execOptions struct {
	env     envFlag
	secrets listFlag
	cwd     string
	timeout time.Duration
	shell   bool
	stdin   bool
	// maxOutput is ExecRequest.MaxOutputBytes.
	maxOutput int64
}

// runExec runs one command in a sandbox and passes its exit status through.
func runExec(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("exec", "NAME [-t] [--env K=V]... [--secret NAME]... [--cwd DIR] [--timeout D] [--shell] [--stdin] [--max-output N] -- CMD [ARGS...]", execSummary)
	opts := execOptions{env: envFlag{}}
	tty := fs.Bool("t", false, "run the command on a terminal, interactively, as `hearth shell NAME -- CMD` does")
	fs.Var(opts.env, "env", "set `K=V` in the command's environment (repeatable)")
	fs.Var(&opts.secrets, "secret", "give the command the tenant's secret `NAME` in $NAME, scrubbed from its output (repeatable)")
	fs.StringVar(&opts.cwd, "cwd", "", "working `DIR` (default: the sandbox user's home)")
	fs.DurationVar(&opts.timeout, "timeout", 0, "kill the command and its descendants after `D`, e.g. 30s (exit 124)")
	fs.BoolVar(&opts.shell, "shell", false, "run the words after -- as one /bin/sh script")
	fs.BoolVar(&opts.stdin, "stdin", false, "forward this process's stdin to the command")
	fs.Int64Var(&opts.maxOutput, "max-output", 0, "print each stream when the command ends, cut to its head and tail past `N` bytes, the whole of it saved in the sandbox")
	name, words, err := fs.parseCommand(args)
	if err != nil {
		return err
	}
	if name == "" {
		return &usageError{verb: "exec", msg: "missing NAME and command"}
	}
	req, err := execRequest(opts, words)
	if err != nil {
		return err
	}
	if *tty {
		if c.json || opts.maxOutput > 0 {
			return &usageError{verb: "exec", msg: "-t does not go with --json or --max-output: a terminal's output streams"}
		}
		return c.terminal(ctx, name, req)
	}

	cl := c.client()
	var stdin io.Reader
	if req.Stdin {
		stdin = c.stdin
	}
	if c.json {
		var stdout, stderr bytes.Buffer
		res, err := cl.Exec(ctx, name, req, stdin, &stdout, &stderr)
		if err != nil {
			return err
		}
		if o := res.Output; o != nil {
			stdout.WriteString(o.Stdout)
			stderr.WriteString(o.Stderr)
		}
		out, err := execJSON(res, stdout.Bytes(), stderr.Bytes())
		if err != nil {
			return err
		}
		if err := c.printJSON(out); err != nil {
			return err
		}
		return exitError(execExitCode(res))
	}

	res, err := cl.Exec(ctx, name, req, stdin, c.stdout, c.stderr)
	if err != nil {
		return err
	}
	if o := res.Output; o != nil {
		io.WriteString(c.stdout, o.Stdout)
		io.WriteString(c.stderr, o.Stderr)
	}
	switch {
	case res.TimedOut:
		after := opts.timeout
		if after <= 0 {
			after = (time.Duration(res.DurationMs) * time.Millisecond).Round(time.Second)
		}
		fmt.Fprintf(c.stderr, "hearth: command timed out after %s\n", after)
	case res.OOMKilled:
		fmt.Fprintf(c.stderr, "hearth: command was killed by the out-of-memory killer\n")
	}
	switch {
	case res.Checkpoint != "":
		fmt.Fprintf(c.stderr, "hearth: checkpoint %s was taken before this destructive command; `hearth restore %s %s` undoes it\n", res.Checkpoint, name, res.Checkpoint)
	case res.Gate != "":
		fmt.Fprintf(c.stderr, "hearth: %s\n", res.Gate)
	}
	return exitError(execExitCode(res))
}

// execRequest builds the request from exec's flags and the command words.
func execRequest(opts execOptions, words []string) (sandbox.ExecRequest, error) {
	if len(words) == 0 {
		return sandbox.ExecRequest{}, &usageError{verb: "exec", msg: "missing command: put it after --, e.g. hearth exec NAME -- ls -l"}
	}
	if opts.timeout < 0 {
		return sandbox.ExecRequest{}, &usageError{verb: "exec", msg: "--timeout must not be negative"}
	}
	if opts.maxOutput < 0 {
		return sandbox.ExecRequest{}, &usageError{verb: "exec", msg: "--max-output must not be negative"}
	}
	req := sandbox.ExecRequest{
		Cwd:            opts.cwd,
		Timeout:        sandbox.Duration(opts.timeout),
		Stdin:          opts.stdin,
		Secrets:        opts.secrets,
		MaxOutputBytes: opts.maxOutput,
	}
	if len(opts.env) > 0 {
		req.Env = map[string]string(opts.env)
	}
	if opts.shell {
		req.Shell = strings.Join(words, " ")
	} else {
		req.Argv = words
	}
	return req, nil
}

// execExitCode is the exit code a shell would give for how the command
// ended: 124 when it timed out, 128+N when signal N killed it (137 for the
// OOM killer's SIGKILL; 128 for a signal it cannot name), else its own exit
// status (255 for one outside 0-255).
func execExitCode(res sandbox.ExecResult) int {
	switch {
	case res.TimedOut:
		return exitTimedOut
	case res.Signal != "":
		if n, ok := signalNumber(res.Signal); ok {
			return exitSignalOffset + n
		}
		return exitSignalOffset
	case res.OOMKilled && res.ExitCode < 0:
		return exitSignalOffset + 9
	case res.ExitCode < 0 || res.ExitCode > 255:
		return 255
	}
	return res.ExitCode
}

// exitError turns an exit code into run's error: nil for 0.
func exitError(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus(code)
}

// execJSON is exec's --json output: the result's fields plus the output.
func execJSON(res sandbox.ExecResult, stdout, stderr []byte) (map[string]any, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	textOrBase64(out, "stdout", stdout)
	textOrBase64(out, "stderr", stderr)
	return out, nil
}

// signalNumber maps a signal name ("SIGKILL" or "KILL") to its Linux number;
// sandboxes are Linux whatever the client runs on.
func signalNumber(name string) (int, bool) {
	names := [...]string{1: "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
		"USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
		"XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"}
	name = strings.ToUpper(strings.TrimSpace(name))
	if num, ok := strings.CutPrefix(name, "SIGNAL "); ok { // Go's name for signals it has no name for
		n, err := strconv.Atoi(num)
		return n, err == nil && n > 0 && n < exitSignalOffset
	}
	name = strings.TrimPrefix(name, "SIG")
	for n, s := range names {
		if s != "" && s == name {
			return n, true
		}
	}
	return 0, false
}

// envFlag collects repeated --env K=V flags.
type envFlag map[string]string

func (e envFlag) String() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + e[k]
	}
	return strings.Join(parts, ",")
}

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}
