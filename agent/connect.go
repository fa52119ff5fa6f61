package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hearth/hearth/sandbox"
)

// connectTimeout bounds the agent's dial of a port on the sandbox's
// loopback. A loopback connect is accepted or refused at once; only a
// server whose accept backlog is full leaves it waiting.
const connectTimeout = 5 * time.Second

// connect dials port on the sandbox's loopback, answers with ConnectResult
// and then proxies the raw stream until both directions are done. A dial
// that fails is the only frame: unavailable when nothing listens or the
// server does not accept in time.
func (s *Server) connect(conn net.Conn, port int, log *slog.Logger) {
	tcp, err := dialLoopback(port, connectTimeout)
	if err != nil {
		s.failLogged(conn, log, err)
		return
	}
	defer tcp.Close()
	if err := WriteJSON(conn, FrameResult, ConnectResult{Address: tcp.RemoteAddr().String()}); err != nil {
		return // the caller went away
	}
	proxy(conn, tcp)
}

// dialLoopback connects to port on 127.0.0.1 and, when that is refused, on
// [::1]: a server bound to "::" accepts on both, one bound to "::1" only on
// the second. Both attempts share timeout.
func dialLoopback(port int, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	p := strconv.Itoa(port)
	conn, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return conn, nil
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		if isTimeout(err) {
			return nil, notAccepted(port, timeout)
		}
		return nil, fmt.Errorf("agent: connect to port %d: %w", port, err)
	}
	conn, err = d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	switch {
	case err == nil:
		return conn, nil
	case isTimeout(err):
		return nil, notAccepted(port, timeout)
	}
	// Refused, or no IPv6 loopback at all: either way nothing listens.
	return nil, sandbox.Errorf(sandbox.CodeUnavailable, "nothing is listening on port %d in the sandbox", port).
		With("port", port).WithHint("start a server on it, bound to 0.0.0.0 or 127.0.0.1")
}

func notAccepted(port int, timeout time.Duration) error {
	return sandbox.Errorf(sandbox.CodeUnavailable, "the server on port %d in the sandbox did not accept a connection within %v", port, timeout).
		With("port", port).WithHint("the server may be overloaded; retry")
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// proxy copies between the agent's connection a and the sandbox's TCP
// connection b, both ways at once, then closes both. The end of one
// direction (EOF) is passed on as a half-close (CloseWrite) of the other
// side's connection, so a client that sends its request and shuts down its
// writing still reads the whole answer. An error either way closes both
// connections, which ends the other direction too. No deadline applies: the
// stream lasts as long as its ends keep it open.
func proxy(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			closeBoth()
			return
		}
		if err := closeWrite(dst); err != nil {
			closeBoth()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(b, a) })
	pipe(a, b)
	wg.Wait()
	closeBoth()
}

// closeWrite shuts down the writing side of c. A connection that cannot
// half-close fails, and the proxy then ends both directions.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
