package execstream

import (
	"io"
	"sync"

	"github.com/hearth/hearth/sandbox"
)

// Input is what an exec client sends while its command runs: the script
// of a request with ShellSize (exactly that many bytes, first), stdin, and
// controls (terminal resizes and signals). Each goes to lifecycle's Exec
// through a pipe, so the daemon holds at most one message of it at a time.
// One goroutine, the door's reader of frames, calls Script, Stdin,
// EndStdin, Control and Ended; the exec's own calls Close once the command
// is over. A call the framing does not allow returns a violation
// (Violation's error): the native door ends the stream with it, Sprites'
// drops the message, as its clients expect.
type Input struct {
	// scriptR and scriptW carry the script; nil without one.
	scriptR    *io.PipeReader
	scriptW    *io.PipeWriter
	scriptLeft int64 // bytes of the script still to come
	// stdinR and stdinW carry stdin; nil without it (stdinR is at its end
	// at once when there are controls but no stdin).
	stdinR *io.PipeReader
	stdinW *io.PipeWriter
	// stdinDone: the client has ended stdin.
	stdinDone bool
	// controls carry the controls; nil without them.
	controls chan sandbox.ExecControl
	once     sync.Once
}

// NewInput returns the input of a command: a script of scriptSize bytes
// (ExecRequest.ShellSize; 0 for none), stdin when the client streams it,
// and controls when the client may send them.
func NewInput(scriptSize int64, stdin, controls bool) *Input {
	in := &Input{scriptLeft: scriptSize}
	if scriptSize > 0 {
		in.scriptR, in.scriptW = io.Pipe()
	}
	if stdin || controls {
		in.stdinR, in.stdinW = io.Pipe()
	}
	if controls {
		in.controls = make(chan sandbox.ExecControl, 16)
		if !stdin {
			in.stdinW.Close() // an empty stdin, that carries the controls
			in.stdinW, in.stdinDone = nil, true
		}
	}
	return in
}

// ScriptReader is the request's script stream (ExecRequest.Script), or nil.
func (in *Input) ScriptReader() io.Reader {
	if in.scriptR == nil {
		return nil
	}
	return in.scriptR
}

// Reader is the command's stdin for Call.Stdin, or nil for an empty one;
// with controls it is a sandbox.ExecControls.
func (in *Input) Reader() io.Reader {
	switch {
	case in.controls != nil:
		return controlled{in}
	case in.stdinR != nil:
		return in.stdinR
	}
	return nil
}

// controlled is stdin with its controls.
type controlled struct{ in *Input }

func (c controlled) Read(p []byte) (int, error)           { return c.in.stdinR.Read(p) }
func (c controlled) Controls() <-chan sandbox.ExecControl { return c.in.controls }

// Script takes the next bytes of the script: refused where none are due or
// beyond ShellSize.
func (in *Input) Script(b []byte) *sandbox.Error {
	switch {
	case in.scriptLeft == 0:
		return Violation("script bytes sent, but the request's shell_size is 0 or already received")
	case int64(len(b)) > in.scriptLeft:
		return Violation("the script runs past its shell_size: %d bytes sent where %d were due", len(b), in.scriptLeft)
	}
	in.scriptW.Write(b) // an error: the exec ended without reading the script
	if in.scriptLeft -= int64(len(b)); in.scriptLeft == 0 {
		in.scriptW.Close()
	}
	return nil
}

// StdinOpen reports, as a violation, why stdin may not be sent now:
// before the end of the script, without stdin asked for, after its end.
func (in *Input) StdinOpen() *sandbox.Error {
	switch {
	case in.scriptLeft > 0:
		return Violation("stdin sent before the end of the script (%d bytes still due)", in.scriptLeft)
	case in.stdinW == nil && !in.stdinDone:
		return Violation("stdin sent, but the request did not set \"stdin\": true")
	case in.stdinDone:
		return Violation("stdin sent after its end")
	}
	return nil
}

// Stdin takes stdin bytes (see StdinOpen). What the command no longer
// reads has nowhere to go and is dropped.
func (in *Input) Stdin(b []byte) *sandbox.Error {
	if v := in.StdinOpen(); v != nil {
		return v
	}
	in.stdinW.Write(b)
	return nil
}

// EndStdin ends stdin (see StdinOpen).
func (in *Input) EndStdin() *sandbox.Error {
	if v := in.StdinOpen(); v != nil {
		return v
	}
	in.stdinW.Close()
	in.stdinW, in.stdinDone = nil, true
	return nil
}

// Control passes a control on to the command; a client flooding controls
// loses the excess. Without controls it is dropped.
func (in *Input) Control(c sandbox.ExecControl) {
	if in.controls == nil {
		return
	}
	select {
	case in.controls <- c:
	default:
	}
}

// Ended records that the client's side ended, how (err: the violation, or
// the client going away): a script or stdin still open breaks with err,
// and the controls end.
func (in *Input) Ended(err error) {
	in.once.Do(func() {
		if in.scriptW != nil {
			in.scriptW.CloseWithError(err)
		}
		if in.stdinW != nil {
			in.stdinW.CloseWithError(err)
		}
		if in.controls != nil {
			close(in.controls)
		}
	})
}

// Close ends the readers once the exec is over, so that a message the
// command will never read does not block the door's reader.
func (in *Input) Close() {
	if in.scriptR != nil {
		in.scriptR.CloseWithError(io.ErrClosedPipe)
	}
	if in.stdinR != nil {
		in.stdinR.CloseWithError(io.ErrClosedPipe)
	}
}

// Violation is the error of a client that broke the exec framing.
func Violation(format string, args ...any) *sandbox.Error {
	return sandbox.Errorf(sandbox.CodeInvalidArgument, "exec stream: "+format, args...).
		WithHint("after the first message send only binary messages: 0x05 followed by script bytes (exactly shell_size of them, first), 0x00 followed by stdin bytes, and the single byte 0x04 to end stdin")
}
