package image_test

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/fetch"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/layers"
)

// TestExportRoundTrip exports the top of an image (the seven-layer tree,
// with a device node and a FIFO added), reads the archive back with
// fetch.ReadArchive and unpacks it as a new image: its top is the same
// tree less the device node and the FIFO, and its config the one
// exported.
func TestExportRoundTrip(t *testing.T) {
	withEnv(t, layertar.Limits{}, testExportRoundTrip)
}

func testExportRoundTrip(t *testing.T, e *env) {
	ctx := t.Context()
	img := treeImage(t, compression.GZip)
	u, _ := unpack(t, e.store, img, digestOf(t, img))

	// A root with what an export leaves out, made as a sandbox's would be.
	dir, err := e.layers.Prepare(ctx, "sandbox-1", u.Layers[len(u.Layers)-1])
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "data/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "data/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.layers.Commit(ctx, "checkpoint-1", "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	cfg := u.Config
	cfg.Env = append(cfg.Env, "EXPORTED=1")
	cfg.Cmd = []string{"serve", "--port", "80"}
	cfg.Labels = map[string]string{"a": "1", "b": "two"}
	const srcDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	srcKey, _ := image.TopKey(srcDigest)
	src, err := e.store.Commit(ctx, "checkpoint-1", srcKey, cfg)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	srcTree := readTree(t, e.path(src.Layers[0]))
	for _, p := range []string{"/data/null", "/data/fifo"} {
		if _, ok := srcTree.nodes[p]; !ok {
			t.Fatalf("the exported top lacks %s", p)
		}
	}

	scratch := t.TempDir()
	var archive bytes.Buffer
	if err := e.store.Export(ctx, src.Layers[0], "example.com/tree:exported", src.Config, scratch, &archive); err != nil {
		t.Fatalf("Export: %v", err)
	}
	checkEmpty(t, scratch)
	p, err := fetch.ReadArchive(ctx, &archive, t.TempDir(), fetch.Options{})
	if err != nil {
		t.Fatalf("ReadArchive of the export: %v", err)
	}
	if p.Name != "example.com/tree:exported" {
		t.Errorf("ReadArchive().Name = %q, want the name exported", p.Name)
	}
	if ls, err := p.Image.Layers(); err != nil || len(ls) != 1 {
		t.Errorf("the exported image has layers %v (%v), want one", ls, err)
	}
	got, _ := unpack(t, e.store, p.Image, p.Digest)
	if !reflect.DeepEqual(got.Config, src.Config) {
		t.Errorf("the exported image's config = %+v, want %+v", got.Config, src.Config)
	}
	want := srcTree
	want.nodes = maps.Clone(want.nodes)
	delete(want.nodes, "/data/null")
	delete(want.nodes, "/data/fifo")
	sameTree(t, "the top of the exported image", readTree(t, e.path(got.Layers[len(got.Layers)-1])), want)

	// A key that is not there: an error, and no file left in scratch.
	err = e.store.Export(ctx, "img-missing", "x", src.Config, scratch, &archive)
	if !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Export of a missing key = %v, want ErrNotFound", err)
	}
	checkEmpty(t, scratch)
	e.checkClean()
}

// checkEmpty checks that dir holds nothing.
func checkEmpty(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("%s holds %v (%v), want nothing", dir, entries, err)
	}
}
