package spritesapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// Stream ids of the exec protocol's binary messages in non-TTY mode: one
// byte, then the payload.
const (
	streamStdin  byte = 0 // client → server: stdin bytes
	streamStdout byte = 1 // server → client
	streamStderr byte = 2 // server → client
	streamExit   byte = 3 // server → client: one byte, the exit status
	streamEOF    byte = 4 // client → server, alone: end of stdin
)

const (
	// outputChunk is the largest payload of one output message (the
	// Python SDK refuses messages over 10 MiB).
	outputChunk = 64 << 10
	// maxInputMessage bounds one client message: stdin bytes or a control.
	maxInputMessage = 1<<20 + 1
	// exitNotFound is the shell's status for a command it cannot find.
	exitNotFound = 127
)

// keepalive is the text message a silent stream sends; every client
// ignores text messages of a type it does not know.
var keepalive = []byte(`{"type":"keepalive"}`)

// execParams is a new exec as the query of GET or POST .../exec says it.
type execParams struct {
	req sandbox.ExecRequest
	// stdin: the client streams stdin; without it the command reads an
	// empty stdin (and stdin messages are dropped).
	stdin bool
}

// parseExec reads the exec query: cmd (repeated, the whole argv), path
// (the program, argv[0] when absent; bash without either), env (repeated
// KEY=VALUE, merged over the sandbox's environment), dir, tty, rows, cols,
// stdin and max_run_after_disconnect (how long the command outlives a
// disconnect: 10s by default, 0 kills it at once). cc and detachable are
// accepted and ignored.
func parseExec(q url.Values) (execParams, error) {
	var x execParams
	argv := q["cmd"]
	if path := q.Get("path"); path != "" {
		if len(argv) == 0 {
			argv = []string{path}
		} else {
			argv = append([]string{path}, argv[1:]...)
		}
	}
	if len(argv) == 0 {
		argv = []string{"bash"}
	}
	x.req.Argv, x.req.Cwd = argv, q.Get("dir")
	for _, kv := range q["env"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return x, sandbox.Errorf(sandbox.CodeInvalidArgument, "env %q is not KEY=VALUE", kv).WithHint("send env=KEY=VALUE, once per variable")
		}
		if x.req.Env == nil {
			x.req.Env = map[string]string{}
		}
		x.req.Env[k] = v
	}
	var err error
	if x.stdin, err = boolParam(q, "stdin", false); err != nil {
		return x, err
	}
	tty, err := boolParam(q, "tty", false)
	if err != nil {
		return x, err
	}
	if tty {
		rows, err := sizeParam(q, "rows", 24)
		if err != nil {
			return x, err
		}
		cols, err := sizeParam(q, "cols", 80)
		if err != nil {
			return x, err
		}
		x.req.TTY = &sandbox.TTYSize{Rows: rows, Cols: cols}
	}
	x.req.Grace = sandbox.DefaultGrace
	if s := q.Get("max_run_after_disconnect"); s != "" {
		d, err := parseDuration(s)
		if err != nil && sandbox.AsError(err).Details["max_seconds"] != nil {
			return x, err // too long
		}
		if err != nil || d < 0 {
			return x, sandbox.Errorf(sandbox.CodeInvalidArgument, "max_run_after_disconnect %q is not a duration", s).WithHint("send e.g. 10s or 5m")
		}
		// 0 means "no grace": the command dies with the connection.
		x.req.Grace = sandbox.Duration(max(d, time.Millisecond))
	}
	return x, x.req.Validate()
}

// parseDuration reads a Go duration ("1m30s", "5.0s") or a bare number of
// seconds, as sandbox.Duration does: one too long to hold is
// invalid_argument saying so, with the limit.
func parseDuration(s string) (time.Duration, error) {
	var d sandbox.Duration
	b := []byte(strconv.Quote(s))
	if _, err := strconv.ParseFloat(s, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		b = []byte(s)
	}
	err := d.UnmarshalJSON(b)
	return time.Duration(d), err
}

// boolParam reads the boolean query parameter name ("true"/"false", as
// strconv.ParseBool reads it), def when absent.
func boolParam(q url.Values, name string, def bool) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s=%q is not a boolean", name, s).WithHint("send %s=true or %s=false", name, name)
	}
	return b, nil
}

// sizeParam reads a terminal dimension, def when absent or 0.
func sizeParam(q url.Values, name string, def uint16) (uint16, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.CodeInvalidArgument, "%s=%q is not a terminal size", name, s).WithHint("send a number of characters, e.g. %s=%d", name, def)
	}
	if n == 0 {
		return def, nil
	}
	return uint16(n), nil
}

// exitStatus is the status Sprites reports for res: the exit code, or
// 128+signal for a command a signal ended.
func exitStatus(res sandbox.ExecResult) int {
	if res.Signal == "" {
		return res.ExitCode & 0xff
	}
	if sig := unix.SignalNum(res.Signal); sig != 0 {
		return 128 + int(sig)
	}
	return 128 + int(unix.SIGKILL)
}

