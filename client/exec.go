package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// The exec WebSocket's framing (docs/API.md): binary messages carry one
// stream byte and the payload.
const (
	streamStdin  byte = 0 // client → daemon: stdin bytes
	streamStdout byte = 1 // daemon → client: stdout bytes
	streamStderr byte = 2 // daemon → client: stderr bytes
	streamEOF    byte = 4 // client → daemon, alone: end of stdin
	streamScript byte = 5 // client → daemon: the script of a request with shell_size
)

const (
	// stdinChunk is the payload of one stdin or script message; the daemon
	// takes up to 1 MiB.
	stdinChunk = 64 << 10
	// maxMessage is the read limit for the daemon's messages, which carry
	// at most 1 MiB of output each.
	maxMessage = 4 << 20
	// streamScriptOver is the longest shell script sent inside the request:
	// a longer one follows it (shell_size, stream 5), well within the
	// daemon's limit on the request's message (256 KiB by default).
	streamScriptOver = 64 << 10
)

// endMessage is the last message of an exec stream.
type endMessage struct {
	Type   string              `json:"type"`
	Result *sandbox.ExecResult `json:"result"`
	Error  *sandbox.Error      `json:"error"`
}

// Exec runs a command in sandbox name and returns how it ended: a command
// that fails or times out is a result (ExitCode, TimedOut), not an error.
// stdout and stderr (nil discards) receive the output as it is produced,
// byte-exact, from one goroutine, so they may be the same writer.
//
// When stdin is not nil, req.Stdin is set and stdin is streamed to the
// command until it returns io.EOF, which closes the command's stdin; when
// it is nil, req.Stdin is cleared and the command's stdin is empty. Exec
// returns once the command has ended, even while a Read of stdin is still
// blocked (os.Stdin, say): that Read's data is then dropped.
//
// A shell script over 64 KiB follows the request as a stream of its own
// (sandbox.ExecRequest.ShellSize) instead of riding inside it; a caller may
// also stream one itself, with req.ShellSize and req.Script (a file, say),
// and a read error of req.Script ends Exec before the command starts.
//
// When req.TTY is set and stdin is a sandbox.ExecControls, its controls
// (terminal resizes, signals) are sent to the command as they come, until
// Exec returns.
//
// If ctx ends first, Exec returns ctx's error at once, and the daemon kills
// the command after its grace period (req.Grace). A stream that breaks
// before the command's end is unavailable; the command may still be
// running for its grace period.
func (c *Client) Exec(ctx context.Context, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if c.t.baseErr != nil {
		return res, c.t.baseErr
	}
	p, err := sandboxPath(name, "/exec")
	if err != nil {
		return res, err
	}
	req.Stdin = stdin != nil
	first, err := firstMessage(&req)
	if err != nil {
		return res, err
	}
	script := req.Script
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}

	header := http.Header{}
	c.t.setHeaders(header)
	conn, resp, err := websocket.Dial(ctx, c.t.base+p, &websocket.DialOptions{HTTPClient: c.t.hc, HTTPHeader: header})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return res, responseError(http.MethodGet, p, resp)
		}
		return res, c.t.unreachable(ctx, http.MethodGet, p, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxMessage)
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return res, streamBroken(ctx, name, err)
	}

	var input stdinState
	if stdin != nil || script != nil {
		go input.pump(ctx, conn, script, req.ShellSize, stdin)
	}
	if c, ok := stdin.(sandbox.ExecControls); ok && req.TTY != nil {
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		go sendControls(cctx, conn, c.Controls())
	}
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if err := input.failed(); err != nil {
				return res, fmt.Errorf("hearth: exec: %w", err)
			}
			return res, streamBroken(ctx, name, err)
		}
		m, err := parseMessage(typ, msg)
		switch {
		case err != nil:
			return res, sandbox.Errorf(sandbox.CodeUnavailable, "exec in sandbox %s: %v", name, err).
				WithHint("check that the client and the daemon speak the same API version")
		case m.result != nil:
			conn.Close(websocket.StatusNormalClosure, "")
			return *m.result, nil
		case m.err != nil:
			conn.Close(websocket.StatusNormalClosure, "")
			return res, m.err
		}
		w := stdout
		switch m.stream {
		case streamStderr:
			w = stderr
		case 0:
			continue // a message this client does not know yet
		}
		if _, err := w.Write(m.data); err != nil {
			return res, fmt.Errorf("hearth: exec: writing output: %w", err)
		}
	}
}

// firstMessage returns the first message of an exec stream for req. A
// req.Shell too long to go in the message becomes req's Script (and
// ShellSize), streamed after it.
func firstMessage(req *sandbox.ExecRequest) ([]byte, error) {
	if len(req.Shell) > streamScriptOver {
		req.ShellSize, req.Script = int64(len(req.Shell)), strings.NewReader(req.Shell)
		req.Shell = ""
	}
	if req.ShellSize > 0 && req.Script == nil {
		return nil, sandbox.Errorf(sandbox.CodeInvalidArgument, "exec: shell_size without the script's stream").
			WithHint("set req.Script to the script's reader, or put the script in req.Shell")
	}
	first, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("hearth: encode exec request: %w", err)
	}
	return first, nil
}

