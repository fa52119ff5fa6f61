package dockerfile_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth/hearth/image/dockerfile"
)

// listTree lists every path under root with its type and size.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d", p, fi.Mode(), fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTarContext checks a context spooled from a tar stream (plain and
// gzip): what it holds, and that a plan resolves in it.
func TestTarContext(t *testing.T) {
	entries := []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "Dockerfile", Typeflag: tar.TypeReg, Linkname: "FROM scratch\nCOPY . /\n"},
		{Name: "a/f", Typeflag: tar.TypeReg, Linkname: "content", Mode: 0o640},
		{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o750},
		{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "a/h", Typeflag: tar.TypeLink, Linkname: "a/f"},
		{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "ro/x", Typeflag: tar.TypeReg, Linkname: "x", Mode: 0o4755},
	}
	for _, gz := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "ctx")
		bc, err := dockerfile.TarContext(bytes.NewReader(archive(t, gz, entries...)), dir, 0)
		if err != nil {
			t.Fatalf("TarContext(gzip %v) = %v", gz, err)
		}
		defer bc.Close()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("context dir: %v, %v; want mode 0700", fi, err)
		}
		checks := []struct {
			name, content string
			mode          fs.FileMode
		}{
			{"a/f", "content", 0o640}, {"a/h", "content", 0o640}, {"ro/x", "x", 0o755 | fs.ModeSetuid},
		}
		for _, c := range checks {
			b, err := os.ReadFile(filepath.Join(dir, c.name))
			fi, _ := os.Lstat(filepath.Join(dir, c.name))
			if err != nil || string(b) != c.content || fi.Mode() != c.mode {
				t.Errorf("%s = %q, %v, mode %v; want %q, mode %v", c.name, b, err, fi.Mode(), c.content, c.mode)
			}
		}
		if l, err := os.Readlink(filepath.Join(dir, "a/l")); err != nil || l != "/etc/passwd" {
			t.Errorf("a/l = %q, %v; want a symlink kept as written", l, err)
		}
		for name, mode := range map[string]fs.FileMode{"a": 0o750, "ro": 0o555} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != mode {
				t.Errorf("%s: %v, %v; want mode %v", name, fi, err, mode)
			}
		}
		p := mustPlan(t, "FROM scratch\nCOPY . /\n", nil, sandboxConfig())
		if err := p.Resolve(bc, ""); err != nil {
			t.Fatalf("Resolve in the spooled context = %v", err)
		}
		if n := len(p.Steps[0].Copies[0].Entries); n != 7 {
			t.Errorf("COPY . copies %d entries, want 7", n)
		}
	}
}

// outsideMark stands for the directory that holds the context in
// hostileStreams' names and links.
const outsideMark = "@OUT@"

