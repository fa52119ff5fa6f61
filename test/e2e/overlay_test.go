package e2e_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// TestOverlayLayers runs the save points on the fallback layer store
// (--layers overlay), under runsc (runc and crun refuse it: their roots
// must be idmapped): a live checkpoint, a change, a restore
// that brings the old file back (twice), a fork, a sleep and a wake, and a
// daemon restart, with sandboxes usable throughout.
func TestOverlayLayers(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, runtime string) {
		d := newDaemon(t, runtime, "--layers", "overlay")
		ctx := ctxT(t)
		c := d.Client()
		sh := func(name, script string) string {
			t.Helper()
			var out bytes.Buffer
			res, err := c.Exec(ctx, name, sandbox.ExecRequest{Shell: script}, nil, &out, &out)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec %q in %s = %+v, %v, %q", script, name, res, err, out.String())
			}
			return out.String()
		}
		_, _, err := c.Create(ctx, sandbox.CreateRequest{Name: "ov"})
		if runtime != "runsc" {
			// runc and crun run sandboxes in a user namespace over an
			// idmapped root, and an overlayfs mount cannot be idmapped:
			// the daemon refuses rather than run them as host root.
			if err == nil {
				t.Fatalf("Create under %s on the overlay store succeeded; want a refusal (no user namespace without an idmapped root)", runtime)
			}
			t.Logf("Create under %s on the overlay store = %v", runtime, err)
			if logs := d.Out.String(); !strings.Contains(logs, "cannot be idmapped") {
				t.Errorf("the daemon's log does not say why the create failed:\n%s", logs)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		sh("ov", "echo v1 > data.txt; mkdir -p keep; echo k > keep/k; rm -f /home/sandbox/.bashrc")
		ck, err := c.Checkpoint(ctx, "ov", sandbox.CheckpointRequest{Label: "v1"})
		if err != nil || ck.SizeBytes <= 0 {
			t.Fatalf("Checkpoint = %+v, %v", ck, err)
		}
		for round := 1; round <= 2; round++ {
			sh("ov", "echo v2 > data.txt; rm -r keep; echo new > extra.txt")
			if _, err := c.Restore(ctx, "ov", ck.ID); err != nil {
				t.Fatalf("Restore #%d = %v", round, err)
			}
			if got := sh("ov", "cat data.txt keep/k; ls extra.txt .bashrc 2>&1 || true"); !strings.HasPrefix(got, "v1\nk\n") || strings.Count(got, "No such file") != 2 {
				t.Fatalf("after restore #%d: %q; want v1 and k back, extra.txt gone and .bashrc still removed", round, got)
			}
		}
		if _, err := c.Fork(ctx, "ov", ck.ID, "ov-fork"); err != nil {
			t.Fatalf("Fork = %v", err)
		}
		sh("ov-fork", "echo forked > data.txt")
		if got := sh("ov", "cat data.txt"); got != "v1\n" {
			t.Fatalf("the source after the fork wrote = %q", got)
		}
		if _, err := c.Sleep(ctx, "ov"); err != nil {
			t.Fatal(err)
		}
		d.Stop()
		d.Start()
		c = d.Client()
		if got := sh("ov", "cat data.txt"); got != "v1\n" {
			t.Fatalf("after sleep, a daemon restart and a wake: %q", got)
		}
		if got := sh("ov-fork", "cat data.txt"); got != "forked\n" {
			t.Fatalf("the fork after a daemon restart: %q", got)
		}
		sb, err := c.Get(ctx, "ov")
		if err != nil || sb.Status != sandbox.StatusRunning {
			t.Fatalf("Get(ov) = %+v, %v", sb, err)
		}
		for _, name := range []string{"ov", "ov-fork"} {
			if err := c.Destroy(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	})
}
