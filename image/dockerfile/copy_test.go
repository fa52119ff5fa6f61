package dockerfile_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hearth/hearth/image/dockerfile"
)

// tarEntry is what a test reads back of one tar entry.
type tarEntry struct {
	typ      byte
	mode     int64
	uid, gid int
	link     string
	content  string
}

// readTar reads a tar stream into its entries by name.
func readTar(t *testing.T, b []byte) (map[string]tarEntry, []string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	out := map[string]tarEntry{}
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, names
		}
		if err != nil {
			t.Fatalf("reading the tar stream: %v", err)
		}
		c, _ := io.ReadAll(tr)
		out[h.Name] = tarEntry{h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, string(c)}
		names = append(names, h.Name)
	}
}

// writeTar writes a Copy's stream.
func writeTar(t *testing.T, c dockerfile.Copy, bc *dockerfile.Context) ([]byte, error) {
	t.Helper()
	var b bytes.Buffer
	err := c.WriteTar(&b, bc)
	return b.Bytes(), err
}

// TestWriteTarDirectory checks a directory's copy with --chown and
// --chmod, read back by archive/tar and unpacked by GNU tar.
func TestWriteTarDirectory(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"sub/x/y.go": "package y", "sub/run.sh": "#!/bin/sh", "sub/link": "-> x/y.go"})
	os.Chmod(filepath.Join(dir, "sub/run.sh"), 0o755)
	bc := dirContext(t, dir)
	p := mustPlan(t, "FROM debian:12\nWORKDIR /srv\nCOPY --chown=1000:1001 --chmod=0750 sub app\nCOPY sub/run.sh /bin/\n", nil, sandboxConfig())
	if err := p.Resolve(bc, baseDigest); err != nil {
		t.Fatal(err)
	}
	c := p.Steps[1].Copies[0]
	if c.Dest != "/srv/app" {
		t.Errorf("Dest = %q, want /srv/app", c.Dest)
	}
	b, err := writeTar(t, c, bc)
	if err != nil {
		t.Fatalf("WriteTar = %v", err)
	}
	got, names := readTar(t, b)
	want := map[string]tarEntry{
		"link":   {tar.TypeSymlink, 0o777, 1000, 1001, "x/y.go", ""},
		"run.sh": {tar.TypeReg, 0o750, 1000, 1001, "", "#!/bin/sh"},
		"x/":     {tar.TypeDir, 0o750, 1000, 1001, "", ""},
		"x/y.go": {tar.TypeReg, 0o750, 1000, 1001, "", "package y"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tar = %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(names, []string{"link", "run.sh", "x/", "x/y.go"}) {
		t.Errorf("tar order = %q, want parents first, in name order", names)
	}

	// A file into a directory, without flags: root's, the context's mode.
	c = p.Steps[2].Copies[0]
	b, err = writeTar(t, c, bc)
	if err != nil {
		t.Fatalf("WriteTar = %v", err)
	}
	got, _ = readTar(t, b)
	if c.Dest != "/bin" || !reflect.DeepEqual(got, map[string]tarEntry{"run.sh": {tar.TypeReg, 0o755, 0, 0, "", "#!/bin/sh"}}) {
		t.Errorf("COPY sub/run.sh /bin/: Dest %q, tar %+v", c.Dest, got)
	}

	// GNU tar unpacks the first stream as it reads.
	out := t.TempDir()
	b, _ = writeTar(t, p.Steps[1].Copies[0], bc)
	cmd := exec.Command("tar", "-x", "-C", out)
	cmd.Stdin = bytes.NewReader(b)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, msg)
	}
	if c, err := os.ReadFile(filepath.Join(out, "link")); err != nil || string(c) != "package y" {
		t.Errorf("unpacked link reads %q, %v", c, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "x/y.go")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("unpacked x/y.go: %v, %v; want mode 0750", fi, err)
	}
}

