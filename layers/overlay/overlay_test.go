//go:build linux

package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/internal/mountinfo"
	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/layerstest"
	"github.com/hearth/hearth/testutil/testenv"
)

// openStore opens a store in a fresh temporary directory and, when the
// test ends, unmounts everything below it (whichever Store on that Dir the
// test ended with).
func openStore(t testing.TB) *Store {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to mount overlayfs")
	}
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := Open(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() {
		s.Close()
		unmountAll(t, dir)
	})
	return s
}

// unmountAll detaches every mount at or below dir.
func unmountAll(t testing.TB, dir string) {
	t.Helper()
	points, err := mountinfo.Under(dir)
	if err != nil {
		t.Error(err)
		return
	}
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("umount %s: %v", p, err)
		}
	}
}

// reopen closes s and opens its Dir again, as a daemon restart does.
func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), Options{Dir: s.Dir()})
	if err != nil {
		t.Fatalf("Open(%s) again = %v", s.Dir(), err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestConformance(t *testing.T) {
	layerstest.Run(t, func(t *testing.T) layers.Store { return openStore(t) }, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store { return reopen(t, s.(*Store)) },
	})
}

// TestConformanceMount2 runs the suite with mount(2) and its one page of
// options, as on kernels before 6.8, which have no "lowerdir+".
func TestConformanceMount2(t *testing.T) {
	legacy := func(s *Store) *Store {
		s.appendLowers = false
		return s
	}
	layerstest.Run(t, func(t *testing.T) layers.Store { return legacy(openStore(t)) }, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store {
			b := s.(*Store)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(context.Background(), Options{Dir: b.Dir()})
			if err != nil {
				t.Fatalf("Open again = %v", err)
			}
			t.Cleanup(func() { r.Close() })
			return legacy(r)
		},
	})
}

// TestMount2TooDeep checks the error of a stack mount(2) cannot take.
func TestMount2TooDeep(t *testing.T) {
	m := mountSpec{upper: "/u", work: "/w"}
	for i := range 200 {
		m.lowers = append(m.lowers, fmt.Sprintf("/var/lib/hearth/layers/layers/%016x", i))
	}
	err := legacyMount(t.TempDir(), m)
	if err == nil || !strings.Contains(err.Error(), "more than mount(2) takes") {
		t.Errorf("legacyMount of 200 layers = %v, want the page size error", err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("ReadFile(%s) = %q, %v, want %q", path, got, err, want)
	}
}

// TestReclaim checks the reference counting of layers: a removed parent's
// layer stays while a child's stack names it (and the child keeps reading
// it), and goes with the last snapshot that names it, as do every mount,
// mount point and work dir.
func TestReclaim(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	p, err := s.Prepare(ctx, "img-build", "")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(p, "etc", "hostname"), "img\n")
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatal(err)
	}
	imgLayer := s.entries["img"].Layers[0]
	child, err := s.Prepare(ctx, "child", "img")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(child, "mine"), "child\n")
	if err := s.Snapshot(ctx, "ck", "child"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "img"); err != nil {
		t.Fatalf("Remove(img) with children = %v", err)
	}
	if _, err := os.Stat(s.dirs.layer(imgLayer)); err != nil {
		t.Fatalf("img's layer after Remove(img), with children = %v, want it kept", err)
	}
	if got := testenv.DirNames(t, s.dirs.layers()); len(got) != 3 {
		t.Errorf("layers after Remove(img) = %v, want 3 (img's, child's, ck's)", got)
	}
	if err := s.Remove(ctx, "child"); err != nil {
		t.Fatal(err)
	}
	ck, err := s.Stat(ctx, "ck")
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(ck.Path, "etc", "hostname"), "img\n")
	mustRead(t, filepath.Join(ck.Path, "mine"), "child\n")
	if got := testenv.DirNames(t, s.dirs.layers()); len(got) != 2 || !slices.Contains(got, imgLayer) {
		t.Errorf("layers after Remove(child) = %v, want img's and ck's", got)
	}
	if err := s.Remove(ctx, "ck"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{s.dirs.layers(), s.dirs.work(), s.dirs.mnt(), s.dirs.meta()} {
		if got := testenv.DirNames(t, d); len(got) != 0 {
			t.Errorf("%s after the last Remove = %v, want empty", d, got)
		}
	}
	if points, err := mountinfo.Under(s.Dir()); err != nil || len(points) != 0 {
		t.Errorf("mounts under %s after the last Remove = %v, %v, want none", s.Dir(), points, err)
	}
	if len(s.refs) != 0 {
		t.Errorf("refs after the last Remove = %v, want none", s.refs)
	}
}

