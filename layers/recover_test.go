//go:build linux

package layers

import (
	"context"
	"errors"
	"github.com/hearth/hearth/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRecover builds, by hand, each state a crash between two steps of a
// call can leave, and checks what OpenBtrfs makes of it.
func TestRecover(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root to loop-mount btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		testenv.Skip(t, "needs mkfs.btrfs")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layers")
	s, err := OpenBtrfs(ctx, BtrfsOptions{Dir: dir, ImageSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if last, err := OpenBtrfs(ctx, BtrfsOptions{Dir: dir}); err == nil {
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
	for _, k := range []string{"a", "b", "c"} {
		_, err := s.Prepare(ctx, k, "img")
		must(err)
		ids[k] = s.entries[k].ID
	}
	// A Prepare that wrote its record but not its subvolume.
	must(s.writeRecord("ghost", record{ID: "00000000deadbeef", Kind: KindActive, Parent: "img"}))
	// A Commit of a that wrote the new record but did not set the flag.
	must(s.writeRecord("a-1", record{ID: ids["a"], Kind: KindCommitted, Parent: "img"}))
	// A Commit of b that set the flag but kept the old record.
	must(s.writeRecord("b-1", record{ID: ids["b"], Kind: KindCommitted, Parent: "img"}))
	must(setReadonly(s.path(ids["b"]), true))
	// An active snapshot that is read-only for no recorded reason.
	must(setReadonly(s.path(ids["c"]), true))
	// A subvolume no record names.
	must(subvolCreate(s.snapDir, "0123456789abcdef"))
	must(s.Close())

	s, err = OpenBtrfs(ctx, BtrfsOptions{Dir: dir})
	if err != nil {
		t.Fatalf("OpenBtrfs after a crash = %v", err)
	}
	for key, want := range map[string]Kind{"img": KindCommitted, "a": KindActive, "b-1": KindCommitted, "c": KindActive} {
		info, err := s.Stat(ctx, key)
		if err != nil || info.Kind != want {
			t.Errorf("Stat(%s) = %+v, %v, want kind %s", key, info, err, want)
		}
	}
	for _, key := range []string{"ghost", "a-1", "b"} {
		if _, err := s.Stat(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want ErrNotFound", key, err)
		}
		if _, err := os.Lstat(s.recordPath(key)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record of %s still there: %v", key, err)
		}
	}
	for _, key := range []string{"a", "c"} {
		if err := os.WriteFile(filepath.Join(s.path(ids[key]), "f"), []byte("x"), 0o644); err != nil {
			t.Errorf("writing into active %s after recovery: %v", key, err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.path(ids["b"]), "f"), []byte("x"), 0o644); err == nil {
		t.Error("committed b-1 is writable after recovery")
	}
	if _, err := os.Lstat(filepath.Join(s.snapDir, "0123456789abcdef")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan subvolume still there: %v", err)
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"a", "img.v1", "..", ".", "a/b", "", "A", "a\x00b", "-x"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		if filepath.Base(key) != key || key == "." || key == ".." || len(key) > MaxKeyLen || key[0] == '.' || key[0] == '-' {
			t.Errorf("ValidateKey(%q) = nil for a key that is not one safe path element", key)
		}
		for _, c := range []byte(key) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				t.Errorf("ValidateKey(%q) = nil with byte %q", key, c)
			}
		}
	})
}
