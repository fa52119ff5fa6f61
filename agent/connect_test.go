package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/agent"
	"github.com/hearth/hearth/sandbox"
)

// listenTCP listens on addr ("127.0.0.1:0", "[::1]:0") and closes the
// listener in t's cleanup; it skips t when the host has no such address.
func listenTCP(t *testing.T, addr string) *net.TCPListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("no %s on this host: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

// serveTCP accepts connections on ln and runs serve on each, closing it
// after; accepted connections are closed in t's cleanup at the latest.
func serveTCP(t *testing.T, ln *net.TCPListener, serve func(*net.TCPConn)) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
}

// echo sends back what it reads, then half-closes.
func echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// connect calls c.Connect and closes the stream in t's cleanup.
func connect(t *testing.T, c *agent.Client, port int) net.Conn {
	t.Helper()
	conn, err := c.Connect(ctxT(t, 10*time.Second), port)
	if err != nil {
		t.Fatalf("Connect(%d) = %v", port, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// halfCloser is what a stream returned by Connect is, over a unix socket.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

func TestConnectEcho(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	for _, tc := range []struct {
		name, listen, wantPeer string
	}{
		{"127.0.0.1", "127.0.0.1:0", "127.0.0.1"},
		{"::1 only", "[::1]:0", "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listenTCP(t, tc.listen)
			peers := make(chan string, 1)
			serveTCP(t, ln, func(conn *net.TCPConn) {
				peers <- conn.RemoteAddr().(*net.TCPAddr).IP.String()
				echo(conn)
			})
			conn := connect(t, c, portOf(ln))
			if got := <-peers; got != tc.wantPeer {
				t.Errorf("the agent connected from %s, want %s", got, tc.wantPeer)
			}

			// A round trip at a time, as an interactive protocol does.
			for _, msg := range []string{"hello", "\x00\xff binary\r\n", strings.Repeat("x", 100_000)} {
				if _, err := conn.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
					t.Fatalf("echo of %d bytes = %d bytes, %v", len(msg), len(got), err)
				}
			}

			// 8 MiB each way at once, then a half-close: the echo ends
			// with the same bytes and EOF.
			want := randomBytes(t, 8<<20)
			wrote := make(chan error, 1)
			go func() {
				_, err := conn.Write(want)
				if err == nil {
					err = conn.(halfCloser).CloseWrite()
				}
				wrote <- err
			}()
			got, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("reading the echo: %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("writing 8 MiB: %v", err)
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("echo of 8 MiB = %d bytes differing from byte %d, want the same %d bytes", len(got), i, len(want))
			}
		})
	}
}

// TestConnectHalfClose: HTTP/1.0 style, the client sends its request and
// shuts down writing; the server reads to EOF, answers and closes; the
// client reads the whole answer.
func TestConnectHalfClose(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	ln := listenTCP(t, "127.0.0.1:0")
	serveTCP(t, ln, func(conn *net.TCPConn) {
		req, err := io.ReadAll(conn)
		if err != nil {
			return
		}
		fmt.Fprintf(conn, "got %d bytes: %s", len(req), bytes.ToUpper(req))
	})
	conn := connect(t, c, portOf(ln)).(halfCloser)
	if _, err := conn.Write([]byte("get /index")); err != nil {
		t.Fatal(err)
	}
	if err := conn.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite() = %v", err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if want := "got 10 bytes: GET /INDEX"; err != nil || string(got) != want {
		t.Errorf("answer = %q, %v; want %q", got, err, want)
	}
}

// TestConnectClose: closing the stream closes the agent's connection to the
// server, and the server closing ends the stream.
func TestConnectClose(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	ln := listenTCP(t, "127.0.0.1:0")
	ended := make(chan error, 1)
	serveTCP(t, ln, func(conn *net.TCPConn) {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, conn)
		ended <- err
	})
	conn := connect(t, c, portOf(ln))
	if _, err := conn.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := <-ended; err != nil {
		t.Errorf("the server read %v after the client closed, want EOF", err)
	}

	ln2 := listenTCP(t, "127.0.0.1:0")
	serveTCP(t, ln2, func(conn *net.TCPConn) { conn.Write([]byte("hi")) })
	conn = connect(t, c, portOf(ln2))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(conn); err != nil || string(got) != "hi" {
		t.Errorf("stream of a server that wrote and closed = %q, %v; want \"hi\" then EOF", got, err)
	}
}