func TestSetLimitUnsupported(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.Prepare(ctx, "root", ""); err != nil {
		t.Fatal(err)
	}
	err := s.SetLimit(ctx, "root", 1<<30)
	if !errors.Is(err, layers.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetLimit(root, 1 GiB) = %v, want ErrUnsupported", err)
	}
	if err := s.SetLimit(ctx, "root", 0); err != nil {
		t.Errorf("SetLimit(root, 0) = %v, want nil: there is no limit to remove", err)
	}
}

// devOf is the device number of path: every overlay mount has its own.
func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// TestReopenKeepsMounts is a daemon restart under a running sandbox: the
// mounts Open finds are the ones it keeps, not new ones, so a file held
// open across the restart writes into what the path shows.
func TestReopenKeepsMounts(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	root, err := s.Prepare(ctx, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "f"), "before\n")
	if err := s.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatal(err)
	}
	ck, _ := s.Stat(ctx, "ck")
	f, err := os.OpenFile(filepath.Join(root, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rootDev, ckDev := devOf(t, root), devOf(t, ck.Path)

	s = reopen(t, s)
	if got := devOf(t, root); got != rootDev {
		t.Errorf("device of the active snapshot's path after reopen = %d, want %d: Open replaced its mount", got, rootDev)
	}
	if got := devOf(t, ck.Path); got != ckDev {
		t.Errorf("device of the committed snapshot's path after reopen = %d, want %d", got, ckDev)
	}
	if _, err := f.WriteString("written through the old mount\n"); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(root, "log"), "written through the old mount\n")
}

