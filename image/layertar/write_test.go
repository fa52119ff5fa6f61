package layertar_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/image/layertar"
	"golang.org/x/sys/unix"
)

// TestWriteRoundTrip writes a tree made of every kind of entry as a tar,
// checks the stream, applies it onto an empty root and compares the two
// trees file by file.
func TestWriteRoundTrip(t *testing.T) {
	src := writeSource(t)
	var out bytes.Buffer
	st, err := layertar.Write(context.Background(), src.f, &out)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	checkStream(t, src, out.Bytes(), st)

	var again bytes.Buffer
	if _, err := layertar.Write(context.Background(), src.f, &again); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
		t.Errorf("a second Write gave other bytes (err %v): the stream is not deterministic", err)
	}

	dst := newFixture(t)
	if _, err := dst.apply(t, out.Bytes(), layertar.Limits{}); err != nil {
		t.Fatalf("Apply of Write's tar: %v", err)
	}
	a, b := describe(t, src.root), describe(t, dst.root)
	for _, skipped := range []string{"null", "fifo", "sock", "tmp/.wh.planted"} {
		delete(a, skipped)
	}
	if !maps.Equal(a, b) {
		for p := range maps.Keys(a) {
			if a[p] != b[p] {
				t.Errorf("%q:\n written from %s\n applied as   %s", p, a[p], b[p])
			}
		}
		for p := range maps.Keys(b) {
			if _, ok := a[p]; !ok {
				t.Errorf("%q: applied but not in the source: %s", p, b[p])
			}
		}
	}
	src.checkOutside(t)
	dst.checkOutside(t)
}

// long is a name longer than a USTAR header holds.
var long = strings.Repeat("long-name-", 20)

// writeSource returns a root holding every kind of file.
func writeSource(t *testing.T) *fixture {
	t.Helper()
	src := newFixture(t)
	capped := owner(reg("bin/ping", "ping", 0o4755), 0, 0)
	capped.h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": capNetBindService, "SCHILY.xattr.user.a": "1"}
	tagged := dir("a", 0o2750)
	tagged.h.PAXRecords = map[string]string{"SCHILY.xattr.user.dir": "yes"}
	src.mustApply(t,
		tagged, owner(reg("a/b", "b", 0o600), 1000, 1000), reg("a.txt", "a.txt", 0o644),
		capped, hardlink("bin/ping6", "bin/ping"), hardlink("a/ping-too", "bin/ping"),
		dir("tmp", 0o1777), owner(sym("tmp/link", "../a/b"), 5, 6),
		reg("empty", "", 0o400), reg("zeros", strings.Repeat("\x00", 1<<20)+"z", 0o644),
		reg("odd name\nwith ünïcode", "odd", 0o644), reg(long+"/"+long, "long", 0o644),
	)
	must(t, os.Symlink(src.outside, src.path("esc")))
	must(t, os.Symlink(src.outside+"/keep", src.path("escfile")))
	must(t, unix.Mknod(src.path("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mkfifo(src.path("fifo"), 0o644))
	makeSocket(t, src.path("sock"))
	must(t, os.WriteFile(src.path("tmp/.wh.planted"), []byte("would hide tmp/planted"), 0o644))
	return src
}

// checkStream checks the tar Write wrote from writeSource, and its Stats.
func checkStream(t *testing.T, src *fixture, b []byte, st layertar.Stats) {
	t.Helper()
	hdrs := readTar(t, b)
	var order []string
	for _, h := range hdrs {
		order = append(order, h.Name)
	}
	want := []string{
		"a/", "a/b", "a/ping-too", "a.txt", "bin/", "bin/ping", "bin/ping6", "empty", "esc", "escfile",
		long + "/", long + "/" + long, "odd name\nwith ünïcode", "tmp/", "tmp/link", "zeros",
	}
	if !slices.Equal(order, want) {
		t.Errorf("Write's entries:\n %q\nwant\n %q", order, want)
	}
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeLink && h.Linkname != "a/ping-too" {
			t.Errorf("%s: hard link to %q, want to a/ping-too, the first name written", h.Name, h.Linkname)
		}
		if h.Format&tar.FormatGNU != 0 {
			t.Errorf("%s: format %v, want PAX (or plain USTAR, where PAX needs no records)", h.Name, h.Format)
		}
		if h.Name == "esc" && (h.Typeflag != tar.TypeSymlink || h.Linkname != src.outside) {
			t.Errorf("esc: type %q target %q, want the symbolic link itself", h.Typeflag, h.Linkname)
		}
	}
	wantNotes := []string{
		"fifo: FIFO skipped", "null: device node skipped", "sock: socket skipped",
		"tmp/.wh.planted: name reserved for whiteouts skipped",
	}
	if !slices.Equal(st.Skipped, wantNotes) {
		t.Errorf("Skipped = %q, want %q", st.Skipped, wantNotes)
	}
	wantStats := layertar.Stats{Entries: 16, Files: 7, Dirs: 4, Symlinks: 3, Hardlinks: 2, Bytes: 1 + 5 + 4 + (1<<20 + 1) + 3 + 4, Skipped: wantNotes}
	if !statsEqual(st, wantStats) {
		t.Errorf("Stats = %+v, want %+v", st, wantStats)
	}
}

// TestWriteSkipsMountPoints checks that Write does not descend into a
// mount inside the tree.
func TestWriteSkipsMountPoints(t *testing.T) {
	fx := newFixture(t)
	fx.mustApply(t, dir("mnt", 0o755), reg("file", "f", 0o644))
	if err := unix.Mount(fx.outside, fx.path("mnt"), "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(fx.path("mnt"), unix.MNT_DETACH) })
	var out bytes.Buffer
	st, err := layertar.Write(context.Background(), fx.f, &out)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	var names []string
	for _, h := range readTar(t, out.Bytes()) {
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"file"}) || !slices.Equal(st.Skipped, []string{"mnt: mount point skipped"}) {
		t.Errorf("Write = entries %q, skipped %q; want [file] and the mount point noted", names, st.Skipped)
	}
}

func TestWriteCancelled(t *testing.T) {
	fx := newFixture(t)
	fx.mustApply(t, reg("x", "x", 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := layertar.Write(ctx, fx.f, io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
}

// readTar returns the headers of the tar b, checking that it ends well.
func readTar(t *testing.T, b []byte) []*tar.Header {
	t.Helper()
	var hdrs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs
		}
		must(t, err)
		hdrs = append(hdrs, h)
	}
}

// describe returns, for every path under root, what a layer carries of
// it: type and mode, owner, modification time, content, link target, kept
// extended attributes and, for a file with several names, the first.
func describe(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	firsts := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		desc := fmt.Sprintf("mode=%o owner=%d:%d mtime=%v", st.Mode, st.Uid, st.Gid, time.Unix(st.Mtim.Unix()).UTC())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			must(t, err)
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
			if st.Nlink > 1 {
				if _, ok := firsts[st.Ino]; !ok {
					firsts[st.Ino] = rel
				}
				desc += " links-with=" + firsts[st.Ino]
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			must(t, err)
			desc += " target=" + target
		}
		for _, name := range []string{"user.a", "user.dir", "security.capability"} {
			buf := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, name, buf); err == nil {
				desc += fmt.Sprintf(" %s=%q", name, buf[:n])
			}
		}
		m[rel] = desc
		return nil
	})
	must(t, err)
	return m
}

