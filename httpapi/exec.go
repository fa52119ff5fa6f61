package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// The exec WebSocket's binary messages start with one stream byte; the rest
// is the payload. The numbering follows Sprites' exec stream (0 stdin,
// 1 stdout, 2 stderr, 4 stdin EOF), so that the compat door stays thin.
const (
	streamStdin  byte = 0 // client → server: stdin bytes
	streamStdout byte = 1 // server → client: stdout bytes, as produced
	streamStderr byte = 2 // server → client: stderr bytes, as produced
	streamEOF    byte = 4 // client → server, alone in its message: end of stdin
)

// Limits of the exec stream after its first message.
const (
	// maxStdinMessage is the read limit for the client's stdin messages:
	// the stream byte and at most 1 MiB of data.
	maxStdinMessage = 1<<20 + 1
	// maxOutputChunk is the largest payload of one stdout or stderr message.
	maxOutputChunk = 1 << 20
	// endTimeout bounds sending the last message to a slow client.
	endTimeout = 10 * time.Second
)

// Close statuses (RFC 6455 §7.4.1): 1000 after an end message that answers
// the request, 1008 after one that reports a violation of the framing.
const (
	closeNormal    = websocket.StatusNormalClosure
	closeViolation = websocket.StatusPolicyViolation
)

// endMessage is the last message of an exec stream, a text message:
// {"type":"exit","result":{...}} or {"type":"error","error":{...}}.
type endMessage struct {
	Type   string              `json:"type"`
	Result *sandbox.ExecResult `json:"result,omitempty"`
	Error  *sandbox.WireError  `json:"error,omitempty"`
}

// handleExec runs one command over a WebSocket. The client's first message
// is a text message holding the JSON sandbox.ExecRequest; then it may send
// stdin (binary, stream 0) and stdin's end (the single byte 4). The server
// streams stdout and stderr (binary, streams 1 and 2) and ends with one
// endMessage, then closes. A client that goes away cancels the context of
// lifecycle's Exec, which leaves the command its grace period.
func (s *server) handleExec(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	if err := checkUpgrade(r); err != nil {
		w.Header().Set("Upgrade", "websocket")
		s.writeError(w, r, err)
		return
	}
	if err := checkOrigin(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Accept repeats the same origin check.
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.Debug("exec: websocket accept failed", "err", err)
		return
	}
	defer conn.CloseNow()
	name := r.PathValue("name")
	log := s.log.With("sandbox", name)
	stream := &execStream{conn: conn, ctx: r.Context(), call: callOf(r)}

	conn.SetReadLimit(s.opts.MaxExecMessage)
	readCtx, cancelRead := context.WithTimeout(r.Context(), s.opts.ExecStartTimeout)
	typ, msg, err := conn.Read(readCtx)
	timedOut := readCtx.Err() == context.DeadlineExceeded
	cancelRead()
	if err != nil {
		log.Debug("exec: no first message", "err", err)
		if timedOut {
			noteCode(r, sandbox.CodeTimeout)
		} else {
			noteCode(r, sandbox.CodeUnavailable)
		}
		return
	}
	req, err := decodeExecMessage(typ, msg)
	if err != nil {
		status := closeNormal
		if typ != websocket.MessageText {
			status = closeViolation
		}
		stream.end(endMessage{Type: "error", Error: ptr(sandbox.AsError(err).Wire())}, status)
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream.onFail = cancel
	var (
		stdin  io.Reader
		pr     *io.PipeReader
		pw     *io.PipeWriter
		reader sync.WaitGroup
		input  = &inputState{}
	)
	if req.Stdin {
		pr, pw = io.Pipe()
		stdin = pr
	}
	conn.SetReadLimit(maxStdinMessage)
	reader.Go(func() {
		// Reads are not bound to the request's context: a read whose context
		// ends closes the connection, and a stopping daemon still says so.
		input.set(readInput(context.WithoutCancel(r.Context()), conn, pw))
		cancel()
	})

	res, err := s.svc.Exec(ctx, p, name, req, stdin, stream.writer(streamStdout), stream.writer(streamStderr))
	if pr != nil {
		// Unblocks a stdin message the command will never read.
		pr.CloseWithError(io.ErrClosedPipe)
	}
	switch violation, gone := input.get(); {
	case violation != nil:
		log.Info("exec: client broke the stream protocol", "err", violation)
		stream.end(endMessage{Type: "error", Error: ptr(violation.Wire())}, closeViolation)
	case gone && err != nil:
		log.Debug("exec: client went away", "err", err)
		// What the client saw: a connection that ended without an end message.
		noteCode(r, sandbox.CodeUnavailable)
	case err != nil && r.Context().Err() != nil:
		stream.end(endMessage{Type: "error", Error: ptr(sandbox.Errorf(sandbox.CodeUnavailable, "the daemon is stopping").
			WithHint("the command keeps running for its grace period, then is killed; retry once `hearth serve` is back").Wire())}, websocket.StatusGoingAway)
	case err != nil:
		stream.end(endMessage{Type: "error", Error: ptr(s.publicError(ctx, "exec", err).Wire())}, closeNormal)
	default:
		stream.end(endMessage{Type: "exit", Result: &res}, closeNormal)
	}
	conn.CloseNow()
	reader.Wait()
}

// inputState is how the client's side of the stream ended, set once by
// the goroutine reading it.
type inputState struct {
	mu        sync.Mutex
	violation *sandbox.Error
	gone      bool
}

func (s *inputState) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *sandbox.Error
	if errors.As(err, &e) {
		s.violation = e
	} else {
		s.gone = true
	}
}

