package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/image"
	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/btrfs"
	"github.com/hearth/hearth/layers/overlay"
	"github.com/hearth/hearth/testutil/testenv"
)

// stamp is the modification time of every test entry.
var stamp = time.Unix(1_700_000_000, 250_000_000)

// ent is one entry of a test layer.
type ent struct {
	h    tar.Header
	body string
}

func regular(name, body string, mode int64) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body: body}
}

func directory(name string, mode int64) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func symlink(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// whiteout is an OCI whiteout entry (".wh.NAME", or ".wh..wh..opq" for an
// opaque directory).
func whiteout(name string) ent { return regular(name, "", 0o644) }

// owner is e owned by uid and gid.
func (e ent) owner(uid, gid int) ent {
	e.h.Uid, e.h.Gid = uid, gid
	return e
}

// xattr is e with the extended attribute name set to value.
func (e ent) xattr(name, value string) ent {
	recs := map[string]string{"SCHILY.xattr." + name: value}
	for k, v := range e.h.PAXRecords {
		recs[k] = v
	}
	e.h.PAXRecords = recs
	return e
}

// tarOf is the PAX tar stream of ents, in their order.
func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.h
		h.ModTime, h.Format = stamp, tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("tar content %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withConfig is img with change applied to its config.
func withConfig(t testing.TB, img v1.Image, change func(*v1.ConfigFile)) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	change(cf)
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// digestOf is img's manifest digest.
func digestOf(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// chainKeys are the layer store keys of img's layer chains, bottom first,
// computed here from the OCI image spec's definition of ChainID:
// ChainID(L0) = DiffID(L0), ChainID(L0..Ln) = sha256(ChainID(L0..Ln-1) + " " + DiffID(Ln)).
func chainKeys(t testing.TB, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	chain := ""
	for _, d := range cf.RootFS.DiffIDs {
		if chain == "" {
			chain = d.String()
		} else {
			sum := sha256.Sum256([]byte(chain + " " + d.String()))
			chain = "sha256:" + hex.EncodeToString(sum[:])
		}
		keys = append(keys, "layer-"+strings.TrimPrefix(chain, "sha256:"))
	}
	return keys
}

// layerStore is a layer store the image tests run on, with the Walk that
// image.Keys takes.
type layerStore interface {
	layers.Store
	Walk(ctx context.Context, fn func(layers.Info) error) error
}

// backend is one of the layer stores hearth runs images on. Each test of
// the image store runs on every backend, as a subtest named after it.
type backend struct {
	name string
	// open opens a store of this kind at dir (which it creates), closed and
	// cleaned up when t ends; it skips t (fails it under
	// HEARTH_TEST_STRICT) when the backend cannot work here.
	open func(t *testing.T, dir string) layerStore
	// layerOverhead is the most that Usage of a small layer's snapshot
	// (which image.Store reports for a layer found stored) counts beyond
	// its files' data. btrfs charges the snapshot its own metadata (its
	// exclusive qgroup bytes: a 16 KiB tree node for a small layer);
	// overlay adds up the blocks of every file and directory in the
	// layer's own directory (one 4 KiB block per directory on ext4, none
	// on tmpfs).
	layerOverhead int64
}

// backends are the layer stores of `hearth serve --layers`: btrfs, the
// default, and overlay, the fallback for kernels without btrfs.
var backends = []backend{
	{name: "btrfs", open: openBtrfs, layerOverhead: 64 << 10},
	{name: "overlay", open: openOverlay, layerOverhead: 16 << 10},
}

// openBtrfs opens a btrfs layer store in a loop-mounted file beside dir.
func openBtrfs(t *testing.T, dir string) layerStore {
	t.Helper()
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs (btrfs-progs)")
	}
	ls, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir, ImageSize: 2 << 30})
	if err != nil {
		t.Fatalf("btrfs.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := ls.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return ls
}

// openOverlay opens an overlayfs layer store at dir; when t ends, it
// closes it and detaches every mount below dir (the store keeps its
// mounts past Close, for the sandboxes running on them).
func openOverlay(t *testing.T, dir string) layerStore {
	t.Helper()
	ls, err := overlay.Open(context.Background(), overlay.Options{Dir: dir})
	if errors.Is(err, layers.ErrUnsupported) {
		testenv.Skip(t, "overlayfs cannot work here: %v", err)
	}
	if err != nil {
		t.Fatalf("overlay.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := ls.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		points, err := mountinfo.Under(dir)
		if err != nil {
			t.Error(err)
		}
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
				t.Errorf("umount %s: %v", p, err)
			}
		}
	})
	return ls
}

