package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	"github.com/hearth/hearth/sandbox"
)

// Dialer opens a new connection to one sandbox's agent.
type Dialer func(ctx context.Context) (net.Conn, error)

// Client is the daemon's end of the protocol for one sandbox. It is safe for
// concurrent use: every call opens its own connection.
type Client struct {
	dial Dialer
}

// NewClient returns a client that reaches the agent through dial.
func NewClient(dial Dialer) *Client { return &Client{dial: dial} }

// call opens a connection and sends req. The caller owns the connection. When
// ctx ends, the connection is closed, which the agent takes as its caller
// going away.
func (c *Client) call(ctx context.Context, req Request) (net.Conn, func(), error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, nil, sandbox.Errorf(sandbox.CodeUnavailable, "sandbox agent unreachable").
			WithHint("the sandbox may be stopped or starting; retry")
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	if err := WriteJSON(conn, FrameRequest, req); err != nil {
		stop()
		conn.Close()
		return nil, nil, c.broken(ctx, err)
	}
	return conn, func() { stop(); conn.Close() }, nil
}

// broken turns a connection failure into the error a caller sees: the
// context's own error when it ended, unavailable otherwise.
func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sandbox.Errorf(sandbox.CodeUnavailable, "connection to the sandbox agent broke: %v", err).
		WithHint("retry; if the sandbox died its status says why")
}

// final decodes a FrameResult into out, or returns the FrameError's error.
func final(kind FrameKind, payload []byte, out any) error {
	switch kind {
	case FrameResult:
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(payload, out); err != nil {
			return fmt.Errorf("agent: bad result: %w", err)
		}
		return nil
	case FrameError:
		var e sandbox.Error
		if err := json.Unmarshal(payload, &e); err != nil || !e.Code.Valid() {
			return fmt.Errorf("agent: bad error frame %q", payload)
		}
		return &e
	}
	return fmt.Errorf("agent: unexpected frame %q", kind)
}

// simple runs an op whose only answer is its final frame.
func (c *Client) simple(ctx context.Context, req Request, out any) error {
	conn, done, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	defer done()
	kind, payload, err := ReadFrame(conn, nil)
	if err != nil {
		return c.broken(ctx, err)
	}
	return final(kind, payload, out)
}

// Ping checks that the agent answers and returns what it says about itself.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var res PingResult
	err := c.simple(ctx, Request{Op: OpPing}, &res)
	return res, err
}
