package layertar_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/testutil/testenv"
	"golang.org/x/sys/unix"
)

// stamp is the modification time of test entries that give none.
var stamp = time.Unix(1_700_000_000, 123_456_789)

// ent is one entry of a test layer.
type ent struct {
	h    tar.Header
	body string
}

func reg(name, body string, mode int64) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body: body}
}

func dir(name string, mode int64) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func sym(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// whiteout is the whiteout file an OCI layer uses for a removal.
func whiteout(name string) ent { return reg(name, "", 0o644) }

// makeTar returns the tar of ents (PAX, nanosecond times).
func makeTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.h
		if h.ModTime.IsZero() {
			h.ModTime = stamp
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("WriteHeader(%q): %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("Write(%q): %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fixture is a root to apply layers onto, with sentinels beside it, in
// its parent, that nothing may touch.
type fixture struct {
	base    string // the parent: root, outside and beside
	root    string
	outside string // a directory beside the root: keep, dir/, link
	f       *os.File
	before  map[string]string
	tb      testing.TB
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "layertar applies owners and file capabilities: needs root")
	}
	base := t.TempDir()
	fx := &fixture{tb: t, base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{fx.root, fx.outside, filepath.Join(fx.outside, "dir")} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(fx.outside, "keep"), []byte("sentinel"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.outside, "dir", "inner"), []byte("inner"), 0o600))
	must(t, os.Symlink("keep", filepath.Join(fx.outside, "link")))
	must(t, os.WriteFile(filepath.Join(base, "beside"), []byte("beside"), 0o644))
	f, err := os.Open(fx.root)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	fx.f = f
	fx.before = fx.snapshot(t)
	return fx
}

// apply applies the tar b onto the root.
func (fx *fixture) apply(t testing.TB, b []byte, lim layertar.Limits) (layertar.Stats, error) {
	t.Helper()
	return layertar.Apply(context.Background(), fx.f, bytes.NewReader(b), lim)
}

// mustApply applies a layer of ents and fails t if Apply fails.
func (fx *fixture) mustApply(t testing.TB, ents ...ent) layertar.Stats {
	t.Helper()
	st, err := fx.apply(t, makeTar(t, ents...), layertar.Limits{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return st
}

// path returns rel's host path under the root.
func (fx *fixture) path(rel string) string { return filepath.Join(fx.root, rel) }

// snapshot describes everything in base but the root's contents: type,
// mode, owner, size, times (ctime too, which any change moves), content,
// link target.
func (fx *fixture) snapshot(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(fx.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d size=%d nlink=%d mtime=%v ctime=%v",
			st.Mode, st.Uid, st.Gid, st.Size, st.Nlink, st.Mtim, st.Ctim)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " target=" + target
		}
		m[p] = desc
		if p == fx.root {
			return fs.SkipDir
		}
		return nil
	})
	must(t, err)
	return m
}

// checkOutside fails t if anything outside the root was created, changed
// or removed since the fixture was made.
func (fx *fixture) checkOutside(t testing.TB) {
	t.Helper()
	after := fx.snapshot(t)
	for p, was := range fx.before {
		if p == fx.root {
			continue // its own times and mode are the layer's to set
		}
		if now, ok := after[p]; !ok {
			t.Errorf("outside the root: %s was removed", p)
		} else if now != was {
			t.Errorf("outside the root: %s changed:\n was %s\n now %s", p, was, now)
		}
	}
	for p, now := range after {
		if _, ok := fx.before[p]; !ok {
			t.Errorf("outside the root: %s was created: %s", p, now)
		}
	}
}

func lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
