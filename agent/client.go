package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// Dialer opens a new connection to one sandbox's agent.
type Dialer func(ctx context.Context) (net.Conn, error)

// Client is the daemon's end of the protocol for one sandbox. It is safe for
// concurrent use: every call opens its own connection.
type Client struct {
	dial Dialer
}

// NewClient returns a client that reaches the agent through dial.
func NewClient(dial Dialer) *Client { return &Client{dial: dial} }

// call opens a connection and sends req. The caller owns the connection and
// calls the returned func when done with it. When ctx ends, the connection
// is closed, which the agent takes as its caller going away.
func (c *Client) call(ctx context.Context, req Request) (net.Conn, func(), error) {
	conn, stop, err := c.open(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return conn, func() { stop(); conn.Close() }, nil
}

// open is call for a connection that may outlive ctx: it returns the stop
// of the context.AfterFunc that closes the connection when ctx ends. stop
// reports whether it came first; when it did not, the connection is closed
// or being closed.
func (c *Client) open(ctx context.Context, req Request) (net.Conn, func() bool, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, nil, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox agent unreachable").
			WithHint("the sandbox may be stopped or starting; retry")
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	b, err := json.Marshal(req)
	if err != nil {
		stop()
		conn.Close()
		return nil, nil, err
	}
	if len(b) > MaxFrame {
		stop()
		conn.Close()
		return nil, nil, sandbox.Errorf(sandbox.CodeTooLarge, "request of %d bytes exceeds the agent's %d", len(b), MaxFrame).
			With("max_bytes", MaxFrame).WithHint("pass large data through stdin or a file")
	}
	if err := WriteFrame(conn, FrameRequest, b); err != nil {
		stop()
		conn.Close()
		return nil, nil, c.broken(ctx, err)
	}
	return conn, stop, nil
}

// broken turns a connection failure into the error a caller sees: the
// context's own error when it ended, unavailable otherwise.
func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "connection to the sandbox agent broke: %v", err).
		WithHint("retry; if the sandbox died its status says why")
}

// final decodes a FrameResult into out, or returns the FrameError's error.
func final(kind FrameKind, payload []byte, out any) error {
	switch kind {
	case FrameResult:
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(payload, out); err != nil {
			return fmt.Errorf("agent: bad result: %w", err)
		}
		return nil
	case FrameError:
		var e sandbox.Error
		if err := json.Unmarshal(payload, &e); err != nil || !e.Code.Valid() {
			return fmt.Errorf("agent: bad error frame %q", payload)
		}
		// The cause of an internal error is for the daemon's log, not
		// for the caller: it wraps the error the caller sees.
		if cause, ok := e.Details[causeDetail]; ok && e.Code == sandbox.CodeInternal {
			delete(e.Details, causeDetail)
			if len(e.Details) == 0 {
				e.Details = nil
			}
			return fmt.Errorf("agent: %v: %w", cause, &e)
		}
		return &e
	}
	return fmt.Errorf("agent: unexpected frame %q", kind)
}

// simple runs an op whose only answer is its final frame.
func (c *Client) simple(ctx context.Context, req Request, out any) error {
	conn, done, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	defer done()
	kind, payload, err := ReadFrame(conn, nil)
	if err != nil {
		return c.broken(ctx, err)
	}
	return final(kind, payload, out)
}

// Ping checks that the agent answers and returns what it says about itself.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var res PingResult
	err := c.simple(ctx, Request{Op: OpPing}, &res)
	return res, err
}

