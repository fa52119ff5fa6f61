package lifecycle_test

import (
	"io"
	"net"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// ConnectPublic reaches a public port of a sandbox by its stored name,
// whoever created it (an operator's names carry no prefix, an agent's do),
// and nothing else: a private port and a missing sandbox are the same
// not_found. An open stream keeps the sandbox from sleeping.
func TestConnectPublic(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // under driver/fake the sandbox's loopback is the host's
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, p := range []sandbox.Principal{op, a1} {
		sb := e.create(t, p, "site")
		if _, err := e.svc.ConnectPublic(ctx, sb.Name, port); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("ConnectPublic(%s, private port) = %v, want not_found", sb.Name, err)
		}
		if _, err := e.svc.Update(ctx, p, sb.Name, sandbox.SandboxUpdate{PublicPorts: &[]int{port}}); err != nil {
			t.Fatal(err)
		}
		conn, err := e.svc.ConnectPublic(ctx, sb.Name, port)
		if err != nil {
			t.Fatalf("ConnectPublic(%s, public port) = %v", sb.Name, err)
		}
		if b, err := io.ReadAll(conn); err != nil || string(b) != "hi" {
			t.Errorf("read %q, %v", b, err)
		}
		conn.Close()
	}
	if _, err := e.svc.ConnectPublic(ctx, "nope", port); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Errorf("ConnectPublic(missing) = %v, want not_found", err)
	}
	_, err = e.svc.Update(ctx, a1, "site", sandbox.SandboxUpdate{PublicPorts: &[]int{80, 80}})
	wantCode(t, "Update(repeated port)", err, sandbox.CodeInvalidArgument)
	_, err = e.svc.Update(ctx, a1, "site", sandbox.SandboxUpdate{PublicPorts: &[]int{0}})
	wantCode(t, "Update(port 0)", err, sandbox.CodeInvalidArgument)
}