func (s *inputState) get() (*sandbox.Error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.violation, s.gone
}

// readInput reads the client's messages after the first until the
// connection ends, feeding stdin to pw (nil when the request did not ask
// for stdin). It returns a *sandbox.Error for a violation of the framing and
// the read error when the connection ended. Stdin the command no longer
// reads is discarded.
func readInput(ctx context.Context, conn *websocket.Conn, pw *io.PipeWriter) (err error) {
	closed := false
	defer func() {
		if pw != nil && !closed {
			pw.CloseWithError(errors.New("exec client went away before the end of stdin"))
		}
	}()
	violation := func(format string, args ...any) error {
		return sandbox.Errorf(sandbox.CodeInvalidArgument, "exec stream: "+format, args...).
			WithHint("after the first message send only binary messages: 0x00 followed by stdin bytes, or the single byte 0x04 to end stdin")
	}
	for {
		typ, msg, err := conn.Read(ctx)
		switch {
		case err != nil:
			return err
		case typ != websocket.MessageBinary:
			return violation("unexpected text message after the request")
		case len(msg) == 0:
			return violation("empty binary message")
		case msg[0] != streamStdin && msg[0] != streamEOF:
			return violation("unknown stream id %d", msg[0])
		case pw == nil:
			return violation("stdin sent, but the request did not set \"stdin\": true")
		case closed:
			return violation("stdin sent after its end")
		case msg[0] == streamEOF && len(msg) != 1:
			return violation("the end-of-stdin message carries %d bytes of data; it is the single byte 0x04", len(msg)-1)
		case msg[0] == streamEOF:
			pw.Close()
			closed = true
		default:
			// An error means the command stopped reading stdin; the rest
			// of it has nowhere to go.
			pw.Write(msg[1:])
		}
	}
}

// execStream serializes the server's messages on one exec WebSocket.
type execStream struct {
	conn *websocket.Conn
	ctx  context.Context
	// call, when not nil, learns the code of an error end message.
	call *call
	// onFail cancels the command's context when a write fails: the client
	// is gone even if its read side has not noticed yet.
	onFail func()

	mu  sync.Mutex
	buf []byte
}

// send writes p to the client as stream id messages of at most
// maxOutputChunk bytes each.
func (s *execStream) send(id byte, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(p) > 0 {
		chunk := p[:min(len(p), maxOutputChunk)]
		p = p[len(chunk):]
		s.buf = append(append(s.buf[:0], id), chunk...)
		if err := s.conn.Write(s.ctx, websocket.MessageBinary, s.buf); err != nil {
			if s.onFail != nil {
				s.onFail()
			}
			return err
		}
	}
	return nil
}

// writer returns an io.Writer onto stream id, safe for concurrent use with
// the stream's other writers.
func (s *execStream) writer(id byte) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if err := s.send(id, p); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

// end sends the last message and closes the connection with status.
func (s *execStream) end(m endMessage, status websocket.StatusCode) {
	if m.Error != nil && s.call != nil {
		s.call.code = m.Error.Code
	}
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(endMessage{Type: "error", Error: ptr(sandbox.AsError(err).Wire())})
	}
	ctx, cancel := detached(s.ctx, endTimeout)
	defer cancel()
	s.mu.Lock()
	err = s.conn.Write(ctx, websocket.MessageText, b)
	s.mu.Unlock()
	if err != nil {
		return
	}
	s.conn.Close(status, "")
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func ptr[T any](v T) *T { return &v }

// decodeExecMessage decodes the first message of an exec WebSocket: a text
// message holding one JSON sandbox.ExecRequest, strictly (unknown fields
// are refused), that passes Validate. Every error is invalid_argument.
func decodeExecMessage(typ websocket.MessageType, msg []byte) (sandbox.ExecRequest, error) {
	var req sandbox.ExecRequest
	if typ != websocket.MessageText {
		return req, sandbox.Errorf(sandbox.CodeInvalidArgument, "the first exec message is binary; it must be a text message holding the JSON request").
			WithHint(`send e.g. {"argv":["ls","-l"]} or {"shell":"echo hi"} as a text message`)
	}
	if err := decodeBytes(msg, &req); err != nil {
		return sandbox.ExecRequest{}, err
	}
	if err := req.Validate(); err != nil {
		return sandbox.ExecRequest{}, err
	}
	return req, nil
}

// checkUpgrade refuses, with a JSON error, a request to the exec route that
// is not a WebSocket handshake.
func checkUpgrade(r *http.Request) error {
	if headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket") {
		return nil
	}
	return &statusError{status: http.StatusUpgradeRequired,
		err: sandbox.Errorf(sandbox.CodeInvalidArgument, "exec is a WebSocket endpoint").
			WithHint("open a WebSocket (ws:// or wss://) to this URL; docs/API.md describes the messages")}
}

// headerHasToken reports whether the comma-separated header holds token,
// case-insensitively (RFC 9110 §5.6.1).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// checkOrigin refuses a WebSocket opened by a web page of another origin
// (RFC 6455 §10.2): only a request without Origin (every non-browser
// client) or with an Origin whose host is the request's Host passes. The
// token travels in a header a page cannot set on a WebSocket, so this is
// defence in depth for now; an allowlist option can relax it once a web
// console needs one.
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	return sandbox.Errorf(sandbox.CodePermissionDenied, "cross-origin WebSocket from %q refused", origin).
		WithHint("connect from a client that sends no Origin header, or from a page served from %s", r.Host)
}
