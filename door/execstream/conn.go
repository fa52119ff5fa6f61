package execstream

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hearth/hearth/sandbox"
)

// EndTimeout bounds sending the last messages of a stream to a slow
// client, and waiting for its close.
const EndTimeout = 10 * time.Second

// Conn serializes the server's messages on one exec WebSocket.
type Conn struct {
	ws  *websocket.Conn
	ctx context.Context
	// OnFail, if set, is called when an output message cannot be sent:
	// the client is gone even if the reading side has not noticed yet.
	OnFail func()

	mu   sync.Mutex
	buf  []byte
	last time.Time // when the last message went out
}

// NewConn returns the writer of ws for the call of ctx.
func NewConn(ctx context.Context, ws *websocket.Conn) *Conn {
	return &Conn{ws: ws, ctx: ctx}
}

// Stream returns a writer onto one output stream: each write goes out, in
// order, as binary messages of prefix (a stream id, or nothing) and at
// most chunk bytes of the write. It is safe for concurrent use with the
// Conn's other writers.
func (c *Conn) Stream(prefix []byte, chunk int) io.Writer {
	return Chunked(chunk, func(part []byte) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.buf = append(append(c.buf[:0], prefix...), part...)
		if err := c.ws.Write(c.ctx, websocket.MessageBinary, c.buf); err != nil {
			if c.OnFail != nil {
				c.OnFail()
			}
			return err
		}
		c.last = time.Now()
		return nil
	})
}

// Chunked is a writer that hands send each write in pieces of at most
// chunk bytes, in order, stopping at the first error: a door's frames.
func Chunked(chunk int, send func(part []byte) error) io.Writer {
	return chunkWriter{chunk: chunk, send: send}
}

type chunkWriter struct {
	chunk int
	send  func([]byte) error
}

func (w chunkWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		part := rest[:min(len(rest), w.chunk)]
		rest = rest[len(part):]
		if err := w.send(part); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Send sends one message, even after the call's context ended (within
// EndTimeout): the last messages of a stream.
func (c *Conn) Send(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), EndTimeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = time.Now()
	return c.ws.Write(ctx, typ, b)
}

// Keepalive sends msg, a text message, whenever the stream has been silent
// for every, until ctx ends or the returned stop is called.
func (c *Conn) Keepalive(ctx context.Context, every time.Duration, msg []byte) (stop func()) {
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
			c.mu.Lock()
			silent := time.Since(c.last) >= every
			c.mu.Unlock()
			if silent && c.Send(websocket.MessageText, msg) != nil {
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// Close closes the connection with status, waiting at most EndTimeout for
// the client's close.
func (c *Conn) Close(status websocket.StatusCode, reason string) {
	done := make(chan struct{})
	go func() {
		c.ws.Close(status, reason)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(EndTimeout):
		c.ws.CloseNow()
	}
}

// Serve runs c on the WebSocket of conn: read, the door's reader of the
// client's frames (into the Input whose Reader is c.Stdin), runs in its
// own goroutine, not bound to ctx (a read whose context ends closes the
// connection, and a stopping daemon still says so), and its end cancels
// the command's context, which leaves the command its grace period. Once
// the command is over, the input is closed and end sends the stream's last
// messages; Serve then closes the connection and waits for read.
func (x *Runner) Serve(ctx context.Context, conn *Conn, in *Input, c Call, read func(ctx context.Context), end func(sandbox.ExecResult, error)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn.OnFail = cancel
	var reader sync.WaitGroup
	reader.Go(func() {
		read(context.WithoutCancel(ctx))
		cancel()
	})
	res, err := x.Run(ctx, c)
	in.Close() // unblocks a message the command will never read
	end(res, err)
	conn.ws.CloseNow()
	reader.Wait()
}
