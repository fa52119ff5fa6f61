package lifecycle_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/sandbox"
)

// TestFetchImage: a node given a sandbox of an image it lacks fetches the
// image's layers, bottom first, from a node that holds them, and starts
// the sandbox on them; the sending node sends only a layer of an image
// in the catalog, against the layer below it there (never a sandbox's
// root); an image no node holds fails the start, and leaves nothing.
func TestFetchImage(t *testing.T) {
	m := newMoveEnv(t)
	ctx := t.Context()
	if err := m.lay.Import(ctx, "tl-1", fstest.MapFS{"etc/hostname": {Data: []byte("tools\n"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	path, err := m.lay.Prepare(ctx, "tl-2-build", "tl-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "etc", "tool.conf"), []byte("from the top layer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.lay.Commit(ctx, "tl-2", "tl-2-build"); err != nil {
		t.Fatal(err)
	}
	tools := sandbox.Image{Name: "tools", Tenant: a1.Tenant, Digest: "sha256:7d1a2a1b6c1c7ebd9d84ed2ef5b9e1f5b1e6f1c1f8fd0d4b1a3c0b5f6c2d7e8f", Source: sandbox.ImageSourceImport,
		Current: true, Layers: []string{"tl-1", "tl-2"}, CreatedAt: time.Now().UTC()}
	ghost := tools
	ghost.Name, ghost.Digest, ghost.Layers = "ghost", "sha256:8e2b3b2c7d2d8fce0e95fe3f06c0f2f6c2f7f2d2f9fe1e5c2b4d1c6f7d3e8f90", []string{"gh-1"}
	for _, img := range []sandbox.Image{tools, ghost} {
		if err := m.db.Images().Put(ctx, img); err != nil {
			t.Fatal(err)
		}
	}

	base := m.create(t, a1, "base")
	placed := func(name string, img sandbox.Image) (sandbox.Sandbox, error) {
		sb := base
		sb.ID, sb.Name, sb.Status, sb.Node = "id"+name, "agent-a1-"+name, sandbox.StatusCreating, "cp"
		sb.Image, sb.ImageDigest, sb.ImageKey = img.Name, img.Digest, img.Key()
		if err := m.db.Sandboxes().Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return m.b.Sandboxes.StartPlaced(ctx, sb.Tenant, sb.Name, sb.ID)
	}
	sb, err := placed("tooled", tools)
	if err != nil || sb.Node != "b" || sb.Status != sandbox.StatusRunning {
		t.Fatalf("StartPlaced on b of a sandbox of an image only local holds = %s on %q, %v; want running on b", sb.Status, sb.Node, err)
	}
	if !slices.Equal(m.fetched, []string{"tl-1", "tl-2"}) {
		t.Errorf("b fetched %q; want tl-1, then tl-2", m.fetched)
	}
	for _, key := range []string{"tl-1", "tl-2"} {
		if info, err := m.layB.Stat(ctx, key); err != nil || info.Kind != layers.KindCommitted {
			t.Errorf("b's %s after the fetch = %+v, %v; want committed", key, info, err)
		}
	}
	if info, _ := m.layB.Stat(ctx, "tl-2"); info.Parent != "tl-1" {
		t.Errorf("b's tl-2 has parent %q; want tl-1", info.Parent)
	}
	root, err := m.layB.Stat(ctx, "sb-"+sb.ID)
	if err != nil || root.Parent != "tl-2" {
		t.Fatalf("the sandbox's root on b = %+v, %v; want one prepared from tl-2", root, err)
	}
	if got, err := os.ReadFile(filepath.Join(root.Path, "etc", "tool.conf")); err != nil || string(got) != "from the top layer\n" {
		t.Errorf("the sandbox's /etc/tool.conf on b = %q, %v", got, err)
	}

	// A second sandbox of it fetches nothing more.
	m.fetched = nil
	if _, err := placed("again", tools); err != nil || len(m.fetched) != 0 {
		t.Errorf("a second sandbox of the image = %v, fetched %q; want none fetched", err, m.fetched)
	}

	for _, c := range []struct{ what, key, base string }{
		{"a sandbox's root", "sb-" + base.ID, ""},
		{"a layer against another base", "tl-2", ""},
		{"a layer against a base below its own", "tl-2", "default"},
		{"a layer no image has", "tl-3", "tl-2"},
	} {
		err := m.svc.Images.SendLayer(ctx, "b", c.key, c.base, io.Discard)
		wantCode(t, "SendLayer of "+c.what, err, sandbox.CodeNotFound)
	}

	_, err = placed("haunted", ghost)
	wantCode(t, "StartPlaced of a sandbox of an image no node holds", err, sandbox.CodeNotFound)
	if _, err := m.layB.Stat(ctx, "gh-1"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("b holds a layer of the image no node holds: %v", err)
	}
	if _, err := m.layB.Stat(ctx, "sb-idhaunted"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("b made a root for the sandbox whose image it could not fetch: %v", err)
	}
}
