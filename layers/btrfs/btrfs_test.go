//go:build linux

package btrfs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hearth/hearth/layers"
	"github.com/hearth/hearth/layers/btrfs"
	"github.com/hearth/hearth/layers/layerstest"
	"github.com/hearth/hearth/testutil/testenv"
)

// requireBtrfs skips unless the test can format and loop-mount btrfs.
func requireBtrfs(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to loop-mount btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs (btrfs-progs)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testenv.Skip(t, "needs loop devices")
	}
}

// openStore opens a store in a fresh temporary directory (loop-mounted, as
// t.TempDir is not on btrfs here) and destroys it, checking that no loop
// device is left attached, when the test ends.
func openStore(t testing.TB) *btrfs.Store {
	t.Helper()
	return openStoreSize(t, 2<<30)
}

// openStoreSize is openStore with a backing file of size bytes (sparse).
func openStoreSize(t testing.TB, size int64) *btrfs.Store {
	t.Helper()
	requireBtrfs(t)
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir, ImageSize: size})
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() {
		// The store the test ends with may be another Store on the
		// same Dir (after a reopen); a fresh one destroys it all.
		s.Close()
		last, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir})
		if err != nil {
			t.Errorf("Open(%s) for cleanup = %v", dir, err)
			return
		}
		if err := last.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy() = %v", err)
		}
		checkNoLoop(t, dir+".btrfs")
	})
	return s
}

// checkNoLoop fails if a loop device still has backing attached.
func checkNoLoop(t testing.TB, backing string) {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Errorf("losetup -a: %v: %s", err, out)
		return
	}
	if strings.Contains(string(out), backing) {
		t.Errorf("loop device leaked: losetup -a =\n%s", out)
	}
}

func TestConformance(t *testing.T) {
	requireBtrfs(t)
	layerstest.Run(t, func(t *testing.T) layers.Store { return openStore(t) }, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store {
			b := s.(*btrfs.Store)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := btrfs.Open(context.Background(), btrfs.Options{Dir: b.Dir()})
			if err != nil {
				t.Fatalf("Open again = %v", err)
			}
			t.Cleanup(func() { r.Close() })
			return r
		},
		Limit: kernelLimit,
	})
}

// kernelLimit is layerstest's Options.Limit: the kernel's qgroup limit.
func kernelLimit(t *testing.T, s layers.Store, key string) int64 {
	t.Helper()
	n, err := btrfs.KernelLimit(s.(*btrfs.Store), key)
	if err != nil {
		t.Fatalf("KernelLimit(%s) = %v", key, err)
	}
	return n
}

// TestConformanceWalkUsage runs the suite as on a host's own btrfs without
// quotas: Usage walks files, and SetLimit is unsupported.
func TestConformanceWalkUsage(t *testing.T) {
	requireBtrfs(t)
	layerstest.Run(t, func(t *testing.T) layers.Store {
		s := openStore(t)
		btrfs.ForceWalkUsage(s)
		return s
	}, layerstest.Options{})
}

// TestConformanceNative runs the suite on a Dir that is already on btrfs
// (a directory inside another store's filesystem), used as it is.
func TestConformanceNative(t *testing.T) {
	outer := openStore(t)
	open := func(t *testing.T, dir string) *btrfs.Store {
		s, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir})
		if err != nil {
			t.Fatalf("Open(%s) = %v", dir, err)
		}
		if _, err := os.Stat(dir + ".btrfs"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open on btrfs made a backing file: %v", err)
		}
		return s
	}
	layerstest.Run(t, func(t *testing.T) layers.Store {
		parent, err := os.MkdirTemp(outer.Dir(), "native-")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "layers")
		s := open(t, dir)
		t.Cleanup(func() {
			s.Close()
			if err := open(t, dir).Destroy(context.Background()); err != nil {
				t.Errorf("Destroy() = %v", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Stat(%s) after Destroy = %v, want not exist", dir, err)
			}
		})
		return s
	}, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store {
			b := s.(*btrfs.Store)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			r := open(t, b.Dir())
			t.Cleanup(func() { r.Close() })
			return r
		},
		Limit: kernelLimit,
	})
}

