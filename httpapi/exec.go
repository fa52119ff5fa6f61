package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/door"
	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// The exec WebSocket's binary messages start with one stream byte; the rest
// is the payload. The numbering follows Sprites' exec stream (0 stdin,
// 1 stdout, 2 stderr, 4 stdin EOF), so that the compat door stays thin; 5
// is hearth's own.
const (
	streamStdin  byte = 0 // client → server: stdin bytes
	streamStdout byte = 1 // server → client: stdout bytes, as produced
	streamStderr byte = 2 // server → client: stderr bytes, as produced
	streamEOF    byte = 4 // client → server, alone in its message: end of stdin
	streamScript byte = 5 // client → server: the script of a request with shell_size, before any stdin
)

// Limits of the exec stream after its first message.
const (
	// maxStdinMessage is the read limit for the client's messages after
	// the first, stdin or script: the stream byte and at most 1 MiB of
	// data.
	maxStdinMessage = 1<<20 + 1
	// maxOutputChunk is the largest payload of one stdout or stderr message.
	maxOutputChunk = 1 << 20
)

// Close statuses (RFC 6455 §7.4.1): 1000 after an end message that answers
// the request, 1008 after one that reports a violation of the framing,
// 1009 after one that refuses a first message over the limit.
const (
	closeNormal    = websocket.StatusNormalClosure
	closeViolation = websocket.StatusPolicyViolation
	closeTooBig    = websocket.StatusMessageTooBig
)

// endMessage is the last message of an exec stream, a text message:
// {"type":"exit","result":{...}} or {"type":"error","error":{...}}.
type endMessage struct {
	Type   string              `json:"type"`
	Result *sandbox.ExecResult `json:"result,omitempty"`
	Error  *sandbox.WireError  `json:"error,omitempty"`
}

// route is the exec WebSocket's route. Before the upgrade the chain
// checks the handshake and the Origin, that the caller may see the
// sandbox, and takes one of the caller's connections
// (door.Options.MaxConnections): a refusal is an HTTP error, and nothing
// of the stream is read.
func (s execs) route() door.Route {
	return door.Route{Pattern: "GET /v1/sandboxes/{name}/exec", Verb: door.VerbExec, Visible: true, Stream: true,
		Check: func(w http.ResponseWriter, r *http.Request) error {
			if err := queryParams(r).err; err != nil {
				return err
			}
			if err := checkUpgrade(r); err != nil {
				w.Header().Set("Upgrade", "websocket")
				return err
			}
			return checkOrigin(r)
		},
		Handle: handle(s.handleExec)}
}

// handleExec runs one command over a WebSocket. The client's first message
// is a text message holding the JSON sandbox.ExecRequest, at most
// Options.MaxExecMessage bytes; then, when the request says shell_size, the
// script (binary, stream 5); then it may send stdin (binary, stream 0) and
// stdin's end (the single byte 4). The server streams stdout and stderr
// (binary, streams 1 and 2) and ends with one endMessage, then closes. A
// client that goes away cancels the context of lifecycle's Exec, which
// leaves the command its grace period.
func (s execs) handleExec(w http.ResponseWriter, r *http.Request, p sandbox.Principal) {
	// A wake that moves the sandbox is answered before the upgrade.
	if err := s.svc.Sandboxes.WakeToStream(r.Context(), p, r.PathValue("name")); err != nil {
		door.WriteError(w, r, err)
		return
	}
	// Accept repeats the same origin check.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{door.WebSocketProtocol}})
	if err != nil {
		s.log.Debug("exec: websocket accept failed", "err", err)
		return
	}
	defer conn.CloseNow()
	stream := &execStream{Conn: execstream.NewConn(r.Context(), conn), r: r}
	req, ok := s.readRequest(r, conn, stream)
	if !ok {
		return
	}
	s.runExec(r, p, conn, stream, req)
}

// readRequest reads and decodes the first message of an exec stream,
// reading at most Options.MaxExecMessage bytes of it (a longer one is
// refused as too_large, and the rest of it is never read into memory)
// within Options.ExecStartTimeout. On a failure it answers the client
// (when there is still one to answer) and returns false.
func (s execs) readRequest(r *http.Request, conn *websocket.Conn, stream *execStream) (sandbox.ExecRequest, bool) {
	limit := s.opts.MaxExecMessage
	readCtx, cancelRead := context.WithTimeout(r.Context(), s.opts.ExecStartTimeout)
	typ, msg, err := readLimited(readCtx, conn, limit)
	timedOut := readCtx.Err() == context.DeadlineExceeded
	cancelRead()
	switch {
	case errors.Is(err, errMessageTooLarge):
		e := sandbox.Errorf(sandbox.CodeTooLarge, "the first exec message is larger than the %d-byte limit", limit).
			With("max_bytes", limit).With("size_at_least", limit+1).
			WithHint(`stream a large script after the request: send {"shell_size":N,...} first, then the script's N bytes as binary messages 0x05 + bytes (docs/API.md, Exec WebSocket); the Go client and the CLI do this`)
		stream.end(endMessage{Type: "error", Error: ptr(e.Wire())}, closeTooBig)
		return sandbox.ExecRequest{}, false
	case err != nil:
		s.log.Debug("exec: no first message", "sandbox", r.PathValue("name"), "err", err)
		if timedOut {
			door.NoteCode(r, sandbox.CodeTimeout)
		} else {
			door.NoteCode(r, sandbox.CodeUnavailable)
		}
		return sandbox.ExecRequest{}, false
	}
	req, err := decodeExecMessage(typ, msg)
	if err != nil {
		status := closeNormal
		if typ != websocket.MessageText {
			status = closeViolation
		}
		stream.end(endMessage{Type: "error", Error: ptr(sandbox.AsError(err).Wire())}, status)
		return sandbox.ExecRequest{}, false
	}
	return req, true
}

