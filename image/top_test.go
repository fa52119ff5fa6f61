package image_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
	"github.com/hearth/hearth/testutil/registry"
)

// TestTopKeepsAgentFile unpacks an image that has the agent's mount point
// already, a regular file: the top leaves it as it is.
func TestTopKeepsAgentFile(t *testing.T) {
	withEnv(t, layertar.Limits{}, testTopKeepsAgentFile)
}

func testTopKeepsAgentFile(t *testing.T, e *env) {
	l := registry.TarLayer(t, compression.GZip, tarOf(t,
		directory(".hearth/", 0o700), regular(".hearth/hearth-agent", "x", 0o600)))
	img := registry.Image(t, baseLayer(t), l)
	u, _ := unpack(t, e.store, img, digestOf(t, img))
	got := readTree(t, e.path(u.Layers[len(u.Layers)-1])).nodes
	want := readTree(t, e.path(u.Layers[len(u.Layers)-2])).nodes
	for _, p := range []string{"/.hearth", agentFile} {
		if g, w := got[p], want[p]; g != w {
			t.Errorf("%s in the top: %v, want it as the image has it, %v", p, g, w)
		}
	}
	if n := want[agentFile]; n.Type != "file" || n.Size != 1 || n.Mode != 0o600 {
		t.Errorf("%s in the image: %v, want the layer's file", agentFile, n)
	}
	e.checkClean()
}

// TestTopSymlinks unpacks an image whose home, working directory and
// /run are symlinks to directories inside it: the top follows them
// inside the root and leaves them symlinks. A mount point that is a
// symlink, even to a directory of the image, is refused: the runtime
// mounts there.
func TestTopSymlinks(t *testing.T) {
	withEnv(t, layertar.Limits{}, testTopSymlinks)
}

func testTopSymlinks(t *testing.T, e *env) {
	links := registry.TarLayer(t, compression.GZip, tarOf(t,
		directory("var/", 0o755),
		directory("var/home/", 0o755),
		directory("var/run/", 0o755),
		symlink("home", "var/home"),
		symlink("run", "/var/run"),
		directory("srv/", 0o755),
		directory("srv/app/", 0o750),
		symlink("app", "/srv/app"),
	))
	img := withConfig(t, registry.Image(t, baseLayer(t), links), func(cf *v1.ConfigFile) {
		cf.Config.User, cf.Config.WorkingDir = "app", "/app/sub"
	})
	u, _ := unpack(t, e.store, img, digestOf(t, img))
	if c := u.Config; c.UID != 1000 || c.GID != 1000 || c.Home != "/home/app" || c.WorkingDir != "/app/sub" {
		t.Errorf("Unpack().Config = %+v, want 1000:1000, home /home/app, working directory /app/sub", c)
	}
	got := readTree(t, e.path(u.Layers[len(u.Layers)-1]))
	want := readTree(t, e.path(u.Layers[len(u.Layers)-2]))
	sameTree(t, "the top less what it adds", got.without(t, map[string]node{
		"/.hearth":        {Type: "dir", Mode: 0o755},
		agentFile:         agentFileNode,
		"/var/run/hearth": {Type: "dir", Mode: 0o755},
		"/var/home/app":   {Type: "dir", Mode: 0o755, UID: 1000, GID: 1000},
		"/srv/app/sub":    {Type: "dir", Mode: 0o755, UID: 1000, GID: 1000},
	}), want)

	for _, mp := range []string{".hearth", "run/hearth"} {
		l := registry.TarLayer(t, compression.GZip, tarOf(t,
			directory("run/", 0o755), directory("srv/", 0o755), symlink(mp, "/srv")))
		err := refused(t, e, registry.Image(t, baseLayer(t), l), 2)
		if want := "mount point /" + mp + " is not a directory"; !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %s", err, want)
		}
	}
	e.checkClean()
}

// failingReader fails the test that reads it.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("a reader that Apply must not read was read")
	return 0, io.ErrUnexpectedEOF
}

// TestApply applies a build step's tar onto an image's top: a new top
// with the step's changes, its config resolved, the parent unchanged; the
// same version again is not applied again; a missing parent or a hostile
// tar leave nothing.
func TestApply(t *testing.T) {
	withEnv(t, layertar.Limits{}, testApply)
}