// TestConformanceFullQgroups runs the suite on a Dir that is natively on a
// btrfs with full qgroups, as an admin's `btrfs quota enable` makes, where
// a snapshot inherits its source's limits: a checkpoint of a limited root,
// and what is prepared from it, must not keep the root's limit.
func TestConformanceFullQgroups(t *testing.T) {
	if _, err := exec.LookPath("btrfs"); err != nil {
		testenv.Skip(t, "needs the btrfs tool")
	}
	outer := openStore(t)
	for _, args := range [][]string{{"quota", "disable", outer.Dir()}, {"quota", "enable", outer.Dir()}} {
		if out, err := exec.Command("btrfs", args...).CombinedOutput(); err != nil {
			t.Fatalf("btrfs %v: %v: %s", args, err, out)
		}
	}
	open := func(t *testing.T, dir string) *btrfs.Store {
		s, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir})
		if err != nil {
			t.Fatalf("Open(%s) = %v", dir, err)
		}
		return s
	}
	layerstest.Run(t, func(t *testing.T) layers.Store {
		parent, err := os.MkdirTemp(outer.Dir(), "full-")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "layers")
		s := open(t, dir)
		t.Cleanup(func() {
			s.Close()
			if err := open(t, dir).Destroy(context.Background()); err != nil {
				t.Errorf("Destroy() = %v", err)
			}
		})
		return s
	}, layerstest.Options{
		Reopen: func(t *testing.T, s layers.Store) layers.Store {
			b := s.(*btrfs.Store)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			r := open(t, b.Dir())
			t.Cleanup(func() { r.Close() })
			return r
		},
		Limit: kernelLimit,
	})
}

// TestRemount is a host reboot: the mount is gone, the backing file stays,
// and Open mounts it again without reformatting.
func TestRemount(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	p, err := s.Prepare(ctx, "img-build", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "f"), []byte("survives"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unmount(ctx); err != nil {
		t.Fatalf("Unmount() = %v", err)
	}
	checkNoLoop(t, s.Dir()+".btrfs")
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat(%s) after Unmount = %v, want not exist", p, err)
	}

	s, err = btrfs.Open(ctx, btrfs.Options{Dir: s.Dir()})
	if err != nil {
		t.Fatalf("Open after Unmount = %v", err)
	}
	defer s.Close()
	info, err := s.Stat(ctx, "img")
	if err != nil || info.Kind != layers.KindCommitted {
		t.Fatalf("Stat(img) after remount = %+v, %v", info, err)
	}
	if got, err := os.ReadFile(filepath.Join(info.Path, "f")); err != nil || string(got) != "survives" {
		t.Errorf("ReadFile after remount = %q, %v, want %q", got, err, "survives")
	}
}

func TestOpenTwice(t *testing.T) {
	s := openStore(t)
	if _, err := btrfs.Open(context.Background(), btrfs.Options{Dir: s.Dir()}); !errors.Is(err, layers.ErrInUse) {
		t.Errorf("Open of an open store = %v, want ErrInUse", err)
	}
}

func TestOpenNotEmpty(t *testing.T) {
	requireBtrfs(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := btrfs.Open(context.Background(), btrfs.Options{Dir: dir}); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("Open of a non-empty, non-btrfs dir = %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(dir + ".btrfs"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open made a backing file for a dir it refused: %v", err)
	}
}

func TestOpenNoDir(t *testing.T) {
	if _, err := btrfs.Open(context.Background(), btrfs.Options{}); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("Open(no Dir) = %v, want ErrInvalid", err)
	}
}

