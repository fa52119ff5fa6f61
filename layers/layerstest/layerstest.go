// Package layerstest is the conformance suite every layers.Store passes, in
// the spirit of containerd's SnapshotterSuite: each backend's test calls Run
// with a function that makes an empty store, and the suite checks the
// contract in layers.go through the store's paths on the host.
package layerstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hearth/hearth/layers"
)

// Options tunes Run. The zero value runs every test that needs nothing more
// than a Store.
type Options struct {
	// Reopen, if set, closes s and opens the same store again, as a
	// daemon restart would; the suite then checks that every snapshot
	// survives with its kind, parent, path and files.
	Reopen func(t *testing.T, s layers.Store) layers.Store
	// Limit, if set, returns the limit the store applies to the active
	// snapshot key (0 for none), as the backend sees it: the btrfs
	// backend's test reads the kernel's qgroup limit. The suite then
	// checks where SetLimit's limits end up (across Reset, Commit and
	// Reopen); without it, only what SetLimit returns. Whether writes
	// past a limit fail is each backend's own test.
	Limit func(t *testing.T, s layers.Store, key string) int64
}

// Run runs the suite. newStore returns an empty store, to be cleaned up
// with t.Cleanup; every subtest gets its own.
func Run(t *testing.T, newStore func(t *testing.T) layers.Store, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s layers.Store)
	}{
		{"PrepareEmpty", testPrepareEmpty},
		{"CommitAndChildren", testCommitAndChildren},
		{"CommittedIsReadOnly", testCommittedIsReadOnly},
		{"Remove", testRemove},
		{"RemoveParent", testRemoveParent},
		{"Snapshot", testSnapshot},
		{"SnapshotTree", testSnapshotTree},
		{"Reset", testReset},
		{"Errors", testErrors},
		{"InvalidKeys", testInvalidKeys},
		{"Usage", testUsage},
		{"Concurrent", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
	t.Run("Reopen", func(t *testing.T) {
		if opts.Reopen == nil {
			t.Skip("no Options.Reopen")
		}
		testReopen(t, newStore(t), opts.Reopen)
	})
	t.Run("Limit", func(t *testing.T) { testLimit(t, newStore(t), opts) })
}

func testPrepareEmpty(t *testing.T, s layers.Store) {
	ctx := context.Background()
	path := prepare(t, s, "empty", "")
	des, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 0 {
		t.Errorf("Prepare(empty, \"\") = %s holding %d entries, want an empty directory", path, len(des))
	}
	writeFile(t, filepath.Join(path, "f"), "x")
	info, err := s.Stat(ctx, "empty")
	if err != nil {
		t.Fatalf("Stat(empty) = %v", err)
	}
	want := layers.Info{Key: "empty", Kind: layers.KindActive, Path: path}
	if info != want {
		t.Errorf("Stat(empty) = %+v, want %+v", info, want)
	}
}

// base makes a committed snapshot "img" holding a few kinds of files.
func base(t *testing.T, s layers.Store) string {
	t.Helper()
	ctx := context.Background()
	p := prepare(t, s, "img-build", "")
	writeFile(t, filepath.Join(p, "etc", "hostname"), "base\n")
	writeFile(t, filepath.Join(p, "shared"), "parent\n")
	writeFile(t, filepath.Join(p, "doomed"), "delete me in a child\n")
	if err := os.Symlink("etc/hostname", filepath.Join(p, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(p, "shared"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "img", "img-build"); err != nil {
		t.Fatalf("Commit(img, img-build) = %v", err)
	}
	info, err := s.Stat(ctx, "img")
	if err != nil {
		t.Fatalf("Stat(img) = %v", err)
	}
	return info.Path
}

func testCommitAndChildren(t *testing.T, s layers.Store) {
	ctx := context.Background()
	imgPath := base(t, s)
	if _, err := s.Stat(ctx, "img-build"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(img-build) after Commit = %v, want ErrNotFound", err)
	}
	info, err := s.Stat(ctx, "img")
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != layers.KindCommitted || info.Parent != "" || info.Key != "img" {
		t.Errorf("Stat(img) = %+v, want a committed snapshot with no parent", info)
	}
	a := prepare(t, s, "a", "img")
	b := prepare(t, s, "b", "img")
	if a == b || a == imgPath {
		t.Fatalf("paths a=%s b=%s img=%s are not distinct", a, b, imgPath)
	}
	for _, p := range []string{a, b} {
		checkFile(t, filepath.Join(p, "etc", "hostname"), "base\n")
		checkFile(t, filepath.Join(p, "link"), "base\n")
		if fi, err := os.Lstat(filepath.Join(p, "shared")); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("Lstat(%s/shared) = %v, %v, want mode 0640", p, fi.Mode(), err)
		}
	}
	info, err = s.Stat(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (layers.Info{Key: "a", Kind: layers.KindActive, Parent: "img", Path: a}); info != want {
		t.Errorf("Stat(a) = %+v, want %+v", info, want)
	}

	writeFile(t, filepath.Join(a, "shared"), "child a\n")
	writeFile(t, filepath.Join(a, "new"), "only in a\n")
	if err := os.Remove(filepath.Join(a, "doomed")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{b, imgPath} {
		checkFile(t, filepath.Join(p, "shared"), "parent\n")
		checkFile(t, filepath.Join(p, "doomed"), "delete me in a child\n")
		if _, err := os.Lstat(filepath.Join(p, "new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Lstat(%s/new) = %v, want not exist: a's write leaked", p, err)
		}
	}
	writeFile(t, filepath.Join(b, "shared"), "child b\n")
	checkFile(t, filepath.Join(a, "shared"), "child a\n")

	// A committed child of a child: the chain a checkpoint tree makes.
	if err := s.Commit(ctx, "a-1", "a"); err != nil {
		t.Fatalf("Commit(a-1, a) = %v", err)
	}
	c := prepare(t, s, "c", "a-1")
	checkFile(t, filepath.Join(c, "shared"), "child a\n")
	checkFile(t, filepath.Join(c, "new"), "only in a\n")
	if info, err := s.Stat(ctx, "a-1"); err != nil || info.Parent != "img" || info.Kind != layers.KindCommitted {
		t.Errorf("Stat(a-1) = %+v, %v, want committed with parent img", info, err)
	}
}

func testCommittedIsReadOnly(t *testing.T, s layers.Store) {
	imgPath := base(t, s)
	checkReadOnly(t, imgPath, "shared", "doomed")
	checkFile(t, filepath.Join(imgPath, "shared"), "parent\n")
}

// checkReadOnly checks that nothing can be written in the committed
// snapshot at path, which holds the regular files f1 and f2.
func checkReadOnly(t *testing.T, path, f1, f2 string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(path, f1), []byte("overwrite"), 0o644); err == nil {
		t.Errorf("overwriting %s in the committed snapshot %s succeeded, want an error", f1, path)
	}
	if err := os.WriteFile(filepath.Join(path, "new"), []byte("x"), 0o644); err == nil {
		t.Errorf("creating a file in the committed snapshot %s succeeded, want an error", path)
	}
	if err := os.Remove(filepath.Join(path, f2)); err == nil {
		t.Errorf("removing %s from the committed snapshot %s succeeded, want an error", f2, path)
	}
	if err := os.Mkdir(filepath.Join(path, "d"), 0o755); err == nil {
		t.Errorf("mkdir in the committed snapshot %s succeeded, want an error", path)
	}
}

func testRemove(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	p := prepare(t, s, "gone", "img")
	writeFile(t, filepath.Join(p, "deep", "er", "file"), "x")
	if err := s.Remove(ctx, "gone"); err != nil {
		t.Fatalf("Remove(gone) = %v", err)
	}
	if _, err := s.Stat(ctx, "gone"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(gone) after Remove = %v, want ErrNotFound", err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(%s) after Remove = %v, want not exist", p, err)
	}
	if err := s.Remove(ctx, "gone"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Remove(gone) twice = %v, want ErrNotFound", err)
	}
	// The key can be used again.
	p = prepare(t, s, "gone", "img")
	if _, err := os.Lstat(filepath.Join(p, "deep")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a new snapshot under a removed key holds the old files: %v", err)
	}
	// A committed snapshot with no children goes too.
	if err := s.Commit(ctx, "gone-c", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "gone-c"); err != nil {
		t.Fatalf("Remove(gone-c) = %v", err)
	}
}

// testRemoveParent removes a committed snapshot that has children, active
// and committed: every snapshot owns its content, so the children keep
// theirs, lose their Parent, and what is made from them later works.
func testRemoveParent(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	child := prepare(t, s, "child", "img")
	sib := prepare(t, s, "sib", "img")
	writeFile(t, filepath.Join(sib, "shared"), "sib\n")
	kept := prepare(t, s, "kept-build", "img")
	writeFile(t, filepath.Join(kept, "note"), "kept\n")
	if err := s.Commit(ctx, "kept", "kept-build"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "img"); err != nil {
		t.Fatalf("Remove(img) with children = %v, want nil", err)
	}
	if _, err := s.Stat(ctx, "img"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(img) after Remove = %v, want ErrNotFound", err)
	}
	checkFile(t, filepath.Join(child, "shared"), "parent\n")
	checkFile(t, filepath.Join(child, "etc", "hostname"), "base\n")
	checkFile(t, filepath.Join(child, "link"), "base\n")
	checkFile(t, filepath.Join(sib, "shared"), "sib\n")
	checkFile(t, filepath.Join(sib, "doomed"), "delete me in a child\n")
	writeFile(t, filepath.Join(child, "shared"), "child\n")
	checkParents(t, s, map[string]string{"child": "", "sib": "", "kept": ""})

	// Made later from an active sibling and from a committed one.
	if err := s.Snapshot(ctx, "sib-1", "sib"); err != nil {
		t.Fatalf("Snapshot(sib-1, sib) after its parent went = %v", err)
	}
	fork := prepare(t, s, "fork", "sib-1")
	checkFile(t, filepath.Join(fork, "shared"), "sib\n")
	checkFile(t, filepath.Join(fork, "etc", "hostname"), "base\n")
	k := prepare(t, s, "k", "kept")
	checkFile(t, filepath.Join(k, "note"), "kept\n")
	checkFile(t, filepath.Join(k, "shared"), "parent\n")

	// A new snapshot under the removed name is not the children's parent.
	base(t, s)
	checkParents(t, s, map[string]string{"child": "", "sib": "", "kept": "", "sib-1": "", "fork": "sib-1", "k": "kept"})
	checkFile(t, filepath.Join(child, "shared"), "child\n")
}

// checkParents checks the Parent that Stat reports of each key.
func checkParents(t *testing.T, s layers.Store, want map[string]string) {
	t.Helper()
	for k, p := range want {
		info, err := s.Stat(context.Background(), k)
		if err != nil {
			t.Errorf("Stat(%s) = %v", k, err)
			continue
		}
		if info.Parent != p {
			t.Errorf("Stat(%s).Parent = %q, want %q", k, info.Parent, p)
		}
	}
}

// testSnapshot checks a checkpoint of a running sandbox: Snapshot of an
// active snapshot that stays active, then restore and fork from it.
func testSnapshot(t *testing.T, s layers.Store) {
	ctx := context.Background()
	imgPath := base(t, s)
	a := prepare(t, s, "a", "img")
	writeFile(t, filepath.Join(a, "note"), "v1\n")
	if err := os.Remove(filepath.Join(a, "doomed")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(a, "big"), string(pattern(2<<20, 3)))
	// Not synced: a completed write is in the snapshot, durable or not.
	if err := os.WriteFile(filepath.Join(a, "cached"), []byte("page cache\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(ctx, "a-1", "a"); err != nil {
		t.Fatalf("Snapshot(a-1, a) = %v", err)
	}
	ck, err := s.Stat(ctx, "a-1")
	if err != nil {
		t.Fatalf("Stat(a-1) = %v", err)
	}
	if ck.Key != "a-1" || ck.Kind != layers.KindCommitted || ck.Parent != "img" || ck.Path == a || ck.Path == imgPath || ck.Path == "" {
		t.Errorf("Stat(a-1) = %+v, want committed, parent img, a path of its own", ck)
	}
	if info, err := s.Stat(ctx, "a"); err != nil || info != (layers.Info{Key: "a", Kind: layers.KindActive, Parent: "img", Path: a}) {
		t.Errorf("Stat(a) after Snapshot = %+v, %v, want it active at %s as before", info, err, a)
	}

	// The content of a at the time of the call.
	checkFile(t, filepath.Join(ck.Path, "note"), "v1\n")
	checkFile(t, filepath.Join(ck.Path, "cached"), "page cache\n")
	checkFile(t, filepath.Join(ck.Path, "etc", "hostname"), "base\n")
	checkFile(t, filepath.Join(ck.Path, "link"), "base\n")
	checkFile(t, filepath.Join(ck.Path, "shared"), "parent\n")
	if fi, err := os.Lstat(filepath.Join(ck.Path, "shared")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("Lstat(a-1/shared) = %v, %v, want mode 0640", fi.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(ck.Path, "doomed")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(a-1/doomed) = %v, want not exist: a removed it before the Snapshot", err)
	}

	// a stays writable, and its later writes stay out of a-1.
	writeFile(t, filepath.Join(a, "note"), "v2\n")
	writeFile(t, filepath.Join(a, "later"), "after the checkpoint\n")
	if err := os.Remove(filepath.Join(a, "shared")); err != nil {
		t.Fatalf("removing a file from a after Snapshot = %v", err)
	}
	checkFile(t, filepath.Join(ck.Path, "note"), "v1\n")
	checkFile(t, filepath.Join(ck.Path, "shared"), "parent\n")
	if _, err := os.Lstat(filepath.Join(ck.Path, "later")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(a-1/later) = %v, want not exist: a's write leaked into its checkpoint", err)
	}
	checkReadOnly(t, ck.Path, "note", "cached")
	checkFile(t, filepath.Join(ck.Path, "note"), "v1\n")
	if n, err := s.Usage(ctx, "a-1"); err != nil || n >= 1<<20 {
		t.Errorf("Usage(a-1) = %d, %v, want under 1 MiB: a's 2 MiB stays charged to a", n, err)
	}

	// Fork: a new root from the checkpoint, independent of both.
	fork := prepare(t, s, "fork", "a-1")
	checkFile(t, filepath.Join(fork, "note"), "v1\n")
	checkFile(t, filepath.Join(fork, "shared"), "parent\n")
	writeFile(t, filepath.Join(fork, "note"), "fork\n")
	checkFile(t, filepath.Join(ck.Path, "note"), "v1\n")
	checkFile(t, filepath.Join(a, "note"), "v2\n")

	// Restore: the sandbox's root replaced by a new one from the checkpoint.
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatalf("Remove(a) with a checkpoint of it = %v", err)
	}
	a = prepare(t, s, "a", "a-1")
	checkFile(t, filepath.Join(a, "note"), "v1\n")
	if _, err := os.Lstat(filepath.Join(a, "later")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(a/later) after restore = %v, want not exist", err)
	}

	// A checkpoint of the restored root, then the first one goes while a
	// child (fork) and a grandchild (a-2, by way of a) of it are there.
	writeFile(t, filepath.Join(a, "note"), "v3\n")
	if err := s.Snapshot(ctx, "a-2", "a"); err != nil {
		t.Fatalf("Snapshot(a-2, a) = %v", err)
	}
	checkParents(t, s, map[string]string{"a": "a-1", "a-2": "a-1", "fork": "a-1"})
	if err := s.Remove(ctx, "a-1"); err != nil {
		t.Fatalf("Remove(a-1) while fork is prepared from it = %v, want nil", err)
	}
	checkFile(t, filepath.Join(fork, "note"), "fork\n")
	checkFile(t, filepath.Join(fork, "etc", "hostname"), "base\n")
	checkFile(t, filepath.Join(a, "note"), "v3\n")
	a2, err := s.Stat(ctx, "a-2")
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(a2.Path, "note"), "v3\n")
	checkParents(t, s, map[string]string{"a": "", "a-2": "", "fork": ""})
	writeFile(t, filepath.Join(fork, "note"), "fork 2\n")

	// Snapshot and Commit of one key: two independent committed snapshots.
	if err := s.Commit(ctx, "a-c", "a"); err != nil {
		t.Fatalf("Commit(a-c, a) after Snapshot = %v", err)
	}
	checkFile(t, filepath.Join(a2.Path, "note"), "v3\n")
	if err := s.Remove(ctx, "a-c"); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(a2.Path, "note"), "v3\n")

	// An active snapshot prepared empty.
	e := prepare(t, s, "e", "")
	writeFile(t, filepath.Join(e, "f"), "e\n")
	if err := s.Snapshot(ctx, "e-1", "e"); err != nil {
		t.Fatalf("Snapshot(e-1, e) = %v", err)
	}
	if info, err := s.Stat(ctx, "e-1"); err != nil || info.Parent != "" || info.Kind != layers.KindCommitted {
		t.Errorf("Stat(e-1) = %+v, %v, want committed with no parent", info, err)
	} else {
		checkFile(t, filepath.Join(info.Path, "f"), "e\n")
	}
}

// testSnapshotTree makes the checkpoint tree of one sandbox, a chain of
// checkpoints with a fork off the middle, and removes checkpoints in an
// order that leaves holes: each remaining snapshot keeps its content.
func testSnapshotTree(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	root := prepare(t, s, "sb", "img")
	const n = 5
	for i := range n {
		writeFile(t, filepath.Join(root, "gen"), fmt.Sprint(i))
		writeFile(t, filepath.Join(root, fmt.Sprintf("f%d", i)), fmt.Sprint(i))
		if err := s.Snapshot(ctx, fmt.Sprintf("ck%d", i), "sb"); err != nil {
			t.Fatalf("Snapshot(ck%d, sb) = %v", i, err)
		}
	}
	fork := prepare(t, s, "fork", "ck2")
	writeFile(t, filepath.Join(fork, "gen"), "fork")
	if err := s.Snapshot(ctx, "fork-ck", "fork"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ck2", "ck0", "ck4", "img"} {
		if err := s.Remove(ctx, k); err != nil {
			t.Fatalf("Remove(%s) = %v", k, err)
		}
	}
	for _, i := range []int{1, 3} {
		info, err := s.Stat(ctx, fmt.Sprintf("ck%d", i))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, filepath.Join(info.Path, "gen"), fmt.Sprint(i))
		for j := range n {
			_, err := os.Lstat(filepath.Join(info.Path, fmt.Sprintf("f%d", j)))
			if (j <= i) != (err == nil) {
				t.Errorf("Lstat(ck%d/f%d) = %v, want it there iff %d <= %d", i, j, err, j, i)
			}
		}
	}
	info, err := s.Stat(ctx, "fork-ck")
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(info.Path, "gen"), "fork")
	checkFile(t, filepath.Join(info.Path, "f2"), "2")
	checkFile(t, filepath.Join(root, "gen"), fmt.Sprint(n-1))
	checkFile(t, filepath.Join(root, "etc", "hostname"), "base\n")
	restored := prepare(t, s, "restored", "ck1")
	checkFile(t, filepath.Join(restored, "gen"), "1")
}