func testApply(t *testing.T, e *env) {
	ctx := t.Context()
	base := withConfig(t, registry.Image(t, baseLayer(t), registry.TarLayer(t, compression.GZip, tarOf(t,
		regular("etc/motd", "hello\n", 0o644),
		directory("opt/", 0o755),
		regular("opt/tool", "tool\n", 0o755),
	))), func(cf *v1.ConfigFile) { cf.Config.WorkingDir = "" })
	u, _ := unpack(t, e.store, base, digestOf(t, base))
	parent := u.Layers[len(u.Layers)-1]
	before := readTree(t, e.path(parent))

	const step = "sha256:00000000000000000000000000000000000000000000000000000000000000a1"
	stepTar := tarOf(t,
		directory("app/", 0o755),
		regular("app/main", "main\n", 0o755).owner(1000, 1001),
		whiteout("etc/.wh.motd"),
	)
	cfg := sandbox.ImageConfig{User: "app:staff", WorkingDir: "/app", Env: []string{"STEP=1"}}
	key, _ := image.StepKey(step)
	got, err := e.store.Apply(ctx, parent, key, strings.NewReader(string(stepTar)), cfg)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if c := got.Config; !slices.Equal(got.Layers, []string{key}) || c.UID != 1000 || c.GID != 50 || c.Home != "/home/app" || c.WorkingDir != "/app" {
		t.Errorf("Apply() = %+v, want layers [%s], 1000:50, home /home/app, working directory /app", got, key)
	}
	after := readTree(t, e.path(key))
	if n, ok := after.nodes["/app/main"]; !ok || n.UID != 1000 || n.Mode != 0o755 {
		t.Errorf("/app/main in the step's top: %v (%v), want the step's file", n, ok)
	}
	if _, ok := after.nodes["/etc/motd"]; ok {
		t.Errorf("/etc/motd is in the step's top, which whites it out")
	}
	if _, ok := after.nodes["/home/app"]; !ok {
		t.Errorf("the step's top lacks the user's home")
	}
	sameTree(t, "the parent after Apply", readTree(t, e.path(parent)), before)

	// The same version again: resolved again, r not read.
	again, err := e.store.Apply(ctx, parent, key, failingReader{t}, cfg)
	if err != nil || !slices.Equal(again.Layers, got.Layers) || again.Config.GID != 50 {
		t.Errorf("Apply of a stored version = %+v, %v, want %+v", again, err, got)
	}

	const other = "sha256:00000000000000000000000000000000000000000000000000000000000000a2"
	otherKey, _ := image.TopKey(other)
	_, err = e.store.Apply(ctx, "img-missing", otherKey, strings.NewReader(string(stepTar)), cfg)
	if !errors.Is(err, layers.ErrNotFound) || e.has(otherKey) {
		t.Errorf("Apply onto a missing parent = %v, want ErrNotFound and no %s", err, otherKey)
	}
	hostile := tarOf(t, regular("../../../sentinel/pwned", "out\n", 0o644))
	_, err = e.store.Apply(ctx, parent, otherKey, strings.NewReader(string(hostile)), cfg)
	if !errors.Is(err, layertar.ErrHostile) || e.has(otherKey) {
		t.Errorf("Apply of a hostile tar = %v, want ErrHostile and no %s", err, otherKey)
	}
	_, err = e.store.Apply(ctx, parent, "layer-latest", strings.NewReader(string(stepTar)), cfg)
	if err == nil {
		t.Errorf("Apply to a key that is no top's (layer-latest) succeeded")
	}
	e.checkClean()
}

// TestCommitAndRemove makes an image of a sandbox's root (Commit from a
// checkpoint), which keeps its content when the checkpoint goes; resolves
// users in it; and removes image keys, refusing any other.
func TestCommitAndRemove(t *testing.T) {
	withEnv(t, layertar.Limits{}, testCommitAndRemove)
}