// TestRemoveNested removes snapshots in which a sandbox made subvolumes of
// its own (Docker's btrfs driver does), in an active and a committed
// snapshot.
func TestRemoveNested(t *testing.T) {
	if _, err := exec.LookPath("btrfs"); err != nil {
		testenv.Skip(t, "needs the btrfs tool")
	}
	ctx := context.Background()
	s := openStore(t)
	for _, commit := range []bool{false, true} {
		key := fmt.Sprintf("nested-%v", commit)
		p, err := s.Prepare(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range []string{"a", "a/b", "c"} {
			if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(p, sub)).CombinedOutput(); err != nil {
				t.Fatalf("btrfs subvolume create: %v: %s", err, out)
			}
		}
		if out, err := exec.Command("btrfs", "property", "set", filepath.Join(p, "c"), "ro", "true").CombinedOutput(); err != nil {
			t.Fatalf("btrfs property set ro: %v: %s", err, out)
		}
		if commit {
			if err := s.Commit(ctx, key+"-c", key); err != nil {
				t.Fatal(err)
			}
			key += "-c"
		}
		if err := s.Remove(ctx, key); err != nil {
			t.Fatalf("Remove(%s) with nested subvolumes = %v", key, err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Stat(%s) after Remove = %v, want not exist", p, err)
		}
	}
}

// BenchmarkPrepare measures a sandbox root: a writable snapshot of a
// committed image of a few thousand files.
func BenchmarkPrepare(b *testing.B) {
	ctx := context.Background()
	s := benchImage(b)
	i := 0
	for b.Loop() {
		i++
		if _, err := s.Prepare(ctx, fmt.Sprintf("sb%d", i), "img"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit measures committing a sandbox root that wrote a file.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	s := benchImage(b)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		key := fmt.Sprintf("sb%d", i)
		p, err := s.Prepare(ctx, key, "img")
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "etc", "note"), []byte(key), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := s.Commit(ctx, "ck"+key, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRemove measures removing a sandbox root (the kernel frees its
// blocks afterwards, in the background).
func BenchmarkRemove(b *testing.B) {
	ctx := context.Background()
	s := benchImage(b)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		key := fmt.Sprintf("sb%d", i)
		p, err := s.Prepare(ctx, key, "img")
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "etc", "note"), []byte(key), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := s.Remove(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot measures a checkpoint of a running sandbox with 1 MB,
// 100 MB or 1 GB written (see layerstest.BenchSnapshot), to show that the
// cost does not grow with the data written.
func BenchmarkSnapshot(b *testing.B) {
	layerstest.BenchSnapshot(b, func(b *testing.B) layers.Store { return openStoreSize(b, 4<<30) }, 1<<20, 100<<20, 1<<30)
}

// benchImage makes a store holding layerstest.BuildImage's image "img".
func benchImage(b *testing.B) *btrfs.Store {
	b.Helper()
	s := openStoreSize(b, 2<<30)
	layerstest.BuildImage(b, s)
	return s
}

// TestLimit proves that the kernel enforces SetLimit: a sandbox root
// prepared from an 8 MiB image, limited to 20 MiB, writes 10 MiB, and
// writing 40 MiB more fails with EDQUOT or ENOSPC. The limit holds the
// same way after a Reset to a checkpoint (the new root starts at 0) and
// after the store is unmounted and opened again (a host reboot). A fork
// of the checkpoint has no limit, SetLimit(0) lifts it, and a limit set
// below what the root holds stops every write but not a Commit.
func TestLimit(t *testing.T) {
	const limit = 20 << 20
	ctx := context.Background()
	s := openStore(t)
	img, err := s.Prepare(ctx, "img-build", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeData(filepath.Join(img, "base"), 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatal(err)
	}
	root, err := s.Prepare(ctx, "root", "img")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimit(ctx, "root", limit); err != nil {
		t.Fatalf("SetLimit(root, %d) = %v", limit, err)
	}
	// checkEnforced writes 10 MiB, which fits, then 40 MiB, which must
	// not,
	// into the root at path, as files fits<round> and too-much<round>.
	round := 0
	checkEnforced := func(when, path string) {
		t.Helper()
		round++
		if err := writeData(filepath.Join(path, fmt.Sprint("fits", round)), 10<<20); err != nil {
			t.Fatalf("writing 10 MiB under a 20 MiB limit %s = %v, want nil", when, err)
		}
		werr := writeData(filepath.Join(path, fmt.Sprint("too-much", round)), 40<<20)
		if !errors.Is(werr, unix.EDQUOT) && !errors.Is(werr, unix.ENOSPC) {
			t.Fatalf("writing 40 MiB more under a 20 MiB limit %s = %v, want EDQUOT or ENOSPC", when, werr)
		}
		n, err := s.Usage(ctx, "root")
		if err != nil || n < 10<<20 || n > limit {
			t.Errorf("Usage(root) at the limit %s = %d, %v, want 10-20 MiB", when, n, err)
		}
		t.Logf("%s: 10 MiB written; 40 MiB more: %v; Usage(root) = %d", when, werr, n)
	}
	checkEnforced("after SetLimit", root)

	if err := s.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatalf("Snapshot(ck, root) at the limit = %v", err)
	}
	if root, err = s.Reset(ctx, "root", "ck"); err != nil {
		t.Fatalf("Reset(root, ck) = %v", err)
	}
	checkEnforced("after Reset", root)

	// What the root wrote since the Reset is in no checkpoint: deleting
	// it frees it, at the next transaction commit.
	for _, f := range []string{"fits2", "too-much2"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	layerstest.Syncfs(t, root)
	if err := s.Unmount(ctx); err != nil {
		t.Fatalf("Unmount() = %v", err)
	}
	if s, err = btrfs.Open(ctx, btrfs.Options{Dir: s.Dir()}); err != nil {
		t.Fatalf("Open after Unmount = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	checkEnforced("after Unmount and Open", root)

	fork, err := s.Prepare(ctx, "fork", "ck")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeData(filepath.Join(fork, "big"), 40<<20); err != nil {
		t.Errorf("writing 40 MiB into a fork of a limited root's checkpoint = %v, want nil", err)
	}
	if err := s.SetLimit(ctx, "root", 0); err != nil {
		t.Fatalf("SetLimit(root, 0) = %v", err)
	}
	if err := writeData(filepath.Join(root, "unlimited"), 40<<20); err != nil {
		t.Errorf("writing 40 MiB after SetLimit(root, 0) = %v, want nil", err)
	}

	// Below what it holds: nothing more fits, and the limit can still
	// be changed and the root committed.
	if err := s.SetLimit(ctx, "root", 1<<20); err != nil {
		t.Fatalf("SetLimit(root, 1 MiB) while it holds more = %v", err)
	}
	if err := writeData(filepath.Join(root, "one-more"), 64<<10); !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing 64 KiB over the limit = %v, want EDQUOT or ENOSPC", err)
	}
	if err := s.SetLimit(ctx, "root", 2<<20); err != nil {
		t.Errorf("SetLimit(root, 2 MiB) while over the limit = %v", err)
	}
	if err := s.Commit(ctx, "root-c", "root"); err != nil {
		t.Errorf("Commit(root-c, root) over its limit = %v", err)
	}
}

// TestLimitUnsupported: without quotas, SetLimit fails with ErrUnsupported
// (which is also errors.ErrUnsupported), except to remove a limit.
func TestLimitUnsupported(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	btrfs.ForceWalkUsage(s)
	if _, err := s.Prepare(ctx, "root", ""); err != nil {
		t.Fatal(err)
	}
	err := s.SetLimit(ctx, "root", 1<<20)
	if !errors.Is(err, layers.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetLimit(root, 1 MiB) without quotas = %v, want ErrUnsupported", err)
	}
	if err := s.SetLimit(ctx, "root", 0); err != nil {
		t.Errorf("SetLimit(root, 0) without quotas = %v, want nil", err)
	}
}

// writeData writes n bytes (a multiple of 1 MiB, or less) that do not
// compress to the new file path and syncs it, returning the first error:
// a quota may stop the write, or only the flush of delayed allocation.
func writeData(path string, n int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, min(n, 1<<20))
	x := uint64(len(path)) | 1
	for off := 0; off < n && err == nil; off += len(buf) {
		for i := 0; i+8 <= len(buf); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(buf[i:], x)
		}
		_, err = f.Write(buf)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