// errMessageTooLarge is readLimited's refusal of a message over its limit.
var errMessageTooLarge = errors.New("message over the limit")

// readLimited reads one message of at most limit bytes. A longer message
// is errMessageTooLarge, found once limit+1 bytes of it are read: the rest
// is left unread (closing the connection discards it), so a client cannot
// make the daemon hold more than limit+1 bytes for it.
func readLimited(ctx context.Context, conn *websocket.Conn, limit int64) (websocket.MessageType, []byte, error) {
	conn.SetReadLimit(limit + 1) // the library's own limit, which would close without an answer, lies beyond
	typ, r, err := conn.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		return 0, nil, err
	case int64(len(b)) > limit:
		return typ, nil, errMessageTooLarge
	}
	return typ, b, nil
}

// runExec runs req, the command of the exec stream on conn, on the exec
// core, passing what the client sends after the request (readInput) to it,
// and answers with the stream's end message.
func (s execs) runExec(r *http.Request, p sandbox.Principal, conn *websocket.Conn, stream *execStream, req sandbox.ExecRequest) {
	log := s.log.With("sandbox", r.PathValue("name"))
	// A terminal's caller steers it: resizes, and signals such as a
	// shell's job control needs.
	controls := req.TTY != nil
	in := execstream.NewInput(req.ShellSize, req.Stdin, controls)
	req.Script = in.ScriptReader()
	call := execstream.Call{Principal: p, Sandbox: r.PathValue("name"), Request: req, Stdin: in.Reader()}
	if req.MaxOutputBytes == 0 { // else the result holds the output
		call.Stdout, call.Stderr = stream.Stream([]byte{streamStdout}, maxOutputChunk), stream.Stream([]byte{streamStderr}, maxOutputChunk)
	}
	ended := &inputEnd{}
	conn.SetReadLimit(maxStdinMessage)
	s.exec.Serve(r.Context(), stream.Conn, in, call, func(ctx context.Context) { readInput(ctx, conn, in, controls, ended) }, func(res sandbox.ExecResult, err error) {
		switch violation, gone := ended.get(); {
		case violation != nil:
			log.Info("exec: client broke the stream protocol", "err", violation)
			stream.end(endMessage{Type: "error", Error: ptr(violation.Wire())}, closeViolation)
		case gone && err != nil:
			log.Debug("exec: client went away", "err", err)
			// What the client saw: a connection that ended without an end message.
			door.NoteCode(r, sandbox.CodeUnavailable)
		case err != nil && r.Context().Err() != nil:
			stream.end(endMessage{Type: "error", Error: ptr(sandbox.Errorf(sandbox.CodeUnavailable, "the daemon is stopping").
				WithHint("the command keeps running for its grace period, then is killed; retry once `hearth serve` is back").Wire())}, websocket.StatusGoingAway)
		case err != nil:
			stream.end(endMessage{Type: "error", Error: ptr(door.PublicError(r.Context(), "exec", err).Wire())}, closeNormal)
		default:
			stream.end(endMessage{Type: "exit", Result: &res}, closeNormal)
		}
	})
}

// execStream is the exec core's Conn with the native end message.
type execStream struct {
	*execstream.Conn
	// r's call learns the code of an error end message.
	r *http.Request
}

// end sends the last message and closes the connection with status.
func (s *execStream) end(m endMessage, status websocket.StatusCode) {
	if m.Error != nil {
		door.NoteCode(s.r, m.Error.Code)
	}
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(endMessage{Type: "error", Error: ptr(sandbox.AsError(err).Wire())})
	}
	if s.Send(websocket.MessageText, b) != nil {
		return
	}
	s.Close(status, "")
}

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
	return door.WithStatus(http.StatusUpgradeRequired,
		sandbox.Errorf(sandbox.CodeInvalidArgument, "exec is a WebSocket endpoint").
			WithHint("open a WebSocket (ws:// or wss://) to this URL; docs/API.md describes the messages"))
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