// TestWriteTarChanged checks that a context changed after Resolve is
// refused, never copied as the key's content.
func TestWriteTarChanged(t *testing.T) {
	outside := t.TempDir()
	tests := []struct {
		name   string
		change func(dir string)
		is     error
	}{
		{"same size", func(d string) { os.WriteFile(filepath.Join(d, "sub/f"), []byte("BBBB"), 0o644) }, dockerfile.ErrChanged},
		{"other size", func(d string) { os.WriteFile(filepath.Join(d, "sub/f"), []byte("aaaaa"), 0o644) }, dockerfile.ErrChanged},
		{"file now a symlink", func(d string) {
			os.Remove(filepath.Join(d, "sub/f"))
			os.Symlink("/etc/passwd", filepath.Join(d, "sub/f"))
		}, dockerfile.ErrChanged},
		{"directory now a symlink out", func(d string) {
			os.Rename(filepath.Join(d, "sub"), filepath.Join(outside, "moved"))
			os.Symlink(filepath.Join(outside, "moved"), filepath.Join(d, "sub"))
		}, dockerfile.ErrEscapes},
		{"symlink retargeted", func(d string) {
			os.Remove(filepath.Join(d, "sub/l"))
			os.Symlink("/other", filepath.Join(d, "sub/l"))
		}, dockerfile.ErrChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"sub/f": "aaaa", "sub/l": "-> f"})
			bc := dirContext(t, dir)
			p := mustPlan(t, "FROM debian:12\nCOPY sub /s/\n", nil, sandboxConfig())
			if err := p.Resolve(bc, baseDigest); err != nil {
				t.Fatal(err)
			}
			tt.change(dir)
			_, err := writeTar(t, p.Steps[0].Copies[0], bc)
			if !errors.Is(err, tt.is) {
				t.Errorf("WriteTar after the change = %v, want %v", err, tt.is)
			}
		})
	}
}

// TestWriteTarOwnerByName checks that an owner by name must be resolved.
func TestWriteTarOwnerByName(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"f": "x"})
	bc := dirContext(t, dir)
	p := mustPlan(t, "FROM debian:12\nCOPY --chown=node:staff f /f\n", nil, sandboxConfig())
	if err := p.Resolve(bc, baseDigest); err != nil {
		t.Fatal(err)
	}
	key := p.Steps[0].Key
	c := p.Steps[0].Copies[0]
	if _, err := writeTar(t, c, bc); err == nil || !strings.Contains(err.Error(), "not resolved") {
		t.Errorf("WriteTar with an unresolved owner = %v, want a refusal", err)
	}
	c.Owner.UID, c.Owner.GID = 1000, 50
	b, err := writeTar(t, c, bc)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readTar(t, b); got["f"].uid != 1000 || got["f"].gid != 50 {
		t.Errorf("owner = %d:%d, want 1000:50", got["f"].uid, got["f"].gid)
	}
	if err := p.Resolve(bc, baseDigest); err != nil || p.Steps[0].Key != key {
		t.Errorf("key after the owner's IDs are filled = %q (%v), want unchanged %q", p.Steps[0].Key, err, key)
	}
}

// archive builds a tar stream of hdrs (a TypeReg's content is its
// Linkname field's text, for brevity), gzipped if gz.
func archive(t *testing.T, gz bool, hdrs ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.Writer = &b
	var z *gzip.Writer
	if gz {
		z = gzip.NewWriter(&b)
		w = z
	}
	tw := tar.NewWriter(w)
	for _, h := range hdrs {
		content := ""
		if h.Typeflag == tar.TypeReg {
			content, h.Linkname = h.Linkname, ""
			h.Size = int64(len(content))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, content)
	}
	tw.Close()
	if z != nil {
		z.Close()
	}
	return b.Bytes()
}