// sessionInfo is the first message of every exec stream.
type sessionInfo struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Command   string `json:"command"`
	Created   int64  `json:"created"`
	Cols      uint16 `json:"cols,omitempty"`
	Rows      uint16 `json:"rows,omitempty"`
	IsOwner   bool   `json:"is_owner"`
	TTY       bool   `json:"tty"`
}

// exitMessage ends a TTY stream: exit_code for Go and Python, code for
// Elixir.
type exitMessage struct {
	Type     string `json:"type"`
	ExitCode int    `json:"exit_code"`
	Code     int    `json:"code"`
}

// controlMessage is a text message from the client: a resize or a signal.
type controlMessage struct {
	Type   string          `json:"type"`
	Rows   uint16          `json:"rows"`
	Cols   uint16          `json:"cols"`
	Signal json.RawMessage `json:"signal"`
}

// handleExec runs one command over a WebSocket (Sprites' exec protocol):
// session_info first, then stdout and stderr as they come (stream-id
// messages, or raw bytes in TTY mode), then the exit (a stream-3 message,
// or a text exit message in TTY mode) and a 1000 close. The client sends
// stdin (stream 0, or raw bytes in TTY mode), its end (stream 4), and text
// resize and signal messages. A GET without an upgrade lists sessions
// (hearth keeps none that can be attached to) and HEAD answers the
// Sprite-Version header only.
func (d *server) handleExec(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	name := r.PathValue("name")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	if _, err := d.svc.Sandboxes.Get(r.Context(), p, name); err != nil {
		return err
	}
	if !isUpgrade(r) {
		encode(w, http.StatusOK, map[string]any{"sessions": []any{}})
		return nil
	}
	if id := r.URL.Query().Get("id"); id != "" {
		return sandbox.Errorf(sandbox.CodeNotFound, "exec session %q not found: hearth keeps no sessions to attach to", id).
			WithHint("start a new exec")
	}
	x, err := parseExec(r.URL.Query())
	if err != nil {
		return err
	}
	w.Header().Set("X-Sprite-Capabilities", "signal")
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		d.log.Debug("sprites exec: websocket accept failed", "err", err)
		return nil // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxInputMessage)
	tty := x.req.TTY != nil
	out := &wsOut{Conn: execstream.NewConn(r.Context(), conn), tty: tty}

	info := sessionInfo{Type: "session_info", SessionID: strconv.FormatInt(d.sessions.Add(1), 10),
		Command: x.req.Argv[0], Created: time.Now().Unix(), IsOwner: true, TTY: tty}
	if tty {
		info.Rows, info.Cols = x.req.TTY.Rows, x.req.TTY.Cols
	}
	if err := out.text(info); err != nil {
		return nil
	}

	in := execstream.NewInput(0, x.stdin, true)
	x.req.Stdin = true // the input carries the controls, and stdin when asked
	call := execstream.Call{Principal: p, Sandbox: name, Request: x.req, Stdin: in.Reader(),
		Stdout: out.stream(streamStdout), Stderr: out.stream(streamStderr)}
	stopKeepalive := out.Keepalive(r.Context(), d.keepalive, keepalive)
	d.exec.Serve(r.Context(), out.Conn, in, call, func(ctx context.Context) { readInput(ctx, conn, in, tty) }, func(res sandbox.ExecResult, err error) {
		stopKeepalive()
		d.finish(r, out, res, err)
	})
	return nil
}

// finish sends the end of an exec stream: the exit and a normal close; for
// a command that could not run, its error on stderr and then the status
// 127 when the program does not exist, else a 1011 close whose reason is
// the error.
func (d *server) finish(r *http.Request, out *wsOut, res sandbox.ExecResult, err error) {
	status := exitStatus(res)
	if err != nil {
		e := sandbox.AsError(err)
		door.NoteCode(r, e.Code)
		if r.Context().Err() != nil || errors.Is(err, context.Canceled) {
			return // the client went away: nobody to tell
		}
		out.stream(streamStderr).Write([]byte(e.Text()))
		if !isCommandNotFound(e) {
			reason := e.Message
			if len(reason) > 120 {
				reason = reason[:120]
			}
			out.Close(websocket.StatusInternalError, reason)
			return
		}
		status = exitNotFound
	}
	if out.tty {
		out.text(exitMessage{Type: "exit", ExitCode: status, Code: status})
	} else {
		out.binary([]byte{streamExit, byte(status)})
	}
	out.Close(websocket.StatusNormalClosure, "")
}

// isCommandNotFound reports whether e says the program to run does not
// exist in the sandbox.
func isCommandNotFound(e *sandbox.Error) bool {
	return e.Code == sandbox.CodeNotFound && strings.HasPrefix(e.Message, "command not found")
}

// isUpgrade reports whether r asks for a WebSocket.
func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// wsOut is the exec core's Conn in Sprites' framing: stream-id messages,
// or raw bytes in TTY mode.
type wsOut struct {
	*execstream.Conn
	tty bool
}