// serverMessage is one message of the daemon on an exec stream: output
// (stream and data), or the end (result or err); all zero for a message
// this client does not know, which it skips.
type serverMessage struct {
	stream byte // streamStdout or streamStderr
	data   []byte
	result *sandbox.ExecResult
	err    *sandbox.Error
}

// parseMessage reads one message of the daemon. A text message that is
// not JSON is an error; an end error whose code this client does not know
// becomes internal, with the daemon's code in details.server_code.
func parseMessage(typ websocket.MessageType, msg []byte) (serverMessage, error) {
	if typ == websocket.MessageBinary {
		if len(msg) == 0 || msg[0] != streamStdout && msg[0] != streamStderr {
			return serverMessage{}, nil // a stream this client does not know yet
		}
		return serverMessage{stream: msg[0], data: msg[1:]}, nil
	}
	var end endMessage
	if err := json.Unmarshal(msg, &end); err != nil {
		return serverMessage{}, fmt.Errorf("malformed message from the daemon: %v", err)
	}
	switch {
	case end.Type == "exit" && end.Result != nil:
		return serverMessage{result: end.Result}, nil
	case end.Type == "error" && end.Error != nil:
		if !end.Error.Code.Valid() {
			end.Error.With("server_code", string(end.Error.Code))
			end.Error.Code = sandbox.CodeInternal
		}
		return serverMessage{err: end.Error}, nil
	}
	return serverMessage{}, nil // a text message this client does not know yet
}

// streamBroken is the error of an exec stream that ended before its end
// message: the caller's context error, or unavailable.
func streamBroken(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("hearth: exec: %w", ctx.Err())
	}
	msg := err.Error()
	if st := websocket.CloseStatus(err); st != -1 {
		msg = fmt.Sprintf("closed with status %d", st)
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "exec stream of sandbox %s ended before the command did: %s", name, msg).
		WithHint("the command may still be running for its grace period; check `hearth serve` and retry")
}

// stdinState streams the script and stdin to the daemon and remembers a
// failure to read them.
type stdinState struct {
	mu  sync.Mutex
	err error
}

// pump sends the size bytes of script (when not nil) as script messages,
// then stdin (when not nil) as stdin messages and the end of stdin. When
// reading either fails, or the script is short, it records why and closes
// the connection, which ends Exec's read loop (and, on the daemon, the
// exec: before the command starts when the script broke, else after its
// grace period).
func (s *stdinState) pump(ctx context.Context, conn *websocket.Conn, script io.Reader, size int64, stdin io.Reader) {
	buf := make([]byte, 1+stdinChunk)
	if script != nil {
		n, err := send(ctx, conn, buf, streamScript, io.LimitReader(script, size))
		switch {
		case err == nil && n < size:
			err = fmt.Errorf("the script ended after %d of its %d bytes", n, size)
		case err != nil:
			err = fmt.Errorf("reading the script: %w", err)
		}
		if s.fail(conn, err) || stdin == nil {
			return
		}
	}
	if stdin != nil {
		if _, err := send(ctx, conn, buf, streamStdin, stdin); err != nil {
			s.fail(conn, fmt.Errorf("reading stdin: %w", err))
			return
		}
		conn.Write(ctx, websocket.MessageBinary, []byte{streamEOF})
	}
}

// sendControls sends each control of controls to the daemon, a text
// message each, until the channel closes, the stream ends or ctx does.
func sendControls(ctx context.Context, conn *websocket.Conn, controls <-chan sandbox.ExecControl) {
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-controls:
			if !ok {
				return
			}
			b, err := json.Marshal(c)
			if err != nil || conn.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
	}
}

// errStreamEnded is send's answer when the stream ended under it: Exec
// reports why.
var errStreamEnded = errors.New("the exec stream ended")

// send copies r to conn as messages of stream id until r's end, using buf
// (the stream byte and up to stdinChunk bytes), and returns how many bytes
// it sent and r's read error (errStreamEnded when the stream ended).
func send(ctx context.Context, conn *websocket.Conn, buf []byte, id byte, r io.Reader) (int64, error) {
	buf[0] = id
	var sent int64
	for {
		n, err := r.Read(buf[1:])
		if n > 0 {
			if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
				return sent, errStreamEnded
			}
			sent += int64(n)
		}
		switch {
		case errors.Is(err, io.EOF):
			return sent, nil
		case err != nil:
			return sent, err
		}
	}
}

// fail records err, if it is one (but the stream's own end, which Exec
// reports), closes the connection, and reports whether there was an error.
func (s *stdinState) fail(conn *websocket.Conn, err error) bool {
	if err == nil {
		return false
	}
	if !errors.Is(err, errStreamEnded) {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		conn.CloseNow()
	}
	return true
}

func (s *stdinState) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