// TestAddUnpacks checks that ADD unpacks a local tar archive (plain,
// gzip, bzip2), COPY does not, and a file that is no archive is copied.
func TestAddUnpacks(t *testing.T) {
	dir := t.TempDir()
	entries := []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/tool", Typeflag: tar.TypeReg, Linkname: "#!tool", Mode: 0o4755, Uid: 3, Gid: 4},
		{Name: "/abs/x", Typeflag: tar.TypeReg, Linkname: "x"},
		{Name: "bin/alias", Typeflag: tar.TypeSymlink, Linkname: "tool"},
		{Name: "bin/hard", Typeflag: tar.TypeLink, Linkname: "./bin/tool"},
	}
	os.WriteFile(filepath.Join(dir, "root.tar"), archive(t, false, entries...), 0o644)
	os.WriteFile(filepath.Join(dir, "root.tar.gz"), archive(t, true, entries...), 0o644)
	os.WriteFile(filepath.Join(dir, "root.tb"), archive(t, false, entries...), 0o644)
	if msg, err := exec.Command("bzip2", filepath.Join(dir, "root.tb")).CombinedOutput(); err != nil {
		t.Fatalf("bzip2: %v: %s", err, msg)
	}
	os.WriteFile(filepath.Join(dir, "plain.gz"), gzipped(t, "not a tar"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
	bc := dirContext(t, dir)
	p := mustPlan(t, "FROM debian:12\nADD root.tar /opt/\nADD root.tar.gz /opt\nADD root.tb.bz2 /opt/\nCOPY root.tar /x/\nADD plain.gz notes.txt /y/\n", nil, sandboxConfig())
	if err := p.Resolve(bc, baseDigest); err != nil {
		t.Fatal(err)
	}
	want := map[string]tarEntry{
		"bin/":      {tar.TypeDir, 0o755, 0, 0, "", ""},
		"bin/tool":  {tar.TypeReg, 0o4755, 3, 4, "", "#!tool"},
		"abs/x":     {tar.TypeReg, 0o644, 0, 0, "", "x"},
		"bin/alias": {tar.TypeSymlink, 0o777, 0, 0, "tool", ""},
		"bin/hard":  {tar.TypeLink, 0o644, 0, 0, "bin/tool", ""},
	}
	for i := 0; i < 3; i++ {
		c := p.Steps[i].Copies[0]
		if !c.Unpack || c.Dest != "/opt" {
			t.Errorf("%s: Unpack %v, Dest %q; want an unpack into /opt", p.Steps[i].Instruction, c.Unpack, c.Dest)
		}
		b, err := writeTar(t, c, bc)
		if err != nil {
			t.Fatalf("%s: WriteTar = %v", p.Steps[i].Instruction, err)
		}
		if got, _ := readTar(t, b); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: tar = %+v\nwant %+v", p.Steps[i].Instruction, got, want)
		}
	}
	if c := p.Steps[3].Copies[0]; c.Unpack || c.Entries[0].Name != "root.tar" {
		t.Errorf("COPY of a tar: %+v, want it copied as a file", c)
	}
	for _, c := range p.Steps[4].Copies {
		if c.Unpack {
			t.Errorf("ADD %s (no tar inside) unpacks; want it copied", c.Source)
		}
	}
}

// gzipped compresses s.
func gzipped(_ testing.TB, s string) []byte {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	io.WriteString(z, s)
	z.Close()
	return b.Bytes()
}

// TestAddRefused checks the archives ADD refuses.
func TestAddRefused(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"climbs out", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Linkname: "x"}}},
		{"climbs out deeper", []tar.Header{{Name: "a/../../evil", Typeflag: tar.TypeReg, Linkname: "x"}}},
		{"through its symlink", []tar.Header{
			{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
			{Name: "etc/passwd", Typeflag: tar.TypeReg, Linkname: "root::0:0::/:/bin/sh"}}},
		{"hard link to nothing", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}}},
		{"device", []tar.Header{{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}}},
		{"fifo", []tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "a.tar"), archive(t, false, tt.entries...), 0o644)
			bc := dirContext(t, dir)
			p := mustPlan(t, "FROM debian:12\nADD a.tar /\n", nil, sandboxConfig())
			if err := p.Resolve(bc, baseDigest); err != nil {
				t.Fatal(err)
			}
			if _, err := writeTar(t, p.Steps[0].Copies[0], bc); !errors.Is(err, dockerfile.ErrUnsafe) {
				t.Errorf("WriteTar = %v, want ErrUnsafe", err)
			}
		})
	}
	// xz and zstd are refused at Resolve, naming the line.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.tar"), archive(t, false, tar.Header{Name: "f", Typeflag: tar.TypeReg, Linkname: "x"}), 0o644)
	if msg, err := exec.Command("xz", filepath.Join(dir, "a.tar")).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v: %s", err, msg)
	}
	_, err := resolvePlan(t, "FROM debian:12\nADD a.tar.xz /\n", nil, dir)
	var de *dockerfile.Error
	if !errors.As(err, &de) || de.Line != 2 || !errors.Is(err, dockerfile.ErrUnsupported) {
		t.Errorf("ADD of an xz archive = %v, want ErrUnsupported at line 2", err)
	}
}