// testReset: Reset makes an active snapshot's content a checkpoint's again
// (a restore), repeatably, and leaves the checkpoint itself untouched.
func testReset(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	root := prepare(t, s, "root", "img")
	writeFile(t, filepath.Join(root, "data"), "v1\n")
	if err := s.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatalf("Snapshot(ck, root) = %v", err)
	}
	for round := 1; round <= 2; round++ {
		info, err := s.Stat(ctx, "root")
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(info.Path, "data"), "v2\n")
		writeFile(t, filepath.Join(info.Path, "extra"), "new\n")
		path, err := s.Reset(ctx, "root", "ck")
		if err != nil {
			t.Fatalf("Reset(root, ck) #%d = %v", round, err)
		}
		if info, err := s.Stat(ctx, "root"); err != nil || info.Path != path || info.Kind != layers.KindActive {
			t.Fatalf("Stat(root) after Reset = %+v, %v; want active at %s", info, err, path)
		}
		checkFile(t, filepath.Join(path, "data"), "v1\n")
		checkFile(t, filepath.Join(path, "shared"), "parent\n")
		if _, err := os.Stat(filepath.Join(path, "extra")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after Reset #%d, extra = %v; want gone", round, err)
		}
		writeFile(t, filepath.Join(path, "after"), "writable\n")
	}
	ck, err := s.Stat(ctx, "ck")
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(ck.Path, "data"), "v1\n")
	if _, err := os.Stat(filepath.Join(ck.Path, "after")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a write after Reset reached the checkpoint: %v", err)
	}
	for _, tc := range []struct {
		key, parent string
		want        error
	}{
		{"nosuch", "ck", layers.ErrNotFound},
		{"root", "nosuch", layers.ErrNotFound},
		{"ck", "img", layers.ErrInvalid},    // not active
		{"root", "root", layers.ErrInvalid}, // parent not committed
	} {
		if _, err := s.Reset(ctx, tc.key, tc.parent); !errors.Is(err, tc.want) {
			t.Errorf("Reset(%q, %q) = %v, want %v", tc.key, tc.parent, err, tc.want)
		}
	}
}