// hostileStreams are tar streams that try to write outside the context.
var hostileStreams = []struct {
	name     string
	entries  []tar.Header
	maxBytes int64
	is       error
}{
	{"dotdot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrEscapes},
	{"dotdot deep", []tar.Header{{Name: "a/b/../../../evil", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrEscapes},
	{"dotdot dir", []tar.Header{{Name: "../evildir/", Typeflag: tar.TypeDir}}, 0, dockerfile.ErrEscapes},
	{"absolute", []tar.Header{{Name: outsideMark + "/evil", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrEscapes},
	{"through absolute symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outsideMark},
		{Name: "l/evil", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrUnsafe},
	{"through relative symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."},
		{Name: "l/evil", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrUnsafe},
	{"through symlink deep", []tar.Header{
		{Name: "a/b", Typeflag: tar.TypeSymlink, Linkname: "../.."},
		{Name: "a/b/evil/", Typeflag: tar.TypeDir}}, 0, dockerfile.ErrUnsafe},
	{"file over symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outsideMark + "/evil"},
		{Name: "l", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrUnsafe},
	{"dir over symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outsideMark},
		{Name: "l/", Typeflag: tar.TypeDir}}, 0, dockerfile.ErrUnsafe},
	{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../sentinel"}}, 0, dockerfile.ErrEscapes},
	{"hard link absolute", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, 0, dockerfile.ErrEscapes},
	{"hard link through symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outsideMark},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "l/sentinel"}}, 0, dockerfile.ErrUnsafe},
	{"hard link to symlink", []tar.Header{
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outsideMark + "/sentinel"},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "l"}}, 0, dockerfile.ErrUnsafe},
	{"device", []tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, 0, dockerfile.ErrUnsafe},
	{"fifo", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, 0, dockerfile.ErrUnsafe},
	{"duplicate", []tar.Header{{Name: "f", Typeflag: tar.TypeReg, Linkname: "x"}, {Name: "./f", Typeflag: tar.TypeReg, Linkname: "y"}}, 0, dockerfile.ErrUnsafe},
	{"dir over file", []tar.Header{{Name: "f", Typeflag: tar.TypeReg, Linkname: "x"}, {Name: "f/", Typeflag: tar.TypeDir}}, 0, dockerfile.ErrUnsafe},
	{"file under file", []tar.Header{{Name: "f", Typeflag: tar.TypeReg, Linkname: "x"}, {Name: "f/g", Typeflag: tar.TypeReg, Linkname: "x"}}, 0, dockerfile.ErrUnsafe},
	{"too large", []tar.Header{{Name: "f", Typeflag: tar.TypeReg, Linkname: "12345678901"}}, 10, dockerfile.ErrTooLarge},
	{"too large in sum", []tar.Header{
		{Name: "f", Typeflag: tar.TypeReg, Linkname: "123456"},
		{Name: "g", Typeflag: tar.TypeReg, Linkname: "123456"}}, 10, dockerfile.ErrTooLarge},
	{"too large by hard link", []tar.Header{
		{Name: "f", Typeflag: tar.TypeReg, Linkname: "123456"},
		{Name: "g", Typeflag: tar.TypeLink, Linkname: "f"}}, 10, dockerfile.ErrTooLarge},
}

// TestTarContextHostile feeds TarContext streams that try to write
// outside its directory, and checks that each is refused and that
// nothing is left, inside or out.
func TestTarContextHostile(t *testing.T) {
	for _, tt := range hostileStreams {
		for _, exists := range []bool{false, true} {
			name := tt.name
			if exists {
				name += " (dir exists)"
			}
			t.Run(name, func(t *testing.T) {
				parent := t.TempDir()
				os.WriteFile(filepath.Join(parent, "sentinel"), []byte("keep"), 0o644)
				dir := filepath.Join(parent, "ctx")
				if exists {
					os.Mkdir(dir, 0o700)
				}
				before := listTree(t, parent)
				var hdrs []tar.Header
				for _, h := range tt.entries {
					h.Name = strings.ReplaceAll(h.Name, outsideMark, parent)
					h.Linkname = strings.ReplaceAll(h.Linkname, outsideMark, parent)
					hdrs = append(hdrs, h)
				}
				bc, err := dockerfile.TarContext(bytes.NewReader(archive(t, false, hdrs...)), dir, tt.maxBytes)
				if err == nil {
					bc.Close()
					t.Fatalf("TarContext accepted a hostile stream")
				}
				if !errors.Is(err, tt.is) {
					t.Errorf("TarContext = %v, want %v", err, tt.is)
				}
				if after := listTree(t, parent); !reflect.DeepEqual(after, before) {
					t.Errorf("the context's parent changed:\nbefore %q\nafter  %q", before, after)
				}
				if b, _ := os.ReadFile(filepath.Join(parent, "sentinel")); string(b) != "keep" {
					t.Errorf("the file beside the context now reads %q", b)
				}
			})
		}
	}
}

// TestTarContextDir checks TarContext's directory argument.
func TestTarContextDir(t *testing.T) {
	stream := archive(t, false, tar.Header{Name: "f", Typeflag: tar.TypeReg, Linkname: "x"})
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "mine"), []byte("mine"), 0o644)
	if _, err := dockerfile.TarContext(bytes.NewReader(stream), full, 0); err == nil {
		t.Error("TarContext into a directory that is not empty succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(full, "mine")); string(b) != "mine" {
		t.Error("TarContext into a directory that is not empty touched what was there")
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if _, err := dockerfile.TarContext(bytes.NewReader(stream), link, 0); err == nil {
		t.Error("TarContext into a symlink succeeded")
	}
	if _, err := dockerfile.TarContext(strings.NewReader("not a tar stream, not at all, not even close to one, really"), filepath.Join(t.TempDir(), "c"), 0); err == nil {
		t.Error("TarContext of garbage succeeded")
	}
}
