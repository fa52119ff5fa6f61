package mcpserver

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// killGrace is the grace of an MCP exec: a cancelled request (the
// client's notifications/cancelled, or its session closing) kills the
// command at once rather than after sandbox.DefaultGrace. The agent takes
// zero for "the default", hence one millisecond.
const killGrace = sandbox.Duration(time.Millisecond)

// exec runs in.Command with /bin/sh -c. While it runs, each chunk of its
// output is sent as a progress notification (message: the chunk, _meta
// "stream": stdout or stderr) when the request carries a progress token.
// Cancelling the request kills the command. A stream over
// Options.MaxOutputBytes is cut to its head and tail around a marker line,
// and saved whole in the sandbox (see execOut): the exec core's long-output
// option (execstream, sandbox.ExecRequest.MaxOutputBytes).
func (t tools) exec(ctx context.Context, req *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	execReq, err := in.request()
	if err != nil {
		return nil, execOut{}, err
	}
	var prog *progress
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		prog = &progress{ctx: ctx, session: req.Session, token: tok}
	}
	execReq.MaxOutputBytes = int64(t.s.opts.MaxOutputBytes) // the exec core's long-output option
	res, err := t.s.exec.Run(ctx, execstream.Call{Principal: t.p, Sandbox: in.Sandbox, Request: execReq,
		Stdout: prog.stream("stdout"), Stderr: prog.stream("stderr")})
	if err != nil {
		return nil, execOut{}, t.s.publicError(ctx, "sandbox_exec", err)
	}
	return nil, execOut{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, Signal: res.Signal, OOMKilled: res.OOMKilled,
		DurationMs: res.DurationMs, Checkpoint: res.Checkpoint, Gate: res.Gate, ExecOutput: *res.Output,
	}, nil
}

// request is the exec request in asks for: its command at most
// execstream.MaxRequestBytes (too_large), its timeout a duration (see duration), and
// the request valid.
func (in execIn) request() (sandbox.ExecRequest, error) {
	if len(in.Command) > execstream.MaxRequestBytes {
		return sandbox.ExecRequest{}, sandbox.Errorf(sandbox.CodeTooLarge, "command of %d bytes is larger than the %d-byte limit", len(in.Command), execstream.MaxRequestBytes).
			With("size", len(in.Command)).With("max_bytes", execstream.MaxRequestBytes).
			WithHint("send a long script in pieces, each appended to a file in the sandbox (cat >> script.sh), then run the file")
	}
	timeout, err := duration("timeout", in.Timeout)
	if err != nil {
		return sandbox.ExecRequest{}, err
	}
	req := sandbox.ExecRequest{
		Shell:   in.Command,
		Env:     in.Env,
		Cwd:     in.Cwd,
		Timeout: timeout,
		Grace:   killGrace,
		Secrets: in.Secrets,
	}
	return req, req.Validate()
}

// progress sends an exec's output as progress notifications of the
// request's token. Sending is best effort: a client that stopped listening
// does not stop the command.
type progress struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any

	mu   sync.Mutex // stdout and stderr are written from separate goroutines
	sent int64
}

// stream is a writer onto p's notifications of one stream, or nil
// without p.
func (p *progress) stream(name string) io.Writer {
	if p == nil {
		return nil
	}
	return writerFunc(func(b []byte) (int, error) {
		p.send(name, b)
		return len(b), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (p *progress) send(stream string, b []byte) {
	if p == nil || len(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent += int64(len(b))
	p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
		Meta:          mcp.Meta{"stream": stream},
		ProgressToken: p.token,
		Message:       string(b),
		Progress:      float64(p.sent),
	})
}