func testErrors(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	prepare(t, s, "act", "img")
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"Prepare(act, img) again", prepareErr(s, "act", "img"), layers.ErrExists},
		{"Prepare(img, \"\") over a committed name", prepareErr(s, "img", ""), layers.ErrExists},
		{"Prepare(x, missing)", prepareErr(s, "x", "missing"), layers.ErrNotFound},
		{"Prepare(x, act) from an active parent", prepareErr(s, "x", "act"), layers.ErrInvalid},
		{"Commit(n, missing)", s.Commit(ctx, "n", "missing"), layers.ErrNotFound},
		{"Commit(img, act) to a taken name", s.Commit(ctx, "img", "act"), layers.ErrExists},
		{"Commit(act, act)", s.Commit(ctx, "act", "act"), layers.ErrExists},
		{"Commit(n, img) of a committed snapshot", s.Commit(ctx, "n", "img"), layers.ErrInvalid},
		{"Snapshot(n, missing)", s.Snapshot(ctx, "n", "missing"), layers.ErrNotFound},
		{"Snapshot(img, act) to a taken name", s.Snapshot(ctx, "img", "act"), layers.ErrExists},
		{"Snapshot(act, act)", s.Snapshot(ctx, "act", "act"), layers.ErrExists},
		{"Snapshot(n, img) of a committed snapshot", s.Snapshot(ctx, "n", "img"), layers.ErrInvalid},
		{"Stat(missing)", statErr(s, "missing"), layers.ErrNotFound},
		{"Remove(missing)", s.Remove(ctx, "missing"), layers.ErrNotFound},
		{"Usage(missing)", usageErr(s, "missing"), layers.ErrNotFound},
		{"SetLimit(missing, 1)", s.SetLimit(ctx, "missing", 1), layers.ErrNotFound},
		{"SetLimit(img, 1) of a committed snapshot", s.SetLimit(ctx, "img", 1), layers.ErrInvalid},
		{"SetLimit(act, -1)", s.SetLimit(ctx, "act", -1), layers.ErrInvalid},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.err, c.want)
		}
	}
	// Failed calls changed nothing.
	if _, err := s.Stat(ctx, "x"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(x) after failed Prepares = %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "n"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(n) after failed Commits and Snapshots = %v, want ErrNotFound", err)
	}
	if info, err := s.Stat(ctx, "act"); err != nil || info.Kind != layers.KindActive {
		t.Errorf("Stat(act) after failed Commits and Snapshots = %+v, %v, want active", info, err)
	}
}

