package layertar_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hearth/hearth/image/layertar"
	"github.com/hearth/hearth/testutil/testenv"
	"golang.org/x/sys/unix"
)

// capNetBindService is security.capability for cap_net_bind_service=ep
// (VFS_CAP_REVISION_2 with the effective flag; permitted bit 10).
const capNetBindService = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// entriesAtime is the access time of home/u/notes in entriesLayer.
var entriesAtime = time.Unix(1_600_000_000, 42)

// entriesLayer is a layer of every kind of entry.
func entriesLayer() []ent {
	suid := reg("/usr/bin/su", "#!su", 0o4755)
	owned := owner(reg("home/u/notes", "hello", 0o640), 1234, 5678)
	owned.h.AccessTime = entriesAtime
	capped := reg("bin/ping", "ping", 0o755)
	capped.h.PAXRecords = map[string]string{
		"SCHILY.xattr.security.capability":    capNetBindService,
		"SCHILY.xattr.user.note":              "kept",
		"SCHILY.xattr.trusted.overlay.opaque": "y",
		"SCHILY.xattr.security.selinux":       "system_u:object_r:bin_t:s0",
	}
	shared := owner(dir("srv/shared", 0o2775), 0, 50)
	shared.h.PAXRecords = map[string]string{"SCHILY.xattr.user.dir": "d"}
	link := owner(sym("etc/passwd-link", "/etc/passwd"), 7, 8)
	link.h.PAXRecords = map[string]string{"SCHILY.xattr.user.l": "x"}
	devnull := ent{h: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}}
	fifo := ent{h: tar.Header{Typeflag: tar.TypeFifo, Name: "run/fifo", Mode: 0o644}}
	return []ent{
		dir("./", 0o755), suid, owned, capped, shared,
		dir("tmp", 0o1777), link, sym("rel", "../../x/y"),
		hardlink("bin/ping6", "/bin/ping"), devnull, fifo,
		reg("deep/er/file", "implicit parents", 0o600),
	}
}

func TestApplyEntries(t *testing.T) {
	fx := newFixture(t)
	atime := entriesAtime
	st := fx.mustApply(t, entriesLayer()...)

	checkMode(t, fx.root, unix.S_IFDIR|0o755)
	checkMode(t, fx.path("usr/bin/su"), unix.S_IFREG|0o4755)
	checkMode(t, fx.path("tmp"), unix.S_IFDIR|0o1777)
	checkMode(t, fx.path("srv/shared"), unix.S_IFDIR|0o2775)
	checkMode(t, fx.path("deep/er"), unix.S_IFDIR|0o755) // made, not in the layer
	if s := lstat(t, fx.path("home/u/notes")); s.Uid != 1234 || s.Gid != 5678 || s.Mode != unix.S_IFREG|0o640 {
		t.Errorf("home/u/notes: uid %d gid %d mode %o, want 1234 5678 100640", s.Uid, s.Gid, s.Mode)
	} else if s.Mtim != unix.NsecToTimespec(stamp.UnixNano()) || s.Atim != unix.NsecToTimespec(atime.UnixNano()) {
		t.Errorf("home/u/notes: mtime %v atime %v, want %v %v", s.Mtim, s.Atim, stamp, atime)
	}
	if got := readFile(t, fx.path("home/u/notes")); got != "hello" { // after lstat: reading moves atime
		t.Errorf("home/u/notes = %q, want hello", got)
	}
	if s := lstat(t, fx.path("srv/shared")); s.Gid != 50 || s.Mtim != unix.NsecToTimespec(stamp.UnixNano()) {
		t.Errorf("srv/shared: gid %d mtime %v, want 50 %v", s.Gid, s.Mtim, stamp)
	}
	for p, want := range map[string]string{"etc/passwd-link": "/etc/passwd", "rel": "../../x/y"} {
		if got, err := os.Readlink(fx.path(p)); err != nil || got != want {
			t.Errorf("Readlink(%s) = %q, %v, want %q", p, got, err, want)
		}
	}
	if s := lstat(t, fx.path("etc/passwd-link")); s.Uid != 7 || s.Gid != 8 || s.Mtim != unix.NsecToTimespec(stamp.UnixNano()) {
		t.Errorf("etc/passwd-link: uid %d gid %d mtime %v, want 7 8 %v (the link's own)", s.Uid, s.Gid, s.Mtim, stamp)
	}
	a, b := lstat(t, fx.path("bin/ping")), lstat(t, fx.path("bin/ping6"))
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("bin/ping6: inode %d (nlink %d), want bin/ping's %d with nlink 2", b.Ino, a.Nlink, a.Ino)
	}
	checkEntriesRest(t, fx, st)
	fx.checkOutside(t)
}