// stream returns a writer onto stream id: each write goes out as messages
// of at most outputChunk bytes, prefixed by id (raw in TTY mode).
func (o *wsOut) stream(id byte) io.Writer {
	if o.tty {
		return o.Stream(nil, outputChunk)
	}
	return o.Stream([]byte{id}, outputChunk)
}

// binary sends one binary message, text one JSON text message, even after
// the request's context ended (within execstream.EndTimeout).
func (o *wsOut) binary(b []byte) error { return o.Send(websocket.MessageBinary, b) }

func (o *wsOut) text(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return o.Send(websocket.MessageText, b)
}

// readInput translates what the client sends while the command runs into
// in: stdin (stream 0, or raw bytes in TTY mode), its end (stream 4), and
// resize and signal text messages; what the framing does not allow is
// dropped. When the connection ends, stdin breaks if the client did not
// end it, and the controls end.
func readInput(ctx context.Context, conn *websocket.Conn, in *execstream.Input, tty bool) {
	defer in.Ended(errors.New("exec client went away before the end of stdin"))
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			if c, ok := control(msg); ok {
				in.Control(c)
			}
			continue
		}
		switch {
		case len(msg) == 0:
		case tty:
			in.Stdin(msg)
		case msg[0] == streamEOF:
			in.EndStdin()
		case msg[0] == streamStdin:
			in.Stdin(msg[1:])
		}
	}
}

// control reads a resize or signal message; anything else is ignored, as
// Sprites clients expect of each other's extensions.
func control(msg []byte) (sandbox.ExecControl, bool) {
	var m controlMessage
	if json.Unmarshal(msg, &m) != nil {
		return sandbox.ExecControl{}, false
	}
	var c sandbox.ExecControl
	switch m.Type {
	case "resize":
		if m.Rows == 0 || m.Cols == 0 {
			return c, false
		}
		c.Resize = &sandbox.TTYSize{Rows: m.Rows, Cols: m.Cols}
	case "signal":
		c.Signal = signalOf(m.Signal)
		if c.Signal == "" {
			return c, false
		}
	default:
		return c, false
	}
	return c, true
}

// signalOf reads a signal given as a name ("TERM", "SIGTERM") or a number.
func signalOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && n > 0 {
		return strconv.Itoa(n)
	}
	return ""
}

// handleControl refuses control connections at once: every Sprites client
// then falls back to plain exec WebSockets.
func (d *server) handleControl(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	return sandbox.Errorf(sandbox.CodeNotFound, "control connections are not supported").
		WithHint("use the exec WebSocket, /v1/sprites/%s/exec", r.PathValue("name"))
}

// handleHTTPExec runs one command without a WebSocket: the body is its
// stdin, the answer a 200 stream of frames, each flushed as its own chunk:
// a stream byte (1 stdout, 2 stderr) and the bytes, and last 3 and the
// exit status. An error before the command starts is a JSON error.
func (d *server) handleHTTPExec(w http.ResponseWriter, r *http.Request, p sandbox.Principal) error {
	x, err := parseExec(r.URL.Query())
	if err != nil {
		return err
	}
	if x.req.TTY != nil {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "tty is not available on the HTTP exec").WithHint("open the exec WebSocket for a terminal")
	}
	name := r.PathValue("name") // the route is Visible: p may see it
	var stdin io.Reader
	if x.stdin {
		stdin = r.Body
		x.req.Stdin = true
	}
	fw := &frameWriter{w: w, rc: http.NewResponseController(w)}
	res, err := d.exec.Run(r.Context(), execstream.Call{Principal: p, Sandbox: name, Request: x.req, Stdin: stdin,
		Stdout: fw.stream(streamStdout), Stderr: fw.stream(streamStderr)})
	status := exitStatus(res)
	if err != nil {
		e := sandbox.AsError(err)
		if !fw.started && !isCommandNotFound(e) {
			return e
		}
		door.NoteCode(r, e.Code)
		fw.stream(streamStderr).Write([]byte(e.Text()))
		status = exitNotFound
		if !isCommandNotFound(e) {
			status = 1
		}
	}
	fw.frame(streamExit, []byte{byte(status)})
	return nil
}

// frameWriter writes the HTTP exec's frames, one flushed chunk each.
type frameWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	mu      sync.Mutex
	started bool
}

func (f *frameWriter) stream(id byte) io.Writer {
	return execstream.Chunked(outputChunk, func(chunk []byte) error { return f.frame(id, chunk) })
}

func (f *frameWriter) frame(id byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		f.w.Header().Set("Content-Type", "application/octet-stream")
		f.w.WriteHeader(http.StatusOK)
		f.started = true
	}
	if _, err := f.w.Write(append([]byte{id}, p...)); err != nil {
		return err
	}
	if err := f.rc.Flush(); err != nil {
		return fmt.Errorf("flush exec frame: %w", err)
	}
	return nil
}