func testInvalidKeys(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	bad := []string{"", "A", "a/b", "../x", "..", ".", ".a", "-a", "_a", "a b", "a\x00", "é", strings.Repeat("a", 129)}
	for _, k := range bad {
		prepare(t, s, "act", "img")
		calls := map[string]error{
			"Prepare(k, \"\")": prepareErr(s, k, ""),
			"Commit(k, act)":   s.Commit(ctx, k, "act"),
			"Commit(img-2, k)": s.Commit(ctx, "img-2", k),
			"Snapshot(k, act)": s.Snapshot(ctx, k, "act"),
			"Snapshot(ck, k)":  s.Snapshot(ctx, "ck", k),
			"Stat(k)":          statErr(s, k),
			"Remove(k)":        s.Remove(ctx, k),
			"Usage(k)":         usageErr(s, k),
			"SetLimit(k, 1)":   s.SetLimit(ctx, k, 1),
		}
		if k != "" { // "" is the empty parent
			calls["Prepare(ok, k)"] = prepareErr(s, "ok", k)
		}
		for call, err := range calls {
			if !errors.Is(err, layers.ErrInvalid) {
				t.Errorf("%s with k=%q = %v, want ErrInvalid", call, k, err)
			}
		}
		if err := s.Remove(ctx, "act"); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "0", "a.b_c-d", strings.Repeat("z", 128)} {
		prepare(t, s, k, "img")
	}
}

