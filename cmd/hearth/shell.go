package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/hearth/hearth/sandbox"
)

const shellSummary = `Open an interactive terminal in a sandbox: a login shell (bash where the
image has it, else sh), or CMD when it follows --. Keys go to the sandbox as
typed (Ctrl-C interrupts the command in the sandbox, Ctrl-D ends the shell),
the sandbox's terminal follows this one's size, and hearth exits with the
shell's exit code. This terminal is put back as it was however the session
ends. A sleeping sandbox is woken. 'hearth exec -t NAME -- CMD' is the same
for one command.`

// loginShell is the command `hearth shell` runs without one of its own.
const loginShell = `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`

// runShell opens an interactive terminal in a sandbox.
func runShell(ctx context.Context, c *cli, args []string) error {
	fs := c.clientFlagSet("shell", "NAME [--env K=V]... [--cwd DIR] [-- CMD [ARGS...]]", shellSummary)
	opts := execOptions{env: envFlag{}}
	fs.Var(opts.env, "env", "set `K=V` in the shell's environment (repeatable)")
	fs.StringVar(&opts.cwd, "cwd", "", "working `DIR` (default: the sandbox user's home)")
	name, words, err := fs.parseCommand(args)
	if err != nil {
		return err
	}
	if name == "" {
		return &usageError{verb: "shell", msg: "missing NAME"}
	}
	if len(words) == 0 {
		opts.shell, words = true, []string{loginShell}
	}
	req, err := execRequest(opts, words)
	if err != nil {
		return err
	}
	return c.terminal(ctx, name, req)
}

// terminal runs req in sandbox name on a terminal of its own, joined to
// this process's: when stdin is a terminal it is put in raw mode (and
// back as it was on every way out), its size is the sandbox terminal's
// and follows it (SIGWINCH), and its keys go to the command as typed.
// SIGTERM, SIGHUP and SIGINT end the session, the terminal restored.
// It returns the command's exit code as exec does.
func (c *cli) terminal(ctx context.Context, name string, req sandbox.ExecRequest) error {
	in := &terminalInput{Reader: c.stdin, controls: make(chan sandbox.ExecControl, 4)}
	req.Stdin, req.TTY = true, &sandbox.TTYSize{}
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		*req.TTY = sizeOf(fd)
		old, err := term.MakeRaw(fd)
		if err != nil {
			return err
		}
		defer term.Restore(fd, old)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go in.follow(ctx, fd, winch)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	defer stop()
	res, err := c.client().Exec(ctx, name, req, in, c.stdout, c.stderr)
	if err != nil {
		return err
	}
	return exitError(execExitCode(res))
}

// sizeOf is terminal fd's size, or the default (zero) when it has none.
func sizeOf(fd int) sandbox.TTYSize {
	cols, rows, err := term.GetSize(fd)
	if err != nil || cols <= 0 || rows <= 0 || cols > 1000 || rows > 1000 {
		return sandbox.TTYSize{}
	}
	return sandbox.TTYSize{Rows: uint16(rows), Cols: uint16(cols)}
}

// terminalInput is a terminal session's stdin with its controls (see
// sandbox.ExecControls): the local terminal's resizes.
type terminalInput struct {
	io.Reader
	controls chan sandbox.ExecControl
}

func (t *terminalInput) Controls() <-chan sandbox.ExecControl { return t.controls }

// follow sends terminal fd's new size each time winch fires, until ctx
// ends.
func (t *terminalInput) follow(ctx context.Context, fd int, winch <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			size := sizeOf(fd)
			select {
			case t.controls <- sandbox.ExecControl{Resize: &size}:
			default: // the command is not taking them; the next one will do
			}
		}
	}
}