// Exec runs a command and streams it: stdin (when not nil) is sent as the
// command's stdin and closed at its EOF, stdout and stderr receive the
// command's output as it comes, byte-exact (nil discards). It returns when
// the command has ended and its output was delivered; the result then tells
// how it ended (exit code or signal, timed_out, oom_killed). A command that
// exits non-zero is not an error: errors mean it could not run (not_found,
// permission_denied, invalid_argument …) or the connection broke. With
// req.TTY the command's terminal output all goes to stdout.
//
// When stdin implements sandbox.ExecControls, each control it delivers is
// sent to the command (FrameControl) as it comes, until Exec returns or the
// channel closes; Exec never waits for a control.
//
// A script streamed with the request (req.ShellSize, req.Script) is read
// from req.Script and sent after the request before anything else; a read
// error of it, or a short script, ends Exec with that error before the
// agent starts the command. A shell script over 64 KiB is sent the same
// way from req.Shell.
//
// When ctx ends the connection is closed: the command runs on unheard for
// req.Grace (sandbox.DefaultGrace when zero) and is then killed, and Exec
// returns ctx's error. A failing stdout or stderr write ends Exec the same
// way, with that error. Exec does not wait for a Read of stdin that blocks:
// the copy stops at the next Read that returns.
func (c *Client) Exec(ctx context.Context, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	return c.ExecSecrets(ctx, req, nil, stdin, stdout, stderr)
}

// Secret is a secret environment variable of a command (see ExecSecrets).
type Secret struct {
	// Name is the variable's name, a valid secret name
	// (sandbox.ValidateSecretName).
	Name string
	// Value is its value, which holds no NUL byte.
	Value []byte
}

// ExecSecrets is Exec for a command that is also given secrets, each in
// the environment variable of its name (over req.Env's). req names none
// (req.Secrets is the daemon's, which opens them). The values never go
// into the request's JSON: each travels in a FrameSecret of its own, from a
// buffer that is wiped once written, and the agent wipes its copy once the
// command has started; secrets stays the caller's to wipe.
func (c *Client) ExecSecrets(ctx context.Context, req sandbox.ExecRequest, secrets []Secret, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	if stdin != nil {
		req.Stdin = true
	}
	if err := checkExec(req, secrets); err != nil {
		return sandbox.ExecResult{}, err
	}
	r := Request{Op: OpExec, Exec: &req, SecretEnv: len(secrets)}
	var script io.Reader // the script that follows the request
	switch {
	case req.ShellSize > 0 && req.Script == nil:
		return sandbox.ExecResult{}, sandbox.Errorf(sandbox.CodeInvalidArgument, "exec: shell_size without the script's stream")
	case req.ShellSize > 0:
		script, r.ShellSize = io.LimitReader(req.Script, req.ShellSize), req.ShellSize
		req.ShellSize, req.Script = 0, nil // the agent reads Request.ShellSize
	case len(req.Shell) > maxArgScript:
		script, r.ShellSize = strings.NewReader(req.Shell), int64(len(req.Shell))
		req.Shell = ""
	}
	conn, done, err := c.call(ctx, r)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	// The secrets go first, then the script (the agent reads them in that
	// order). On a write error the agent has answered (and closed) or the
	// connection broke: the frames read below say which.
	for _, sec := range secrets {
		if sendSecret(conn, sec) != nil {
			break
		}
	}
	if script != nil {
		if err := sendScript(conn, script, r.ShellSize); err != nil {
			return sandbox.ExecResult{}, err
		}
	}
	if req.Stdin {
		in := &inputFrames{conn: conn}
		go in.sendStdin(stdin)
		if ctl, ok := stdin.(sandbox.ExecControls); ok {
			returned := make(chan struct{})
			defer close(returned)
			go in.sendControls(ctl.Controls(), returned)
		}
	}
	var buf []byte
	for {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			return sandbox.ExecResult{}, c.broken(ctx, err)
		}
		buf = payload
		var w io.Writer
		switch kind {
		case FrameStdout:
			w = stdout
		case FrameStderr:
			w = stderr
		default:
			var res sandbox.ExecResult
			err := final(kind, payload, &res)
			return res, err
		}
		if w != nil {
			if _, err := w.Write(payload); err != nil {
				return sandbox.ExecResult{}, fmt.Errorf("agent: writing the command's output: %w", err)
			}
		}
	}
}