func testCommitAndRemove(t *testing.T, e *env) {
	ctx := t.Context()
	base := registry.Image(t, baseLayer(t))
	u, _ := unpack(t, e.store, base, digestOf(t, base))
	top := u.Layers[len(u.Layers)-1]

	dir, err := e.layers.Prepare(ctx, "sandbox-1", top)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "made-in-sandbox"), []byte("work\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.layers.Commit(ctx, "checkpoint-1", "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:00000000000000000000000000000000000000000000000000000000000000c1"
	key, _ := image.TopKey(digest)
	c, err := e.store.Commit(ctx, "checkpoint-1", key, sandbox.ImageConfig{User: "app:staff", WorkingDir: "/srv/work"})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !slices.Equal(c.Layers, []string{key}) || c.Config.UID != 1000 || c.Config.GID != 50 || c.Config.WorkingDir != "/srv/work" {
		t.Errorf("Commit() = %+v, want layers [%s], 1000:50, working directory /srv/work", c, key)
	}
	if err := e.layers.Remove(ctx, "checkpoint-1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.path(key), "made-in-sandbox")); err != nil || string(b) != "work\n" {
		t.Errorf("the committed image, its source removed: made-in-sandbox = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(e.path(key), "srv/work")); err != nil || !st.IsDir() {
		t.Errorf("the committed image's working directory: %v", err)
	}

	if _, err := e.layers.Prepare(ctx, "sandbox-2", key); err != nil {
		t.Fatal(err)
	}
	other, _ := image.TopKey("sha256:00000000000000000000000000000000000000000000000000000000000000c2")
	for _, parent := range []string{"checkpoint-1", "sandbox-2"} { // removed; active
		if _, err := e.store.Commit(ctx, parent, other, sandbox.ImageConfig{}); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("Commit from %s = %v, want ErrNotFound", parent, err)
		}
	}
	if _, err := e.store.Commit(ctx, top, "layer-00", sandbox.ImageConfig{}); err == nil {
		t.Errorf("Commit to a key that is no top's succeeded")
	}

	uid, gid, err := e.store.ResolveUser(ctx, key, "app:staff")
	if err != nil || uid != 1000 || gid != 50 {
		t.Errorf("ResolveUser(app:staff) = %d, %d, %v; want 1000, 50", uid, gid, err)
	}
	if _, _, err := e.store.ResolveUser(ctx, "img-missing", "app"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("ResolveUser in a missing snapshot = %v, want ErrNotFound", err)
	}

	// Keys lists image keys only; Remove removes those and refuses others.
	all := e.keys()
	if want := sortedCopy(append(slices.Clone(u.Layers), key)); !slices.Equal(all, want) {
		t.Errorf("Keys() = %v, want %v", all, want)
	}
	err = e.store.Remove(ctx, []string{"sandbox-2", key, "img-0123", "checkpoint-9"})
	if err == nil || !strings.Contains(err.Error(), `"sandbox-2" is not an image key`) || !strings.Contains(err.Error(), `"checkpoint-9" is not an image key`) {
		t.Errorf("Remove of non-image keys = %v, want both refused", err)
	}
	if _, err := e.layers.Stat(ctx, "sandbox-2"); err != nil {
		t.Errorf("sandbox-2 after a Remove that refused it: %v", err)
	}
	if e.has(key) {
		t.Errorf("%s, an image key given with refused ones, is still there", key)
	}
	if err := e.store.Remove(ctx, all); err != nil {
		t.Errorf("Remove(%v) = %v", all, err)
	}
	if keys := e.keys(); len(keys) != 0 {
		t.Errorf("Keys() after removing them all = %v", keys)
	}
	e.checkClean()
}

// TestUnpackNoLayers unpacks an image of no layers: its top holds the
// mount points and working directory only.
func TestUnpackNoLayers(t *testing.T) {
	withEnv(t, layertar.Limits{}, testUnpackNoLayers)
}

func testUnpackNoLayers(t *testing.T, e *env) {
	img := registry.Image(t)
	u, events := unpack(t, e.store, img, digestOf(t, img))
	top, _ := image.TopKey(digestOf(t, img))
	if !slices.Equal(u.Layers, []string{top}) || len(events) != 0 || u.Config.UID != 0 || u.Config.Home != "/" {
		t.Errorf("Unpack of no layers = %+v, events %v; want only the top %s, root's, home /", u, events, top)
	}
	got := readTree(t, e.path(top)).without(t, map[string]node{agentFile: agentFileNode})
	sameTree(t, "the top of no layers", got, tree{nodes: map[string]node{
		"/":           got.nodes["/"],
		"/.hearth":    {Type: "dir", Mode: 0o755},
		"/run":        {Type: "dir", Mode: 0o755},
		"/run/hearth": {Type: "dir", Mode: 0o755},
		"/work":       {Type: "dir", Mode: 0o755},
	}})
	e.checkClean()
}
