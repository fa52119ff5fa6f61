package drivertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/hearth/hearth/layers/btrfs"
)

// snapshots is the btrfs layer store of this test process (see
// SnapshotRootFS).
var snapshots struct {
	sync.Mutex
	store *btrfs.Store
	dir   string
	bases map[string]string // image directory → committed snapshot key
	n     int
}

// SnapshotRootFS returns a writable root filesystem for one sandbox: a
// writable btrfs snapshot of lower, the kind of root hearth's default
// layer store gives sandboxes (an idmappable filesystem, which runc and
// crun sandboxes need: they run in a user namespace over an idmapped
// mount of their root, and an overlayfs mount cannot be idmapped). The
// store is the test process's own, a loop-mounted backing file in a
// temporary directory made at the first call, with lower copied into it
// once; the snapshot is removed in t's cleanup. A package whose tests use
// it calls RemoveSnapshots from TestMain. It needs root and mkfs.btrfs.
func SnapshotRootFS(t testing.TB, lower string) string {
	t.Helper()
	ctx := context.Background()
	snapshots.Lock()
	defer snapshots.Unlock()
	if snapshots.store == nil {
		dir, err := os.MkdirTemp("", "drivertest-layers")
		if err != nil {
			t.Fatal(err)
		}
		s, err := btrfs.Open(ctx, btrfs.Options{Dir: filepath.Join(dir, "layers"), ImageSize: 8 << 30})
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("open a btrfs layer store for test roots: %v", err)
		}
		snapshots.store, snapshots.dir, snapshots.bases = s, dir, map[string]string{}
	}
	s := snapshots.store
	base, ok := snapshots.bases[lower]
	if !ok {
		snapshots.n++
		base = "base" + itoa(snapshots.n)
		p, err := s.Prepare(ctx, base+"-import", "")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", lower+"/.", p).CombinedOutput(); err != nil {
			t.Fatalf("copy %s into the test layer store: %v: %s", lower, err, out)
		}
		if err := s.Commit(ctx, base, base+"-import"); err != nil {
			t.Fatal(err)
		}
		snapshots.bases[lower] = base
	}
	snapshots.n++
	key := "root" + itoa(snapshots.n)
	p, err := s.Prepare(ctx, key, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Remove(context.Background(), key); err != nil {
			t.Errorf("remove test root %s: %v", key, err)
		}
	})
	return p
}

// RemoveSnapshots destroys the layer store SnapshotRootFS made, if any,
// with its backing file; for TestMain, after every test.
func RemoveSnapshots() {
	snapshots.Lock()
	defer snapshots.Unlock()
	if snapshots.store == nil {
		return
	}
	snapshots.store.Destroy(context.Background())
	os.RemoveAll(snapshots.dir)
	snapshots.store = nil
}

func itoa(n int) string { return strconv.Itoa(n) }