// sendScript sends the size bytes of script as FrameData frames. On a
// write error the agent has answered (and closed) or the connection broke:
// it returns nil, and the frames read next say which. A read error, or a
// script shorter than size, closes the connection, so that the agent runs
// nothing, and is returned (a short script as invalid_argument).
func sendScript(conn net.Conn, script io.Reader, size int64) error {
	buf := make([]byte, min(size, dataChunk))
	for sent := int64(0); sent < size; {
		n, err := io.ReadFull(script, buf[:min(int64(len(buf)), size-sent)])
		if err != nil {
			conn.Close()
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return sandbox.Errorf(sandbox.CodeInvalidArgument, "the script ended after %d of its %d bytes", sent+int64(n), size).
					WithHint("send exactly shell_size bytes of script")
			}
			return err
		}
		if WriteFrame(conn, FrameData, buf[:n]) != nil {
			return nil
		}
		sent += int64(n)
	}
	return nil
}

// inputFrames sends the input frames of one exec, from two goroutines
// (stdin and controls): each frame goes out whole, never interleaved with
// another, whatever the connection's own Write guarantees.
type inputFrames struct {
	conn net.Conn
	mu   sync.Mutex
}

// sendStdin copies r as stdin frames, then FrameEOF. A read error other
// than EOF closes the connection: the command must not take a truncated
// input for a whole one.
func (in *inputFrames) sendStdin(r io.Reader) {
	buf := make([]byte, headerLen+stdinChunk)
	if r == nil {
		in.framed(FrameEOF, buf[:headerLen])
		return
	}
	for {
		n, err := r.Read(buf[headerLen:])
		if n > 0 {
			if werr := in.framed(FrameStdin, buf[:headerLen+n]); werr != nil {
				return // the exec ended or the connection broke
			}
		}
		if err == io.EOF {
			in.framed(FrameEOF, buf[:headerLen])
			return
		}
		if err != nil {
			in.conn.Close()
			return
		}
	}
}

// sendControls sends each control as a FrameControl until controls is
// closed, returned is, or the connection fails.
func (in *inputFrames) sendControls(controls <-chan sandbox.ExecControl, returned <-chan struct{}) {
	for {
		select {
		case <-returned:
			return
		case c, ok := <-controls:
			if !ok {
				return
			}
			if in.json(FrameControl, c) != nil {
				return // the exec ended or the connection broke
			}
		}
	}
}

// framed writes buf as one frame of kind (see writeFramed).
func (in *inputFrames) framed(kind FrameKind, buf []byte) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return writeFramed(in.conn, kind, buf)
}

// json writes v as the JSON payload of one frame of kind.
func (in *inputFrames) json(kind FrameKind, v any) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return WriteJSON(in.conn, kind, v)
}

// checkExec refuses what the agent would: an invalid request, one that
// names secrets, too many secrets, a secret's invalid name.
func checkExec(req sandbox.ExecRequest, secrets []Secret) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if len(req.Secrets) > 0 {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "agent: the request names secrets; pass their values instead")
	}
	if len(secrets) > maxSecretEnv {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "%d secrets for one command exceed %d", len(secrets), maxSecretEnv).With("max", maxSecretEnv)
	}
	for _, sec := range secrets {
		if err := sandbox.ValidateSecretName(sec.Name); err != nil {
			return err
		}
	}
	return nil
}

// sendSecret writes sec as a FrameSecret, "NAME=VALUE", from a buffer it
// wipes once written.
func sendSecret(conn net.Conn, sec Secret) error {
	buf := make([]byte, headerLen+len(sec.Name)+1+len(sec.Value))
	defer clear(buf)
	n := copy(buf[headerLen:], sec.Name)
	buf[headerLen+n] = '='
	copy(buf[headerLen+n+1:], sec.Value)
	return writeFramed(conn, FrameSecret, buf)
}

