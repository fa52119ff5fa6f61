package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/client"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/daemonproc"
	"github.com/hearth/hearth/testutil/pgtest"
)

// sharedStore starts n daemons of runtime rt, nodes n0…, on one new
// Postgres store, whose DSN it returns, with one sealing key: the first
// mints the operator token, the others say the store holds it and are
// given it.
func sharedStore(tb testing.TB, rt string, n int, serveArgs ...string) ([]*daemon, string) {
	tb.Helper()
	requireDaemon(tb)
	dsn := pgtest.NewDatabase(tb)
	key := filepath.Join(tb.TempDir(), "hearth.key")
	if out, err := exec.Command(bins.Hearth, "key", "create", key).CombinedOutput(); err != nil {
		tb.Fatalf("hearth key create: %v\n%s", err, out)
	}
	var ds []*daemon
	for i := range n {
		d := newDaemon(tb, rt, append([]string{"--store", dsn, "--key-file", key, "--node", fmt.Sprintf("n%d", i)}, serveArgs...)...)
		if i > 0 {
			if !strings.Contains(d.Out.String(), daemonproc.HeldLine) {
				tb.Fatalf("daemon %d of a shared store did not say the store holds the operator token:\n%s", i, d.Out.String())
			}
			d.Token = ds[0].Token
		}
		ds = append(ds, d)
	}
	return ds, dsn
}

// sharedDaemons is sharedStore's daemons, of the first runtime.
func sharedDaemons(t *testing.T, n int) []*daemon {
	t.Helper()
	requireDaemon(t)
	ds, _ := sharedStore(t, bins.Runtimes[0], n)
	return ds
}

// health is d's /v1/health as an operator sees it.
func health(t *testing.T, ctx context.Context, d *daemon) sandbox.ClusterHealth {
	t.Helper()
	h, err := d.Client().Health(ctx)
	if err != nil || h.Cluster == nil {
		t.Fatalf("health of %s = %+v, %v; want the cluster", d.URL, h, err)
	}
	return *h.Cluster
}

