package e2e_test

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// TestOverlayLayers runs the save points on the fallback layer store
// (--layers overlay), under runsc (runc and crun refuse it: their roots
// must be idmapped): a live checkpoint, a change, a restore
// that brings the old file back (twice), a fork, a sleep and a wake, and a
// daemon restart, with sandboxes usable throughout; then images on it (see
// overlayImages).
func TestOverlayLayers(t *testing.T) {
	requireDaemon(t)
	reg := registry.Start(t, registry.Options{})
	ref := reg.Push(t, "probe:overlay", overlayProbeImage(t))
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
		overlayImages(t, d, ref)
	})
}

// overlayProbeImage is probeImage with a third layer: a hard link to a
// file of the layer below, a directory of the first layer made opaque
// (its files hidden, one of its own added), and a whiteout of a
// directory of the first layer.
func overlayProbeImage(t *testing.T) v1.Image {
	t.Helper()
	base := probeImage(t, buildProbe(t))
	dir := func(name string) tarEntry { return tarEntry{name: name, mode: 0o755, typ: tar.TypeDir} }
	lower := layerOf(t,
		dir("srv/"), dir("srv/old/"), dir("srv/opaque/"),
		tarEntry{name: "srv/old/file", body: "whited out with its directory", mode: 0o644},
		tarEntry{name: "srv/opaque/hidden", body: "hidden by an opaque marker", mode: 0o644},
	)
	third := layerOf(t,
		tarEntry{name: "srv/app/hard", link: "srv/app/data.txt", typ: tar.TypeLink},
		tarEntry{name: "srv/.wh.old", mode: 0o644},
		tarEntry{name: "srv/opaque/.wh..wh..opq", mode: 0o644},
		tarEntry{name: "srv/opaque/own", body: "the third layer's", mode: 0o644},
	)
	ls, err := base.Layers()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{ls[0], lower}, ls[1], third)...)
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	icf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.RootFS = icf.RootFS
	cf.History = nil
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// overlayImages runs images on the overlay store of d: a sandbox of the
// image ref (pulled from a registry, four layers with a hard link across
// layers, whiteouts and an opaque directory) sees the files its layers
// leave, and a sandbox of an image made from that sandbox (image create
// --from) sees them too, with what was written in the first.
func overlayImages(t *testing.T, d *daemon, ref string) {
	t.Helper()
	const files = "data.txt gone.txt link hard /srv/old/file /srv/opaque/hidden /srv/opaque/own"
	const want = "uid=1234 gid=1234 cwd=/srv/app home=/home/app foo=bar\n" +
		"data.txt: second\n" +
		"gone.txt: open gone.txt: no such file or directory\n" +
		"link: second\n" +
		"hard: second\n" +
		"/srv/old/file: open /srv/old/file: no such file or directory\n" +
		"/srv/opaque/hidden: open /srv/opaque/hidden: no such file or directory\n" +
		"/srv/opaque/own: the third layer's\n"
	probe := func(name, extra, want string) {
		t.Helper()
		args := append([]string{"exec", name, "--", "probe"}, strings.Fields(files+" "+extra)...)
		if out, errOut, code := d.CLI("", args...); code != 0 || out != want {
			t.Fatalf("exec probe in %s = %d %q %q, want %q", name, code, out, errOut, want)
		}
	}
	if out, errOut, code := d.CLI("", "image", "pull", ref); code != 0 {
		t.Fatalf("image pull %s = %d %q %q", ref, code, out, errOut)
	}
	if out, errOut, code := d.CLI("", "create", "ov-img", "--image", ref); code != 0 {
		t.Fatalf("create --image %s on the overlay store = %d %q %q", ref, code, out, errOut)
	}
	probe("ov-img", "", want)
	if _, errOut, code := d.CLI("made on overlay\n", "fs", "write", "ov-img", "note.txt"); code != 0 {
		t.Fatalf("fs write = %d %q", code, errOut)
	}
	if _, errOut, code := d.CLI("", "image", "create", "ov-snap", "--from", "ov-img"); code != 0 {
		t.Fatalf("image create --from ov-img on the overlay store = %d %q", code, errOut)
	}
	if _, errOut, code := d.CLI("", "create", "ov-copy", "--image", "ov-snap"); code != 0 {
		t.Fatalf("create --image ov-snap = %d %q", code, errOut)
	}
	probe("ov-copy", "note.txt", want+"note.txt: made on overlay\n\n")
	for _, name := range []string{"ov-copy", "ov-img"} {
		if _, errOut, code := d.CLI("", "destroy", name); code != 0 {
			t.Fatalf("destroy %s = %d %q", name, code, errOut)
		}
	}
	for _, img := range []string{"ov-snap", ref} {
		if _, errOut, code := d.CLI("", "image", "rm", img); code != 0 {
			t.Errorf("image rm %s = %d %q", img, code, errOut)
		}
	}
}
