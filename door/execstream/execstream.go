// Package execstream is the one exec stream of the doors: it runs a
// command through lifecycle's Processes and carries what goes in (the
// script of a streamed request, stdin, terminal resizes and signals) and
// what comes out (stdout and stderr as produced, the result), whatever
// the wire. The native exec WebSocket (httpapi), the Sprites exec
// WebSocket and HTTP exec (spritesapi) and MCP's sandbox_exec (mcpserver)
// each only translate their frames to and from it: Input takes what the
// client sends, Conn serializes what goes back on a WebSocket, Serve ties
// them to one command, and Run runs one.
//
// Long output is an option of the stream (ExecRequest.MaxOutputBytes):
// each of stdout and stderr is kept to its head and tail around a marker
// line, and the whole stream is saved in the sandbox, at a path the
// result names (sandbox.ExecOutput). MCP asks for it on every call; the
// native API's callers may.
//
// Decisions stay in lifecycle: the secrets' scrubbing, the deadline
// (ExecRequest.Timeout), the grace after a disconnect and the guardrails
// are Exec's.
package execstream

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/hearth/hearth/sandbox"
)

// MaxRequestBytes bounds the exec request as a door receives it: the
// native exec WebSocket's first message, MCP's command. A larger script
// streams after the request (ExecRequest.ShellSize).
const MaxRequestBytes = 256 << 10

// Processes runs commands (lifecycle.Processes).
type Processes interface {
	Exec(ctx context.Context, p sandbox.Principal, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error)
}

// Files writes into a sandbox (lifecycle.Files): where the long-output
// option saves a whole stream.
type Files interface {
	WriteFile(ctx context.Context, p sandbox.Principal, name string, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error)
	MaxWriteBytes() int64
}

// Runner runs the doors' commands.
type Runner struct {
	procs Processes
	files Files
	log   *slog.Logger
}

// New returns the runner over lifecycle's processes and files; a nil log
// discards.
func New(procs Processes, files Files, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{procs: procs, files: files, log: log}
}

// Call is one command to run.
type Call struct {
	// Principal runs Request in the sandbox Sandbox names.
	Principal sandbox.Principal
	Sandbox   string
	Request   sandbox.ExecRequest
	// Stdin is the command's stdin (nil: empty), an Input's Reader for a
	// streamed one; its ExecControls, if it has them, steer the command.
	Stdin io.Reader
	// Stdout and Stderr receive the output as the command produces it;
	// nil discards it (as a door that asked for MaxOutputBytes may).
	Stdout, Stderr io.Writer
}

// Run runs c and returns its result: with Request.MaxOutputBytes, its
// Output holds each stream cut to that many bytes, the whole of a cut
// stream saved in the sandbox. The error is lifecycle's.
func (x *Runner) Run(ctx context.Context, c Call) (sandbox.ExecResult, error) {
	req := c.Request
	limit := int(req.MaxOutputBytes)
	req.MaxOutputBytes = 0 // the door's option: the sandbox never sees it
	if limit == 0 {
		return x.procs.Exec(ctx, c.Principal, c.Sandbox, req, c.Stdin, orDiscard(c.Stdout), orDiscard(c.Stderr))
	}
	spoolMax := x.files.MaxWriteBytes()
	stdout := &capture{limit: limit, spoolMax: spoolMax, stream: "stdout", live: c.Stdout}
	stderr := &capture{limit: limit, spoolMax: spoolMax, stream: "stderr", live: c.Stderr}
	defer stdout.close()
	defer stderr.close()
	res, err := x.procs.Exec(ctx, c.Principal, c.Sandbox, req, c.Stdin, stdout, stderr)
	if err != nil {
		return res, err
	}
	id := randomID()
	out := &sandbox.ExecOutput{StdoutBytes: stdout.total, StderrBytes: stderr.total, Truncated: stdout.cut() || stderr.cut()}
	out.Stdout, out.StdoutFile = x.finish(ctx, c, id, stdout)
	out.Stderr, out.StderrFile = x.finish(ctx, c, id, stderr)
	res.Output = out
	return res, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// PublicError returns the *sandbox.Error to show for err, an error of a
// call that runs commands (MCP's tool calls are): a call whose ctx ended
// was cancelled (unavailable), and the cause of any other error is logged
// (op says where), never sent.
func (x *Runner) PublicError(ctx context.Context, op string, err error) *sandbox.Error {
	var e *sandbox.Error
	if errors.As(err, &e) {
		return e
	}
	if ctx.Err() != nil {
		return sandbox.Errorf(sandbox.CodeUnavailable, "cancelled").
			WithHint("the call was cancelled; a command it ran was killed")
	}
	x.log.Error("internal error", "op", op, "err", err)
	return sandbox.AsError(err)
}