// TestSharedStore: two daemons on one Postgres store answer for each
// other's sandboxes. A sandbox created through A is exec'd (streamed),
// written, read, checkpointed, restored and destroyed through B, which
// forwards every call to A; a token revoked through one is refused by the
// other at once; the sandbox's URL, private and public, answers through
// b; the health of either names both nodes and one leader;
// SIGKILL of the leader hands the loops to the other within 10 s and
// makes the dead node's sandboxes unavailable, with the reason, through
// the survivor; its restart brings them back with their files.
func TestSharedStore(t *testing.T) {
	ds := sharedDaemons(t, 2)
	a, b := ds[0], ds[1]
	ctx := ctxT(t)
	if _, _, err := a.Client().Create(ctx, sandbox.CreateRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	cb := b.Client()
	sb, err := cb.Get(ctx, "web")
	if err != nil || sb.Node != "n0" {
		t.Fatalf("Get(web) through b = node %q, %v; want the sandbox of n0", sb.Node, err)
	}
	if got := b.sh(ctx, "web", "echo hello from $(hostname)"); !strings.HasPrefix(got, "hello from ") {
		t.Fatalf("exec through b = %q", got)
	}
	if _, err := cb.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/home/sandbox/note.txt"}, strings.NewReader("v1")); err != nil {
		t.Fatalf("write through b: %v", err)
	}
	ck, err := cb.Checkpoint(ctx, "web", sandbox.CheckpointRequest{})
	if err != nil {
		t.Fatalf("checkpoint through b: %v", err)
	}
	if _, err := cb.WriteFile(ctx, "web", sandbox.WriteRequest{Path: "/home/sandbox/note.txt"}, strings.NewReader("v2")); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Restore(ctx, "web", ck.ID); err != nil {
		t.Fatalf("restore through b: %v", err)
	}
	var note bytes.Buffer
	if err := cb.ReadFile(ctx, "web", "/home/sandbox/note.txt", &note); err != nil || note.String() != "v1" {
		t.Fatalf("note.txt read through b after the restore = %q, %v; want v1", note.String(), err)
	}
	if a.sh(ctx, "web", "cat /home/sandbox/note.txt") != "v1" {
		t.Fatal("a does not see what b wrote and restored")
	}
	// The sandbox's URL through b: a web server in the sandbox on a
	// answers there, with the token, and to anyone once the port is public.
	serveInSandbox(t, cb, "web", 8000)
	if code, body := get(t, b.URL+"/v1/sandboxes/web/proxy/8000/", b.Token); code != 200 || !strings.Contains(body, "Directory listing") {
		t.Fatalf("the sandbox's URL through b = %d %.200q", code, body)
	}
	if _, err := cb.Update(ctx, "web", sandbox.SandboxUpdate{PublicPorts: &[]int{8000}}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, b.URL+"/v1/sandboxes/web/proxy/8000/", ""); code != 200 {
		t.Fatalf("the public URL through b, without a token = %d", code)
	}

	// A token revoked through a is refused by b at once.
	secret, info, err := a.Client().Admin().CreateToken(ctx, sandbox.TokenRequest{Tenant: "system", Role: sandbox.RoleOperator, Agent: "brief"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(b.URL, secret, nil).List(ctx); err != nil {
		t.Fatalf("a token made through a, used at b: %v", err)
	}
	if err := a.Client().Admin().RevokeToken(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(b.URL, secret, nil).List(ctx); !sandbox.IsCode(err, sandbox.CodeUnauthenticated) {
		t.Fatalf("the revoked token at b = %v, want unauthenticated", err)
	}

	h := health(t, ctx, b)
	if len(h.Nodes) != 2 || !h.Nodes[0].Live || !h.Nodes[1].Live || (h.Leader != "n0" && h.Leader != "n1") || h.Node != "n1" ||
		!strings.HasPrefix(h.Store, "postgres ") {
		t.Fatalf("health through b = %+v; want n0 and n1 live, one of them leading", h)
	}
	leader, other, otherName := a, b, "n1"
	if h.Leader == "n1" {
		leader, other, otherName = b, a, "n0"
	}
	if _, _, err := leader.Client().Create(ctx, sandbox.CreateRequest{Name: "on-leader"}); err != nil {
		t.Fatal(err)
	}
	leader.sh(ctx, "on-leader", "echo kept > /home/sandbox/kept.txt")
	leader.Kill()
	killed := time.Now()
	for health(t, ctx, other).Leader != otherName {
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("10s after the leader's SIGKILL, the other node does not lead: %+v", health(t, ctx, other))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the other node took the loops %s after the leader's SIGKILL", time.Since(killed).Round(time.Millisecond))
	wantUnavailable(t, ctx, other, "on-leader")

	leader.Start()
	if got := other.sh(ctx, "on-leader", "cat /home/sandbox/kept.txt"); got != "kept\n" {
		t.Fatalf("on-leader through the other node after its node came back = %q", got)
	}
	if err := cb.Destroy(ctx, "web"); err != nil {
		t.Fatalf("destroy through b: %v", err)
	}
	if _, err := a.Client().Get(ctx, "web"); !sandbox.IsCode(err, sandbox.CodeNotFound) {
		t.Fatalf("Get(web) through a after b destroyed it = %v, want not_found", err)
	}
}

// wantUnavailable waits until name, whose node is dead, is listed through
// d as unavailable with the reason, and an exec on it is unavailable.
func wantUnavailable(t *testing.T, ctx context.Context, d *daemon, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := d.Client().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got sandbox.Sandbox
		for _, sb := range list {
			if sb.Name == name {
				got = sb
			}
		}
		if got.Status == sandbox.StatusUnavailable && strings.Contains(got.Reason, "stopped heartbeating") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s through the live node 30s after its node died: %s (%s); want unavailable", name, got.Status, got.Reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err := d.Client().Exec(ctx, name, sandbox.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
	if !sandbox.IsCode(err, sandbox.CodeUnavailable) || !strings.Contains(err.Error(), "stopped heartbeating") {
		t.Fatalf("exec on %s, whose node is dead = %v; want unavailable saying its node stopped heartbeating", name, err)
	}
}