func testUsage(t *testing.T, s layers.Store) {
	ctx := context.Background()
	p := prepare(t, s, "big-build", "")
	writeFile(t, filepath.Join(p, "big"), string(pattern(8<<20, 1)))
	if err := s.Commit(ctx, "big", "big-build"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Usage(ctx, "big"); err != nil || n < 8<<20 {
		t.Errorf("Usage(big) = %d, %v, want at least %d", n, err, 8<<20)
	}
	c := prepare(t, s, "c", "big")
	before, err := s.Usage(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if before >= 1<<20 {
		t.Errorf("Usage(c) of a fresh child of an 8 MiB parent = %d, want under 1 MiB", before)
	}
	writeFile(t, filepath.Join(c, "mine"), string(pattern(4<<20, 2)))
	after, err := s.Usage(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if after < 4<<20 || after > 6<<20 {
		t.Errorf("Usage(c) after writing 4 MiB = %d, want 4-6 MiB (the parent's 8 MiB not counted)", after)
	}
}

func testConcurrent(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i)
			p, err := s.Prepare(ctx, key, "img")
			if err != nil {
				errs <- err
				return
			}
			if err := os.WriteFile(filepath.Join(p, "id"), []byte(key), 0o644); err != nil {
				errs <- err
				return
			}
			if i%2 == 0 {
				errs <- s.Remove(ctx, key)
			}
		}()
	}
	// Racing Prepares of one key: exactly one wins.
	var won sync.WaitGroup
	results := make(chan error, n)
	for range n {
		won.Add(1)
		go func() {
			defer won.Done()
			_, err := s.Prepare(ctx, "same", "img")
			results <- err
		}()
	}
	wg.Wait()
	won.Wait()
	close(errs)
	close(results)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Prepare/Remove: %v", err)
		}
	}
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, layers.ErrExists):
			t.Errorf("racing Prepare(same) = %v, want nil or ErrExists", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d racing Prepare(same) calls succeeded, want 1", ok)
	}
	for i := 1; i < n; i += 2 {
		key := fmt.Sprintf("k%d", i)
		info, err := s.Stat(ctx, key)
		if err != nil {
			t.Errorf("Stat(%s) = %v", key, err)
			continue
		}
		checkFile(t, filepath.Join(info.Path, "id"), key)
	}

	// Snapshots of one key do not get in each other's way (none changes
	// it); racing Snapshots to one name: exactly one wins.
	many := make(chan error, n)
	same := make(chan error, n)
	for i := range n {
		won.Add(2)
		go func() {
			defer won.Done()
			many <- s.Snapshot(ctx, fmt.Sprintf("k1-ck%d", i), "k1")
		}()
		go func() {
			defer won.Done()
			same <- s.Snapshot(ctx, "k3-ck", "k3")
		}()
	}
	won.Wait()
	close(many)
	close(same)
	for err := range many {
		if err != nil {
			t.Errorf("concurrent Snapshot(k1-ck*, k1) = %v", err)
		}
	}
	ok = 0
	for err := range same {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, layers.ErrExists):
			t.Errorf("racing Snapshot(k3-ck, k3) = %v, want nil or ErrExists", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d racing Snapshot(k3-ck, k3) calls succeeded, want 1", ok)
	}
	for i := range n {
		key := fmt.Sprintf("k1-ck%d", i)
		if info, err := s.Stat(ctx, key); err != nil {
			t.Errorf("Stat(%s) = %v", key, err)
		} else {
			checkFile(t, filepath.Join(info.Path, "id"), "k1")
		}
	}

	// Removing snapshots while calls read them: Prepares from a committed
	// one and Snapshots of an active one, each in a loop until the source
	// is gone. No call gets half a copy, and reads never make a Remove
	// fail.
	readers := []struct {
		src  string
		read func(dst string) error
		gone error // what a read gets once src is being removed or gone
	}{
		{"k1-ck0", func(dst string) error { _, err := s.Prepare(ctx, dst, "k1-ck0"); return err }, layers.ErrNotFound},
		{"k1", func(dst string) error { return s.Snapshot(ctx, dst, "k1") }, layers.ErrInUse},
	}
	for _, r := range readers {
		made := make(chan string, 1024)
		started := make(chan struct{}, n)
		for i := range n {
			won.Add(1)
			go func() {
				defer won.Done()
				for j := range 100 {
					dst := fmt.Sprintf("from-%s-%d-%d", r.src, i, j)
					err := r.read(dst)
					if err == nil {
						made <- dst
					}
					if j == 0 {
						started <- struct{}{}
					}
					if err != nil {
						if !errors.Is(err, r.gone) && !errors.Is(err, layers.ErrNotFound) {
							t.Errorf("reading %s as %s while it is removed = %v, want nil, ErrNotFound or %v", r.src, dst, err, r.gone)
						}
						return
					}
				}
			}()
		}
		<-started
		if err := s.Remove(ctx, r.src); err != nil {
			t.Errorf("Remove(%s) while calls read it = %v, want nil", r.src, err)
		}
		won.Wait()
		close(made)
		count := 0
		for key := range made {
			count++
			if info, err := s.Stat(ctx, key); err != nil {
				t.Errorf("Stat(%s) = %v", key, err)
			} else {
				checkFile(t, filepath.Join(info.Path, "id"), "k1")
				checkFile(t, filepath.Join(info.Path, "etc", "hostname"), "base\n")
			}
		}
		if count == 0 {
			t.Errorf("no read of %s succeeded before Remove", r.src)
		}
	}
}

