package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/door/execstream"
	"github.com/hearth/hearth/sandbox"
)

// readInput translates what an exec client sends after its request into
// in, the exec core's input: the script, when the request says shell_size
// (stream 5, exactly that many bytes), then stdin, when it says stdin
// (stream 0, then the single byte 4), and, with controls (a request with
// a terminal), text messages that each hold one sandbox.ExecControl. It
// reads until the connection ends or a message breaks the framing, and
// records in end how the client's side ended.
func readInput(ctx context.Context, conn *websocket.Conn, in *execstream.Input, controls bool, end *inputEnd) {
	for {
		typ, msg, err := conn.Read(ctx)
		var v *sandbox.Error
		switch {
		case err != nil:
		case typ != websocket.MessageBinary && controls:
			v = handleControl(in, msg)
		case typ != websocket.MessageBinary:
			v = execstream.Violation("unexpected text message after the request (controls go only to a command with a terminal, \"tty\")")
		default:
			v = handleInput(in, msg)
		}
		if err == nil && v == nil {
			continue
		}
		end.set(v)
		if v != nil {
			in.Ended(v)
		} else {
			in.Ended(errors.New("exec client went away before the end of its input"))
		}
		return
	}
}

// handleInput passes one binary message of the client to in, or returns
// how it breaks the framing: an unknown stream, an end of stdin with data,
// or what in refuses (script bytes where none are due or beyond
// shell_size, stdin before the script's end or without "stdin": true).
func handleInput(in *execstream.Input, msg []byte) *sandbox.Error {
	if len(msg) == 0 {
		return execstream.Violation("empty binary message")
	}
	id, data := msg[0], msg[1:]
	switch {
	case id == streamScript:
		return in.Script(data)
	case id != streamStdin && id != streamEOF:
		return execstream.Violation("unknown stream id %d", id)
	case id == streamEOF && len(data) != 0:
		if v := in.StdinOpen(); v != nil {
			return v
		}
		return execstream.Violation("the end-of-stdin message carries %d bytes of data; it is the single byte 0x04", len(data))
	case id == streamEOF:
		return in.EndStdin()
	}
	return in.Stdin(data)
}

// handleControl passes one control (a text message) to in, or returns
// how it breaks the framing: not one ExecControl, strictly decoded, with
// exactly one of resize and signal.
func handleControl(in *execstream.Input, msg []byte) *sandbox.Error {
	var c sandbox.ExecControl
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	if err == nil && dec.More() {
		err = errors.New("data after the object")
	}
	if err == nil {
		err = c.Validate()
	}
	if err != nil {
		return execstream.Violation("a control is one JSON object with exactly one of resize and signal: %v", err).
			WithHint(`with a terminal, send a control as a text message: {"resize":{"rows":R,"cols":C}} or {"signal":"INT"}`)
	}
	in.Control(c)
	return nil
}

// inputEnd is how the client's side of an exec stream ended: the
// violation of the framing, or gone when the connection ended.
type inputEnd struct {
	mu        sync.Mutex
	violation *sandbox.Error
	gone      bool
}

func (e *inputEnd) set(v *sandbox.Error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.violation, e.gone = v, v == nil
}

// get reports the end so far.
func (e *inputEnd) get() (*sandbox.Error, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.violation, e.gone
}
