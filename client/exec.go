package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
)

const (
	// stdinChunk is the payload of one stdin message; the daemon takes up
	// to 1 MiB.
	stdinChunk = 64 << 10
	// maxMessage is the read limit for the daemon's messages, which carry
	// at most 1 MiB of output each.
	maxMessage = 4 << 20
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
// If ctx ends first, Exec returns ctx's error at once, and the daemon kills
// the command after its grace period (req.Grace). A stream that breaks
// before the command's end is unavailable; the command may still be
// running for its grace period.
func (c *Client) Exec(ctx context.Context, name string, req sandbox.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if c.baseErr != nil {
		return res, c.baseErr
	}
	p, err := sandboxPath(name, "/exec")
	if err != nil {
		return res, err
	}
	req.Stdin = stdin != nil
	first, err := json.Marshal(req)
	if err != nil {
		return res, fmt.Errorf("hearth: encode exec request: %w", err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}

	header := http.Header{}
	c.setHeaders(header)
	conn, resp, err := websocket.Dial(ctx, c.base+p, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: header})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return res, responseError(http.MethodGet, p, resp)
		}
		return res, c.unreachable(ctx, http.MethodGet, p, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxMessage)
	if err := conn.Write(ctx, websocket.MessageText, first); err != nil {
		return res, c.streamBroken(ctx, name, err)
	}

	var input stdinState
	if stdin != nil {
		go input.pump(ctx, conn, stdin)
	}
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if err := input.failed(); err != nil {
				return res, fmt.Errorf("hearth: exec: reading stdin: %w", err)
			}
			return res, c.streamBroken(ctx, name, err)
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 {
				continue
			}
			var w io.Writer
			switch msg[0] {
			case streamStdout:
				w = stdout
			case streamStderr:
				w = stderr
			default:
				continue // a stream this client does not know yet
			}
			if _, err := w.Write(msg[1:]); err != nil {
				return res, fmt.Errorf("hearth: exec: writing output: %w", err)
			}
			continue
		}
		var end endMessage
		if err := json.Unmarshal(msg, &end); err != nil {
			return res, sandbox.Errorf(sandbox.CodeUnavailable, "exec in sandbox %s: malformed message from the daemon: %v", name, err).
				WithHint("check that the client and the daemon speak the same API version")
		}
		switch {
		case end.Type == "exit" && end.Result != nil:
			conn.Close(websocket.StatusNormalClosure, "")
			return *end.Result, nil
		case end.Type == "error" && end.Error != nil:
			conn.Close(websocket.StatusNormalClosure, "")
			if !end.Error.Code.Valid() {
				end.Error.With("server_code", string(end.Error.Code))
				end.Error.Code = sandbox.CodeInternal
			}
			return res, end.Error
		}
		// A text message this client does not know yet.
	}
}

// streamBroken is the error of an exec stream that ended before its end
// message: the caller's context error, or unavailable.
func (c *Client) streamBroken(ctx context.Context, name string, err error) error {
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

// stdinState streams stdin to the daemon and remembers a failure to read it.
type stdinState struct {
	mu  sync.Mutex
	err error
}

// pump sends r as stdin messages, then the end of stdin. When reading r
// fails it records why and closes the connection, which ends Exec's read
// loop (and, on the daemon, the command after its grace period).
func (s *stdinState) pump(ctx context.Context, conn *websocket.Conn, r io.Reader) {
	buf := make([]byte, 1+stdinChunk)
	buf[0] = streamStdin
	for {
		n, err := r.Read(buf[1:])
		if n > 0 {
			if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
				return // the stream ended; Exec reports why
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			conn.Write(ctx, websocket.MessageBinary, []byte{streamEOF})
			return
		case err != nil:
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			conn.CloseNow()
			return
		}
	}
}

func (s *stdinState) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