// TestConnectOutlivesContext: the ctx given to Connect bounds the call, not
// the stream.
func TestConnectOutlivesContext(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	ln := listenTCP(t, "127.0.0.1:0")
	serveTCP(t, ln, echo)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := c.Connect(ctx, portOf(ln))
	cancel()
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	defer conn.Close()
	time.Sleep(50 * time.Millisecond) // let a close on ctx's end happen, were there one
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("still here")); err != nil {
		t.Fatalf("Write after ctx ended = %v", err)
	}
	got := make([]byte, len("still here"))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "still here" {
		t.Errorf("echo after ctx ended = %q, %v", got, err)
	}
}

func TestConnectRefused(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(ln)
	ln.Close()
	conn, err := c.Connect(ctxT(t, 10*time.Second), port)
	if err == nil {
		conn.Close()
		t.Fatalf("Connect(%d) of a closed port succeeded", port)
	}
	wantCode(t, err, sandbox.CodeUnavailable)
	e := sandbox.AsError(err)
	if !strings.Contains(e.Message, strconv.Itoa(port)) || e.Hint == "" {
		t.Errorf("Connect(%d) = %q, want a message naming the port and a hint", port, e.Text())
	}
}

func TestConnectInvalidPort(t *testing.T) {
	c, _, sock := startServerSock(t, agent.Options{})
	for _, port := range []int{0, -1, 65536} {
		conn, err := c.Connect(ctxT(t, 10*time.Second), port)
		if err == nil {
			conn.Close()
		}
		if !sandbox.IsCode(err, sandbox.CodeInvalidArgument) {
			t.Errorf("Connect(%d) = %v, want invalid_argument", port, err)
		}
	}
	// The agent refuses them too, whatever the client checks.
	for _, req := range []string{
		`{"op":"connect"}`,
		`{"op":"connect","port":70000}`,
		`{"op":"connect","port":-80}`,
		`{"op":"ping","port":80}`,
	} {
		kind, payload := rawRequest(t, sock, req)
		var e sandbox.Error
		if err := json.Unmarshal(payload, &e); kind != agent.FrameError || err != nil || e.Code != sandbox.CodeInvalidArgument {
			t.Errorf("agent answer to %s = %q %s, want an invalid_argument error frame", req, kind, payload)
		}
	}
}

// rawRequest sends req as the request frame on a new connection to sock and
// returns the agent's first frame.
func rawRequest(t *testing.T, sock, req string) (agent.FrameKind, []byte) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := agent.WriteFrame(conn, agent.FrameRequest, []byte(req)); err != nil {
		t.Fatal(err)
	}
	kind, payload, err := agent.ReadFrame(conn, nil)
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", req, err)
	}
	return kind, payload
}

func TestPorts(t *testing.T) {
	c, _ := startServer(t, agent.Options{})
	v4 := listenTCP(t, "127.0.0.1:0")
	want := []sandbox.ListeningPort{{Port: portOf(v4), Address: "127.0.0.1"}}
	if dual, err := net.Listen("tcp", "[::]:0"); err == nil {
		defer dual.Close()
		want = append(want, sandbox.ListeningPort{Port: portOf(dual), Address: "::"})
	} else {
		t.Logf("no IPv6 on this host: %v", err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := portOf(closed)
	closed.Close()

	ports, err := c.Ports(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("Ports() = %v", err)
	}
	for _, w := range want {
		if !slices.Contains(ports, w) {
			t.Errorf("Ports() = %v, want it to hold %+v", ports, w)
		}
	}
	if slices.ContainsFunc(ports, func(p sandbox.ListeningPort) bool { return p.Port == closedPort }) {
		t.Errorf("Ports() = %v, holds closed port %d", ports, closedPort)
	}
	for i := 1; i < len(ports); i++ {
		a, b := ports[i-1], ports[i]
		if a.Port > b.Port || a.Port == b.Port && a.Address >= b.Address {
			t.Errorf("Ports() = %v, not sorted by port then address without repeats at %d", ports, i)
		}
	}
}
