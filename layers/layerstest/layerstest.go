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
	if err := os.WriteFile(filepath.Join(imgPath, "shared"), []byte("overwrite"), 0o644); err == nil {
		t.Error("overwriting a file in a committed snapshot succeeded, want an error")
	}
	if err := os.WriteFile(filepath.Join(imgPath, "new"), []byte("x"), 0o644); err == nil {
		t.Error("creating a file in a committed snapshot succeeded, want an error")
	}
	if err := os.Remove(filepath.Join(imgPath, "doomed")); err == nil {
		t.Error("removing a file from a committed snapshot succeeded, want an error")
	}
	if err := os.Mkdir(filepath.Join(imgPath, "d"), 0o755); err == nil {
		t.Error("mkdir in a committed snapshot succeeded, want an error")
	}
	checkFile(t, filepath.Join(imgPath, "shared"), "parent\n")
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

func testRemoveParent(t *testing.T, s layers.Store) {
	ctx := context.Background()
	base(t, s)
	child := prepare(t, s, "child", "img")
	err := s.Remove(ctx, "img")
	switch {
	case errors.Is(err, layers.ErrInUse):
		if _, err := s.Stat(ctx, "img"); err != nil {
			t.Errorf("Stat(img) after a refused Remove = %v", err)
		}
		if err := s.Remove(ctx, "child"); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(ctx, "img"); err != nil {
			t.Errorf("Remove(img) without children = %v", err)
		}
	case err == nil:
		checkFile(t, filepath.Join(child, "shared"), "parent\n")
	default:
		t.Errorf("Remove(img) with a child = %v, want nil or ErrInUse", err)
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
		{"Stat(missing)", statErr(s, "missing"), layers.ErrNotFound},
		{"Remove(missing)", s.Remove(ctx, "missing"), layers.ErrNotFound},
		{"Usage(missing)", usageErr(s, "missing"), layers.ErrNotFound},
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
		t.Errorf("Stat(n) after failed Commits = %v, want ErrNotFound", err)
	}
	if info, err := s.Stat(ctx, "act"); err != nil || info.Kind != layers.KindActive {
		t.Errorf("Stat(act) after failed Commits = %+v, %v, want active", info, err)
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
			"Stat(k)":          statErr(s, k),
			"Remove(k)":        s.Remove(ctx, k),
			"Usage(k)":         usageErr(s, k),
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
	want := map[string]layers.Info{}
	for _, k := range []string{"img", "a-1", "b"} {
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
	checkFile(t, filepath.Join(want["b"].Path, "note"), "b\n")
	checkFile(t, filepath.Join(want["a-1"].Path, "note"), "kept\n")
	if err := os.WriteFile(filepath.Join(want["a-1"].Path, "note"), []byte("x"), 0o644); err == nil {
		t.Error("a committed snapshot is writable after reopen")
	}
	c := prepare(t, s, "c", "a-1")
	checkFile(t, filepath.Join(c, "note"), "kept\n")
	if err := s.Remove(ctx, "b"); err != nil {
		t.Errorf("Remove(b) after reopen = %v", err)
	}
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
