//go:build linux

package btrfs

import (
	"context"
	"errors"
	"github.com/hearth/hearth/testutil/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearth/hearth/layers"
)

// TestRecover builds, by hand, each state a crash between two steps of a
// call can leave, and checks what Open makes of it.
func TestRecover(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to loop-mount btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := Open(ctx, Options{Dir: dir, ImageSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if last, err := Open(ctx, Options{Dir: dir}); err == nil {
			last.Destroy(ctx)
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Prepare(ctx, "img-build", "")
	must(err)
	must(s.Commit(ctx, "img", "img-build"))
	ids := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		_, err := s.Prepare(ctx, k, "img")
		must(err)
		ids[k] = s.entries[k].ID
	}
	must(os.WriteFile(filepath.Join(s.subvols.path(ids["d"]), "f"), []byte("d1"), 0o644))
	must(s.Snapshot(ctx, "d-1", "d"))
	ids["d-1"] = s.entries["d-1"].ID
	must(os.WriteFile(filepath.Join(s.subvols.path(ids["d"]), "f"), []byte("d2"), 0o644))
	// A Prepare that wrote its record but not its subvolume.
	must(s.records.write("ghost", record{ID: "00000000deadbeef", Kind: layers.KindActive, Parent: "img"}))
	// A Commit of a that wrote the new record but did not set the flag.
	must(s.records.write("a-1", record{ID: ids["a"], Kind: layers.KindCommitted, Parent: "img"}))
	// A Commit of b that set the flag but kept the old record.
	must(s.records.write("b-1", record{ID: ids["b"], Kind: layers.KindCommitted, Parent: "img"}))
	must(setReadonly(s.subvols.path(ids["b"]), true))
	// A Snapshot of d that wrote its record but not its subvolume: killed
	// before the ioctl.
	must(s.records.write("d-2", record{ID: "00000000cafef00d", Kind: layers.KindCommitted, Parent: "img", ParentID: s.entries["img"].ID}))
	// A record from before parent_id, whose parent is there.
	must(s.records.remove("e"))
	must(s.records.write("e", record{ID: ids["e"], Kind: layers.KindActive, Parent: "img"}))
	// A record whose parent was removed, and the name taken again since.
	must(s.records.remove("f"))
	must(s.records.write("f", record{ID: ids["f"], Kind: layers.KindActive, Parent: "img", ParentID: "00000000000000aa"}))
	// An active snapshot that is read-only for no recorded reason.
	must(setReadonly(s.subvols.path(ids["c"]), true))
	// A subvolume no record names.
	must(subvolCreate(s.snapDir, "0123456789abcdef"))
	must(s.Close())

	s, err = Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open after a crash = %v", err)
	}
	for key, want := range map[string]layers.Kind{"img": layers.KindCommitted, "a": layers.KindActive, "b-1": layers.KindCommitted, "c": layers.KindActive, "d": layers.KindActive, "d-1": layers.KindCommitted} {
		info, err := s.Stat(ctx, key)
		if err != nil || info.Kind != want {
			t.Errorf("Stat(%s) = %+v, %v, want kind %s", key, info, err, want)
		}
	}
	for _, key := range []string{"ghost", "a-1", "b", "d-2"} {
		if _, err := s.Stat(ctx, key); !errors.Is(err, layers.ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want ErrNotFound", key, err)
		}
		if _, err := os.Lstat(s.records.path(key)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record of %s still there: %v", key, err)
		}
	}
	for _, key := range []string{"a", "c"} {
		if err := os.WriteFile(filepath.Join(s.subvols.path(ids[key]), "f"), []byte("x"), 0o644); err != nil {
			t.Errorf("writing into active %s after recovery: %v", key, err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.subvols.path(ids["b"]), "f"), []byte("x"), 0o644); err == nil {
		t.Error("committed b-1 is writable after recovery")
	}
	// The interrupted Snapshot left d as it was, and its name free.
	for key, want := range map[string]string{"d": "d2", "d-1": "d1"} {
		if got, err := os.ReadFile(filepath.Join(s.subvols.path(ids[key]), "f")); err != nil || string(got) != want {
			t.Errorf("ReadFile(%s/f) after recovery = %q, %v, want %q", key, got, err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(s.subvols.path(ids["d-1"]), "f"), []byte("x"), 0o644); err == nil {
		t.Error("snapshot d-1 is writable after recovery")
	}
	if err := s.Snapshot(ctx, "d-2", "d"); err != nil {
		t.Errorf("Snapshot(d-2, d) after recovering an interrupted one = %v", err)
	}
	for key, want := range map[string]string{"d-1": "img", "d-2": "img", "e": "img", "f": ""} {
		if info, err := s.Stat(ctx, key); err != nil || info.Parent != want {
			t.Errorf("Stat(%s) after recovery = %+v, %v, want parent %q", key, info, err, want)
		}
	}
	// e's record had no parent id; its parent is known by id from now on.
	must(s.Remove(ctx, "img"))
	if info, err := s.Stat(ctx, "e"); err != nil || info.Parent != "" {
		t.Errorf("Stat(e) after Remove(img) = %+v, %v, want no parent", info, err)
	}
	if _, err := os.Lstat(filepath.Join(s.snapDir, "0123456789abcdef")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan subvolume still there: %v", err)
	}
}

// TestRecoverLimits checks that Open makes the kernel's limits what
// the records say: a limit whose record swap reached the disk but whose
// qgroup update did not is applied, and one the record does not hold (a
// limit inherited under full qgroups) is removed; a record replacement
// left under its temporary name goes.
func TestRecoverLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to loop-mount btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := Open(ctx, Options{Dir: dir, ImageSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if last, err := Open(ctx, Options{Dir: dir}); err == nil {
			last.Destroy(ctx)
		}
	})
	if s.qgroups == "" {
		t.Fatal("no quotas on a backing file Open formatted")
	}
	for _, k := range []string{"lost", "extra"} {
		if _, err := s.Prepare(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
	}
	lost, extra := s.entries["lost"].record, s.entries["extra"].record
	lost.Limit = 5 << 20
	if err := s.records.replace("lost", lost); err != nil {
		t.Fatal(err)
	}
	if err := s.subvols.limit(extra.ID, 3<<20); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(s.metaDir, ".new-extra")
	if err := os.Symlink(`{"id":"x","kind":"active","limit":1}`, tmp); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if s, err = Open(ctx, Options{Dir: dir}); err != nil {
		t.Fatalf("Open = %v", err)
	}
	for k, want := range map[string]int64{"lost": 5 << 20, "extra": 0} {
		if got, err := qgroupLimit(s.qgroups, s.subvols.path(s.entries[k].ID)); err != nil || got != want {
			t.Errorf("kernel limit of %s after Open = %d, %v, want %d", k, got, err, want)
		}
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(%s) after Open = %v, want not exist", tmp, err)
	}
}

// TestRemoveWaitsForReaders checks that Remove waits for the calls that
// read a snapshot (here a Prepare from it, held in flight by hand), turns
// new ones away meanwhile, and gives up when its context ends.
func TestRemoveWaitsForReaders(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to loop-mount btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := Open(ctx, Options{Dir: dir, ImageSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy(ctx) })
	if _, err := s.Prepare(ctx, "img-build", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatal(err)
	}
	img := s.entries["img"]
	s.mu.Lock()
	img.Read() // a Prepare from img, in its ioctl
	s.mu.Unlock()

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Remove(short, "img"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Remove(img) while read, until a deadline = %v, want DeadlineExceeded", err)
	}
	if _, err := s.Prepare(ctx, "a", "img"); err != nil {
		t.Fatalf("Prepare(a, img) after a Remove gave up = %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- s.Remove(ctx, "img") }()
	for {
		s.mu.Lock()
		busy := img.Busy
		s.mu.Unlock()
		if busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Prepare(ctx, "b", "img"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Prepare(b, img) while img is being removed = %v, want ErrNotFound", err)
	}
	if err := s.Remove(ctx, "img"); !errors.Is(err, layers.ErrInUse) {
		t.Errorf("Remove(img) while img is being removed = %v, want ErrInUse", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Remove(img) = %v before the read ended", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.mu.Lock()
	img.Release()
	s.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Remove(img) after the read ended = %v", err)
	}
	if info, err := s.Stat(ctx, "a"); err != nil || info.Parent != "" {
		t.Errorf("Stat(a) after Remove(img) = %+v, %v, want no parent", info, err)
	}
}
