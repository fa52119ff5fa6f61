package httpapi

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// execInput is what an exec client sends after its request: the script,
// when the request says shell_size (stream 5, exactly that many bytes),
// then stdin, when it says stdin (stream 0, then the single byte 4). Each
// goes to lifecycle's Exec through a pipe, so the daemon holds at most one
// message of it (1 MiB) at a time. One goroutine reads (read); the exec's
// own goroutine takes the readers and closes them (close).
type execInput struct {
	// scriptR and scriptW carry the script; nil without shell_size.
	scriptR    *io.PipeReader
	scriptW    *io.PipeWriter
	scriptLeft int64 // bytes of the script still to come
	// stdinR and stdinW carry stdin; nil without stdin.
	stdinR *io.PipeReader
	stdinW *io.PipeWriter
	// stdinDone: the client has ended stdin.
	stdinDone bool

	mu        sync.Mutex
	violation *sandbox.Error // how the client broke the framing
	gone      bool           // the connection ended
}

// newExecInput returns the input of req.
func newExecInput(req sandbox.ExecRequest) *execInput {
	in := &execInput{scriptLeft: req.ShellSize}
	if req.ShellSize > 0 {
		in.scriptR, in.scriptW = io.Pipe()
	}
	if req.Stdin {
		in.stdinR, in.stdinW = io.Pipe()
	}
	return in
}

// script is the request's script stream (ExecRequest.Script), or nil.
func (in *execInput) script() io.Reader {
	if in.scriptR == nil {
		return nil
	}
	return in.scriptR
}

// stdin is the command's stdin, or nil for an empty one.
func (in *execInput) stdin() io.Reader {
	if in.stdinR == nil {
		return nil
	}
	return in.stdinR
}

// read reads the client's messages until the connection ends, then
// records how it ended (see ended). A message that breaks the framing
// ends the reading there. What the command no longer reads is discarded.
func (in *execInput) read(ctx context.Context, conn *websocket.Conn) {
	gone := errors.New("exec client went away before the end of its input")
	for {
		typ, msg, err := conn.Read(ctx)
		var v *sandbox.Error
		switch {
		case err != nil:
		case typ != websocket.MessageBinary:
			v = inputViolation("unexpected text message after the request")
		default:
			v = in.handle(msg)
		}
		if err == nil && v == nil {
			continue
		}
		in.mu.Lock()
		in.violation, in.gone = v, v == nil
		in.mu.Unlock()
		if v != nil {
			gone = v
		}
		if in.scriptW != nil {
			in.scriptW.CloseWithError(gone)
		}
		if in.stdinW != nil && !in.stdinDone {
			in.stdinW.CloseWithError(gone)
		}
		return
	}
}

// handle takes one binary message of the client, or returns how it breaks
// the framing: script bytes where none are due or beyond shell_size, stdin
// before the script's end or without "stdin": true, an unknown stream.
func (in *execInput) handle(msg []byte) *sandbox.Error {
	if len(msg) == 0 {
		return inputViolation("empty binary message")
	}
	id, data := msg[0], msg[1:]
	switch {
	case id == streamScript && in.scriptLeft == 0:
		return inputViolation("script bytes sent, but the request's shell_size is 0 or already received")
	case id == streamScript && int64(len(data)) > in.scriptLeft:
		return inputViolation("the script runs past its shell_size: %d bytes sent where %d were due", len(data), in.scriptLeft)
	case id == streamScript:
		in.scriptW.Write(data) // an error: the exec ended without reading the script
		if in.scriptLeft -= int64(len(data)); in.scriptLeft == 0 {
			in.scriptW.Close()
		}
		return nil
	case id != streamStdin && id != streamEOF:
		return inputViolation("unknown stream id %d", id)
	case in.scriptLeft > 0:
		return inputViolation("stdin sent before the end of the script (%d bytes still due)", in.scriptLeft)
	case in.stdinW == nil:
		return inputViolation("stdin sent, but the request did not set \"stdin\": true")
	case in.stdinDone:
		return inputViolation("stdin sent after its end")
	case id == streamEOF && len(data) != 0:
		return inputViolation("the end-of-stdin message carries %d bytes of data; it is the single byte 0x04", len(data))
	case id == streamEOF:
		in.stdinW.Close()
		in.stdinDone = true
	default:
		// An error means the command stopped reading stdin; the rest of it
		// has nowhere to go.
		in.stdinW.Write(data)
	}
	return nil
}

// inputViolation is the error of a client that broke the exec framing.
func inputViolation(format string, args ...any) *sandbox.Error {
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "exec stream: "+format, args...).
		WithHint("after the first message send only binary messages: 0x05 followed by script bytes (exactly shell_size of them, first), 0x00 followed by stdin bytes, and the single byte 0x04 to end stdin")
}

// close ends the readers once the exec is over, so that a message the
// command will never read does not block read.
func (in *execInput) close() {
	if in.scriptR != nil {
		in.scriptR.CloseWithError(io.ErrClosedPipe)
	}
	if in.stdinR != nil {
		in.stdinR.CloseWithError(io.ErrClosedPipe)
	}
}

// ended reports how the client's side ended so far: the violation of the
// framing, or gone when the connection ended.
func (in *execInput) ended() (*sandbox.Error, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.violation, in.gone
}
