package rootfs_test

import (
	"context"
	"errors"
	"github.com/hearth/hearth/testutil/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/btrfs"
	"github.com/hearth/hearth/rootfs"
	"golang.org/x/sys/unix"
)

func openStore(t *testing.T) *btrfs.Store {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs")
	}
	ctx := context.Background()
	s, err := btrfs.Open(ctx, btrfs.Options{Dir: filepath.Join(t.TempDir(), "layers"), ImageSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

// fakeRootfs makes a tree with every kind of thing a root filesystem holds.
func fakeRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o755))
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "home/sandbox"), 0o700))
	must(os.Chown(filepath.Join(root, "home/sandbox"), 1000, 1000))
	must(os.WriteFile(filepath.Join(root, "usr/bin/python3"), []byte("#!elf"), 0o755))
	must(os.Link(filepath.Join(root, "usr/bin/python3"), filepath.Join(root, "usr/bin/python3.11")))
	must(os.WriteFile(filepath.Join(root, "usr/bin/su"), []byte("setuid"), 0o755))
	must(unix.Chmod(filepath.Join(root, "usr/bin/su"), 0o4755))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Symlink("/nonexistent", filepath.Join(root, "dangling")))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Chmod(filepath.Join(root, "null"), 0o666))
	if err := unix.Setxattr(filepath.Join(root, "usr/bin/python3"), "user.hearth", []byte("x"), 0); err != nil {
		t.Logf("no user xattrs on %s: %v", root, err)
	}
	return root
}

func TestImport(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	root := fakeRootfs(t)
	if err := rootfs.Import(ctx, s, "default", root); err != nil {
		t.Fatalf("Import = %v", err)
	}
	info, err := s.Stat(ctx, "default")
	if err != nil || info.Kind != layers.KindCommitted {
		t.Fatalf("Stat(default) = %+v, %v, want committed", info, err)
	}
	p := info.Path
	var a, b syscall.Stat_t
	if err := syscall.Stat(filepath.Join(p, "usr/bin/python3"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(p, "usr/bin/python3.11"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not kept: inodes %d %d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	checks := []struct {
		path string
		mode os.FileMode
		uid  uint32
	}{
		{".", os.ModeDir | 0o755, 0},
		{"home/sandbox", os.ModeDir | 0o700, 1000},
		{"usr/bin/su", os.ModeSetuid | 0o755, 0},
		{"bin", os.ModeSymlink | 0o777, 0},
		{"fifo", os.ModeNamedPipe | 0o600, 0},
		{"null", os.ModeDevice | os.ModeCharDevice | 0o666, 0},
	}
	for _, c := range checks {
		fi, err := os.Lstat(filepath.Join(p, c.path))
		if err != nil {
			t.Errorf("Lstat(%s) = %v", c.path, err)
			continue
		}
		if fi.Mode() != c.mode || fi.Sys().(*syscall.Stat_t).Uid != c.uid {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", c.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, c.mode, c.uid)
		}
	}
	if target, err := os.Readlink(filepath.Join(p, "dangling")); err != nil || target != "/nonexistent" {
		t.Errorf("Readlink(dangling) = %q, %v", target, err)
	}
	if buf := make([]byte, 8); true {
		if n, err := unix.Getxattr(filepath.Join(root, "usr/bin/python3"), "user.hearth", buf); err == nil && n == 1 {
			if n, err := unix.Getxattr(filepath.Join(p, "usr/bin/python3"), "user.hearth", buf); err != nil || string(buf[:n]) != "x" {
				t.Errorf("xattr user.hearth = %q, %v, want %q", buf[:max(n, 0)], err, "x")
			}
		}
	}
	// Idempotent.
	if err := rootfs.Import(ctx, s, "default", root); err != nil {
		t.Errorf("Import again = %v, want nil", err)
	}
	// Sandboxes prepare from it.
	sb, err := s.Prepare(ctx, "sb", "default")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sb, "usr/bin/python3")); err != nil {
		t.Error(err)
	}
	checkOnly(t, s, "default", "sb")
}

// failingStore makes Prepare hand out a path cp cannot write, or Commit
// fail, to check that a failed Import removes what it made.
type failingStore struct {
	layers.Store
	badPath   bool
	commitErr error
}

func (f failingStore) Prepare(ctx context.Context, key, parent string) (string, error) {
	p, err := f.Store.Prepare(ctx, key, parent)
	if f.badPath && err == nil {
		p = filepath.Join(p, "missing", "dir")
	}
	return p, err
}

func (f failingStore) Commit(ctx context.Context, name, key string) error {
	if f.commitErr != nil {
		return f.commitErr
	}
	return f.Store.Commit(ctx, name, key)
}

func TestImportFails(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	root := fakeRootfs(t)
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name  string
		store layers.Store
		ctx   context.Context
		key   string
		root  string
		want  error
	}{
		{"missing rootfs", s, ctx, "default", filepath.Join(root, "missing"), os.ErrNotExist},
		{"bad name", s, ctx, "Bad/Name", root, layers.ErrInvalid},
		{"cancelled", s, cancelled, "default", root, context.Canceled},
		{"copy fails", failingStore{Store: s, badPath: true}, ctx, "default", root, nil},
		{"commit fails", failingStore{Store: s, commitErr: boom}, ctx, "default", root, boom},
	} {
		err := rootfs.Import(c.ctx, c.store, c.key, c.root)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: Import = %v, want %v", c.name, err, c.want)
		}
		checkOnly(t, s)
	}
}

// TestImportLeftover: a killed Import leaves its active snapshot; the next
// one removes it and succeeds.
func TestImportLeftover(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	root := fakeRootfs(t)
	p, err := s.Prepare(ctx, rootfs.ImportKey("default"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "half"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.Import(ctx, s, "default", root); err != nil {
		t.Fatalf("Import after a killed one = %v", err)
	}
	info, err := s.Stat(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(info.Path, "half")) {
		t.Error("Import kept the killed import's files")
	}
	checkOnly(t, s, "default")
}

// checkOnly fails unless the store holds exactly keys.
func checkOnly(t *testing.T, s *btrfs.Store, keys ...string) {
	t.Helper()
	got := map[string]bool{}
	s.Walk(context.Background(), func(i layers.Info) error { got[i.Key] = true; return nil })
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	if len(got) != len(want) {
		t.Errorf("store holds %v, want %v", got, keys)
		return
	}
	for k := range want {
		if !got[k] {
			t.Errorf("store holds %v, want %v", got, keys)
		}
	}
}
