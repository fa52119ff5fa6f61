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
	// A public URL names its sandbox as a caller of no tenant does: NAME
	// for an operators' sandbox, TENANT/NAME for a tenant's.
	for _, p := range []sandbox.Principal{op, a1} {
		sb := e.create(t, p, "site")
		ref := sandbox.Principal{}.RefOf(sb.Tenant, sb.Name)
		if _, err := e.svc.Processes.ConnectPublic(ctx, ref, port); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("ConnectPublic(%s, private port) = %v, want not_found", ref, err)
		}
		if _, err := e.svc.Sandboxes.Update(ctx, p, sb.Name, sandbox.SandboxUpdate{PublicPorts: &[]int{port}}); err != nil {
			t.Fatal(err)
		}
		conn, err := e.svc.Processes.ConnectPublic(ctx, ref, port)
		if err != nil {
			t.Fatalf("ConnectPublic(%s, public port) = %v", ref, err)
		}
		if b, err := io.ReadAll(conn); err != nil || string(b) != "hi" {
			t.Errorf("read %q, %v", b, err)
		}
		conn.Close()
	}
	// Another tenant's sandbox of the same name, public on the same port,
	// takes nothing from t1's: each URL reaches its own.
	if twin := e.create(t, twinA1, "site"); twin.Name != "agent-a1-site" || twin.Tenant != "t2" {
		t.Fatalf("t2's a1 created %+v, want t2's agent-a1-site", twin)
	}
	for _, ref := range []string{"nope", "agent-a1-site", "t3/agent-a1-site", "T1/agent-a1-site", "t2/agent-a1-site"} {
		if _, err := e.svc.Processes.ConnectPublic(ctx, ref, port); !sandbox.IsCode(err, sandbox.CodeNotFound) {
			t.Errorf("ConnectPublic(%s) = %v, want not_found", ref, err)
		}
	}
	_, err = e.svc.Sandboxes.Update(ctx, a1, "site", sandbox.SandboxUpdate{PublicPorts: &[]int{80, 80}})
	wantCode(t, "Update(repeated port)", err, sandbox.CodeInvalidArgument)
	_, err = e.svc.Sandboxes.Update(ctx, a1, "site", sandbox.SandboxUpdate{PublicPorts: &[]int{0}})
	wantCode(t, "Update(port 0)", err, sandbox.CodeInvalidArgument)
}
