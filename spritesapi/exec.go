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
	// endTimeout bounds sending the last messages to a slow client.
	endTimeout = 10 * time.Second
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
	out := &wsOut{conn: conn, ctx: r.Context(), tty: tty}

	info := sessionInfo{Type: "session_info", SessionID: strconv.FormatInt(d.sessions.Add(1), 10),
		Command: x.req.Argv[0], Created: time.Now().Unix(), IsOwner: true, TTY: tty}
	if tty {
		info.Rows, info.Cols = x.req.TTY.Rows, x.req.TTY.Cols
	}
	if err := out.text(info); err != nil {
		return nil
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	in := newInput(x.stdin)
	x.req.Stdin = true // the input carries the controls, and stdin when asked
	var reader sync.WaitGroup
	reader.Go(func() {
		// Not bound to the request: the command gets its grace period.
		in.read(context.WithoutCancel(r.Context()), conn, tty)
		cancel()
	})
	stopKeepalive := out.keepalive(ctx, d.keepalive)
	res, err := d.svc.Processes.Exec(ctx, p, name, x.req, in, out.stream(streamStdout), out.stream(streamStderr))
	stopKeepalive()
	in.closeStdin()
	d.finish(r, out, res, err)
	conn.CloseNow()
	reader.Wait()
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
			out.close(websocket.StatusInternalError, reason)
			return
		}
		status = exitNotFound
	}
	if out.tty {
		out.text(exitMessage{Type: "exit", ExitCode: status, Code: status})
	} else {
		out.binary([]byte{streamExit, byte(status)})
	}
	out.close(websocket.StatusNormalClosure, "")
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

// wsOut serializes the server's messages on one exec WebSocket.
type wsOut struct {
	conn *websocket.Conn
	ctx  context.Context
	tty  bool
	mu   sync.Mutex
	buf  []byte
	last time.Time // when the last message went out; under mu
}

// keepalive sends the keepalive message whenever the stream has been
// silent for every, until ctx ends or the returned stop is called.
func (o *wsOut) keepalive(ctx context.Context, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every / 4)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			o.mu.Lock()
			silent := time.Since(o.last) >= every
			o.mu.Unlock()
			if silent && o.write(websocket.MessageText, keepalive) != nil {
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// stream returns a writer onto stream id: each write goes out as messages
// of at most outputChunk bytes, prefixed by id (raw in TTY mode).
func (o *wsOut) stream(id byte) io.Writer {
	return chunkWriter(func(chunk []byte) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.buf = o.buf[:0]
		if !o.tty {
			o.buf = append(o.buf, id)
		}
		o.buf = append(o.buf, chunk...)
		if err := o.conn.Write(o.ctx, websocket.MessageBinary, o.buf); err != nil {
			return err
		}
		o.last = time.Now()
		return nil
	})
}

// binary sends one binary message, text one JSON text message, even after
// the request's context ended (within endTimeout).
func (o *wsOut) binary(b []byte) error { return o.write(websocket.MessageBinary, b) }

func (o *wsOut) text(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return o.write(websocket.MessageText, b)
}

func (o *wsOut) write(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), endTimeout)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = time.Now()
	return o.conn.Write(ctx, typ, b)
}

// close closes the connection with status, waiting at most endTimeout for
// the client's close.
func (o *wsOut) close(status websocket.StatusCode, reason string) {
	done := make(chan struct{})
	go func() {
		o.conn.Close(status, reason)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(endTimeout):
		o.conn.CloseNow()
	}
}

// chunkWriter is a writer that hands send each write in pieces of at most
// outputChunk bytes, in order, stopping at the first error.
type chunkWriter func(chunk []byte) error

func (send chunkWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		chunk := rest[:min(len(rest), outputChunk)]
		rest = rest[len(chunk):]
		if err := send(chunk); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// input is what the client sends while the command runs: stdin, as an
// io.Reader for lifecycle's Exec, and resizes and signals, as its
// sandbox.ExecControls.
type input struct {
	pr       *io.PipeReader
	pw       *io.PipeWriter
	controls chan sandbox.ExecControl
	once     sync.Once
}

// newInput returns an input; without stdin its reader is at EOF at once
// and stdin messages are dropped.
func newInput(stdin bool) *input {
	in := &input{controls: make(chan sandbox.ExecControl, 16)}
	in.pr, in.pw = io.Pipe()
	if !stdin {
		in.pw.Close()
		in.pw = nil
	}
	return in
}

func (in *input) Read(p []byte) (int, error)           { return in.pr.Read(p) }
func (in *input) Controls() <-chan sandbox.ExecControl { return in.controls }

// closeStdin unblocks a stdin message the command will never read.
func (in *input) closeStdin() { in.pr.CloseWithError(io.ErrClosedPipe) }

// read reads the client's messages until the connection ends, then closes
// stdin (as broken, if the client did not end it) and the controls.
func (in *input) read(ctx context.Context, conn *websocket.Conn, tty bool) {
	defer close(in.controls)
	defer func() {
		if in.pw != nil {
			in.pw.CloseWithError(errors.New("exec client went away before the end of stdin"))
		}
	}()
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			in.control(msg)
			continue
		}
		switch {
		case in.pw == nil || len(msg) == 0:
			// No stdin asked for, or already ended: dropped.
		case tty:
			in.pw.Write(msg)
		case msg[0] == streamEOF:
			in.pw.Close()
			in.pw = nil
		case msg[0] == streamStdin:
			in.pw.Write(msg[1:])
		}
	}
}

// control passes a resize or signal message on; anything else is ignored,
// as Sprites clients expect of each other's extensions.
func (in *input) control(msg []byte) {
	var m controlMessage
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	var c sandbox.ExecControl
	switch m.Type {
	case "resize":
		if m.Rows == 0 || m.Cols == 0 {
			return
		}
		c.Resize = &sandbox.TTYSize{Rows: m.Rows, Cols: m.Cols}
	case "signal":
		c.Signal = signalOf(m.Signal)
		if c.Signal == "" {
			return
		}
	default:
		return
	}
	select {
	case in.controls <- c:
	default: // a client flooding controls loses the excess
	}
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
	res, err := d.svc.Processes.Exec(r.Context(), p, name, x.req, stdin, fw.stream(streamStdout), fw.stream(streamStderr))
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
	return chunkWriter(func(chunk []byte) error { return f.frame(id, chunk) })
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
