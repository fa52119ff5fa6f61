package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/sandbox"
)

// Where exec saves a stream that was cut: in the sandbox user's home
// (/home/sandbox, where relative paths resolve), as the caller, so that the
// caller can read it with its next command.
const (
	homeDir   = "/home/sandbox"
	outputDir = ".hearth"
	// killGrace is the grace of an MCP exec: a cancelled request (the
	// client's notifications/cancelled, or its session closing) kills the
	// command at once rather than after sandbox.DefaultGrace. The agent
	// takes zero for "the default", hence one millisecond.
	killGrace = sandbox.Duration(time.Millisecond)
)

// exec runs in.Command with /bin/sh -c. While it runs, each chunk of its
// output is sent as a progress notification (message: the chunk, _meta
// "stream": stdout or stderr) when the request carries a progress token.
// Cancelling the request kills the command. A stream over
// Options.MaxOutputBytes is cut to its head and tail around a marker line,
// and saved whole in the sandbox (see execOut).
func (t tools) exec(ctx context.Context, req *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	execReq, err := in.request()
	if err != nil {
		return nil, execOut{}, err
	}
	var prog *progress
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		prog = &progress{ctx: ctx, session: req.Session, token: tok}
	}
	limit := t.s.opts.MaxOutputBytes
	spoolMax := t.s.svc.Files.MaxWriteBytes()
	stdout := &capture{limit: limit, spoolMax: spoolMax, stream: "stdout", progress: prog}
	stderr := &capture{limit: limit, spoolMax: spoolMax, stream: "stderr", progress: prog}
	defer stdout.close()
	defer stderr.close()
	res, err := t.s.svc.Processes.Exec(ctx, t.p, in.Sandbox, execReq, nil, stdout, stderr)
	if err != nil {
		return nil, execOut{}, t.s.publicError(ctx, "sandbox_exec", err)
	}
	out := execOut{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, Signal: res.Signal, OOMKilled: res.OOMKilled,
		DurationMs: res.DurationMs, Checkpoint: res.Checkpoint, Gate: res.Gate,
		StdoutBytes: stdout.total, StderrBytes: stderr.total,
	}
	id := randomID()
	out.Stdout, out.StdoutFile = t.finish(ctx, in.Sandbox, id, stdout)
	out.Stderr, out.StderrFile = t.finish(ctx, in.Sandbox, id, stderr)
	out.Truncated = stdout.cut() || stderr.cut()
	return nil, out, nil
}

// request is the exec request in asks for: its command at most
// maxCommandBytes (too_large), its timeout a duration (see duration), and
// the request valid.
func (in execIn) request() (sandbox.ExecRequest, error) {
	if len(in.Command) > maxCommandBytes {
		return sandbox.ExecRequest{}, sandbox.Errorf(sandbox.CodeTooLarge, "command of %d bytes is larger than the %d-byte limit", len(in.Command), maxCommandBytes).
			With("size", len(in.Command)).With("max_bytes", maxCommandBytes).
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

// finish returns what the result carries of c's stream: all of it, or,
// when it was cut, its head, a marker line and its tail, after saving the
// whole stream (up to the daemon's write limit) in the sandbox at the path
// it returns ("" when saving failed, which the marker says).
func (t tools) finish(ctx context.Context, name, id string, c *capture) (string, string) {
	if !c.cut() {
		return c.head.String() + string(c.tail), ""
	}
	rel := fmt.Sprintf("%s/exec-%s.%s", outputDir, id, c.stream)
	path := homeDir + "/" + rel
	cut := c.total - int64(c.head.Len()) - int64(len(c.tail))
	var marker string
	if err := t.save(ctx, name, rel, c); err != nil {
		path = ""
		marker = fmt.Sprintf("[… %d bytes cut; saving the full output failed: %s …]", cut, sandbox.AsError(err).Message)
	} else if c.spooled < c.total {
		marker = fmt.Sprintf("[… %d bytes cut; the first %d bytes of the output in %s …]", cut, c.spooled, path)
	} else {
		marker = fmt.Sprintf("[… %d bytes cut; full output in %s …]", cut, path)
	}
	return c.head.String() + "\n" + marker + "\n" + string(c.tail), path
}

// save writes c's spooled stream into the sandbox at path (relative to
// the home), as the caller.
func (t tools) save(ctx context.Context, name, path string, c *capture) error {
	if c.spoolErr != nil {
		t.s.log.Error("spool exec output", "err", c.spoolErr)
		return sandbox.Errorf(sandbox.CodeInternal, "the daemon could not hold the output")
	}
	if _, err := c.spool.Seek(0, io.SeekStart); err != nil {
		return t.s.publicError(ctx, "sandbox_exec", err)
	}
	_, err := t.s.svc.Files.WriteFile(ctx, t.p, name, sandbox.WriteRequest{Path: path, Parents: true}, c.spool)
	if err != nil {
		return t.s.publicError(ctx, "sandbox_exec", err)
	}
	return nil
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// capture is one output stream of an exec: it keeps the first limit/2
// bytes and the last limit/2, counts them all, and, once the stream
// outgrows limit, spools it (its first spoolMax bytes) to a temporary file
// for finish to save in the sandbox. Each write is also reported to
// progress, if any.
type capture struct {
	limit    int
	spoolMax int64
	stream   string
	progress *progress

	total    int64
	head     bytes.Buffer
	tail     []byte // the last limit-limit/2 bytes past the head, once cut
	spool    *os.File
	spooled  int64
	spoolErr error
}

// cut reports whether the stream outgrew the limit.
func (c *capture) cut() bool { return c.total > int64(c.limit) }

func (c *capture) Write(p []byte) (int, error) {
	c.progress.send(c.stream, p)
	c.total += int64(len(p))
	if c.spool == nil && c.spoolErr == nil && c.total > int64(c.limit) {
		c.startSpool()
	}
	if c.spool != nil && c.spooled < c.spoolMax {
		chunk := p[:min(int64(len(p)), c.spoolMax-c.spooled)]
		n, err := c.spool.Write(chunk)
		c.spooled += int64(n)
		if err != nil {
			c.spoolErr = err
			c.close()
		}
	}
	rest := p
	if room := c.limit/2 - c.head.Len(); room > 0 && c.tail == nil {
		k := min(room, len(rest))
		c.head.Write(rest[:k])
		rest = rest[k:]
	}
	if len(rest) > 0 || c.tail != nil {
		keep := c.limit - c.limit/2
		c.tail = append(c.tail, rest...)
		if len(c.tail) > keep {
			c.tail = append(c.tail[:0:0], c.tail[len(c.tail)-keep:]...)
		}
	}
	return len(p), nil
}

// startSpool opens the spool and writes into it what the stream held so
// far: the head, and the tail (which is all of the rest until the cap).
func (c *capture) startSpool() {
	f, err := os.CreateTemp("", "hearth-mcp-exec-")
	if err != nil {
		c.spoolErr = err
		return
	}
	os.Remove(f.Name()) // unlinked: nothing outlives the process
	c.spool = f
	for _, b := range [][]byte{c.head.Bytes(), c.tail} {
		n, err := f.Write(b)
		c.spooled += int64(n)
		if err != nil {
			c.spoolErr = err
			c.close()
			return
		}
	}
}

// close releases the spool.
func (c *capture) close() {
	if c.spool != nil {
		c.spool.Close()
		c.spool = nil
	}
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