// stdinChunk and dataChunk are the payload sizes of the client's input
// frames.
const (
	stdinChunk = 64 << 10
	dataChunk  = 256 << 10
)

// ReadFile streams the file at path (relative paths are relative to the
// sandbox user's home) to w. Errors about the file (not_found,
// invalid_argument for a directory, permission_denied) come before any
// byte is written to w. An error after some bytes means w holds a
// truncated file.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) error {
	conn, done, err := c.call(ctx, Request{Op: OpRead, Path: path})
	if err != nil {
		return err
	}
	defer done()
	var buf []byte
	for {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			return c.broken(ctx, err)
		}
		buf = payload
		if kind != FrameData {
			return final(kind, payload, nil)
		}
		if _, err := w.Write(payload); err != nil {
			return fmt.Errorf("agent: writing the file's content: %w", err)
		}
	}
}

// WriteFile stores r's content in the file req.Path, atomically: on any
// error (too_large beyond req.MaxBytes, a read error of r, ctx ending, the
// connection breaking) the file is left as it was. See sandbox.WriteRequest
// for modes, owners and parents. It returns the written file's info (the
// symlink's target when req.Path is a symlink).
func (c *Client) WriteFile(ctx context.Context, req sandbox.WriteRequest, r io.Reader) (sandbox.FileInfo, error) {
	conn, done, err := c.call(ctx, Request{Op: OpWrite, Write: &req})
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	defer done()
	type answer struct {
		kind    FrameKind
		payload []byte
		err     error
	}
	answered := make(chan answer, 1)
	go func() {
		kind, payload, err := ReadFrame(conn, nil)
		answered <- answer{kind, payload, err}
	}()
	result := func(a answer) (sandbox.FileInfo, error) {
		if a.err != nil {
			return sandbox.FileInfo{}, c.broken(ctx, a.err)
		}
		var info sandbox.FileInfo
		err := final(a.kind, a.payload, &info)
		return info, err
	}

	buf := make([]byte, headerLen+dataChunk)
	for {
		select {
		case a := <-answered: // an early answer is an error, such as too_large
			return result(a)
		default:
		}
		n, rerr := r.Read(buf[headerLen:])
		if n > 0 {
			if err := writeFramed(conn, FrameData, buf[:headerLen+n]); err != nil {
				return result(<-answered) // the agent answered and closed, or the connection broke
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return sandbox.FileInfo{}, ctx.Err()
			}
			return sandbox.FileInfo{}, fmt.Errorf("agent: reading the content to write: %w", rerr)
		}
	}
	WriteFrame(conn, FrameEOF, nil) // on error, the answer says why
	return result(<-answered)
}

// MaxListBytes bounds one listing's frames (see List): 16 MiB, about
// 100,000 entries. A larger one is too_large.
const MaxListBytes = 16 << 20

// List returns the entries of the directory at path, sorted by name
// (symlinks described, not followed). A path that is not a directory is
// invalid_argument.
//
// The listing is at most MaxListBytes of the agent's frames: the agent is
// the sandbox's, and a sandbox may hold, or fake, a directory of any size,
// which the daemon must not hold in memory.
func (c *Client) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	conn, done, err := c.call(ctx, Request{Op: OpList, Path: path})
	if err != nil {
		return nil, err
	}
	defer done()
	out := []sandbox.FileInfo{}
	var buf []byte
	for total := 0; ; {
		kind, payload, err := ReadFrame(conn, buf)
		if err != nil {
			return nil, c.broken(ctx, err)
		}
		buf = payload
		if total += len(payload); total > MaxListBytes {
			return nil, sandbox.Errorf(sandbox.CodeTooLarge, "the listing of %s is larger than %d bytes", path, MaxListBytes).
				With("max_bytes", MaxListBytes).
				WithHint("list a directory with fewer entries, or run `ls` or `find` in a command")
		}
		if kind != FrameData {
			var res ListResult
			if err := final(kind, payload, &res); err != nil {
				return nil, err
			}
			if res.Count != len(out) {
				return nil, fmt.Errorf("agent: list sent %d entries but counted %d", len(out), res.Count)
			}
			return out, nil
		}
		var batch []sandbox.FileInfo
		if err := json.Unmarshal(payload, &batch); err != nil {
			return nil, fmt.Errorf("agent: bad list frame: %w", err)
		}
		out = append(out, batch...)
	}
}

