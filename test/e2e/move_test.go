package e2e_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// hasRoot reports whether d's layer store holds the root of sandbox id.
func hasRoot(t *testing.T, d *daemon, id string) bool {
	t.Helper()
	return hasSnapshot(t, d, "sb-"+id)
}

// hasSnapshot reports whether d's layer store holds the snapshot key
// (its record, meta/<key>).
func hasSnapshot(t *testing.T, d *daemon, key string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(d.DataDir, "layers", "meta", key))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestMoveBetweenNodes: an operator moves a sleeping sandbox from node A
// to node B of one store with `hearth move`, asked through B (which sends
// the call to A, which sends the checkpoint and the root to B): its files
// are there when it wakes on B, calls through A reach it on B, its
// checkpoint restores there, and A keeps nothing of it.
// The node-only route that takes a root refuses every caller but a node
// proving its credential (an operator's token included), and writes
// nothing; a running sandbox does not move.
func TestMoveBetweenNodes(t *testing.T) {
	ds := sharedDaemons(t, 2)
	a, b := ds[0], ds[1]
	ctx := ctxT(t)
	sb, _, err := a.Client().Create(ctx, sandbox.CreateRequest{Name: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	a.sh(ctx, "mover", "mkdir -p /home/sandbox/work && head -c 3000000 /dev/urandom > /home/sandbox/work/blob && sha256sum /home/sandbox/work/blob > /home/sandbox/work/sum && rm /home/sandbox/.bashrc")
	sum := readThrough(t, ctx, a, "mover", "/home/sandbox/work/sum")

	if _, err := b.Client().Move(ctx, "mover", "n1"); !sandbox.IsCode(err, sandbox.CodeFailedPrecondition) {
		t.Errorf("move of a running sandbox = %v, want failed_precondition", err)
	}

	// Forged deliveries of a root to B: no node credential, an
	// operator's token, a made-up credential.
	wantNodeOnly(t, ctx, a.Token, "PUT", b.URL+"/v1/internal/sandboxes/"+sb.ID+"/root", "{\"hearth_layers_send\":1}\nbtrfs-stream\x00")
	if hasRoot(t, b, sb.ID) {
		t.Fatal("a forged delivery left a root on b")
	}

	ck, err := a.Client().Checkpoint(ctx, "mover", sandbox.CheckpointRequest{Label: "before"})
	if err != nil {
		t.Fatal(err)
	}
	a.sh(ctx, "mover", "echo after the checkpoint > /home/sandbox/work/later")
	if _, err := a.Client().Sleep(ctx, "mover"); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := b.CLI("", "move", "mover", "n1")
	if code != 0 || !strings.Contains(out, "mover is sleeping on node n1") {
		t.Fatalf("hearth move mover n1 through b = %d, %q, %q", code, out, stderr)
	}
	if hasRoot(t, a, sb.ID) || !hasRoot(t, b, sb.ID) {
		t.Errorf("after the move: root on a %v, on b %v; want on b only", hasRoot(t, a, sb.ID), hasRoot(t, b, sb.ID))
	}
	if hasSnapshot(t, a, "ck-"+ck.ID) || !hasSnapshot(t, b, "ck-"+ck.ID) {
		t.Errorf("after the move: checkpoint on a %v, on b %v; want on b only", hasSnapshot(t, a, "ck-"+ck.ID), hasSnapshot(t, b, "ck-"+ck.ID))
	}
	if got, err := a.Client().Get(ctx, "mover"); err != nil || got.Node != "n1" || got.Status != sandbox.StatusSleeping {
		t.Errorf("Get(mover) through a = node %s, %s, %v; want asleep on n1", got.Node, got.Status, err)
	}
	// Through A, the call goes to B, which wakes it there with its files.
	if got := a.sh(ctx, "mover", "sha256sum /home/sandbox/work/blob; test ! -e /home/sandbox/.bashrc && echo removed"); got != sum+"removed\n" {
		t.Errorf("after the move, through a: %q, want %q and the removed file absent", got, sum)
	}
	if got := a.sh(ctx, "mover", "cat /home/sandbox/work/later"); got != "after the checkpoint\n" {
		t.Errorf("a file written after the checkpoint, after the move = %q", got)
	}
	// The checkpoint moved with it: restored through a, on b.
	if _, err := a.Client().Restore(ctx, "mover", ck.ID); err != nil {
		t.Fatalf("restore of the moved checkpoint = %v", err)
	}
	if got := a.sh(ctx, "mover", "test -e /home/sandbox/work/later || echo not yet; sha256sum /home/sandbox/work/blob"); got != "not yet\n"+sum {
		t.Errorf("after restoring the moved checkpoint: %q, want the file written after it gone and the blob whole", got)
	}
	if names, err := b.RuntimeSandboxes(); err != nil || !containsID(names, sb.ID) {
		t.Errorf("b's runtime = %v, %v; want sandbox %s running there", names, err, sb.ID)
	}
	if names, err := a.RuntimeSandboxes(); err != nil || containsID(names, sb.ID) {
		t.Errorf("a's runtime = %v, %v; want nothing of sandbox %s", names, err, sb.ID)
	}
	if err := b.Client().Destroy(context.WithoutCancel(ctx), "mover"); err != nil {
		t.Fatal(err)
	}
	if hasRoot(t, b, sb.ID) {
		t.Error("b kept the moved sandbox's root after its destroy")
	}
}

func containsID(names []string, id string) bool {
	for _, n := range names {
		if strings.Contains(n, id) {
			return true
		}
	}
	return false
}

// wantNodeOnly wants a node-only route, method url with body, to refuse
// every caller that does not prove a node credential with 401: no
// credential, the operator's token, a made-up credential with and
// without that token.
func wantNodeOnly(t *testing.T, ctx context.Context, token, method, url, body string) {
	t.Helper()
	for name, h := range map[string]http.Header{
		"nothing":        {},
		"operator token": {"Authorization": {"Bearer " + token}},
		"forged node":    {"Hearth-Node": {"n0"}, "Hearth-Node-Credential": {"guessed"}},
		"forged, token":  {"Authorization": {"Bearer " + token}, "Hearth-Node": {"n0"}, "Hearth-Node-Credential": {"x"}},
	} {
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with %s = %d, want 401", method, url, name, resp.StatusCode)
		}
	}
}