// TestReboot: the mounts are gone (a host reboot), the directories stay,
// and Open mounts every snapshot again at its path.
func TestReboot(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	root, err := s.Prepare(ctx, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(root, "f"), "v1\n")
	if err := s.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "f")); err != nil {
		t.Fatal(err)
	}
	ck, _ := s.Stat(ctx, "ck")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	unmountAll(t, s.Dir())
	if _, err := os.Stat(filepath.Join(ck.Path, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat(ck/f) after unmounting = %v, want not exist", err)
	}

	s = reopen(t, s)
	for k, want := range map[string]string{"root": root, "ck": ck.Path} {
		if info, err := s.Stat(ctx, k); err != nil || info.Path != want {
			t.Errorf("Stat(%s) after reboot = %+v, %v, want path %s", k, info, err, want)
		}
	}
	mustRead(t, filepath.Join(ck.Path, "f"), "v1\n")
	if _, err := os.Stat(filepath.Join(root, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(root/f) after reboot = %v, want not exist: it was removed", err)
	}
	mustWrite(t, filepath.Join(root, "g"), "writable\n")
	if err := os.WriteFile(filepath.Join(ck.Path, "f"), []byte("x"), 0o644); err == nil {
		t.Error("the committed snapshot is writable after a reboot")
	}
}

// TestSnapshotKeeps checks what Snapshot's copy of an upper layer keeps:
// deletions (whiteouts), a directory replaced (opaque) and one renamed
// (redirect), owners, setuid bits, xattrs, hard links, special files,
// holes and times, as seen through the snapshot and a fork of it.
func TestSnapshotKeeps(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	img, err := s.Prepare(ctx, "img-build", "")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(img, "gone"), "x")
	mustWrite(t, filepath.Join(img, "replaced", "old"), "x")
	mustWrite(t, filepath.Join(img, "renamed", "f"), "moved\n")
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatal(err)
	}
	root, err := s.Prepare(ctx, "root", "img")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	j := func(name string) string { return filepath.Join(root, name) }
	must(os.Remove(j("gone")))
	must(os.RemoveAll(j("replaced")))
	mustWrite(t, j("replaced/new"), "new\n")
	must(os.Rename(j("renamed"), j("moved")))
	mustWrite(t, j("suid"), "#!/bin/sh\n")
	must(os.Lchown(j("suid"), 1000, 1000))
	must(unix.Chmod(j("suid"), 0o4755))
	must(unix.Setxattr(j("suid"), "user.note", []byte("kept"), 0))
	must(os.Link(j("suid"), j("hardlink")))
	must(unix.Mkfifo(j("fifo"), 0o600))
	must(unix.Mknod(j("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Symlink("/etc/passwd", j("abs-link")))
	must(os.Lchown(j("abs-link"), 1000, 1000))
	sparse, err := os.Create(j("sparse"))
	must(err)
	_, err = sparse.WriteAt([]byte("end"), 1<<30)
	must(err)
	must(sparse.Close())
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(os.Chtimes(j("suid"), mtime, mtime))
	must(os.Chtimes(j("replaced"), mtime, mtime))

	must(s.Snapshot(ctx, "ck", "root"))
	fork, err := s.Prepare(ctx, "fork", "ck")
	must(err)
	ck, err := s.Stat(ctx, "ck")
	must(err)
	for _, dir := range []string{ck.Path, fork} {
		p := func(name string) string { return filepath.Join(dir, name) }
		if _, err := os.Lstat(p("gone")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Lstat(%s) = %v, want not exist (whiteout)", p("gone"), err)
		}
		if names, err := os.ReadDir(p("replaced")); err != nil || len(names) != 1 || names[0].Name() != "new" {
			t.Errorf("ReadDir(%s) = %v, %v, want only new (opaque)", p("replaced"), names, err)
		}
		if _, err := os.Lstat(p("renamed")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Lstat(%s) = %v, want not exist (renamed)", p("renamed"), err)
		}
		mustRead(t, p("moved/f"), "moved\n")
		var st unix.Stat_t
		must(unix.Lstat(p("suid"), &st))
		if st.Mode&0o7777 != 0o4755 || st.Uid != 1000 || st.Gid != 1000 || st.Nlink != 2 {
			t.Errorf("%s: mode %o, owner %d:%d, links %d, want 4755, 1000:1000, 2", p("suid"), st.Mode&0o7777, st.Uid, st.Gid, st.Nlink)
		}
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", p("suid"), got, mtime)
		}
		buf := make([]byte, 16)
		if n, err := unix.Getxattr(p("suid"), "user.note", buf); err != nil || string(buf[:n]) != "kept" {
			t.Errorf("%s: user.note = %q, %v, want kept", p("suid"), buf[:max(n, 0)], err)
		}
		a, errA := os.Lstat(p("suid"))
		b, errB := os.Lstat(p("hardlink"))
		if errA != nil || errB != nil || !os.SameFile(a, b) {
			t.Errorf("%s and hardlink are not one file: %v, %v", p("suid"), errA, errB)
		}
		if fi, err := os.Lstat(p("fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("Lstat(%s) = %v, %v, want a fifo", p("fifo"), fi, err)
		}
		must(unix.Lstat(p("null"), &st))
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
			t.Errorf("%s: mode %o rdev %x, want the 1:3 character device", p("null"), st.Mode, st.Rdev)
		}
		if target, err := os.Readlink(p("abs-link")); err != nil || target != "/etc/passwd" {
			t.Errorf("Readlink(%s) = %q, %v", p("abs-link"), target, err)
		}
		must(unix.Lstat(p("abs-link"), &st))
		if st.Uid != 1000 {
			t.Errorf("%s: owner %d, want 1000", p("abs-link"), st.Uid)
		}
		must(unix.Lstat(p("sparse"), &st))
		if st.Size != 1<<30+3 || st.Blocks*512 > 1<<20 {
			t.Errorf("%s: size %d, %d bytes allocated, want 1 GiB + 3, a few KiB (a hole)", p("sparse"), st.Size, st.Blocks*512)
		}
		must(unix.Lstat(p("replaced"), &st))
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", p("replaced"), got, mtime)
		}
	}
}