// makeSocket leaves a unix socket at p.
func makeSocket(t *testing.T, p string) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.Bind(fd, &unix.SockaddrUnix{Name: p}))
}

// TestWriteRefusesLongPaths makes a path longer than Apply takes (with
// relative calls: the host path is longer than PATH_MAX) and checks that
// Write refuses it rather than write a tar Apply would refuse.
func TestWriteRefusesLongPaths(t *testing.T) {
	fx := newFixture(t)
	fd, err := unix.Open(fx.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	name := strings.Repeat("d", 250)
	var rel string
	for range 17 {
		must(t, unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		unix.Close(fd)
		fd, rel = next, filepath.Join(rel, name)
	}
	unix.Close(fd)
	_, err = layertar.Write(context.Background(), fx.f, io.Discard)
	var le *layertar.Error
	if !errors.Is(err, layertar.ErrHostile) || !errors.As(err, &le) || le.Path != rel {
		t.Errorf("Write of a %d-byte path = %v, want an *Error for it matching ErrHostile", len(rel), err)
	}
}

// TestWriteReadByGNUTar extracts Write's tar with GNU tar, an independent
// reader, and compares the tree with the source.
func TestWriteReadByGNUTar(t *testing.T) {
	src := writeSource(t)
	var out bytes.Buffer
	if _, err := layertar.Write(context.Background(), src.f, &out); err != nil {
		t.Fatalf("Write: %v", err)
	}
	dst := t.TempDir()
	cmd := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--same-owner", "-xpf", "-", "-C", dst)
	cmd.Stdin = &out
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, b)
	}
	a, b := describe(t, src.root), describe(t, dst)
	for _, skipped := range []string{"null", "fifo", "sock", "tmp/.wh.planted"} {
		delete(a, skipped)
	}
	for p := range maps.Keys(a) {
		if a[p] != b[p] {
			t.Errorf("%q:\n written from    %s\n GNU tar made it %s", p, a[p], b[p])
		}
	}
	for p := range maps.Keys(b) {
		if _, ok := a[p]; !ok {
			t.Errorf("%q: extracted but not in the source: %s", p, b[p])
		}
	}
}