func testReopen(t *testing.T, s layers.Store, reopen func(*testing.T, layers.Store) layers.Store) {
	ctx := context.Background()
	base(t, s)
	a := prepare(t, s, "a", "img")
	writeFile(t, filepath.Join(a, "note"), "kept\n")
	if err := s.Commit(ctx, "a-1", "a"); err != nil {
		t.Fatal(err)
	}
	b := prepare(t, s, "b", "a-1")
	writeFile(t, filepath.Join(b, "note"), "b\n")
	if err := s.Snapshot(ctx, "b-1", "b"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b, "note"), "b after b-1\n")
	// A child whose parent is removed, and the name taken again: it has
	// no parent, before and after the reopen.
	x := prepare(t, s, "x-build", "")
	writeFile(t, filepath.Join(x, "f"), "old x\n")
	if err := s.Commit(ctx, "x", "x-build"); err != nil {
		t.Fatal(err)
	}
	prepare(t, s, "xc", "x")
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	prepare(t, s, "x-build", "")
	if err := s.Commit(ctx, "x", "x-build"); err != nil {
		t.Fatal(err)
	}
	want := map[string]layers.Info{}
	for _, k := range []string{"img", "a-1", "b", "b-1", "xc", "x"} {
		info, err := s.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = info
	}

	s = reopen(t, s)
	for k, w := range want {
		if got, err := s.Stat(ctx, k); err != nil || got != w {
			t.Errorf("Stat(%s) after reopen = %+v, %v, want %+v", k, got, err, w)
		}
	}
	if _, err := s.Stat(ctx, "a"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("Stat(a) after reopen = %v, want ErrNotFound (committed as a-1)", err)
	}
	checkFile(t, filepath.Join(want["b"].Path, "note"), "b after b-1\n")
	checkFile(t, filepath.Join(want["b-1"].Path, "note"), "b\n")
	checkFile(t, filepath.Join(want["xc"].Path, "f"), "old x\n")
	checkParents(t, s, map[string]string{"b-1": "a-1", "xc": ""})
	checkFile(t, filepath.Join(want["a-1"].Path, "note"), "kept\n")
	checkReadOnly(t, want["b-1"].Path, "note", "etc/hostname")
	if err := os.WriteFile(filepath.Join(want["a-1"].Path, "note"), []byte("x"), 0o644); err == nil {
		t.Error("a committed snapshot is writable after reopen")
	}
	c := prepare(t, s, "c", "a-1")
	checkFile(t, filepath.Join(c, "note"), "kept\n")
	if err := s.Remove(ctx, "b"); err != nil {
		t.Errorf("Remove(b) after reopen = %v", err)
	}
}