// Stat describes the file at path; a symlink is described, not followed
// (Target says where it points).
func (c *Client) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.simple(ctx, Request{Op: OpStat, Path: path}, &info)
	return info, err
}

// Mkdir creates the directory at path and any missing parent (mkdir -p),
// mode 0755 and owned by the sandbox user. An existing directory is not an
// error; an existing file is already_exists.
func (c *Client) Mkdir(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.simple(ctx, Request{Op: OpMkdir, Path: path}, &info)
	return info, err
}

// Remove deletes the file, symlink or empty directory at path; with
// recursive, also a directory and everything below it. A missing path is
// not_found, a non-empty directory without recursive and "/" are
// invalid_argument.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.simple(ctx, Request{Op: OpRemove, Path: path, Recursive: recursive}, nil)
}

// Rename moves from to to, replacing a file at to; an existing directory
// at to is already_exists. It returns the info of to.
func (c *Client) Rename(ctx context.Context, from, to string) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.simple(ctx, Request{Op: OpRename, Path: from, To: to}, &info)
	return info, err
}

// Chmod sets the mode of the file at path, following a symlink: permission
// bits plus fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky; other bits are
// invalid_argument.
func (c *Client) Chmod(ctx context.Context, path string, mode fs.FileMode) (sandbox.FileInfo, error) {
	var info sandbox.FileInfo
	err := c.simple(ctx, Request{Op: OpChmod, Path: path, Mode: uint32(mode)}, &info)
	return info, err
}

// Connect opens a TCP stream to port on the sandbox's loopback, through the
// agent, whatever the sandbox's network (even none): the agent connects to
// 127.0.0.1, or to [::1] when 127.0.0.1 refuses, and from then on the
// returned connection carries the stream's bytes both ways, unframed. It is
// the connection the Dialer returned, so a *net.UnixConn (or *net.TCPConn)
// keeps its CloseWrite: the agent passes a half-close on to the server, and
// the server's half-close reads as EOF. The stream ends when either side
// closes; closing the returned connection closes the agent's to the server.
//
// ctx bounds the call until the agent has connected, not the stream, which
// outlives it. Errors: invalid_argument for a port outside 1 to 65535,
// unavailable when nothing listens on the port (the message names it), when
// the server does not accept within seconds, or when the agent cannot be
// reached.
func (c *Client) Connect(ctx context.Context, port int) (net.Conn, error) {
	if err := sandbox.ValidatePort(port); err != nil {
		return nil, err
	}
	conn, stop, err := c.open(ctx, Request{Op: OpConnect, Port: port})
	if err != nil {
		return nil, err
	}
	// The result is one frame read with exact lengths: nothing of the
	// stream that follows is read here.
	kind, payload, err := ReadFrame(conn, nil)
	if err == nil {
		err = final(kind, payload, &ConnectResult{})
	} else {
		err = c.broken(ctx, err)
	}
	if !stop() { // ctx ended and the connection is closed or closing
		conn.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Ports returns the TCP ports processes in the sandbox listen on, with the
// address each is bound to ("0.0.0.0", "127.0.0.1", "::", "::1"), sorted
// by port then address.
func (c *Client) Ports(ctx context.Context) ([]sandbox.ListeningPort, error) {
	var res PortsResult
	if err := c.simple(ctx, Request{Op: OpPorts}, &res); err != nil {
		return nil, err
	}
	if res.Ports == nil {
		res.Ports = []sandbox.ListeningPort{}
	}
	return res.Ports, nil
}
