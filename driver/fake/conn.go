package fake

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// pairListener is a net.Listener whose connections are socket pairs made
// by dial: kernel-buffered like the unix socket a real agent listens on,
// with no path on disk.
type pairListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPairListener() *pairListener {
	return &pairListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pairListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pairListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pairListener) Addr() net.Addr { return pairAddr{} }

type pairAddr struct{}

func (pairAddr) Network() string { return "unix" }
func (pairAddr) String() string  { return "fake-agent" }

// dial makes a socket pair and hands one end to Accept.
func (l *pairListener) dial(ctx context.Context) (net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	client, err := fileConn(fds[0], "fake-agent-client")
	if err != nil {
		syscall.Close(fds[1])
		return nil, err
	}
	server, err := fileConn(fds[1], "fake-agent-server")
	if err != nil {
		client.Close()
		return nil, err
	}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		err = fmt.Errorf("agent is not listening: %w", syscall.ECONNREFUSED)
	case <-ctx.Done():
		err = ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, err
}

func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return net.FileConn(f)
}

// oomConn is the daemon's end of a connection to an agent whose next exec
// is to report an OOM kill: it reads the request the daemon writes, and
// when that is an exec, it sets OOMKilled in the result frame, if report
// (which takes one of OOMNextExec's) says so. It relays the agent's output
// frame by frame, so a read deadline that expires mid-frame loses the
// frame; the agent client sets none.
type oomConn struct {
	net.Conn
	report func() bool

	wmu    sync.Mutex
	req    []byte // the first frame, until it is complete
	parsed bool   // the first frame was complete
	exec   bool   // it is an exec request

	rmu     sync.Mutex
	br      *bufio.Reader
	pending []byte // the rest of the frame being read
}

// frameHeader is the agent protocol's frame header: kind, uint32 length.
const frameHeader = 5

func (c *oomConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	if !c.parsed {
		c.req = append(c.req, p...)
		if len(c.req) >= frameHeader {
			if n := int(binary.BigEndian.Uint32(c.req[1:frameHeader])); len(c.req) >= frameHeader+n {
				var r agent.Request
				c.exec = agent.FrameKind(c.req[0]) == agent.FrameRequest &&
					json.Unmarshal(c.req[frameHeader:frameHeader+n], &r) == nil && r.Op == agent.OpExec
				c.parsed, c.req = true, nil
			}
		}
	}
	c.wmu.Unlock()
	return c.Conn.Write(p)
}

func (c *oomConn) isExec() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.exec
}

func (c *oomConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pending) == 0 {
		if c.br == nil {
			c.br = bufio.NewReader(c.Conn)
		}
		kind, payload, err := agent.ReadFrame(c.br, nil)
		if err != nil {
			return 0, err
		}
		if kind == agent.FrameResult && c.isExec() {
			var res sandbox.ExecResult
			if json.Unmarshal(payload, &res) == nil && c.report() {
				res.OOMKilled = true
				if b, err := json.Marshal(res); err == nil {
					payload = b
				}
			}
		}
		c.pending = make([]byte, frameHeader+len(payload))
		c.pending[0] = byte(kind)
		binary.BigEndian.PutUint32(c.pending[1:frameHeader], uint32(len(payload)))
		copy(c.pending[frameHeader:], payload)
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}