// TestCommitBusy: Commit of an active snapshot a process still uses fails
// and changes nothing; once it is let go, Commit works.
func TestCommitBusy(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	p, err := s.Prepare(ctx, "a", "")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(p, "open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "a-c", "a"); !errors.Is(err, unix.EBUSY) {
		t.Errorf("Commit(a-c, a) with a file open in a = %v, want EBUSY", err)
	}
	if _, err := s.Stat(ctx, "a-c"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(a-c) after a failed Commit = %v, want ErrNotFound", err)
	}
	if _, err := f.WriteString("still writable\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustRead(t, filepath.Join(p, "open"), "still writable\n")
	if err := s.Commit(ctx, "a-c", "a"); err != nil {
		t.Fatalf("Commit(a-c, a) once nothing uses a = %v", err)
	}
	info, err := s.Stat(ctx, "a-c")
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(info.Path, "open"), "still writable\n")
}

func TestOpenErrors(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := Open(ctx, Options{Dir: s.Dir()}); !errors.Is(err, layers.ErrInUse) {
		t.Errorf("Open of an open store = %v, want ErrInUse", err)
	}
	if _, err := Open(ctx, Options{}); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("Open(no Dir) = %v, want ErrInvalid", err)
	}
	if _, err := Open(ctx, Options{Dir: filepath.Join(t.TempDir(), "a:b")}); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("Open of a Dir with ':' = %v, want ErrInvalid", err)
	}
	// A Dir on overlayfs: the store's own snapshots are.
	root, err := s.Prepare(ctx, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Options{Dir: filepath.Join(root, "layers")})
	if !errors.Is(err, layers.ErrUnsupported) || !strings.Contains(err.Error(), "overlayfs") {
		t.Errorf("Open of a Dir on overlayfs = %v, want ErrUnsupported naming overlayfs", err)
	}
}

// BenchmarkOverlaySnapshot is btrfs's BenchmarkSnapshot on this store (see
// layerstest.BenchSnapshot), with 1 MB and 100 MB written. Unlike
// btrfs's, the cost grows with the data written: each Snapshot copies it.
func BenchmarkOverlaySnapshot(b *testing.B) {
	layerstest.BenchSnapshot(b, func(b *testing.B) layers.Store { return openStore(b) }, 1<<20, 100<<20)
}

// TestResetRacesRemoveParent runs Resets to a checkpoint and Removes of it
// together: whichever order they end in, a key's Parent never names a
// snapshot that is gone (or another one under the name).
func TestResetRacesRemoveParent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.Prepare(ctx, "root", ""); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := s.Snapshot(ctx, "ck", "root"); err != nil {
			t.Fatal(err)
		}
		reset := make(chan error, 1)
		go func() {
			_, err := s.Reset(ctx, "root", "ck")
			reset <- err
		}()
		if err := s.Remove(ctx, "ck"); err != nil && !errors.Is(err, layers.ErrInUse) {
			t.Fatalf("Remove(ck) = %v", err)
		}
		if err := <-reset; err != nil && !errors.Is(err, layers.ErrNotFound) && !errors.Is(err, layers.ErrInUse) {
			t.Fatalf("Reset(root, ck) = %v", err)
		}
		if _, err := s.Stat(ctx, "ck"); err == nil {
			if err := s.Remove(ctx, "ck"); err != nil {
				t.Fatal(err)
			}
		}
		if info, err := s.Stat(ctx, "root"); err != nil || info.Parent != "" {
			t.Fatalf("round %d: Stat(root) after ck went = %+v, %v, want no parent", i, info, err)
		}
	}
}