// forEachBackend runs test on every backend, as a subtest named after it.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// withEnv runs test on an env of every backend (see newEnv), each as a
// subtest named after it.
func withEnv(t *testing.T, lim layertar.Limits, test func(t *testing.T, e *env)) {
	t.Helper()
	forEachBackend(t, func(t *testing.T, b backend) { test(t, newEnv(t, b, lim)) })
}

// env is an image store over a layer store of one backend, whose
// directory has a sentinel directory beside it that nothing may change.
type env struct {
	t        *testing.T
	backend  backend
	layers   layerStore
	store    *image.Store
	base     string // holds layers/ (the store) and sentinel/
	sentinel string
	before   map[string]string // the sentinel's tree when env was made
}

// newEnv makes an env over a layer store of backend b whose Store unpacks
// with lim; it skips t (fails it under HEARTH_TEST_STRICT) when b cannot
// work here.
func newEnv(t *testing.T, b backend, lim layertar.Limits) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root (to mount layer stores, and to own files as other users)")
	}
	base := t.TempDir()
	ls := b.open(t, filepath.Join(base, "layers"))
	st, err := image.New(image.Options{Layers: ls, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, backend: b, layers: ls, store: st, base: base, sentinel: filepath.Join(base, "sentinel")}
	for _, d := range []string{"sentinel/dir", "sentinel/etc"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"keep": "do not touch\n", "etc/passwd": "host:x:4444:4444::/host:/bin/sh\n"} {
		if err := os.WriteFile(filepath.Join(e.sentinel, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("keep", filepath.Join(e.sentinel, "link")); err != nil {
		t.Fatal(err)
	}
	e.before = describeDir(t, e.sentinel)
	return e
}

// describeDir describes every path under dir: type, mode, owner, size,
// modification time and content hash.
func describeDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode %o owner %d:%d size %d mtime %d.%d", st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256 %x", sha256.Sum256(b))
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// keys lists the image keys the layer store holds, sorted.
func (e *env) keys() []string {
	e.t.Helper()
	keys, err := image.Keys(e.t.Context(), e.layers.Walk)
	if err != nil {
		e.t.Fatalf("Keys: %v", err)
	}
	slices.Sort(keys)
	return keys
}

// has reports whether the layer store holds the committed snapshot key.
func (e *env) has(key string) bool {
	e.t.Helper()
	info, err := e.layers.Stat(e.t.Context(), key)
	if err != nil {
		return false
	}
	return info.Kind == layers.KindCommitted
}

// path is the host directory of the snapshot key.
func (e *env) path(key string) string {
	e.t.Helper()
	info, err := e.layers.Stat(e.t.Context(), key)
	if err != nil {
		e.t.Fatalf("Stat(%s): %v", key, err)
	}
	return info.Path
}

// checkClean checks that no snapshot being made is left (unpack-*,
// imgtmp-*) and that nothing beside the layer store changed.
func (e *env) checkClean() {
	e.t.Helper()
	for _, k := range e.keys() {
		if strings.HasPrefix(k, "unpack-") || strings.HasPrefix(k, "imgtmp-") {
			e.t.Errorf("the layer store still holds %s, a snapshot being made", k)
		}
	}
	after := describeDir(e.t, e.sentinel)
	for p, want := range e.before {
		if got, ok := after[p]; !ok {
			e.t.Errorf("%s, beside the layer store, is gone", p)
		} else if got != want {
			e.t.Errorf("%s, beside the layer store, changed: %s, was %s", p, got, want)
		}
	}
	for p := range after {
		if _, ok := e.before[p]; !ok {
			e.t.Errorf("%s appeared beside the layer store", p)
		}
	}
	entries, err := os.ReadDir(e.base)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range entries {
		if n := d.Name(); n != "layers" && n != "layers.btrfs" && n != "sentinel" {
			e.t.Errorf("%s appeared beside the layer store", filepath.Join(e.base, n))
		}
	}
}

// newKeys is what after holds that before did not.
func newKeys(before, after []string) []string {
	var out []string
	for _, k := range after {
		if !slices.Contains(before, k) {
			out = append(out, k)
		}
	}
	return out
}