// testLimit checks SetLimit: its errors, the same on every store, and, on
// a store that can enforce limits, that a limit belongs to its key: it
// stays across Reset and Reopen, Commit drops it, and snapshots made from
// the key, or a new key under the name, start without one.
func testLimit(t *testing.T, s layers.Store, opts Options) {
	ctx := context.Background()
	base(t, s)
	prepare(t, s, "root", "img")
	const limit = 20 << 20
	err := s.SetLimit(ctx, "root", limit)
	if err != nil && !errors.Is(err, layers.ErrUnsupported) {
		t.Fatalf("SetLimit(root, %d) = %v, want nil or ErrUnsupported", limit, err)
	}
	supported := err == nil
	for _, c := range []struct {
		key   string
		bytes int64
		want  error
	}{
		{"missing", limit, layers.ErrNotFound},
		{"img", limit, layers.ErrInvalid}, // committed
		{"img", 0, layers.ErrInvalid},
		{"root", -1, layers.ErrInvalid},
		{"Root", limit, layers.ErrInvalid},
	} {
		if err := s.SetLimit(ctx, c.key, c.bytes); !errors.Is(err, c.want) {
			t.Errorf("SetLimit(%q, %d) = %v, want %v", c.key, c.bytes, err, c.want)
		}
	}
	if !supported {
		if err := s.SetLimit(ctx, "root", 0); err != nil {
			t.Errorf("SetLimit(root, 0) on a store without limits = %v, want nil: there is no limit to remove", err)
		}
		t.Logf("SetLimit(root, %d) = %v: the rest needs a store that enforces limits", limit, err)
		return
	}
	// checkLimit checks key's limit where the store can tell.
	checkLimit := func(when, key string, want int64) {
		t.Helper()
		if opts.Limit == nil {
			return
		}
		if got := opts.Limit(t, s, key); got != want {
			t.Errorf("limit of %s %s = %d, want %d", key, when, got, want)
		}
	}
	checkLimit("after SetLimit", "root", limit)
	if err := s.SetLimit(ctx, "root", limit); err != nil {
		t.Errorf("SetLimit(root, %d) again = %v", limit, err)
	}
	root := statPath(t, s, "root")
	writeFile(t, filepath.Join(root, "data"), "v1\n")
	if err := s.Snapshot(ctx, "ck", "root"); err != nil {
		t.Fatalf("Snapshot(ck, root) = %v", err)
	}
	checkLimit("after Snapshot", "root", limit)
	reset := func(when string, want int64) {
		t.Helper()
		path, err := s.Reset(ctx, "root", "ck")
		if err != nil {
			t.Fatalf("Reset(root, ck) %s = %v", when, err)
		}
		checkFile(t, filepath.Join(path, "data"), "v1\n")
		checkLimit("after Reset "+when, "root", want)
	}
	reset("with a limit", limit)
	prepare(t, s, "fork", "ck")
	checkLimit("prepared from a checkpoint of a limited key", "fork", 0)

	// Commit drops the limit; a new key under a removed one's name has none.
	for _, k := range []string{"built", "gone"} {
		prepare(t, s, k, "img")
		if err := s.SetLimit(ctx, k, 1<<20); err != nil {
			t.Fatalf("SetLimit(%s, 1 MiB) = %v", k, err)
		}
	}
	if err := s.Commit(ctx, "built-c", "built"); err != nil {
		t.Fatalf("Commit(built-c, built) of a limited key = %v", err)
	}
	prepare(t, s, "from-built", "built-c")
	checkLimit("prepared from a commit of a limited key", "from-built", 0)
	if err := s.SetLimit(ctx, "built", 1<<20); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("SetLimit(built) after Commit = %v, want ErrNotFound", err)
	}
	if err := s.Remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	prepare(t, s, "gone", "img")
	checkLimit("prepared again after Remove", "gone", 0)

	if opts.Reopen != nil {
		s = opts.Reopen(t, s)
		checkLimit("after Reopen", "root", limit)
		checkLimit("after Reopen", "fork", 0)
		reset("after Reopen", limit)
	}
	if err := s.SetLimit(ctx, "root", 0); err != nil {
		t.Fatalf("SetLimit(root, 0) = %v", err)
	}
	checkLimit("after SetLimit(root, 0)", "root", 0)
	reset("without a limit", 0)
}

func statPath(t *testing.T, s layers.Store, key string) string {
	t.Helper()
	info, err := s.Stat(context.Background(), key)
	if err != nil {
		t.Fatalf("Stat(%s) = %v", key, err)
	}
	return info.Path
}

func prepare(t *testing.T, s layers.Store, key, parent string) string {
	t.Helper()
	p, err := s.Prepare(context.Background(), key, parent)
	if err != nil {
		t.Fatalf("Prepare(%q, %q) = %v", key, parent, err)
	}
	return p
}

func prepareErr(s layers.Store, key, parent string) error {
	_, err := s.Prepare(context.Background(), key, parent)
	return err
}

func statErr(s layers.Store, key string) error {
	_, err := s.Stat(context.Background(), key)
	return err
}

func usageErr(s layers.Store, key string) error {
	_, err := s.Usage(context.Background(), key)
	return err
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func checkFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("ReadFile(%s) = %v", path, err)
		return
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("ReadFile(%s) = %q, want %q", path, got, want)
	}
}

// pattern returns n bytes that no filesystem can compress or deduplicate
// away within the file.
func pattern(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