// checkEntriesRest checks the extended attributes, the skipped entries
// and the counts of entriesLayer applied onto fx.
func checkEntriesRest(t *testing.T, fx *fixture, st layertar.Stats) {
	t.Helper()
	checkXattr(t, fx.path("bin/ping"), "security.capability", capNetBindService)
	checkXattr(t, fx.path("bin/ping"), "user.note", "kept")
	checkXattr(t, fx.path("bin/ping"), "trusted.overlay.opaque", "")
	checkXattr(t, fx.path("bin/ping"), "security.selinux", "")
	checkXattr(t, fx.path("srv/shared"), "user.dir", "d")
	if out, err := exec.Command("getcap", fx.path("bin/ping")).CombinedOutput(); err != nil || !strings.Contains(string(out), "cap_net_bind_service=ep") {
		t.Errorf("getcap bin/ping = %q, %v, want cap_net_bind_service=ep", out, err)
	}
	for _, p := range []string{"dev/null", "run/fifo"} {
		if exists(fx.path(p)) {
			t.Errorf("%s was created; devices and FIFOs are skipped", p)
		}
	}
	wantNotes := []string{
		"bin/ping: extended attribute security.selinux skipped",
		"bin/ping: extended attribute trusted.overlay.opaque skipped",
		"etc/passwd-link: extended attribute user.l of a symbolic link skipped",
		"dev/null: device node skipped",
		"run/fifo: FIFO skipped",
	}
	if !slices.Equal(st.Skipped, wantNotes) {
		t.Errorf("Skipped = %q, want %q", st.Skipped, wantNotes)
	}
	want := layertar.Stats{Entries: 12, Files: 4, Dirs: 3, Symlinks: 2, Hardlinks: 1, Bytes: 4 + 5 + 4 + 16}
	st.Skipped = nil
	if !statsEqual(st, want) {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
}

func statsEqual(a, b layertar.Stats) bool {
	return a.Entries == b.Entries && a.Files == b.Files && a.Dirs == b.Dirs && a.Symlinks == b.Symlinks &&
		a.Hardlinks == b.Hardlinks && a.Whiteouts == b.Whiteouts && a.Bytes == b.Bytes && slices.Equal(a.Skipped, b.Skipped)
}

func checkMode(t *testing.T, p string, want uint32) {
	t.Helper()
	if got := lstat(t, p).Mode; got != want {
		t.Errorf("mode of %s = %o, want %o", p, got, want)
	}
}

// checkXattr checks p's extended attribute name; want "" means absent.
func checkXattr(t *testing.T, p, name, want string) {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	switch {
	case want == "" && err != unix.ENODATA:
		t.Errorf("xattr %s of %s = %q, %v, want none", name, p, buf[:max(n, 0)], err)
	case want != "" && (err != nil || string(buf[:n]) != want):
		t.Errorf("xattr %s of %s = %q, %v, want %q", name, p, buf[:max(n, 0)], err, want)
	}
}

func TestApplyKeepsAndReplaces(t *testing.T) {
	fx := newFixture(t)
	fx.mustApply(t,
		dir("d", 0o755), reg("d/child", "lower", 0o644),
		reg("f-becomes-dir", "lower", 0o644),
		dir("dir-becomes-file", 0o755), dir("dir-becomes-file/sub", 0o755), reg("dir-becomes-file/sub/x", "x", 0o644),
		sym("link-becomes-dir", "d"),
		reg("file", "lower content", 0o644), hardlink("file-other-name", "file"),
	)
	owned := dir("d", 0o700)
	owned.h.Uid, owned.h.Gid = 3, 4
	fx.mustApply(t,
		owned,
		dir("f-becomes-dir", 0o755), reg("f-becomes-dir/in", "in", 0o644),
		reg("dir-becomes-file", "now a file", 0o600),
		dir("link-becomes-dir", 0o750),
		reg("file", "upper", 0o644),
	)
	if got := readFile(t, fx.path("d/child")); got != "lower" {
		t.Errorf("d/child = %q, want the lower layer's (a directory entry keeps the children)", got)
	}
	if s := lstat(t, fx.path("d")); s.Mode != unix.S_IFDIR|0o700 || s.Uid != 3 || s.Gid != 4 {
		t.Errorf("d: mode %o owner %d:%d, want 40700 3:4", s.Mode, s.Uid, s.Gid)
	}
	checkMode(t, fx.path("f-becomes-dir"), unix.S_IFDIR|0o755)
	if got := readFile(t, fx.path("dir-becomes-file")); got != "now a file" {
		t.Errorf("dir-becomes-file = %q, want now a file", got)
	}
	checkMode(t, fx.path("link-becomes-dir"), unix.S_IFDIR|0o750)
	if !exists(fx.path("d/child")) {
		t.Error("replacing the link link-becomes-dir removed its target's contents")
	}
	// A file is replaced, never written in place: its other hard link
	// keeps the lower content.
	if got := readFile(t, fx.path("file")); got != "upper" {
		t.Errorf("file = %q, want upper", got)
	}
	if got := readFile(t, fx.path("file-other-name")); got != "lower content" {
		t.Errorf("file-other-name = %q, want lower content (the old inode)", got)
	}
	fx.checkOutside(t)
}

func TestApplyWhiteouts(t *testing.T) {
	fx := newFixture(t)
	fx.mustApply(t,
		reg("a", "a", 0o644), reg("keep", "k", 0o644),
		dir("b", 0o755), reg("b/c", "c", 0o644), reg("b/d", "d", 0o644),
		dir("tree", 0o755), dir("tree/x", 0o755), reg("tree/x/y", "y", 0o644),
		dir("opq-after", 0o755), reg("opq-after/lower", "l", 0o644),
		dir("opq-after/sub", 0o755), reg("opq-after/sub/lower", "l", 0o644),
		dir("opq-before", 0o755), reg("opq-before/lower", "l", 0o644),
		reg("same-layer", "lower", 0o644),
		dir("rootopq", 0o755),
	)
	st := fx.mustApply(t,
		whiteout(".wh.a"),
		whiteout("b/.wh.c"),
		whiteout(".wh.tree"),
		whiteout("nowhere/.wh.ghost"), // nothing to remove; nothing created
		// The marker after entries of this layer: they stay, the lower ones go.
		dir("opq-after", 0o755), reg("opq-after/new", "n", 0o644), reg("opq-after/sub/new", "n", 0o644),
		whiteout("opq-after/.wh..wh..opq"),
		// The marker first, as most tools write it.
		whiteout("opq-before/.wh..wh..opq"), reg("opq-before/new", "n", 0o644),
		// A whiteout of a file this layer already has does not remove it.
		reg("same-layer", "upper", 0o644), whiteout(".wh.same-layer"),
		whiteout(".wh..wh.plnk"),
	)
	for _, gone := range []string{"a", "b/c", "tree", "opq-after/lower", "opq-after/sub/lower", "opq-before/lower", "nowhere"} {
		if exists(fx.path(gone)) {
			t.Errorf("%s exists after its whiteout", gone)
		}
	}
	for p, want := range map[string]string{
		"keep": "k", "b/d": "d", "opq-after/new": "n", "opq-after/sub/new": "n", "opq-before/new": "n", "same-layer": "upper",
	} {
		if !exists(fx.path(p)) {
			t.Errorf("%s was removed", p)
		} else if got := readFile(t, fx.path(p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if exists(fx.path(".wh.a")) || exists(fx.path("opq-after/.wh..wh..opq")) {
		t.Error("a whiteout file was created")
	}
	if st.Whiteouts != 8 {
		t.Errorf("Whiteouts = %d, want 8", st.Whiteouts)
	}
	if want := []string{".wh..wh.plnk: reserved whiteout name skipped"}; !slices.Equal(st.Skipped, want) {
		t.Errorf("Skipped = %q, want %q", st.Skipped, want)
	}
	// An opaque root: everything lower goes.
	fx.mustApply(t, whiteout(".wh..wh..opq"), reg("only", "o", 0o644))
	if got := testenv.DirNames(t, fx.root); !slices.Equal(got, []string{"only"}) {
		t.Errorf("root after an opaque marker = %q, want [only]", got)
	}
	fx.checkOutside(t)
}

func TestApplyDirectoryTimesLast(t *testing.T) {
	fx := newFixture(t)
	old := time.Unix(1_000_000_000, 5)
	d := dir("d", 0o755)
	d.h.ModTime = old
	fx.mustApply(t, reg("d/lower", "x", 0o644))
	fx.mustApply(t, d, reg("d/a", "a", 0o644), dir("d/sub", 0o755), whiteout("d/.wh.lower"))
	if got := lstat(t, fx.path("d")).Mtim; got != unix.NsecToTimespec(old.UnixNano()) {
		t.Errorf("d mtime = %v, want %v: the entry's, after its contents changed", got, old)
	}
}

func TestApplySparse(t *testing.T) {
	const size = 1 << 30
	src := t.TempDir()
	f, err := os.Create(src + "/sparse")
	must(t, err)
	must(t, f.Truncate(size))
	for _, off := range []int64{0, 512 << 20, size - 5} {
		_, err := f.WriteAt([]byte("data!"), off)
		must(t, err)
	}
	must(t, f.Close())
	// GNU tar's sparse entries: PAX 1.0 (its default), PAX 0.1, old GNU.
	for name, flags := range map[string][]string{
		"pax-1.0": {"--format=pax"},
		"pax-0.1": {"--format=pax", "--sparse-version=0.1"},
		"gnu":     {"--format=gnu"},
	} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t)
			tarFile := t.TempDir() + "/layer.tar"
			cmd := exec.Command("tar", append(flags, "--sparse", "-cf", tarFile, "-C", src, "sparse")...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", cmd, err, out)
			}
			b, err := os.ReadFile(tarFile)
			must(t, err)
			if len(b) > 1<<20 {
				t.Fatalf("GNU tar wrote %d bytes: not a sparse entry", len(b))
			}
			st, err := fx.apply(t, b, layertar.Limits{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			s := lstat(t, fx.path("sparse"))
			if s.Size != size || s.Blocks*512 > 64<<10 {
				t.Errorf("sparse: size %d, %d bytes on disk; want %d and a few blocks", s.Size, s.Blocks*512, size)
			}
			got, err := os.Open(fx.path("sparse"))
			must(t, err)
			defer got.Close()
			for _, off := range []int64{0, 512 << 20, size - 5} {
				buf := make([]byte, 5)
				if _, err := got.ReadAt(buf, off); err != nil || string(buf) != "data!" {
					t.Errorf("sparse at %d = %q, %v, want data!", off, buf, err)
				}
			}
			if st.Bytes > 3*4096 {
				t.Errorf("Stats.Bytes = %d, want at most three blocks", st.Bytes)
			}
			_, err = layertar.Apply(context.Background(), fx.f, strings.NewReader(string(b)), layertar.Limits{MaxFileSize: size - 1})
			checkHostile(t, err, "sparse")
			fx.checkOutside(t)
		})
	}
}

func TestApplyZerosLeaveHoles(t *testing.T) {
	fx := newFixture(t)
	fx.mustApply(t, reg("zeros", strings.Repeat("\x00", 8<<20)+"end", 0o644))
	s := lstat(t, fx.path("zeros"))
	if s.Size != 8<<20+3 || s.Blocks*512 > 64<<10 {
		t.Errorf("zeros: size %d, %d bytes on disk; want %d and a block", s.Size, s.Blocks*512, 8<<20+3)
	}
	if got := readFile(t, fx.path("zeros")); got[len(got)-3:] != "end" || strings.Trim(got[:len(got)-3], "\x00") != "" {
		t.Error("zeros: content differs")
	}
}

func TestApplyRootAsPathDescriptor(t *testing.T) {
	fx := newFixture(t)
	fd, err := unix.Open(fx.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	f := os.NewFile(uintptr(fd), fx.root)
	defer f.Close()
	if _, err := layertar.Apply(context.Background(), f, strings.NewReader(string(makeTar(t, reg("x", "x", 0o644)))), layertar.Limits{}); err != nil {
		t.Fatalf("Apply onto an O_PATH root: %v", err)
	}
	if got := readFile(t, fx.path("x")); got != "x" {
		t.Errorf("x = %q, want x", got)
	}
}

func TestApplyCancelled(t *testing.T) {
	fx := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := layertar.Apply(ctx, fx.f, strings.NewReader(string(makeTar(t, reg("x", "x", 0o644)))), layertar.Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context = %v, want context.Canceled", err)
	}
	if exists(fx.path("x")) {
		t.Error("x was created after the context was cancelled")
	}
}

// TestApplyNotesBounded applies a layer of many device nodes: the notes
// stop at a hundred and count the rest.
func TestApplyNotesBounded(t *testing.T) {
	fx := newFixture(t)
	var ents []ent
	for i := range 150 {
		ents = append(ents, ent{h: tar.Header{Typeflag: tar.TypeChar, Name: fmt.Sprintf("dev/%d", i), Devmajor: 1, Devminor: 3}})
	}
	st := fx.mustApply(t, ents...)
	if len(st.Skipped) != 101 || st.Skipped[0] != "dev/0: device node skipped" || st.Skipped[100] != "and 50 more skipped" {
		t.Errorf("Skipped has %d notes (first %q, last %q), want 100 and \"and 50 more skipped\"",
			len(st.Skipped), st.Skipped[0], st.Skipped[len(st.Skipped)-1])
	}
}

// TestApplyGNUTarLayer applies a layer GNU tar made of writeSource's tree
// (names beginning "./", a root entry, its own PAX records) and compares
// the trees.
func TestApplyGNUTarLayer(t *testing.T) {
	src := writeSource(t)
	cmd := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--format=pax", "-cf", "-", "-C", src.root, ".")
	layer, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
	dst := newFixture(t)
	st, err := dst.apply(t, layer, layertar.Limits{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if want := []string{"fifo: FIFO skipped", "null: device node skipped"}; !slices.Equal(st.Skipped, want) {
		t.Errorf("Skipped = %q, want %q", st.Skipped, want)
	}
	a, b := describe(t, src.root), describe(t, dst.root)
	for _, skipped := range []string{"null", "fifo", "sock", "tmp/.wh.planted"} {
		delete(a, skipped)
	}
	if !maps.Equal(a, b) {
		t.Errorf("GNU tar's layer applied:\n %q\nwant\n %q", b, a)
	}
	dst.checkOutside(t)
}
